//! The limits one request reached, decided by the engine's procedure
//! ([`floodgate_engine::decide`]) through the generation's store.
//!
//! Every enforced limit of every descriptor is one check of one all-or-nothing store
//! call: a request denied by one limit consumes from none (Envoy's own service charges
//! all of them). In process that is one `floodgate_core::multi::check_all`; on Redis one
//! atomic round trip for them all (on a Redis Cluster a dry run and a charge per limit);
//! with the `hybrid` strategy, units admitted before a denial go back to this server's
//! lease. A shadow-mode descriptor's limits are shadow checks (charged on their own,
//! never denying); a blocking limit (`requests_per_unit: 0`) is a blocking check.
//!
//! A store fault is counted under its kind and logged here; the fault policy
//! ([`FaultPolicy`]) decides it; a refusal is a [`CheckError`].

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::Decision;
use floodgate_engine::decide::{Check, Role, Stores};
use floodgate_engine::{StoreError, StoreFailure};

use crate::metrics::Metrics;

use super::error::CheckError;
use super::limit::LimitInst;

pub use floodgate_engine::decide::FaultPolicy;

/// One limit of one descriptor of the request.
pub(super) struct Item {
    /// Which of the request's hits (a descriptor's rule, or a selector that applies,
    /// `matching::DomainTree::hits`) the limit belongs to: its position in that list.
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
        Item {
            desc,
            limit,
            key,
            cost,
            shadow,
            decision: Decision::allow(0, 0, Duration::ZERO),
        }
    }

    fn check(&self) -> Check<'_> {
        let role = match (self.limit.blocks(), self.shadow) {
            (false, false) => Role::Enforced,
            (false, true) => Role::Shadow,
            (true, false) => Role::Blocking,
            (true, true) => Role::BlockingShadow,
        };
        Check {
            policy: &self.limit.policy,
            key: &self.key,
            cost: self.cost,
            role,
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

/// Count and log a store fault under its kind.
pub(super) fn report(e: &StoreError, metrics: &Metrics) {
    metrics.store_error(e);
    if e.is_transient() {
        tracing::warn!(error = %e, kind = e.label(), "decision store failed; the fault policy decides");
    }
}

/// A store fault outside the procedure (a reservation): counted, then the fault policy's
/// answer, or the refusal as an error.
pub(super) fn fault(
    e: StoreError,
    policy: &FaultPolicy,
    metrics: &Metrics,
) -> Result<StoreFailure, CheckError> {
    report(&e, metrics);
    if !e.is_transient() {
        return Err(CheckError::Store(e));
    }
    Ok(policy.failure)
}

/// Decide every item (see the module docs); each item's decision is written into it.
pub(super) async fn decide(
    stores: Stores<'_>,
    policy: &FaultPolicy,
    metrics: &Metrics,
    items: &mut [Item],
) -> Result<Decided, CheckError> {
    let checks: Vec<Check<'_>> = items.iter().map(Item::check).collect();
    let decided =
        floodgate_engine::decide::decide(stores, policy, &checks, &mut |e| report(e, metrics))
            .await
            .map_err(CheckError::Store)?;
    drop(checks);
    for (it, d) in items.iter_mut().zip(decided.decisions) {
        it.decision = d;
    }
    Ok(Decided {
        admitted: decided.admitted,
        fault: decided.fault,
    })
}
