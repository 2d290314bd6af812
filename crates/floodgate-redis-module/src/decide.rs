//! `FG.DECIDE`, pure: the command floodgate-redis's store sends instead of its Lua
//! scripts when the module is loaded. It takes what the scripts take (per check: the
//! algorithm, the cost, the expiry padding, the parameters; the caller's instant or
//! Redis's clock), answers what they answer (GCRA: one integer; the others: seven), and
//! reads and writes the values they store, so the module and the scripts share keys: a
//! settle or an in-flight lease (scripts only) acts on the state a module call left, and
//! clients with and without the module can share a limit. The decisions are
//! floodgate-core's ([`Algorithm::decide`]); the text of each value is
//! [`crate::script_values`]'.
//!
//! ```text
//! FG.DECIDE key alg cost pad_ms p1 p2 p3 p4 [key alg cost pad_ms p1 p2 p3 p4 ...] mode now_s now_ns
//! ```
//!
//! `alg` is the index of the store's multi script (1 GCRA, 2 fixed window, 3 sliding log,
//! 4 sliding counter, 5 token bucket, 6 leaky bucket); `p1..p4` its parameters (unused
//! ones 0): GCRA `T tau` (ns); the windows `limit W` (ns); token bucket `capacity count
//! period_ns`; leaky bucket `capacity count period_ns delay` (`-1`: nodelay, else nginx's
//! `delay=`). `mode`: `one` (one check, the single script's reply), `all` (all-or-nothing,
//! the multi script's reply: 1 or 0, then per check its reply's length and the reply) or
//! `dry` (the same decisions, nothing written). `now_s` is `redis` for the primary's
//! clock (`now_ns` then ignored). Every group has eight words so that the keys sit at a
//! fixed stride (first 1, step 8) for Redis Cluster and ACLs.

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::algorithms::{
    DelayMode, FixedWindow, Gcra, GcraState, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
};
use floodgate_core::{Algorithm, AnyAlgorithm, Decision, Denial, Nanos, Rate};
use smallvec::SmallVec;

use crate::limits::{self, MAX_LOG, log_too_long, shown};
use crate::log::{NewValue, Splice};
use crate::script_values::{decode, encode, gcra_lead, pack_tat};
use crate::value::Bytes;

/// Words per check.
pub const GROUP: usize = 8;
/// Words after the last check: mode, now_s, now_ns.
pub const TRAILER: usize = 3;
/// `FG.DECIDE`'s usage line.
pub const USAGE: &str = "Usage: FG.DECIDE <key> <alg 1-6> <cost> <pad_ms> <p1> <p2> <p3> <p4> [<key> <alg> ...] <one|all|dry> <now_s|redis> <now_ns>";

/// How the checks are decided and answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One check; the reply is its script's.
    One,
    /// All-or-nothing.
    All,
    /// All-or-nothing's decisions, nothing written.
    Dry,
}

/// The algorithm of one check.
#[derive(Debug)]
pub(crate) enum Alg {
    /// GCRA keeps the scripts' reply (the TAT's lead) and their TAT format.
    Gcra(Gcra),
    Other(AnyAlgorithm),
}

/// One check: its algorithm, cost and expiry padding.
#[derive(Debug)]
pub struct Check {
    pub(crate) alg: Alg,
    pub(crate) cost: u64,
    pub(crate) pad_ms: u64,
}

/// A parsed `FG.DECIDE`.
#[derive(Debug)]
pub struct Request {
    /// The checks, in order (check `i`'s key is word `1 + 8i`); one or two without an
    /// allocation.
    pub checks: SmallVec<[Check; 2]>,
    /// The mode.
    pub mode: Mode,
    /// The caller's instant (seconds, nanoseconds), or `None` for the primary's clock.
    pub now: Option<(u64, u64)>,
}

/// A value to store: the key, the bytes, and the time to live in ms (padding included)
/// from the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The key, as an index of the distinct keys ([`slots`]).
    pub key: usize,
    /// The value, in the scripts' format.
    pub bytes: Bytes,
    /// Milliseconds to live.
    pub ttl_ms: u64,
}

