//! Cost settled after the response: reserve at an estimate, settle at the actual cost.
//!
//! The cost of a request is often known only once it ran (tokens generated, rows
//! scanned, bytes sent). A request is admitted at an estimated cost (possibly 0) like any
//! other ([`Algorithm::check`]); what was charged is kept as a [`Charge`] (the estimate
//! and the instant), and settled later with the actual cost by [`Settle::settle`]:
//!
//! * **An actual cost above the estimate is charged in full**, even when that takes the
//!   key past its capacity into *debt*: later requests are denied until the debt is
//!   repaid. Each algorithm states how it carries debt (see its `Settle` notes below).
//! * **An actual cost below the estimate is refunded**, never beyond what was charged and
//!   never beyond what of the charge is still counted against the key: a charge the key
//!   has already recovered from (it drained, refilled or its window ended) refunds
//!   nothing. So a settle never mints capacity.
//! * **A charge never settled** (its holder crashed) keeps its estimate.
//!
//! | algorithm | debt (actual above estimate) | refund (actual below estimate) |
//! |---|---|---|
//! | [`Gcra`] | the theoretical arrival time moves past `now + tau`; denied until it is back within | only the part of the charge not yet elapsed, taking the charge's units as spent one emission interval each from the instant charged |
//! | [`TokenBucket`] | tokens below zero, kept as an empty bucket whose refill starts later | only the part not yet refilled since the instant charged |
//! | [`LeakyBucket`] | a level above the capacity, kept as a full bucket whose drain starts later | only the part not yet drained since the instant charged |
//! | [`FixedWindow`] | the count of the window the settle falls in, which may exceed the limit; the debt ends with that window | only into the window charged, while it is the current one |
//! | [`SlidingCounter`] | the count of the current window (weighted into the next one) | only into the window charged, while it is the current or previous one |
//! | [`SlidingLog`] | an entry at the settle instant, counted for a window from then | only from the entry at the instant charged, while it is in the window |
//!
//! **Guarantees with settles.** Counting every admitted request at its actual cost, at
//! the instant it was admitted: over any span, an algorithm admits at most what its
//! guarantee states *plus the overrun (actual minus estimate) of the requests in flight*
//! (admitted, not yet settled) at the end of the span; with one request in flight at a
//! time, one request's overrun. The property tests in `tests/settle.rs` check this, and
//! that refunds never exceed charges.
//!
//! [`Gcra`]: crate::algorithms::Gcra
//! [`TokenBucket`]: crate::algorithms::TokenBucket
//! [`LeakyBucket`]: crate::algorithms::LeakyBucket
//! [`FixedWindow`]: crate::algorithms::FixedWindow
//! [`SlidingCounter`]: crate::algorithms::SlidingCounter
//! [`SlidingLog`]: crate::algorithms::SlidingLog

mod algorithms;
mod keyed;

pub use keyed::{Reservation, reserve_all};

use thiserror::Error;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::time::Nanos;

/// What a reservation charged: the estimate and the instant it was charged at.
///
/// These two numbers are all any algorithm needs to settle safely (windowed algorithms
/// find the window charged from `at`), so a charge can cross a wire as two integers.
/// A forged or stale charge can refund at most `cost` units, and only what of them is
/// still counted against the key: it cannot mint capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Charge {
    /// Units charged when the request was admitted (the estimate).
    pub cost: u64,
    /// The instant charged (the `now` of the admitting check).
    pub at: Nanos,
}

/// The outcome of a settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    /// Units charged beyond the estimate (`actual - estimate`, or 0).
    pub charged: u64,
    /// Units refunded (at most `estimate - actual`; less when part of the charge was
    /// already recovered). Continuous algorithms may refund a fraction of a unit; this
    /// counts whole units, rounded down.
    pub refunded: u64,
    /// The key's state after the settle, as a request of cost 0 sees it (`remaining` is 0
    /// while the key is in debt).
    pub decision: Decision,
}

/// A settle that cannot be applied; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SettleError {
    /// The debt an actual cost would put on the key does not fit in 64-bit nanoseconds
    /// or units (an actual cost in the billions of windows).
    #[error("actual cost {actual} is too large to charge: the key's debt would not fit in 64 bits")]
    TooLarge {
        /// The actual cost given.
        actual: u64,
    },
}

/// Algorithms whose charges can be settled with an actual cost.
pub trait Settle: Algorithm {
    /// Admit a request at an `estimate`, charging it when admitted, as
    /// [`check`](Algorithm::check) does, except that an estimate of 0 is admitted only
    /// while at least one unit is left: a key in debt, or with nothing left, admits no
    /// reservation until it has capacity again.
    fn reserve(&self, state: &mut Self::State, now: Nanos, estimate: u64) -> Decision {
        if estimate == 0 {
            let probe = self.peek(state, now, 1);
            if !probe.allowed {
                return probe;
            }
        }
        self.check(state, now, estimate)
    }

    /// Settle `charge` with its `actual` cost at `now`: charge the difference when
    /// `actual` is larger (into debt if need be), refund it when smaller, within what is
    /// still counted of the charge. An error changes nothing.
    fn settle(
        &self,
        state: &mut Self::State,
        now: Nanos,
        charge: Charge,
        actual: u64,
    ) -> Result<Settlement, SettleError>;
}

/// The settlement of `charge` given the units charged and refunded, with the cost-0 view
/// of the state after it.
pub(crate) fn settled<A: Algorithm>(
    alg: &A,
    state: &A::State,
    now: Nanos,
    charged: u64,
    refunded: u64,
) -> Settlement {
    Settlement {
        charged,
        refunded,
        decision: alg.peek(state, now, 0),
    }
}
