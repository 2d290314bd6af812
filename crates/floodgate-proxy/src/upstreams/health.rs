//! One server's health: passive (consecutive failures eject it for a back-off) and the
//! active probe's verdict. Times are [`Nanos`] of the [`Upstreams`](super::Upstreams)
//! clock; every field is an atomic, so workers record without a lock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::time::Nanos;

use super::MAX_BACKOFF_FACTOR;

/// Invariant: `until` is 0 or the instant (ns) an ejection ends; a server is taken when
/// `until <= now` and its probe does not fail.
#[derive(Debug, Default)]
pub(super) struct Health {
    /// Consecutive failures since the last success.
    fails: AtomicU32,
    /// Ejections in a row (since the last success): the next back-off is
    /// `fail_timeout * 2^ejections`, at most [`MAX_BACKOFF_FACTOR`] times.
    ejections: AtomicU32,
    /// When the current ejection ends, ns (0: never ejected).
    until: AtomicU64,
    /// The last probe failed.
    probe_down: AtomicBool,
}

impl Health {
    /// Whether the server is taken at `now`.
    pub(super) fn available(&self, now: Nanos) -> bool {
        !self.probe_failing() && self.until.load(Ordering::Relaxed) <= now.0
    }

    /// Whether the server is taken now, `now` read only if it was ever ejected.
    pub(super) fn available_with(&self, now: impl FnOnce() -> Nanos) -> bool {
        if self.probe_failing() {
            return false;
        }
        let until = self.until.load(Ordering::Relaxed);
        until == 0 || until <= now().0
    }

    /// Time left of the current ejection, if any.
    pub(super) fn ejected_for(&self, now: Nanos) -> Option<Duration> {
        let until = self.until.load(Ordering::Relaxed);
        (until > now.0).then(|| Duration::from_nanos(until - now.0))
    }

    pub(super) fn fails(&self) -> u32 {
        self.fails.load(Ordering::Relaxed)
    }

    pub(super) fn probe_failing(&self) -> bool {
        self.probe_down.load(Ordering::Relaxed)
    }

    /// The probe's verdict; returns whether it changed.
    pub(super) fn set_probe(&self, passed: bool) -> bool {
        self.probe_down.swap(!passed, Ordering::Relaxed) == passed
    }

    /// A response came: the failures in a row and the back-off start over.
    pub(super) fn success(&self) {
        if self.fails.load(Ordering::Relaxed) != 0 {
            self.fails.store(0, Ordering::Relaxed);
        }
        if self.ejections.load(Ordering::Relaxed) != 0 {
            self.ejections.store(0, Ordering::Relaxed);
        }
    }

    /// A failure at `now`. With `max_fails` (above 0) failures in a row and the server
    /// not ejected already, it is ejected: the back-off is returned. After a back-off
    /// the failure count still stands, so one more failure ejects it again, for twice
    /// as long.
    pub(super) fn failure(
        &self,
        now: Nanos,
        max_fails: u32,
        fail_timeout: Duration,
    ) -> Option<Duration> {
        if max_fails == 0 {
            return None;
        }
        let fails = self.fails.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if fails < max_fails {
            return None;
        }
        let until = self.until.load(Ordering::Relaxed);
        if until > now.0 {
            return None; // ejected already (requests sent before it failed too)
        }
        let n = self.ejections.load(Ordering::Relaxed).min(3);
        let factor = (1u32 << n).min(MAX_BACKOFF_FACTOR);
        let backoff = fail_timeout.saturating_mul(factor);
        let end = now
            .0
            .saturating_add(floodgate_core::time::duration_to_nanos(backoff));
        // one of several workers failing at once ejects it
        self.until
            .compare_exchange(until, end, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        self.ejections.fetch_add(1, Ordering::Relaxed);
        Some(backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn ejected_after_max_fails_for_a_back_off_that_doubles_up_to_eight_times() {
        let h = Health::default();
        let t = Duration::from_secs(10);
        assert_eq!(h.failure(Nanos(0), 3, t), None);
        assert_eq!(h.failure(Nanos(0), 3, t), None);
        assert!(h.available(Nanos(0)));
        assert_eq!(h.failure(Nanos(0), 3, t), Some(t));
        assert!(!h.available(Nanos(9 * S)));
        assert_eq!(h.ejected_for(Nanos(4 * S)), Some(Duration::from_secs(6)));
        assert!(h.available(Nanos(10 * S)));
        assert!(!h.available_with(|| Nanos(9 * S)));
        assert!(h.available_with(|| Nanos(10 * S)));
        // tried again and failing at once: twice as long, then 4x, 8x, 8x
        assert_eq!(h.failure(Nanos(10 * S), 3, t), Some(2 * t));
        assert_eq!(h.failure(Nanos(30 * S), 3, t), Some(4 * t));
        assert_eq!(h.failure(Nanos(70 * S), 3, t), Some(8 * t));
        assert_eq!(h.failure(Nanos(150 * S), 3, t), Some(8 * t));
        // a success starts over
        h.success();
        assert_eq!(h.failure(Nanos(300 * S), 3, t), None);
    }

    #[test]
    fn a_failure_while_ejected_does_not_extend_it_and_zero_max_fails_never_ejects() {
        let h = Health::default();
        let t = Duration::from_secs(1);
        assert_eq!(h.failure(Nanos(0), 1, t), Some(t));
        assert_eq!(h.failure(Nanos(S / 2), 1, t), None);
        assert!(h.available(Nanos(S)));
        let off = Health::default();
        assert!(
            off.available_with(|| unreachable!("never ejected: no clock read")),
            "a server never ejected is taken"
        );
        for _ in 0..100 {
            assert_eq!(off.failure(Nanos(0), 0, t), None);
        }
        assert!(off.available(Nanos(0)));
    }

    #[test]
    fn a_failing_probe_takes_the_server_out_until_one_passes() {
        let h = Health::default();
        assert!(h.set_probe(false));
        assert!(!h.set_probe(false));
        assert!(!h.available(Nanos(0)));
        assert!(h.set_probe(true));
        assert!(h.available(Nanos(0)));
    }
}
