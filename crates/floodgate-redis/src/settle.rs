//! Reserve at an estimate and settle at the actual cost on Redis: one atomic call each
//! (`lua/settle.lua`, which runs the same per-algorithm code as a check and the core's
//! [`Settle`](floodgate_core::Settle) arithmetic exactly; or, when the store uses the
//! Redis module, its `FG.RESERVE` and `FG.SETTLE`, which answer and write the same).
//!
//! A reservation is the user key plus a [`Charge`]: the estimate and the instant charged,
//! which in Redis-time mode is Redis's own `TIME`, returned by the reserving call. A
//! settle touches the one key of the reservation, so it is Redis Cluster safe under the
//! same hash-tag rules as a check, and it sets the key's expiry again (later when a debt
//! pushes the instant it is back at full capacity later).

use floodgate_core::{Charge, Decision, Nanos, Settlement};

use crate::error::Error;
use crate::limiter::RedisLimiter;
use crate::scripts::{GCRA_TOLERANCE_LIMIT, Now, SETTLE, ScriptCall};

const NANO: u64 = 1_000_000_000;
/// Below 2^50: the most a settle may add, in units (windows) or nano-units (buckets).
const EXACT: u64 = 1 << 50;

impl RedisLimiter {
    /// Admit a request for `user` at an `estimate` (0 is admitted only while a unit is
    /// left) at `now`; when admitted, the [`Charge`] to settle. One atomic call. Asks
    /// Redis directly: no deny cache, breaker or fault policy (a reservation made under
    /// the fault policy has nothing in Redis to settle).
    pub async fn reserve(
        &self,
        user: &[u8],
        estimate: u64,
    ) -> Result<(Decision, Option<Charge>), Error> {
        self.reserve_at(user, self.now(), estimate).await
    }

    /// [`reserve`](Self::reserve) at the given time source.
    pub async fn reserve_at(
        &self,
        user: &[u8],
        now: Now,
        estimate: u64,
    ) -> Result<(Decision, Option<Charge>), Error> {
        let key = self.redis_key(user)?;
        let inv = invocation(
            &self.call,
            &key,
            now,
            "reserve",
            estimate,
            None,
            self.pad_ms,
        )?;
        let cmd = self.store().uses_module().then(|| {
            let mut cmd = redis::cmd("FG.RESERVE");
            let limit = self.call.limit();
            self.call.push_module(
                &mut cmd,
                &key,
                estimate.min(limit.saturating_add(1)),
                self.pad_ms,
            );
            cmd
        });
        let reply = self.send(inv, cmd, now).await?;
        let bad = |detail: String| Error::BadReply {
            script: "settle",
            detail,
        };
        let [s, n, probe, rest @ ..] = &reply[..] else {
            return Err(bad(format!("expected the instant, got {reply:?}")));
        };
        let at = u64::try_from(*s)
            .ok()
            .and_then(|s| s.checked_mul(NANO))
            .and_then(|s| s.checked_add(u64::try_from(*n).ok()?))
            .ok_or_else(|| bad(format!("bad instant {s} s {n} ns")))?;
        // an estimate of 0 denied: the reply is the probe's, at cost 1
        let cost = if *probe == 1 { 1 } else { estimate };
        let decision = self.call.decision(rest, cost)?;
        let charge = decision.allowed.then_some(Charge {
            cost: estimate,
            at: Nanos(at),
        });
        Ok((decision, charge))
    }

