//! Hybrid: admit locally from a lease of quota while a key is far from its limit; go to
//! the shared counter for every request as it nears the limit.
//!
//! A node asks the shared counter (one round trip) for a *lease* of units at once and
//! spends it locally with no round trip. The lease is sized to the key's demand on this
//! node (requests seen per half lease lifetime, at most `batch`), so a quiet key leases one unit
//! at a time and loses nothing. When the shared counter's last answer shows fewer than
//! `near` units remaining (by default `nodes x batch`), the node stops leasing and asks for
//! exactly each request's cost: near the limit every decision is shared and exact. Leases
//! expire after `ttl`; unused leased units are lost, never handed out twice.
//!
//! **Error bound, stated and tested** (`floodgate simulate --nodes N --strategy hybrid`):
//! * every admitted unit was first charged to the shared counter, so over a long run the
//!   hybrid never admits more than the shared limit; within any span, admissions can exceed
//!   the shared limit's bound by at most `nodes x batch` units (leased before the span,
//!   spent inside it);
//! * at most `nodes x batch` units sit leased but unused at any time: that is the most quota
//!   a denied client can be missing (the waste).

use std::hash::Hash;

use floodgate_core::{Decision, Nanos};
use hashbrown::HashMap;

/// What a node must do for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Admitted from the local lease: no round trip.
    Admit,
    /// Ask the shared counter for `units` (then call [`HybridNode::finish`]).
    Ask {
        /// Units to charge on the shared counter.
        units: u64,
    },
}

/// What the shared counter's answer means for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The request is admitted (any surplus of the lease is kept locally).
    Admit,
    /// The request is denied.
    Deny,
    /// A lease was refused but the request alone might fit: ask again for `units`.
    Retry {
        /// Units to ask for.
        units: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Lease {
    units: u64,
    expires: Nanos,
    /// Units the shared counter said remained at its last answer.
    remaining: u64,
    /// When this node last asked the shared counter for the key.
    asked_at: Nanos,
    /// Requests for the key on this node since then.
    demand: u64,
}

/// One node's view in the hybrid strategy, for keys of type `K`. Pure: the caller does
/// the round trip to the shared counter (Redis GCRA, say).
#[derive(Debug)]
pub struct HybridNode<K> {
    batch: u64,
    near: u64,
    ttl: u64,
    max_keys: usize,
    leases: HashMap<K, Lease>,
}

impl<K: Hash + Eq + Clone> HybridNode<K> {
    /// Leases of `batch` units valid `ttl_ns` nanoseconds; per-request sharing once fewer
    /// than `near` units remain; at most `max_keys` leases held (expired ones go first).
    pub fn new(batch: u64, near: u64, ttl_ns: u64, max_keys: usize) -> Self {
        HybridNode {
            batch: batch.max(1),
            near,
            ttl: ttl_ns,
            max_keys: max_keys.max(1),
            leases: HashMap::new(),
        }
    }

    /// First phase: admit from the lease, or say what to ask the shared counter.
    pub fn begin(&mut self, key: &K, now: Nanos, cost: u64) -> Step {
        let Some(l) = self.leases.get_mut(key) else {
            return Step::Ask { units: cost };
        };
        l.demand += 1;
        if l.expires > now && l.units >= cost {
            l.units -= cost;
            return Step::Admit;
        }
        if l.remaining < self.near {
            return Step::Ask { units: cost };
        }
        // lease what this node's demand for the key would spend in half a lease lifetime,
        // so that a lease is normally spent well before it expires
        let elapsed = now.0.saturating_sub(l.asked_at.0).max(1);
        let expected = (l.demand as u128 * (self.ttl / 2) as u128 / elapsed as u128) as u64;
        Step::Ask {
            units: expected.clamp(1, self.batch).max(cost),
        }
    }

    /// Second phase: the shared counter answered `shared` to a request for `asked` units.
    pub fn finish(
        &mut self,
        key: &K,
        now: Nanos,
        cost: u64,
        asked: u64,
        shared: &Decision,
    ) -> Finish {
        if !shared.allowed {
            self.remember(key, now, 0, shared.remaining);
            return if asked > cost {
                Finish::Retry { units: cost }
            } else {
                Finish::Deny
            };
        }
        self.remember(key, now, asked - cost, shared.remaining);
        Finish::Admit
    }

    /// Give back `units` admitted for `key` but not used (a request admitted here and then
    /// denied by another policy, all-or-nothing). They were charged to the shared counter
    /// already, so they return to the key's lease (and are lost if it has expired): the
    /// bound above still holds.
    pub fn refund(&mut self, key: &K, units: u64) {
        if let Some(l) = self.leases.get_mut(key) {
            l.units = l.units.saturating_add(units);
        }
    }

    /// `(unspent units of the lease, units the shared counter said remained at its last
    /// answer)` for `key`, if this node holds a live lease for it.
    pub fn lease(&self, key: &K, now: Nanos) -> Option<(u64, u64)> {
        self.leases
            .get(key)
            .filter(|l| l.expires > now)
            .map(|l| (l.units, l.remaining))
    }

    /// Units leased to this node and not yet spent (expired leases count as zero).
    pub fn leased(&self, now: Nanos) -> u64 {
        self.leases
            .values()
            .filter(|l| l.expires > now)
            .map(|l| l.units)
            .sum()
    }

    fn remember(&mut self, key: &K, now: Nanos, units: u64, remaining: u64) {
        if !self.leases.contains_key(key) && self.leases.len() >= self.max_keys {
            self.leases.retain(|_, l| l.expires > now);
            if self.leases.len() >= self.max_keys {
                // drop the lease nearest to expiry: the least quota is lost
                if let Some(k) = self
                    .leases
                    .iter()
                    .min_by_key(|(_, l)| l.expires)
                    .map(|(k, _)| k.clone())
                {
                    self.leases.remove(&k);
                }
            }
        }
        self.leases.insert(
            key.clone(),
            Lease {
                units,
                expires: Nanos(now.0.saturating_add(self.ttl)),
                remaining,
                asked_at: now,
                demand: 0,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn refund_returns_units_to_a_live_lease_only() {
        let mut n = HybridNode::new(10, 0, 1_000, 16);
        let k = 7u32;
        assert_eq!(n.begin(&k, Nanos(0), 1), Step::Ask { units: 1 });
        let d = Decision::allow(100, 50, Duration::ZERO);
        assert_eq!(n.finish(&k, Nanos(0), 1, 4, &d), Finish::Admit);
        assert_eq!(n.lease(&k, Nanos(1)), Some((3, 50)));
        n.refund(&k, 2);
        assert_eq!(n.lease(&k, Nanos(1)), Some((5, 50)));
        assert_eq!(n.leased(Nanos(1)), 5);
        // expired: nothing held, a refund is lost
        assert_eq!(n.lease(&k, Nanos(1_000)), None);
        n.refund(&9, 3); // unknown key: nothing happens
        assert_eq!(n.lease(&9, Nanos(1)), None);
    }
}
