//! Cost settled after the response, for every surface: a request is admitted at an
//! estimate through [`DecisionStore::reserve`](crate::DecisionStore::reserve), which
//! returns a [`Reservation`], and settled with its actual cost through
//! [`DecisionStore::settle`](crate::DecisionStore::settle). The rules (debt, refunds that
//! never mint capacity) are the core's ([`floodgate_core::settle`]).
//!
//! * [`LocalStore`](crate::LocalStore): the core's `reserve_all` and `settle_charge` on
//!   its limiters, all-or-nothing like a check.
//! * [`RedisDecisionStore`](crate::RedisDecisionStore): one atomic round trip per policy
//!   (floodgate-redis's settle script). Several policies are reserved one after the
//!   other; when one denies, those already reserved are settled at 0 at once, which
//!   refunds their whole estimate (nothing of it has elapsed): all-or-nothing up to the
//!   requests that a concurrent check decides between the two calls.
//! * [`HybridStore`](crate::HybridStore): reservations and settles go to the shared
//!   counter in Redis, as with the Redis store, never to the node's lease: a lease is
//!   quota already taken from the counter with no per-request record to settle, so a
//!   refund into it could hand out units twice. A route that settles costs therefore
//!   makes a round trip per request under the hybrid strategy.

use floodgate_core::{Charge, Settlement};
use smallvec::SmallVec;

/// One policy's part of a [`Reservation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The policy's index in the store.
    pub policy: usize,
    /// The policy's name (the Redis stores key on it).
    pub name: String,
    /// The key within the policy.
    pub key: Vec<u8>,
    /// What was charged: the estimate and the instant.
    pub charge: Charge,
}

/// A request admitted at an estimate, to settle once with its actual cost: every policy
/// it was checked against, with what each charged.
///
/// [`DecisionStore::settle`](crate::DecisionStore::settle) takes it by value, so one
/// reservation cannot be settled twice in process. Dropping it keeps the estimates.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation is settled with its actual cost; dropping it keeps the estimate"]
pub struct Reservation {
    parts: SmallVec<[Reserved; 1]>,
}

impl Reservation {
    /// A reservation of these parts (for one that crossed a wire: a forged part refunds
    /// at most its estimate, and only what of it still counts against its key).
    pub fn from_parts(parts: impl IntoIterator<Item = Reserved>) -> Reservation {
        Reservation {
            parts: parts.into_iter().collect(),
        }
    }

    /// The parts, one per policy, in the order of the checks.
    pub fn parts(&self) -> &[Reserved] {
        &self.parts
    }

    /// The parts, consuming the reservation.
    pub fn into_parts(self) -> Vec<Reserved> {
        self.parts.into_vec()
    }
}

/// The outcome of settling a [`Reservation`]: one settlement per part, in order.
pub type Settled = Vec<Settlement>;
