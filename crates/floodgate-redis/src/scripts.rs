//! The Lua scripts, one per algorithm, and how a core algorithm becomes script arguments.
//!
//! # Exactness
//! Redis runs Lua 5.1, whose numbers are doubles: integers are exact below 2^53 only,
//! and nanosecond Unix times (about 1.7 x 10^18) are not. The scripts therefore
//!
//! * keep instants in two exact parts (seconds, nanoseconds) and store them as decimal
//!   nanosecond strings;
//! * compute every duration and amount as an exact integer below 2^52, which holds when
//!   every configured duration (window, period, time to refill a bucket) and every
//!   nano-unit amount (capacity x 10^9) is below 2^50 (about 13 days, 1.1 million units);
//!   GCRA's script, flat arithmetic on one TAT, is exact for a burst tolerance `tau`
//!   below [`GCRA_TOLERANCE_LIMIT`] (2^53 - 2^30 ns, about 104 days: `CL.THROTTLE`'s
//!   bursts of 100 at 1 per day fit). [`ScriptCall::new`] rejects anything larger with
//!   [`Error::Domain`];
//! * form products of two such values (`elapsed x rate`, `count x window`) exactly in
//!   base-2^24 limbs and divide with an exact remainder.
//!
//! Under those bounds every decision is bit-identical to the core's (the differential
//! test checks it). In caller-time mode a time may step back by at most 2^50 ns (13 days)
//! behind the latest time written to a key (GCRA: while the TAT is less than 2^53 ns
//! ahead of it); further back, the scripts saturate where the core would not.

use std::sync::LazyLock;
use std::time::Duration;

use floodgate_core::algorithms::{DelayMode, Gcra, GcraState};
use floodgate_core::{Algorithm, AnyAlgorithm, Decision, Denial, Nanos, Rate};
use redis::Script;

use crate::error::Error;

/// 2^50: the bound on every duration (ns) and nano-unit amount a script computes with.
pub const EXACT_LIMIT: u64 = 1 << 50;
/// 2^53 - 2^30: the bound on GCRA's burst tolerance `tau` (ns), about 104 days. The GCRA
/// script's sums (the TAT's lead plus an increment, the writer's nanoseconds plus a
/// lead) then stay exact integers below 2^53 whenever the call is admitted.
pub const GCRA_TOLERANCE_LIMIT: u64 = (1 << 53) - (1 << 30);
/// The shortest window the windowed scripts accept (10 µs), so that window indices of
/// any time below 2^63 ns stay exact.
pub const MIN_WINDOW_NS: u64 = 10_000;
const NANO: u64 = 1_000_000_000;

macro_rules! script {
    ($($file:literal),+) => {
        LazyLock::new(|| Script::new(concat!($(include_str!(concat!("../lua/", $file))),+)))
    };
}

/// GCRA (CL.THROTTLE).
pub static GCRA: LazyLock<Script> = script!("gcra.lua");
/// Fixed window.
pub static FIXED_WINDOW: LazyLock<Script> = script!("time.lua", "muldiv.lua", "fixed_window.lua");
/// Sliding log.
pub static SLIDING_LOG: LazyLock<Script> = script!("time.lua", "sliding_log.lua");
/// Sliding window counter.
pub static SLIDING_COUNTER: LazyLock<Script> =
    script!("time.lua", "muldiv.lua", "sliding_counter.lua");
/// Token bucket.
pub static TOKEN_BUCKET: LazyLock<Script> = script!("time.lua", "muldiv.lua", "token_bucket.lua");
/// Leaky bucket (meter and queue).
pub static LEAKY_BUCKET: LazyLock<Script> = script!("time.lua", "muldiv.lua", "leaky_bucket.lua");
/// A driver script over every algorithm: the prelude, the six algorithms' scripts each
/// wrapped as `ALG[i] = function(KEYS, ARGV) ... end` (in the order of
/// [`ScriptCall::multi_index`]), then the driver.
macro_rules! with_algs {
    ($driver:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/time.lua"),
                include_str!("../lua/muldiv.lua"),
                "local ALG = {}\nALG[1] = function(KEYS, ARGV)\n",
                include_str!("../lua/gcra.lua"),
                "\nend\nALG[2] = function(KEYS, ARGV)\n",
                include_str!("../lua/fixed_window.lua"),
                "\nend\nALG[3] = function(KEYS, ARGV)\n",
                include_str!("../lua/sliding_log.lua"),
                "\nend\nALG[4] = function(KEYS, ARGV)\n",
                include_str!("../lua/sliding_counter.lua"),
                "\nend\nALG[5] = function(KEYS, ARGV)\n",
                include_str!("../lua/token_bucket.lua"),
                "\nend\nALG[6] = function(KEYS, ARGV)\n",
                include_str!("../lua/leaky_bucket.lua"),
                "\nend\n",
                include_str!(concat!("../lua/", $driver)),
            ))
        })
    };
}

