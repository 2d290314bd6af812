//! All-or-nothing checks across several limiters: a request that one policy denies is
//! charged by none (nginx's rule for several `limit_req`, and the in-process
//! [`floodgate_core::multi::check_all`]'s).
//!
//! * **Single-node Redis: one atomic round trip.** One `EVALSHA` of
//!   [`scripts::MULTI`](crate::scripts::MULTI) decides every check at one instant and
//!   charges each that admits; if one denies, it puts every key back as it was (value and
//!   expiry) and answers with cost-0 views of the others. No other client's call
//!   interleaves, so the pair can never be charged for a denied request.
//! * **Redis Cluster: a dry run, then the charges.** The keys of different user keys lie
//!   in different slots, which one script may not touch together. Each policy gets a
//!   dry run of the same script (decided as a charge would be, every key put back), one
//!   round trip each; if all would admit, each is charged, one round trip each; if one
//!   would not, the others are answered with their cost-0 views. The decisions are the
//!   in-process ones unless another client acts on these keys between the steps: then
//!   a charge can deny after earlier ones were made, which are not taken back. That
//!   window is a few round trips wide.
//!
//! The deny cache is not consulted here (a cached denial of one policy says nothing of
//! the others' state); the circuit breaker, the per-call timeout and the fault policy
//! apply as in [`RedisLimiter::check`].

use std::sync::Arc;

use floodgate_core::{Decision, Nanos};

use crate::breaker::Gate;
use crate::error::Error;
use crate::limiter::{Fault, Outcome, RedisLimiter, Source};
use crate::scripts::{MULTI, Now, ScriptCall};
use crate::store::bump;

/// One limit of an all-or-nothing check.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The policy's limiter; every check's limiter must be on the same store.
    pub limiter: &'a RedisLimiter,
    /// The user key under that policy.
    pub user: &'a [u8],
    /// Units this request costs under that policy.
    pub cost: u64,
}

/// The outcome of [`check_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiOutcome {
    /// True when every check admitted the request and all were charged.
    pub allowed: bool,
    /// One decision per check, in order. When the request is denied, the checks that
    /// would have admitted it were not charged, and their decision is the cost-0 view of
    /// their state (`allowed`, `remaining` what is really left).
    pub decisions: Vec<Decision>,
    /// Redis, or the fault policy for every check (then `decisions` are its).
    pub source: Source,
}

