//! [`Timeline`]: decisions by outcome in each second of the last [`SECONDS`], in a ring.
//!
//! A slot holds the Unix second it counts; a slot found holding an older second is
//! cleared before it counts again, so memory is fixed and a second older than the ring
//! reads as nothing.

use crate::metrics::DecisionOutcome;

/// Seconds a timeline keeps (3 minutes).
pub const SECONDS: usize = 180;

/// The outcomes a timeline counts, in [`DecisionOutcome`] order.
pub const OUTCOMES: usize = 5;

/// One second's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    /// The Unix second counted (0: never used).
    pub second: u64,
    /// Decisions by [`DecisionOutcome`] (index = `outcome as usize`).
    pub decisions: [u64; OUTCOMES],
    /// Cost units admitted (passed or delayed, dry-run included).
    pub admitted_cost: u64,
}

/// Per-second counts of the last [`SECONDS`] seconds.
#[derive(Debug)]
pub struct Timeline {
    slots: Box<[Second; SECONDS]>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            slots: Box::new([Second::default(); SECONDS]),
        }
    }
}

impl Timeline {
    /// Count one decision of `outcome` at Unix second `second`; `admitted_cost` units are
    /// added to the admitted cost.
    pub fn record(&mut self, second: u64, outcome: DecisionOutcome, admitted_cost: u64) {
        let slot = &mut self.slots[(second % SECONDS as u64) as usize];
        if slot.second != second {
            if slot.second > second {
                // a reading older than the ring holds (a clock step back): not counted
                return;
            }
            *slot = Second {
                second,
                ..Second::default()
            };
        }
        slot.decisions[outcome as usize] += 1;
        slot.admitted_cost = slot.admitted_cost.saturating_add(admitted_cost);
    }

    /// The counts of Unix second `second` (zero when not held).
    pub fn get(&self, second: u64) -> Second {
        let slot = self.slots[(second % SECONDS as u64) as usize];
        if slot.second == second {
            slot
        } else {
            Second {
                second,
                ..Second::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_second_and_forgets_after_the_ring() {
        let mut t = Timeline::default();
        t.record(1_000, DecisionOutcome::Passed, 2);
        t.record(1_000, DecisionOutcome::Rejected, 0);
        t.record(1_001, DecisionOutcome::Rejected, 0);
        assert_eq!(t.get(1_000).decisions, [1, 0, 1, 0, 0]);
        assert_eq!(t.get(1_000).admitted_cost, 2);
        assert_eq!(t.get(1_001).decisions[2], 1);
        // the same slot, one ring later
        t.record(1_000 + SECONDS as u64, DecisionOutcome::Passed, 1);
        assert_eq!(t.get(1_000).decisions, [0; OUTCOMES]);
        assert_eq!(t.get(1_000 + SECONDS as u64).decisions[0], 1);
        // an older second does not clear a newer one
        t.record(1_000, DecisionOutcome::Passed, 1);
        assert_eq!(t.get(1_000 + SECONDS as u64).decisions[0], 1);
    }
}
