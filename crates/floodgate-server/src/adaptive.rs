//! Adaptive concurrency for callers that report each request's end: the permits of the
//! config's `adaptive:` policies ([`floodgate_engine::adaptive::PartitionedLimiter`], the
//! proxy's and the tower layer's limiter), held under lease ids between
//! `/v1/adaptive/acquire` and `/v1/adaptive/release`.
//!
//! The latency sample of a permit is the time from its grant to its release, on the
//! server's clock: a caller releases when its request's response head (or body) is done,
//! as the proxy's `latency = "head"` (`"end"`) does. A permit never released is given back
//! without a sample after its policy's `lease_ttl` ([`AdaptiveLeases::sweep`]), so a
//! caller that dies holds no place for ever. The table holds at most the sum of the
//! policies' ceilings (a limiter grants no more), so its memory is bounded by the config.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use floodgate_engine::adaptive::{
    AdaptivePermit, AdaptiveSpec, Outcome, PartitionedLimiter, Refused,
};
use tokio::time::Instant;

/// How often the expired permits are swept.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// A permit granted: its lease id and the limiter's state at the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// The lease id to release it with (1 to 2^63 - 1).
    pub lease: u64,
    /// The class it was granted to (index in the policy's classes).
    pub class: usize,
    /// The limit at the grant.
    pub limit: usize,
    /// Permits held at the grant, itself included.
    pub in_flight: usize,
    /// Time spent in the policy's queue.
    pub waited: Duration,
}

struct Held {
    permit: AdaptivePermit,
    expires: Instant,
}

/// The permits held by callers, by lease id.
#[derive(Default)]
pub struct AdaptiveLeases {
    held: Mutex<HashMap<u64, Held>>,
}

impl std::fmt::Debug for AdaptiveLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptiveLeases")
            .field("held", &self.len())
            .finish()
    }
}

impl AdaptiveLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Permits held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no permit is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A permit of `limiter` for `class`, waiting in its queue as the policy says, held
    /// until released or `ttl` passes.
    pub async fn acquire(
        &self,
        limiter: &PartitionedLimiter,
        class: usize,
        ttl: Duration,
    ) -> Result<Granted, Refused> {
        let admitted = limiter.acquire(class).await?;
        let permit = admitted.permit;
        let granted = |lease| Granted {
            lease,
            class: permit.class(),
            limit: limiter.limit(),
            in_flight: permit.inflight_at_start(),
            waited: admitted.waited,
        };
        let mut held = self.lock();
        let lease = loop {
            let id = fastrand::u64(1..1 << 63);
            if !held.contains_key(&id) {
                break id;
            }
        };
        let g = granted(lease);
        held.insert(
            lease,
            Held {
                permit,
                expires: Instant::now() + ttl,
            },
        );
        Ok(g)
    }

    /// Release lease `lease` with the outcome `outcome` gives for its policy's spec:
    /// `false` when no such permit is held (released before, expired, never granted);
    /// nothing is released twice.
    pub fn release(&self, lease: u64, outcome: impl FnOnce(&AdaptiveSpec) -> Outcome) -> bool {
        let Some(h) = self.lock().remove(&lease) else {
            return false;
        };
        let o = h.permit.spec().map_or(Outcome::Ignore, outcome);
        h.permit.release(o);
        true
    }

    /// Give back the permits whose lease expired by `now`, without a sample: how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let expired: Vec<Held> = {
            let mut held = self.lock();
            let ids: Vec<u64> = held
                .iter()
                .filter(|(_, h)| h.expires <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| held.remove(id)).collect()
        };
        let n = expired.len();
        // released outside the table's lock (a release serves the limiter's queue)
        for h in expired {
            h.permit.release(Outcome::Ignore);
        }
        n
    }
}

/// Sweep `leases` every [`SWEEP_INTERVAL`] while it is alive.
pub fn spawn_sweeper(leases: &std::sync::Arc<AdaptiveLeases>) {
    let weak = std::sync::Arc::downgrade(leases);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(l) = weak.upgrade() else { return };
            l.sweep(Instant::now());
        }
    });
}