/// One check's reply: GCRA's one integer, or the other algorithms' seven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ints {
    ints: [i64; 7],
    len: usize,
}

impl Ints {
    fn of(v: &[i64]) -> Ints {
        let mut ints = [0; 7];
        ints[..v.len()].copy_from_slice(v);
        Ints { ints, len: v.len() }
    }
}

impl std::ops::Deref for Ints {
    type Target = [i64];

    fn deref(&self) -> &[i64] {
        &self.ints[..self.len]
    }
}

/// What a call answers and writes.
#[derive(Debug)]
pub struct Ran {
    /// The reply's integers (mode `one`, GCRA: a single integer).
    pub reply: Vec<i64>,
    /// The values to store, one per key at most.
    pub writes: Vec<Write>,
}

pub(crate) fn int<T: std::str::FromStr>(w: &[u8], what: &str) -> Result<T, String> {
    std::str::from_utf8(w)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("ERR {what} must be an integer, got {}", shown(w)))
}

fn rate(count: u64, period_ns: u64) -> Result<Rate, String> {
    Rate::from_nanos(count, period_ns).map_err(|e| format!("ERR rate: {e}"))
}

fn build(alg: u8, p: [i64; 4]) -> Result<Alg, String> {
    let u = |i: usize| {
        u64::try_from(p[i]).map_err(|_| format!("ERR parameter {} must not be negative", i + 1))
    };
    let cfg = |e: floodgate_core::ConfigError| format!("ERR {e}");
    Ok(match alg {
        1 => {
            let (t, tau) = (u(0)?, u(1)?);
            if t == 0 || tau % t != 0 {
                return Err(format!(
                    "ERR GCRA's tolerance {tau} ns is not a multiple of its interval {t} ns"
                ));
            }
            // the scripts' bound (floodgate-redis GCRA_TOLERANCE_LIMIT): the stored TAT's
            // nanosecond part then fits its 7 bytes
            if tau >= (1 << 53) - (1 << 30) {
                return Err(format!(
                    "ERR GCRA's tolerance {tau} ns is not below 2^53 - 2^30 ns"
                ));
            }
            Alg::Gcra(Gcra::new(rate(1, t)?, tau / t).map_err(cfg)?)
        }
        2 => Alg::Other(AnyAlgorithm::FixedWindow(
            FixedWindow::new(u(0)?, Duration::from_nanos(u(1)?)).map_err(cfg)?,
        )),
        3 => {
            // FG.THROTTLE's bound: a log holds an entry per admitted instant
            let limit = u(0)?;
            if limit > MAX_LOG {
                return Err(log_too_long(limit));
            }
            Alg::Other(AnyAlgorithm::SlidingLog(
                SlidingLog::new(limit, Duration::from_nanos(u(1)?)).map_err(cfg)?,
            ))
        }
        4 => Alg::Other(AnyAlgorithm::SlidingCounter(
            SlidingCounter::new(u(0)?, Duration::from_nanos(u(1)?)).map_err(cfg)?,
        )),
        5 => Alg::Other(AnyAlgorithm::TokenBucket(
            TokenBucket::new(u(0)?, rate(u(1)?, u(2)?)?).map_err(cfg)?,
        )),
        6 => {
            let burst = u(0)?
                .checked_sub(1)
                .ok_or_else(|| "ERR capacity must be at least 1".to_string())?;
            let delay = if p[3] < 0 {
                DelayMode::NoDelay
            } else {
                DelayMode::After(u(3)?)
            };
            Alg::Other(AnyAlgorithm::Leaky(
                LeakyBucket::queue(rate(u(1)?, u(2)?)?, burst, delay).map_err(cfg)?,
            ))
        }
        other => return Err(format!("ERR algorithm index {other} is not 1 to 6")),
    })
}