    /// Settle `charge` on `user` with its `actual` cost (see
    /// [`Settle`](floodgate_core::Settle)): one atomic call at the store's time source.
    pub async fn settle(
        &self,
        user: &[u8],
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, Error> {
        self.settle_at(user, self.now(), charge, actual).await
    }

    /// [`settle`](Self::settle) at the given time source.
    pub async fn settle_at(
        &self,
        user: &[u8],
        now: Now,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, Error> {
        let key = self.redis_key(user)?;
        let inv = invocation(
            &self.call,
            &key,
            now,
            "settle",
            charge.cost,
            Some((charge, actual)),
            self.pad_ms,
        )?;
        let cmd = self.store().uses_module().then(|| {
            let mut cmd = redis::cmd("FG.SETTLE");
            self.call
                .push_module(&mut cmd, &key, charge.cost, self.pad_ms);
            cmd.arg(charge.at.0 / NANO)
                .arg(charge.at.0 % NANO)
                .arg(actual);
            cmd
        });
        let reply = self.send(inv, cmd, now).await?;
        let [status, charged, refunded, rest @ ..] = &reply[..] else {
            return Err(Error::BadReply {
                script: "settle",
                detail: format!("expected status, charged, refunded, got {reply:?}"),
            });
        };
        if *status != 0 {
            return Err(Error::Settle(format!(
                "an actual cost of {actual} would put a debt on the key beyond what the scripts hold exactly"
            )));
        }
        Ok(Settlement {
            charged: *charged as u64,
            refunded: *refunded as u64,
            decision: self.call.decision(rest, 0)?,
        })
    }
}

impl RedisLimiter {
    /// The module's command (`FG.RESERVE`, `FG.SETTLE`: the script's reply) when the
    /// store uses the module, else the settle script; the script too when the module
    /// turns out gone.
    async fn send(
        &self,
        inv: redis::ScriptInvocation<'static>,
        cmd: Option<redis::Cmd>,
        now: Now,
    ) -> Result<Vec<i64>, Error> {
        if let Some(mut cmd) = cmd {
            ScriptCall::push_instant(&mut cmd, now)?;
            match self.store().module_call(&cmd).await {
                Err(e) if self.store().module_vanished(&e) => {}
                other => return other,
            }
        }
        self.store().eval(&inv).await
    }
}

/// The `SETTLE` invocation: op, now, the algorithm, padding, estimate, the charge's
/// instant and the actual cost, then the algorithm's parameters.
fn invocation(
    call: &ScriptCall,
    key: &[u8],
    now: Now,
    op: &str,
    estimate: u64,
    settle: Option<(Charge, u64)>,
    pad_ms: u64,
) -> Result<redis::ScriptInvocation<'static>, Error> {
    let limit = call.limit();
    let (at, actual) = match settle {
        None => (Nanos::ZERO, 0),
        Some((charge, actual)) => {
            check_settle(call, charge, actual)?;
            (charge.at, actual)
        }
    };
    let mut inv = SETTLE.prepare_invoke();
    inv.key(key).arg(op);
    ScriptCall::push_now(&mut inv, now)?;
    inv.arg(call.multi_index())
        .arg(i64::try_from(pad_ms).unwrap_or(i64::MAX))
        .arg(estimate.min(limit.saturating_add(1)))
        .arg(at.0 / NANO)
        .arg(at.0 % NANO)
        .arg(actual);
    for p in call.params() {
        inv.arg(*p);
    }
    Ok(inv)
}

/// A charge this limiter could have made, and an actual cost the scripts settle exactly.
fn check_settle(call: &ScriptCall, charge: Charge, actual: u64) -> Result<(), Error> {
    let limit = call.limit();
    if charge.cost > limit {
        return Err(Error::Settle(format!(
            "the reservation's estimate {} is above the limit {limit}: no reservation of this policy charged it",
            charge.cost
        )));
    }
    if charge.at.0 >= 1 << 63 {
        return Err(Error::TimeOutOfRange {
            now_ns: charge.at.0,
        });
    }
    let extra = actual.saturating_sub(charge.cost) as u128;
    let bound = match call.kind() {
        "gcra" => GCRA_TOLERANCE_LIMIT as u128 / call.params()[0].max(1) as u128,
        "token-bucket" | "leaky-meter" | "leaky-queue" => (EXACT / NANO) as u128,
        _ => EXACT as u128,
    };
    if extra >= bound {
        return Err(Error::Settle(format!(
            "an actual cost of {actual} is {extra} above the estimate, beyond the {bound} units a settle may add"
        )));
    }
    Ok(())
}