/// All-or-nothing over several policies in one call: the algorithms' scripts and the
/// driver `multi.lua`.
pub static MULTI: LazyLock<Script> = with_algs!("multi.lua");
/// Reserve at an estimate and settle at the actual cost: the algorithms' scripts and the
/// driver `settle.lua` (see `crate::settle`).
pub static SETTLE: LazyLock<Script> = with_algs!("settle.lua");
/// The seed's fixed-window baseline: `INCR` + `EXPIRE` (used by the benchmark).
pub static SEED_INCR_EXPIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c",
    )
});

/// Where a script reads `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// Redis `TIME`, inside the script.
    Redis,
    /// The caller's instant, nanoseconds since the Unix epoch (below 2^63).
    Caller(Nanos),
}

/// One algorithm's script and its parameter arguments.
#[derive(Debug, Clone)]
pub struct ScriptCall {
    script: &'static Script,
    /// `script`'s function in [`MULTI`] (the order of its `ALG` table).
    multi_index: u8,
    kind: &'static str,
    limit: u64,
    params: Vec<i64>,
    /// GCRA's script replies with one integer (the TAT's lead over now, signed by the
    /// decision); the decision is this algorithm's, computed from it.
    gcra: Option<Gcra>,
    /// The Redis module's parameters (`FG.DECIDE`'s `p1..p4`; see [`push_module`]).
    ///
    /// [`push_module`]: ScriptCall::push_module
    module: [i64; 4],
}

fn domain(what: &'static str, value: u128, unit: &str) -> Result<u64, Error> {
    below(what, value, unit, EXACT_LIMIT, "2^50")
}

fn below(
    what: &'static str,
    value: u128,
    unit: &str,
    limit: u64,
    limit_name: &str,
) -> Result<u64, Error> {
    if value >= limit as u128 {
        return Err(Error::Domain {
            what,
            detail: format!("{value} {unit} is not below {limit_name} = {limit}"),
        });
    }
    Ok(value as u64)
}