/// Parse the words after the command's name. Errors name the argument.
pub fn parse(words: &[&[u8]]) -> Result<Request, String> {
    let usage = || format!("ERR {USAGE}");
    let n = words.len().checked_sub(TRAILER).ok_or_else(usage)?;
    if n == 0 || n % GROUP != 0 {
        return Err(usage());
    }
    limits::checks("FG.DECIDE", "checks", n / GROUP)?;
    let mut checks = SmallVec::with_capacity(n / GROUP);
    for g in words[..n].chunks_exact(GROUP) {
        let alg: u8 = int(g[1], "alg")?;
        let cost = int(g[2], "cost")?;
        let pad_ms = limits::pad_ms(int(g[3], "pad_ms")?)
            .map_err(|e| format!("{e} (check {})", checks.len() + 1))?;
        let mut p = [0i64; 4];
        for (i, w) in g[4..].iter().enumerate() {
            p[i] = int(w, "parameter")?;
        }
        let alg = build(alg, p).map_err(|e| format!("{e} (check {})", checks.len() + 1))?;
        checks.push(Check { alg, cost, pad_ms });
    }
    let mode = match words[n] {
        b"one" if checks.len() == 1 => Mode::One,
        b"one" => return Err("ERR mode one takes exactly one check".into()),
        b"all" => Mode::All,
        b"dry" => Mode::Dry,
        other => {
            return Err(format!(
                "ERR mode must be one, all or dry, got {}",
                shown(other)
            ));
        }
    };
    let now = if words[n + 1] == b"redis" {
        None
    } else {
        let (s, ns): (u64, u64) = (int(words[n + 1], "now_s")?, int(words[n + 2], "now_ns")?);
        if ns >= 1_000_000_000 || s >= (1 << 63) / 1_000_000_000 {
            return Err(format!("ERR time {s} s {ns} ns is out of range"));
        }
        Some((s, ns))
    };
    Ok(Request { checks, mode, now })
}

/// Milliseconds a key lives for `ns` (the scripts' `px`: rounded up, at least 1) plus
/// the padding.
pub(crate) fn px(ns: u64, pad_ms: u64) -> u64 {
    ns.div_ceil(1_000_000).max(1).saturating_add(pad_ms)
}

fn dur_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn int_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The seven integers of the scripts' reply.
fn seven(d: &Decision) -> Ints {
    Ints::of(&[
        i64::from(d.allowed),
        int_of(d.limit),
        int_of(d.remaining),
        d.retry_after.map_or(-1, dur_ns),
        dur_ns(d.reset_after),
        dur_ns(d.delay),
        match d.denial {
            None => 0,
            Some(Denial::RateLimited) => 1,
            Some(Denial::CostExceedsLimit { .. }) => 2,
        },
    ])
}

/// A check's reply, whether it admitted, and its write (bytes, ttl in ms).
pub(crate) type Decided = (Ints, bool, Option<(Bytes, u64)>);

/// One check on the value `stored` at `(s, n)` with `cost`: its reply, whether it
/// admitted, and the write (bytes, ttl in ms).
pub(crate) fn one(
    check: &Check,
    stored: Option<&[u8]>,
    (s, n): (u64, u64),
    cost: u64,
) -> Result<Decided, String> {
    match &check.alg {
        Alg::Gcra(g) => {
            let lead = match stored {
                None => 0,
                Some(v) => gcra_lead(v, s, n)?,
            };
            let (d, pending) = g.decide(&GcraState { tat: Nanos(lead) }, Nanos(0), cost);
            if !d.allowed {
                return Ok((Ints::of(&[-1 - int_of(lead)]), false, None));
            }
            // the new TAT, relative to now; the scripts' expiry: floor(ttl / 1 ms) + 1
            let write = pending.map(|ttl| {
                let ms = (ttl.0 / 1_000_000 + 1).saturating_add(check.pad_ms);
                (pack_tat(s, n + ttl.0), ms)
            });
            Ok((Ints::of(&[int_of(lead)]), true, write))
        }
        Alg::Other(alg) => {
            let now = Nanos(s * 1_000_000_000 + n);
            if let Some((ints, ok, w)) = one_log(check, alg, stored, now, cost) {
                let old = stored.unwrap_or_default();
                return Ok((ints, ok, w.map(|(sp, ms)| (sp.to_bytes(old), ms))));
            }
            let mut state = decode(alg.kind(), stored)?;
            let (d, pending) = alg.decide(&state, now, cost);
            let write = match pending {
                Some(p) if cost > 0 => {
                    alg.apply(&mut state, p);
                    let ttl = alg.full_at(&state).0.saturating_sub(now.0);
                    Some((encode(&state), px(ttl, check.pad_ms)))
                }
                _ => None,
            };
            Ok((seven(&d), d.allowed, write))
        }
    }
}

