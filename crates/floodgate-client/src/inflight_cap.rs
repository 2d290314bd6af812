//! A server's concurrency cap, read from `RateLimit-Policy: "gpu";q=4;qu="concurrent-requests"`:
//! the polite client keeps at most `q` requests in flight to that host (the smallest `q`
//! of the host's concurrency policies), instead of pacing them as a rate.
//!
//! * A request takes a place ([`HostCaps::enter`]) before it is sent and gives it back
//!   when its [`CapPermit`] drops (the answer read, an error, a cancelled request). A
//!   request that finds every place taken waits for one, at most `max_wait`; then it goes
//!   anyway (the server decides; the cap is advice).
//! * The cap is learned from every response (it may go up or down); a host never heard
//!   from, or whose responses name no concurrency policy, has no cap.
//! * A 429 whose binding member (`r=0`) is a concurrency policy is not a rate: its
//!   `Retry-After` (the time until the server's earliest lease expires, an upper bound)
//!   does not hold the host; the retry waits for a place here, with backoff.
//!
//! At most [`MAX_HOSTS`] hosts are tracked; past it, new hosts are not capped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::headers::{Policy, QuotaUnit, Remaining};

/// Hosts tracked at most.
pub const MAX_HOSTS: usize = 10_000;

#[derive(Debug, Default)]
struct HostCap {
    /// The cap; 0 = none known.
    cap: AtomicU64,
    in_flight: AtomicU64,
    freed: Notify,
}

/// Per-host concurrency caps (see the module docs). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct HostCaps {
    hosts: Arc<Mutex<HashMap<String, Arc<HostCap>>>>,
}

/// A place held in a host's cap; given back when dropped.
#[derive(Debug)]
pub struct CapPermit {
    host: Arc<HostCap>,
}

impl Drop for CapPermit {
    fn drop(&mut self) {
        self.host.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.host.freed.notify_one();
    }
}

/// The smallest `q` of the concurrency policies among `policies`, if any.
pub fn concurrency_cap(policies: &[Policy]) -> Option<u64> {
    policies
        .iter()
        .filter(|p| p.unit == QuotaUnit::ConcurrentRequests)
        .map(|p| p.quota)
        .min()
}

/// Whether the denial binding in `remaining` (a member with `r=0`) is one of a
/// concurrency policy of `policies`: a 429 for having too many in flight, not a rate.
pub fn concurrency_denial(remaining: &[Remaining], policies: &[Policy]) -> bool {
    let concurrent = |name: &str| {
        policies
            .iter()
            .any(|p| p.name == name && p.unit == QuotaUnit::ConcurrentRequests)
    };
    let empty: Vec<&Remaining> = remaining.iter().filter(|r| r.remaining == 0).collect();
    !empty.is_empty() && empty.iter().all(|r| concurrent(&r.name))
}

impl HostCaps {
    fn host(&self, host: &str, create: bool) -> Option<Arc<HostCap>> {
        let mut hosts = self.hosts.lock();
        if let Some(h) = hosts.get(host) {
            return Some(h.clone());
        }
        if !create || hosts.len() >= MAX_HOSTS {
            return None;
        }
        let h = Arc::new(HostCap::default());
        hosts.insert(host.to_owned(), h.clone());
        Some(h)
    }

    /// Learn `host`'s cap from a response's policies (no concurrency policy: no cap).
    pub fn learn(&self, host: &str, policies: &[Policy]) {
        match concurrency_cap(policies) {
            Some(q) => {
                if let Some(h) = self.host(host, true) {
                    // a cap of 0 blocks everything: keep one request going to learn more
                    h.cap.store(q.max(1), Ordering::Release);
                    h.freed.notify_waiters();
                }
            }
            None => {
                if let Some(h) = self.host(host, false) {
                    h.cap.store(0, Ordering::Release);
                    h.freed.notify_waiters();
                }
            }
        }
    }

    /// The cap known for `host` (`None`: uncapped).
    pub fn cap(&self, host: &str) -> Option<u64> {
        self.host(host, false)
            .map(|h| h.cap.load(Ordering::Acquire))
            .filter(|c| *c > 0)
    }

    /// Take a place to `host`, waiting at most `max_wait` for one when its cap is full.
    /// `None` for a host with no cap learned (nothing to hold).
    pub async fn enter(&self, host: &str, max_wait: Duration) -> Option<CapPermit> {
        let h = self.host(host, false)?;
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let freed = h.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let cap = h.cap.load(Ordering::Acquire);
            let n = h.in_flight.load(Ordering::Acquire);
            if cap == 0 || n < cap {
                if h.in_flight
                    .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Some(CapPermit { host: h.clone() });
                }
                continue;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                // past the wait: go anyway (the server decides)
                h.in_flight.fetch_add(1, Ordering::AcqRel);
                return Some(CapPermit { host: h.clone() });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, q: u64, unit: QuotaUnit) -> Policy {
        Policy {
            name: name.into(),
            quota: q,
            window: None,
            unit,
            capacity: None,
        }
    }

    fn rem(name: &str, r: u64) -> Remaining {
        Remaining {
            name: name.into(),
            remaining: r,
            reset: None,
            limit: None,
        }
    }

    #[test]
    fn the_cap_and_the_denial_come_from_concurrency_policies_only() {
        let gpu = policy("gpu", 4, QuotaUnit::ConcurrentRequests);
        let rate = policy("rate", 100, QuotaUnit::Requests);
        assert_eq!(concurrency_cap(&[rate.clone(), gpu.clone()]), Some(4));
        assert_eq!(concurrency_cap(std::slice::from_ref(&rate)), None);
        let both = [gpu, rate];
        assert!(concurrency_denial(&[rem("gpu", 0), rem("rate", 5)], &both));
        assert!(!concurrency_denial(&[rem("gpu", 0), rem("rate", 0)], &both));
        assert!(!concurrency_denial(&[rem("gpu", 2), rem("rate", 0)], &both));
        assert!(!concurrency_denial(&[], &both));
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_the_cap_in_flight_and_a_freed_place_lets_one_go() {
        let caps = HostCaps::default();
        caps.learn("h", &[policy("gpu", 2, QuotaUnit::ConcurrentRequests)]);
        assert_eq!(caps.cap("h"), Some(2));
        let a = caps.enter("h", Duration::from_secs(5)).await.unwrap();
        let _b = caps.enter("h", Duration::from_secs(5)).await.unwrap();
        let caps2 = caps.clone();
        let third = tokio::spawn(async move { caps2.enter("h", Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!third.is_finished(), "the third waits for a place");
        drop(a);
        assert!(third.await.unwrap().is_some());
        // no concurrency policy any more: uncapped
        caps.learn("h", &[policy("rate", 9, QuotaUnit::Requests)]);
        assert_eq!(caps.cap("h"), None);
        // past max_wait a request goes anyway
        caps.learn("h", &[policy("gpu", 1, QuotaUnit::ConcurrentRequests)]);
        let t0 = tokio::time::Instant::now();
        let _late = caps.enter("h", Duration::from_secs(1)).await.unwrap();
        assert!(t0.elapsed() >= Duration::from_secs(1));
    }
}