fn window(ns: u64) -> Result<u64, Error> {
    if ns < MIN_WINDOW_NS {
        return Err(Error::Domain {
            what: "window",
            detail: format!("{ns} ns is shorter than the minimum of {MIN_WINDOW_NS} ns"),
        });
    }
    domain("window", ns as u128, "ns")
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The rate as a reduced fraction `a / b` nano-units per nanosecond, and a check that a
/// full bucket of `capacity` refills within the exact range.
fn rate_fraction(rate: Rate, capacity: u64) -> Result<(u64, u64), Error> {
    let num = rate.count() as u128 * NANO as u128;
    let den = rate.period_nanos() as u128;
    let g = gcd(num, den);
    let (a, b) = (num / g, den / g);
    let a = domain("rate numerator (count x 10^9 / gcd)", a, "")?;
    let b = domain("rate denominator (period / gcd)", b, "")?;
    let capn = domain(
        "capacity in nano-units",
        capacity as u128 * NANO as u128,
        "nano-units",
    )?;
    domain(
        "time to refill the whole capacity",
        (capn as u128 * b as u128).div_ceil(a as u128),
        "ns",
    )?;
    Ok((a, b))
}

impl ScriptCall {
    /// The script and arguments for `algorithm`, or [`Error::Domain`] when a parameter is
    /// outside the range the scripts compute exactly.
    pub fn new(algorithm: &AnyAlgorithm) -> Result<ScriptCall, Error> {
        let limit = algorithm.limit();
        let kind = algorithm.kind().name();
        let (script, multi_index, params): (_, u8, Vec<u64>) = match algorithm {
            AnyAlgorithm::Gcra(g) => {
                below(
                    "burst tolerance (emission interval x capacity)",
                    g.tolerance_nanos() as u128,
                    "ns",
                    GCRA_TOLERANCE_LIMIT,
                    "2^53 - 2^30",
                )?;
                (
                    &*GCRA,
                    1,
                    vec![g.emission_interval_nanos(), g.tolerance_nanos()],
                )
            }
            AnyAlgorithm::FixedWindow(f) => {
                domain("limit", limit as u128, "units")?;
                (&*FIXED_WINDOW, 2, vec![limit, window(f.window_nanos())?])
            }
            AnyAlgorithm::SlidingLog(f) => {
                domain("limit", limit as u128, "units")?;
                (&*SLIDING_LOG, 3, vec![limit, window(f.window_nanos())?])
            }
            AnyAlgorithm::SlidingCounter(f) => {
                domain("limit", limit as u128, "units")?;
                (&*SLIDING_COUNTER, 4, vec![limit, window(f.window_nanos())?])
            }
            AnyAlgorithm::TokenBucket(t) => {
                let (a, b) = rate_fraction(t.refill(), limit)?;
                (&*TOKEN_BUCKET, 5, vec![limit, a, b])
            }
            AnyAlgorithm::Leaky(l) => {
                let (a, b) = rate_fraction(l.rate(), limit)?;
                // the level passed without delay, nano-units; u64::MAX (sent as -1) = nodelay
                let und = match l.delay_mode() {
                    DelayMode::NoDelay => u64::MAX,
                    DelayMode::After(n) => (n + 1) * NANO, // n <= burst: below capacity
                };
                (&*LEAKY_BUCKET, 6, vec![limit, a, b, und])
            }
        };
        let module = match algorithm {
            AnyAlgorithm::Gcra(g) => [g.emission_interval_nanos(), g.tolerance_nanos(), 0, 0],
            AnyAlgorithm::FixedWindow(f) => [limit, f.window_nanos(), 0, 0],
            AnyAlgorithm::SlidingLog(f) => [limit, f.window_nanos(), 0, 0],
            AnyAlgorithm::SlidingCounter(f) => [limit, f.window_nanos(), 0, 0],
            AnyAlgorithm::TokenBucket(t) => {
                [limit, t.refill().count(), t.refill().period_nanos(), 0]
            }
            AnyAlgorithm::Leaky(l) => [
                limit,
                l.rate().count(),
                l.rate().period_nanos(),
                match l.delay_mode() {
                    DelayMode::NoDelay => u64::MAX,
                    DelayMode::After(n) => n,
                },
            ],
        }
        .map(|p| i64::try_from(p).unwrap_or(-1));
        let params = params
            .into_iter()
            .map(|p| i64::try_from(p).unwrap_or(-1))
            .collect();
        let gcra = match algorithm {
            AnyAlgorithm::Gcra(g) => Some(g.clone()),
            _ => None,
        };
        Ok(ScriptCall {
            script,
            multi_index,
            kind,
            limit,
            params,
            gcra,
            module,
        })
    }

    /// Append this call's group of the Redis module's `FG.DECIDE` (key, algorithm, cost,
    /// padding, four parameters: the same decision as this call's script; see
    /// `floodgate-redis-module`'s `decide`).
    pub fn push_module(&self, cmd: &mut redis::Cmd, key: &[u8], cost: u64, pad_ms: u64) {
        cmd.arg(key).arg(self.multi_index);
        for a in self.args(cost, pad_ms).take(2) {
            cmd.arg(a);
        }
        for p in self.module {
            cmd.arg(p);
        }
    }

    /// End an `FG.DECIDE`: the mode (`one`, `all` or `dry`) and the instant.
    pub fn push_module_now(cmd: &mut redis::Cmd, mode: &str, now: Now) -> Result<(), Error> {
        cmd.arg(mode);
        Self::push_instant(cmd, now)
    }

    /// End a module command with the instant: `redis 0`, or the caller's seconds and
    /// nanoseconds.
    pub fn push_instant(cmd: &mut redis::Cmd, now: Now) -> Result<(), Error> {
        match now {
            Now::Redis => {
                cmd.arg("redis").arg(0);
            }
            Now::Caller(t) => {
                if t.0 >= 1 << 63 {
                    return Err(Error::TimeOutOfRange { now_ns: t.0 });
                }
                cmd.arg(t.0 / NANO).arg(t.0 % NANO);
            }
        }
        Ok(())
    }

    /// The algorithm's name, used in key names.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The algorithm's limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The script this call runs.
    pub fn script(&self) -> &'static Script {
        self.script
    }

    /// The algorithm's parameters, as the scripts take them after cost and padding.
    pub(crate) fn params(&self) -> &[i64] {
        &self.params
    }

    /// This algorithm's function in [`MULTI`]: `ALG[index]`.
    pub fn multi_index(&self) -> u8 {
        self.multi_index
    }

    /// The arguments after `now`: cost (above the limit sent as `limit + 1`: the answer
    /// is the same, never), the expiry padding, the algorithm's parameters.
    fn args(&self, cost: u64, pad_ms: u64) -> impl Iterator<Item = i64> + '_ {
        let cost = cost.min(self.limit.saturating_add(1));
        [
            i64::try_from(cost).unwrap_or(i64::MAX),
            i64::try_from(pad_ms).unwrap_or(i64::MAX),
        ]
        .into_iter()
        .chain(self.params.iter().copied())
    }

    /// Append this call's part of a [`MULTI`] invocation: `key` to KEYS, and to ARGV
    /// the algorithm's index, the count of its arguments, and those arguments.
    pub fn push_multi(
        &self,
        inv: &mut redis::ScriptInvocation<'static>,
        key: &[u8],
        cost: u64,
        pad_ms: u64,
    ) {
        inv.key(key);
        inv.arg(self.multi_index()).arg(2 + self.params.len());
        for a in self.args(cost, pad_ms) {
            inv.arg(a);
        }
    }

    /// The `now` arguments of an invocation (Redis `TIME`, or seconds and nanoseconds).
    pub fn push_now(inv: &mut redis::ScriptInvocation<'static>, now: Now) -> Result<(), Error> {
        match now {
            Now::Redis => {
                inv.arg("redis").arg("");
            }
            Now::Caller(t) => {
                if t.0 >= 1 << 63 {
                    return Err(Error::TimeOutOfRange { now_ns: t.0 });
                }
                inv.arg(t.0 / NANO).arg(t.0 % NANO);
            }
        }
        Ok(())
    }

    /// Prepare the invocation for `key` at `now` with `cost`; `pad_ms` is added to every
    /// expiry. A cost above the limit is sent as `limit + 1` (the answer is the same: never).
    pub fn invocation(
        &self,
        key: &[u8],
        now: Now,
        cost: u64,
        pad_ms: u64,
    ) -> Result<redis::ScriptInvocation<'static>, Error> {
        let mut inv = self.script.prepare_invoke();
        inv.key(key);
        Self::push_now(&mut inv, now)?;
        for a in self.args(cost, pad_ms) {
            inv.arg(a);
        }
        Ok(inv)
    }

    /// Turn the script's reply into the core's [`Decision`]: seven integers, or for GCRA
    /// one (see `gcra_decision`).
    pub fn decision(&self, reply: &[i64], cost: u64) -> Result<Decision, Error> {
        let bad = |detail: String| Error::BadReply {
            script: self.kind,
            detail,
        };
        if let Some(g) = &self.gcra {
            let [lead] = reply else {
                return Err(bad(format!("expected 1 integer, got {reply:?}")));
            };
            return Self::gcra_decision(g, *lead, cost).map_err(bad);
        }
        let [allowed, limit, remaining, retry, reset, delay, denial] = reply else {
            return Err(bad(format!("expected 7 integers, got {reply:?}")));
        };
        let nonneg = |v: i64, what: &str| {
            u64::try_from(v).map_err(|_| bad(format!("negative {what} {v} in {reply:?}")))
        };
        let d = Decision {
            allowed: *allowed == 1,
            limit: nonneg(*limit, "limit")?,
            remaining: nonneg(*remaining, "remaining")?,
            retry_after: if *retry < 0 {
                None
            } else {
                Some(Duration::from_nanos(*retry as u64))
            },
            reset_after: Duration::from_nanos(nonneg(*reset, "reset_after")?),
            delay: Duration::from_nanos(nonneg(*delay, "delay")?),
            denial: match denial {
                0 => None,
                1 => Some(Denial::RateLimited),
                2 => Some(Denial::CostExceedsLimit {
                    cost,
                    limit: self.limit,
                }),
                other => return Err(bad(format!("unknown denial code {other}"))),
            },
        };
        if d.limit != self.limit || d.allowed == d.denial.is_some() {
            return Err(bad(format!("inconsistent reply {reply:?}")));
        }
        Ok(d)
    }

    /// GCRA's decision from the script's one integer: `ttl0` (ns by which the stored TAT
    /// led now before the call, 0 when behind) when the script admitted the call,
    /// `-1 - ttl0` when it denied it. Every GCRA quantity (remaining, retry_after,
    /// reset_after, the denial kind) depends on `now` and the TAT only through `ttl0`, so
    /// the core's own `decide` at now = 0 with TAT = `ttl0` gives exactly the decision it
    /// would give at Redis's instant; the script's verdict must agree with it.
    fn gcra_decision(g: &Gcra, lead: i64, cost: u64) -> Result<Decision, String> {
        let (script_allowed, ttl0) = if lead >= 0 {
            (true, lead as u64)
        } else {
            (false, (-1 - lead) as u64)
        };
        let state = GcraState { tat: Nanos(ttl0) };
        let (d, _) = g.decide(&state, Nanos(0), cost);
        if d.allowed != script_allowed {
            return Err(format!(
                "the script {} cost {cost} at a TAT {ttl0} ns ahead; the core does not",
                if script_allowed { "admitted" } else { "denied" }
            ));
        }
        Ok(d)
    }
}