/// Decide on every check, all-or-nothing (see the [module docs](self)). `Err` only for
/// bad input (a key too long, limiters on different stores); Redis faults are answered
/// by the store's fault policy and marked in [`MultiOutcome::source`].
///
/// ```no_run
/// # async fn demo() -> Result<(), floodgate_redis::Error> {
/// use std::sync::Arc;
/// use floodgate_core::{AnyAlgorithm, Rate, algorithms::Gcra};
/// use floodgate_redis::multi::{Check, check_all};
/// use floodgate_redis::{RedisLimiter, RedisStore, StoreConfig};
///
/// let store = Arc::new(RedisStore::connect("redis://127.0.0.1:6379", StoreConfig::default()).await?);
/// let per_client = RedisLimiter::new(store.clone(), AnyAlgorithm::Gcra(Gcra::new(Rate::per_second(10)?, 20)?))?;
/// let global = RedisLimiter::new(store, AnyAlgorithm::Gcra(Gcra::new(Rate::per_second(1000)?, 100)?))?;
/// let out = check_all(&[
///     Check { limiter: &per_client, user: b"per-ip\x1f203.0.113.7", cost: 1 },
///     Check { limiter: &global, user: b"global\x1f", cost: 1 },
/// ]).await?;
/// if !out.allowed { /* 429; neither limit was charged */ }
/// # Ok(()) }
/// ```
pub async fn check_all(checks: &[Check<'_>]) -> Result<MultiOutcome, Error> {
    run(checks, None).await
}

/// [`check_all`] at the caller's instant `now` (ns since the Unix epoch), whatever the
/// store's time source.
pub async fn check_all_at(checks: &[Check<'_>], now: Nanos) -> Result<MultiOutcome, Error> {
    run(checks, Some(now)).await
}

/// What a charge of `check` would decide now, charging nothing: one call of the script
/// in its dry mode (decided as a charge would be, every key put back as it was). A look
/// at a key for a request of `check.cost` units; the circuit breaker, the timeout and
/// the fault policy apply as in [`check_all`].
pub async fn peek(check: Check<'_>) -> Result<MultiOutcome, Error> {
    let now = check.limiter.now();
    eval_multi(std::slice::from_ref(&check), now, Mode::Dry).await
}

async fn run(checks: &[Check<'_>], at: Option<Nanos>) -> Result<MultiOutcome, Error> {
    let Some(first) = checks.first() else {
        return Ok(MultiOutcome {
            allowed: true,
            decisions: Vec::new(),
            source: Source::Redis,
        });
    };
    if let Some(index) = checks
        .iter()
        .position(|c| !Arc::ptr_eq(c.limiter.store(), first.limiter.store()))
    {
        return Err(Error::MixedStores { index });
    }
    if let [c] = checks {
        let Outcome { decision, source } = outcome(c, c.cost, at).await?;
        return Ok(MultiOutcome {
            allowed: decision.allowed,
            decisions: vec![decision],
            source,
        });
    }
    if first.limiter.store().is_cluster() {
        return dry_run_then_charge(checks, at).await;
    }
    let now = at.map_or_else(|| first.limiter.now(), Now::Caller);
    eval_multi(checks, now, Mode::All).await
}

/// How the MULTI script treats the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Charge all or none.
    All,
    /// Decide as a charge would, charge nothing.
    Dry,
}

/// Every check's fault-policy decision, each counted as degraded but `counted` (already
/// counted by [`RedisLimiter::check`]).
fn faulted(
    checks: &[Check<'_>],
    fault: Fault,
    wait: std::time::Duration,
    counted: Option<usize>,
) -> MultiOutcome {
    let decisions: Vec<Decision> = checks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if Some(i) == counted {
                c.limiter.fault_decision(wait)
            } else {
                c.limiter.fault(fault.clone(), wait).decision
            }
        })
        .collect();
    MultiOutcome {
        allowed: decisions.iter().all(|d| d.allowed),
        decisions,
        source: Source::Fault(fault),
    }
}

/// One call of the MULTI script (every key in one slot: any keys on a single node).
async fn eval_multi(checks: &[Check<'_>], now: Now, mode: Mode) -> Result<MultiOutcome, Error> {
    let store = checks[0].limiter.store();
    let mode = if mode == Mode::Dry { "dry" } else { "all" };
    // the script's call, and the module's when it is used (the script's is sent if the
    // module turns out gone)
    let mut inv = MULTI.prepare_invoke();
    let mut cmd = redis::cmd("FG.DECIDE");
    inv.arg(mode);
    ScriptCall::push_now(&mut inv, now)?;
    for c in checks {
        let key = c.limiter.redis_key(c.user)?;
        let pad = c.limiter.pad_ms;
        c.limiter.call.push_multi(&mut inv, &key, c.cost, pad);
        if store.uses_module() {
            c.limiter.call.push_module(&mut cmd, &key, c.cost, pad);
        }
    }
    ScriptCall::push_module_now(&mut cmd, mode, now)?;
    let mode = if mode == "dry" { Mode::Dry } else { Mode::All };
    match store.breaker.gate() {
        Gate::Reject(wait) => {
            bump(&store.counters.circuit_rejected);
            return Ok(faulted(checks, Fault::CircuitOpen, wait, None));
        }
        Gate::Pass | Gate::Probe => {}
    }
    let sent = match store.uses_module() {
        true => match store.module_call(&cmd).await {
            Err(e) if store.module_vanished(&e) => store.eval(&inv).await,
            other => other,
        },
        false => store.eval(&inv).await,
    };
    let parsed = match sent {
        Ok(reply) => parse(checks, &reply, mode),
        Err(e) => Err(e),
    };
    match parsed {
        Ok(out) => {
            store.breaker.success();
            Ok(out)
        }
        Err(e) if e.is_fault() => {
            store.breaker.failure();
            let fault = match e {
                Error::Timeout { .. } => Fault::Timeout,
                other => Fault::Error(other.to_string()),
            };
            Ok(faulted(checks, fault, store.config.breaker_open_for, None))
        }
        Err(e) => Err(e),
    }
}

/// The MULTI script's reply: the overall verdict, then per check its reply's length and
/// the reply.
fn parse(checks: &[Check<'_>], reply: &[i64], mode: Mode) -> Result<MultiOutcome, Error> {
    let bad = |detail: String| Error::BadReply {
        script: "multi",
        detail,
    };
    let (&all, mut rest) = reply
        .split_first()
        .ok_or_else(|| bad("empty reply".into()))?;
    let allowed = match all {
        1 => true,
        0 => false,
        other => return Err(bad(format!("verdict {other} is not 0 or 1"))),
    };
    let mut decisions = Vec::with_capacity(checks.len());
    for c in checks {
        let (&len, tail) = rest.split_first().ok_or_else(|| {
            bad(format!(
                "{} replies for {} checks",
                decisions.len(),
                checks.len()
            ))
        })?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= tail.len())
            .ok_or_else(|| {
                bad(format!(
                    "reply length {len} with {} integers left",
                    tail.len()
                ))
            })?;
        let (one, after) = tail.split_at(len);
        // when the request is denied, a check that admitted was asked again at cost 0
        // (not in a dry run)
        let admitted = one
            .first()
            .is_some_and(|&v| if len == 1 { v >= 0 } else { v == 1 });
        let cost = if mode == Mode::All && !allowed && admitted {
            0
        } else {
            c.cost
        };
        decisions.push(c.limiter.call.decision(one, cost)?);
        rest = after;
    }
    if !rest.is_empty() {
        return Err(bad(format!(
            "{} integers after the last check's reply",
            rest.len()
        )));
    }
    if allowed != decisions.iter().all(|d| d.allowed) {
        return Err(bad(format!(
            "verdict {all} disagrees with the decisions {decisions:?}"
        )));
    }
    Ok(MultiOutcome {
        allowed,
        decisions,
        source: Source::Redis,
    })
}

/// Cluster: a dry run of each policy (one key per call), then, when all would admit, the
/// charges; when one would not, the others' cost-0 views. Exact when no other client
/// acts on these keys meanwhile. A fault at any step answers every check by the fault
/// policy (charges already made stay).
async fn dry_run_then_charge(
    checks: &[Check<'_>],
    at: Option<Nanos>,
) -> Result<MultiOutcome, Error> {
    let now = |c: &Check<'_>| at.map_or_else(|| c.limiter.now(), Now::Caller);
    // check i's step faulted (and counted itself): every check by the fault policy
    let stop = |i: usize, f: Fault| {
        let wait = checks[i].limiter.store().config.breaker_open_for;
        Ok(faulted(checks, f, wait, Some(i)))
    };
    let mut decisions = Vec::with_capacity(checks.len());
    for (i, c) in checks.iter().enumerate() {
        let out = eval_multi(std::slice::from_ref(c), now(c), Mode::Dry).await?;
        if let Source::Fault(f) = out.source {
            return stop(i, f);
        }
        decisions.extend(out.decisions);
    }
    if decisions.iter().all(|d| d.allowed) {
        for (i, c) in checks.iter().enumerate() {
            match ask(c, c.cost, at).await? {
                Ok(charged) => decisions[i] = charged,
                Err(f) => return stop(i, f),
            }
        }
    } else {
        for (i, c) in checks.iter().enumerate() {
            if decisions[i].allowed && c.cost > 0 {
                let view = Check { cost: 0, ..*c };
                let out = eval_multi(std::slice::from_ref(&view), now(c), Mode::Dry).await?;
                if let Source::Fault(f) = out.source {
                    return stop(i, f);
                }
                decisions[i] = out.decisions[0];
            }
        }
    }
    Ok(MultiOutcome {
        allowed: decisions.iter().all(|d| d.allowed),
        decisions,
        source: Source::Redis,
    })
}

/// One policy charged through [`RedisLimiter::check`], or the fault that stopped it.
async fn ask(
    c: &Check<'_>,
    cost: u64,
    at: Option<Nanos>,
) -> Result<Result<Decision, Fault>, Error> {
    let o = outcome(c, cost, at).await?;
    Ok(match o.source {
        Source::Fault(f) => Err(f),
        Source::Redis | Source::DenyCache => Ok(o.decision),
    })
}

/// One policy through [`RedisLimiter::check`], at the caller's instant when given.
async fn outcome(c: &Check<'_>, cost: u64, at: Option<Nanos>) -> Result<Outcome, Error> {
    match at {
        Some(t) => c.limiter.check_at(c.user, t, cost).await,
        None => c.limiter.check(c.user, cost).await,
    }
}