/// A sliding log's reply, whether it admitted, and its write (splice, ttl in ms).
type LogDecided = (Ints, bool, Option<(Splice, u64)>);

/// A sliding log's check on the scripts' text in place ([`crate::log::text`]): its reply,
/// whether it admitted, and its write as a splice of `stored` (ttl in ms). `None`: not a
/// sliding log, or a value the general path reads.
fn one_log(
    check: &Check,
    alg: &AnyAlgorithm,
    stored: Option<&[u8]>,
    now: Nanos,
    cost: u64,
) -> Option<LogDecided> {
    let AnyAlgorithm::SlidingLog(log) = alg else {
        return None;
    };
    let (d, w) = crate::log::text(log, stored, now, cost)?;
    let w = w.map(|(sp, full)| (sp, px(full.0.saturating_sub(now.0), check.pad_ms)));
    Some((seven(&d), d.allowed, w))
}

/// A value to store on the key of a request of mode `one`: whole or spliced from the
/// value read, and its time to live in ms (padding included) from the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOne {
    /// The value, in the scripts' format.
    pub value: NewValue,
    /// Milliseconds to live.
    pub ttl_ms: u64,
}

/// A request of mode `one` on the value `stored` of its key at `now`: [`run`]'s reply
/// and write, without allocating (a sliding log's write is a splice of `stored`).
pub fn run_one(
    req: &Request,
    stored: Option<&[u8]>,
    now: (u64, u64),
) -> Result<(Ints, Option<WriteOne>), String> {
    let [c] = &req.checks[..] else {
        return Err("ERR mode one takes exactly one check".into());
    };
    if let Alg::Other(alg) = &c.alg {
        let at = Nanos(now.0 * 1_000_000_000 + now.1);
        if let Some((reply, _, w)) = one_log(c, alg, stored, at, c.cost) {
            let write = w.map(|(sp, ttl_ms)| WriteOne {
                value: NewValue::Splice(sp),
                ttl_ms,
            });
            return Ok((reply, write));
        }
    }
    let (reply, _, write) = one(c, stored, now, c.cost)?;
    Ok((
        reply,
        write.map(|(bytes, ttl_ms)| WriteOne {
            value: NewValue::Whole(bytes),
            ttl_ms,
        }),
    ))
}

/// Each check's key as an index of the distinct keys (in the order they first appear),
/// and how many distinct keys there are: one hash lookup per check, whatever the number
/// of checks.
pub fn slots<K: AsRef<[u8]>>(keys: &[K]) -> (Vec<usize>, usize) {
    let mut first: HashMap<&[u8], usize> = HashMap::with_capacity(keys.len());
    let slot = keys
        .iter()
        .map(|k| {
            let n = first.len();
            *first.entry(k.as_ref()).or_insert(n)
        })
        .collect();
    (slot, first.len())
}

