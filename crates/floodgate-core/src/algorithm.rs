//! The contract every algorithm implements: a pure state machine driven by explicit time.

use crate::decision::Decision;
use crate::time::Nanos;

/// A rate-limiting algorithm: parameters in `self`, per-key state in [`Algorithm::State`].
///
/// Implementations are pure: no clock, no I/O, no interior mutability. A decision is made
/// in two phases so several limits can be checked all-or-nothing (see
/// [`crate::multi::check_all`]):
///
/// 1. [`decide`](Algorithm::decide) looks at the state and returns the decision plus, when
///    the request is admitted with a non-zero cost, the write it would make;
/// 2. [`apply`](Algorithm::apply) performs that write.
///
/// [`check`](Algorithm::check) does both; [`peek`](Algorithm::peek) only the first.
///
/// Invariants every implementation keeps, and the property tests check:
/// * `State::default()` is a key never seen: full capacity.
/// * A denied request and a request of cost 0 change nothing.
/// * `now` may stand still or go backwards; that counts as no time passing.
/// * No input panics, whatever the cost or time (arithmetic is checked or 128-bit).
pub trait Algorithm: Send + Sync {
    /// Per-key state. `Default` is the state of a key at full capacity.
    type State: Default + Send;
    /// The write an admitted request makes.
    type Pending;

    /// The most units a key can admit at once from full capacity.
    fn limit(&self) -> u64;

    /// Decide on a request of `cost` units at `now`, without changing anything.
    /// Returns the write to make when the request is admitted with `cost > 0`.
    fn decide(
        &self,
        state: &Self::State,
        now: Nanos,
        cost: u64,
    ) -> (Decision, Option<Self::Pending>);

    /// Perform a write returned by [`decide`](Algorithm::decide) on the same state.
    fn apply(&self, state: &mut Self::State, pending: Self::Pending);

    /// The instant from which `state` is equivalent to `State::default()` if nothing else
    /// arrives: dropping the key then loses nothing. [`Nanos::ZERO`] when it already is.
    fn full_at(&self, state: &Self::State) -> Nanos;

    /// Decide and, when admitted, consume `cost` units.
    #[inline(always)]
    fn check(&self, state: &mut Self::State, now: Nanos, cost: u64) -> Decision {
        let (decision, pending) = self.decide(state, now, cost);
        if let Some(p) = pending {
            self.apply(state, p);
        }
        decision
    }

    /// What [`check`](Algorithm::check) would answer, consuming nothing.
    #[inline]
    fn peek(&self, state: &Self::State, now: Nanos, cost: u64) -> Decision {
        self.decide(state, now, cost).0
    }
}
