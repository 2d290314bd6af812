//! A circuit breaker: after a failure, Redis is left alone for `open_for`; then one probe
//! call goes through while every other call gets the fault policy at once. A dead Redis
//! therefore costs one timeout per `open_for`, not one per request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

#[derive(Debug, Clone, Copy)]
enum State {
    Closed,
    Open {
        until: Instant,
    },
    /// One probe is in flight since the instant; if it never reports (its caller was
    /// cancelled), another probe is allowed after `probe_expiry`.
    Probing {
        since: Instant,
    },
}

/// What a call may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Closed: call Redis.
    Pass,
    /// Half-open: this call is the probe.
    Probe,
    /// Open: do not call Redis; it may be tried again in this long.
    Reject(Duration),
}

#[derive(Debug)]
pub(crate) struct Breaker {
    state: Mutex<State>,
    open_for: Duration,
    probe_expiry: Duration,
    pub(crate) opened: AtomicU64,
}

impl Breaker {
    pub(crate) fn new(open_for: Duration, call_timeout: Duration) -> Breaker {
        Breaker {
            state: Mutex::new(State::Closed),
            open_for,
            probe_expiry: call_timeout.saturating_mul(2).max(open_for),
            opened: AtomicU64::new(0),
        }
    }

    pub(crate) fn gate(&self) -> Gate {
        let mut st = self.state.lock();
        let now = Instant::now();
        match *st {
            State::Closed => Gate::Pass,
            State::Open { until } if now >= until => {
                *st = State::Probing { since: now };
                Gate::Probe
            }
            State::Open { until } => Gate::Reject(until - now),
            State::Probing { since } if now.duration_since(since) >= self.probe_expiry => {
                *st = State::Probing { since: now };
                Gate::Probe
            }
            State::Probing { .. } => Gate::Reject(self.open_for),
        }
    }

    pub(crate) fn success(&self) {
        let mut st = self.state.lock();
        *st = State::Closed;
    }

    pub(crate) fn failure(&self) {
        let mut st = self.state.lock();
        if matches!(*st, State::Closed) {
            self.opened.fetch_add(1, Ordering::Relaxed);
        }
        *st = State::Open {
            until: Instant::now() + self.open_for,
        };
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(*self.state.lock(), State::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_probes_once_and_closes() {
        let b = Breaker::new(Duration::from_millis(30), Duration::from_millis(10));
        assert_eq!(b.gate(), Gate::Pass);
        b.failure();
        assert!(matches!(b.gate(), Gate::Reject(_)));
        std::thread::sleep(Duration::from_millis(35));
        assert_eq!(b.gate(), Gate::Probe);
        assert!(
            matches!(b.gate(), Gate::Reject(_)),
            "only one probe at a time"
        );
        b.failure();
        assert!(matches!(b.gate(), Gate::Reject(_)));
        std::thread::sleep(Duration::from_millis(35));
        assert_eq!(b.gate(), Gate::Probe);
        b.success();
        assert_eq!(b.gate(), Gate::Pass);
        assert_eq!(b.opened.load(Ordering::Relaxed), 1);
    }
}