/// Decide `req` on its keys at `now` (seconds, nanoseconds), as the store's scripts do:
/// check `i`'s key is `slot[i]`, an index of `stored`, the value of each distinct key
/// ([`slots`]; `None`: no key). In order, a key listed twice seeing the earlier check's
/// charge; when one denies (or in mode `dry`) nothing is written, and (mode `all`) each
/// check that admitted is answered with its cost-0 view. The values are read where they
/// lie: a key's value is copied only when a check writes it, once per key at most.
pub fn run(
    req: &Request,
    slot: &[usize],
    stored: &[Option<&[u8]>],
    now: (u64, u64),
) -> Result<Ran, String> {
    let key = |i: usize| {
        slot.get(i)
            .copied()
            .filter(|&k| k < stored.len())
            .ok_or_else(|| format!("ERR check {} has no key", i + 1))
    };
    // each key's value and time to live once a check has written it
    let mut written: Vec<Option<(Bytes, u64)>> = vec![None; stored.len()];
    let mut replies = Vec::with_capacity(req.checks.len());
    let mut admitted = Vec::with_capacity(req.checks.len());
    for (i, c) in req.checks.iter().enumerate() {
        let k = key(i)?;
        let value = match &written[k] {
            Some((bytes, _)) => Some(&bytes[..]),
            None => stored[k],
        };
        let (reply, ok, write) = one(c, value, now, c.cost)?;
        if write.is_some() {
            written[k] = write;
        }
        replies.push(reply);
        admitted.push(ok);
    }
    let all = admitted.iter().all(|&a| a);
    if req.mode == Mode::One {
        return Ok(Ran {
            reply: replies.swap_remove(0).to_vec(),
            writes: write_list(written),
        });
    }
    if req.mode == Mode::All && !all {
        for (i, c) in req.checks.iter().enumerate() {
            if admitted[i] {
                replies[i] = one(c, stored[key(i)?], now, 0)?.0;
            }
        }
    }
    let writes = if req.mode == Mode::All && all {
        write_list(written)
    } else {
        Vec::new()
    };
    let mut reply = Vec::with_capacity(1 + 8 * replies.len());
    reply.push(i64::from(all));
    for r in replies {
        reply.push(r.len() as i64);
        reply.extend_from_slice(&r);
    }
    Ok(Ran { reply, writes })
}

