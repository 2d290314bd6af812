//! Deciding the limits one request reached, through the generation's engine store.
//!
//! Every enforced limit of every descriptor is decided in one all-or-nothing store call:
//! a request denied by one limit consumes from none (Envoy's own service charges all of
//! them). In process that is one `floodgate_core::multi::check_all`; on Redis one atomic
//! round trip for them all (on a Redis Cluster a dry run and a charge per limit); with
//! the `hybrid` strategy, units admitted before a denial go back to this server's lease.
//! Shadow-mode limits are charged on their own and never deny. A blocking limit
//! (`requests_per_unit: 0`) denies the request; the others are then only looked at.
//!
//! A store fault (timeout, open circuit, Redis unavailable) is decided by the fault
//! policy ([`StoreFailure`]) and counted under its kind; a refusal is a [`CheckError`].

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::multi::MultiDecision;
use floodgate_core::{Algorithm, Decision};
use floodgate_engine::{DecisionStore, LocalStore, StoreCheck, StoreError, StoreFailure};

use crate::metrics::Metrics;

use super::error::CheckError;
use super::limit::LimitInst;

/// What a request gets when its store fails: the engine's [`StoreFailure`], and the
/// retry a fail-closed denial advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPolicy {
    /// Admit (fail open, the default) or deny (fail closed).
    pub failure: StoreFailure,
    /// `Retry-After` of a fail-closed denial (the Redis breaker's open time).
    pub retry: Duration,
}

impl Default for FaultPolicy {
    fn default() -> Self {
        FaultPolicy {
            failure: StoreFailure::Allow,
            retry: Duration::from_secs(1),
        }
    }
}

impl FaultPolicy {
    /// The decision of `limit` when the store could not decide.
    pub(super) fn decision(&self, limit: &LimitInst) -> Decision {
        let cap = limit.policy.algorithm.limit();
        match self.failure {
            StoreFailure::Allow => Decision::allow(cap, 0, Duration::ZERO),
            StoreFailure::Deny => Decision::deny(cap, 0, self.retry, self.retry),
        }
    }
}

/// One limit of one descriptor of the request.
pub(super) struct Item {
    /// The descriptor's position in the request.
    pub(super) desc: usize,
    pub(super) limit: Arc<LimitInst>,
    pub(super) key: Vec<u8>,
    pub(super) cost: u64,
    pub(super) shadow: bool,
    pub(super) decision: Decision,
}

impl Item {
    pub(super) fn new(
        desc: usize,
        limit: Arc<LimitInst>,
        key: Vec<u8>,
        cost: u64,
        shadow: bool,
    ) -> Item {
        // a blocking limit's answer; the store's replaces it for the others
        let decision = if cost == 0 {
            Decision::allow(0, 0, Duration::ZERO)
        } else {
            Decision::never(0, cost, 0, Duration::ZERO)
        };
        Item {
            desc,
            limit,
            key,
            cost,
            shadow,
            decision,
        }
    }

    fn check(&self, cost: u64) -> StoreCheck<'_> {
        StoreCheck {
            policy: &self.limit.policy,
            key: &self.key,
            cost,
        }
    }
}

/// What the store said overall.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Decided {
    /// The enforced limits were all admitted (and charged).
    pub(super) admitted: bool,
    /// The fault policy decided (the store failed).
    pub(super) fault: Option<StoreFailure>,
}

pub(super) fn fault(
    e: StoreError,
    policy: &FaultPolicy,
    metrics: &Metrics,
) -> Result<StoreFailure, CheckError> {
    metrics.store_error(&e);
    if !e.is_transient() {
        return Err(CheckError::Store(e));
    }
    tracing::warn!(error = %e, kind = e.label(), "decision store failed; the fault policy decides");
    Ok(policy.failure)
}

/// Where a generation's checks go: its store, and the same store when in process (then
/// decided at once, without a boxed future).
#[derive(Clone, Copy)]
pub(super) struct Stores<'a> {
    pub(super) store: &'a dyn DecisionStore,
    pub(super) local: Option<&'a LocalStore>,
}

impl Stores<'_> {
    async fn check(&self, checks: &[StoreCheck<'_>]) -> Result<MultiDecision, StoreError> {
        match self.local {
            Some(l) => l.check_now(checks),
            None => self.store.check(checks).await,
        }
    }
}

/// Decide every item (see the module docs).
pub(super) async fn decide(
    store: Stores<'_>,
    policy: &FaultPolicy,
    metrics: &Metrics,
    items: &mut [Item],
) -> Result<Decided, CheckError> {
    let mut out = Decided {
        admitted: true,
        fault: None,
    };
    // shadow limits: charged on their own, never deny
    for it in items
        .iter_mut()
        .filter(|it| it.shadow && !it.limit.blocks())
    {
        match store.check(&[it.check(it.cost)]).await {
            Ok(m) => {
                if let Some(d) = m.decisions.first() {
                    it.decision = *d;
                }
            }
            Err(e) => {
                fault(e, policy, metrics)?;
                it.decision = FaultPolicy {
                    failure: StoreFailure::Allow,
                    ..*policy
                }
                .decision(&it.limit);
            }
        }
    }
    let blocked = items
        .iter()
        .any(|it| !it.shadow && it.cost > 0 && it.limit.blocks());
    let enforced: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].shadow && !items[i].limit.blocks())
        .collect();
    if !enforced.is_empty() {
        let checks: Vec<StoreCheck<'_>> = enforced
            .iter()
            .map(|&i| items[i].check(if blocked { 0 } else { items[i].cost }))
            .collect();
        let result = store.check(&checks).await;
        drop(checks);
        match result {
            Ok(m) => {
                out.admitted = m.allowed;
                for (&i, d) in enforced.iter().zip(m.decisions) {
                    items[i].decision = d;
                }
            }
            Err(e) => {
                let failure = fault(e, policy, metrics)?;
                out.fault = Some(failure);
                out.admitted = failure == StoreFailure::Allow;
                for &i in &enforced {
                    items[i].decision = policy.decision(&items[i].limit);
                }
            }
        }
    }
    out.admitted &= !blocked;
    Ok(out)
}
