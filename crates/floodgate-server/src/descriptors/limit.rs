//! One configured limit as the descriptors' procedure decides it: its definition, its
//! identity across reloads, its engine policy and its counters.

use std::sync::Arc;

use floodgate_engine::PolicyInfo;
use floodgate_engine::insight::PolicyInsight;
use floodgate_engine::metrics::DecisionOutcome;
use prometheus_client::metrics::counter::Counter;

use crate::config::LimitDef;
use crate::metrics::Metrics;

/// The per-limit decision counters, `floodgate_decisions_total{policy, outcome}`.
#[derive(Debug, Clone)]
pub(super) struct LimitCounters([Counter; 5]);

impl LimitCounters {
    pub(super) fn new(m: &Metrics, policy: &str) -> LimitCounters {
        use DecisionOutcome::*;
        LimitCounters(
            [Passed, Delayed, Rejected, DelayedDryRun, RejectedDryRun]
                .map(|o| m.decision_counter(policy, o)),
        )
    }

    /// Count one decision.
    pub(super) fn count(&self, outcome: DecisionOutcome) {
        self.0[outcome as usize].inc();
    }
}

/// One configured limit with its engine policy.
#[derive(Debug)]
pub struct LimitInst {
    /// The limit as configured.
    pub def: LimitDef,
    /// Identity across reloads: `domain|rule path|name or #position`.
    pub id: String,
    /// What the store and the header rendering know of this limit. Its index is its
    /// place in the generation's store; a blocking limit (`requests_per_unit: 0`) has
    /// none (`usize::MAX`) and is never sent to a store.
    pub policy: PolicyInfo,
    pub(super) counters: LimitCounters,
    /// Its policy's insight (by name): where its decisions are recorded per key.
    pub(super) insight: Arc<PolicyInsight>,
}

impl LimitInst {
    /// Whether every request with a cost is denied (`requests_per_unit: 0`).
    pub fn blocks(&self) -> bool {
        self.def.spec.is_none()
    }

    /// The limiter key of `values` under this limit: the values alone in process (one
    /// limiter per limit), prefixed with the limit's identity on a shared keyspace.
    pub(super) fn key(&self, shared_keyspace: bool, values: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut key = Vec::new();
        if shared_keyspace {
            key.extend_from_slice(self.id.as_bytes());
            key.push(b'|');
        }
        values(&mut key);
        key
    }
}