fn write_list(written: Vec<Option<(Bytes, u64)>>) -> Vec<Write> {
    written
        .into_iter()
        .enumerate()
        .filter_map(|(key, w)| {
            let (bytes, ttl_ms) = w?;
            Some(Write { key, bytes, ttl_ms })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    fn call(s: &str, stored: &[Option<&[u8]>]) -> Result<Ran, String> {
        let w = words(s);
        let refs: Vec<&[u8]> = w.iter().map(Vec::as_slice).collect();
        let req = parse(&refs)?;
        let keys: Vec<&[u8]> = (0..req.checks.len()).map(|i| refs[i * GROUP]).collect();
        let now = req.now.unwrap_or((1_700_000_000, 0));
        // each distinct key's value: the one given for its first check
        let (slot, distinct) = slots(&keys);
        let mut values = vec![None; distinct];
        for (i, &k) in slot.iter().enumerate().rev() {
            values[k] = stored[i];
        }
        let ran = run(&req, &slot, &values, now)?;
        if req.mode == Mode::One {
            // the command's path for one check: the same reply and write
            let (reply, write) = run_one(&req, stored[0], now)?;
            assert_eq!(*reply, *ran.reply);
            let write = write.map(|w| (w.value.to_bytes(stored[0]), w.ttl_ms));
            let first = ran.writes.first().map(|w| (w.bytes.clone(), w.ttl_ms));
            assert_eq!(write, first);
        }
        Ok(ran)
    }

    #[test]
    fn one_check_replies_as_the_scripts() {
        // fixed window 2 per second at t = 1 700 000 000.25 s
        let r = call("k 2 1 0 2 1000000000 0 0 one 1700000000 250000000", &[None]).unwrap();
        assert_eq!(r.reply, vec![1, 2, 1, -1, 750_000_000, 0, 0]);
        assert_eq!(r.writes[0].bytes, b"1700000001 1");
        assert_eq!(r.writes[0].ttl_ms, 750);
        // GCRA 1 per 100 ms, capacity 2: the lead before the call, nothing ahead
        let r = call("k 1 1 5 100000000 200000000 0 0 one 10 0", &[None]).unwrap();
        assert_eq!(r.reply, vec![0]);
        assert_eq!(r.writes[0].ttl_ms, 101 + 5);
        let v = r.writes[0].bytes.clone();
        let r = call("k 1 2 0 100000000 200000000 0 0 one 10 0", &[Some(&v)]).unwrap();
        assert_eq!(r.reply, vec![-1 - 100_000_000], "denied, 100 ms ahead");
        assert!(r.writes.is_empty());
    }

    #[test]
    fn all_or_nothing_and_duplicates() {
        let g = "2 1 0 1 60000000000 0 0";
        // the same key twice, limit 1: the second sees the first's charge; nothing written
        let r = call(&format!("k {g} k {g} all 100 0"), &[None, None]).unwrap();
        assert_eq!(r.reply[0], 0);
        assert!(r.writes.is_empty());
        // the first check admitted, answered with its cost-0 view
        assert_eq!(&r.reply[1..9], &[7, 1, 1, 1, -1, 0, 0, 0]);
        let r = call(&format!("a {g} b {g} all 100 0"), &[None, None]).unwrap();
        assert_eq!(r.reply[0], 1);
        assert_eq!(r.writes.len(), 2);
        let r = call(&format!("a {g} b {g} dry 100 0"), &[None, None]).unwrap();
        assert_eq!(r.reply[0], 1);
        assert!(r.writes.is_empty(), "a dry run writes nothing");
    }

    #[test]
    fn bad_input_names_the_argument() {
        let e = |s: &str| call(s, &[None]).unwrap_err();
        assert!(e("k 2 1 0 2 1000 0 0 one 1").starts_with("ERR Usage"));
        assert!(e("k 9 1 0 2 1000 0 0 one 1 0").contains("index 9"));
        assert!(e("k 2 x 0 2 1000 0 0 one 1 0").starts_with("ERR cost must be an integer"));
        assert!(e("k 2 1 0 2 1000 0 0 some 1 0").starts_with("ERR mode"));
        assert!(e("k 1 1 0 3 10 0 0 one 1 0").contains("not a multiple"));
        assert!(e("k 1 1 0 1 9007199254740992 0 0 one 1 0").contains("not below 2^53"));
        assert!(e("k 2 1 0 2 1000 0 0 one 1 1000000000").contains("out of range"));
        assert!(e("k 2 1 0 0 1000 0 0 one 1 0").contains("check 1"));
        assert!(call("k 2 1 0 2 1000000 0 0 one 1 0", &[Some(b"junk")]).is_err());
        assert!(
            e("k 2 1 315360000001 2 1000 0 0 one 1 0").starts_with("ERR pad_ms must be at most")
        );
        assert!(e("k 3 1 0 10001 1000 0 0 one 1 0").contains("at most 10000, got 10001"));
        assert!(call("k 3 1 0 10000 1000 0 0 one 1 0", &[None]).is_ok());
        let many = "k 2 1 0 2 1000 0 0 ".repeat(limits::MAX_CHECKS + 1) + "all 1 0";
        let many = words(many.trim_start());
        let refs: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        assert_eq!(
            parse(&refs).unwrap_err(),
            "ERR FG.DECIDE takes at most 1024 checks per call, got 1025"
        );
    }

    #[test]
    fn repeated_keys_share_one_value_read_in_place() {
        let (slot, n) = slots(&[&b"a"[..], b"b", b"a", b"c", b"b"]);
        assert_eq!((slot, n), (vec![0, 1, 0, 2, 1], 3));
        // 64 checks on one key holding a value that is not a state: refused, nothing
        // written
        let g = "k 2 1 0 5 60000000000 0 0 ";
        let w = words(&format!("{}all 100 0", g.repeat(64)));
        let refs: Vec<&[u8]> = w.iter().map(Vec::as_slice).collect();
        let req = parse(&refs).unwrap();
        let junk = vec![b'x'; 1 << 20];
        let e = run(&req, &[0; 64], &[Some(&junk)], (100, 0)).unwrap_err();
        assert!(e.starts_with("WRONGTYPE"), "{e}");
        // the same key 64 times, limit 5: five admitted, then the sixth denies
        let r = run(&req, &[0; 64], &[None], (100, 0)).unwrap();
        assert_eq!(r.reply[0], 0);
        assert!(r.writes.is_empty());
        // a slot without a value is an error, not a panic
        assert!(run(&req, &[1; 64], &[None], (100, 0)).is_err());
    }
}
