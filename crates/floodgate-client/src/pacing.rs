//! Pacing: spread the requests a server still allows over the time it says they cover,
//! never faster than the rate its policy sustains.
//!
//! A fixed window teaches clients a cyclic burst-pause: fire the `r` remaining requests at
//! once, get 429s, wait for the reset, repeat. The [`Pacer`] instead schedules sends
//! `interval = max(w / q, t / r)` apart, per host and per policy: `t / r` spreads the `r`
//! units the server says are left over the `t` seconds they cover, and `w / q` (from the
//! policy's `RateLimit-Policy` member, when known: [`Pacer::observe_with_policies`]) keeps
//! the client at the sustained rate the policy states, so a window that has just reset
//! (a large `r` over a short `t`) is never an invitation to burst. The send time of a
//! request is the latest of what each live policy of its host allows. When `r = 0` the
//! next send waits `t` plus a jitter of up to [`PacerConfig::reset_jitter`] x `t`, so that
//! clients told the same reset do not all return at one instant; the sends queued behind it
//! then go `w / q` apart. Intervals are rounded up to the nanosecond: never early.
//! `Retry-After` blocks the whole host ([`Pacer::block_host`]).
//!
//! Against floodgate (whose fields `docs/ratelimit-fields.md` explains) this runs at the
//! sustained rate of every algorithm: `q / w` is that rate, and `r / t` never exceeds it.
//!
//! Time is [`Nanos`] from an injected clock: the pacer never reads one itself. Every wait it
//! returns is at most [`PacerConfig::max_wait`].

use std::collections::HashMap;
use std::time::Duration;

use floodgate_core::Nanos;
use floodgate_core::time::duration_to_nanos;
use rand::Rng;

use crate::headers::{Policy, QuotaUnit, Remaining};

/// Pacer settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacerConfig {
    /// No wait returned is longer than this (default 60 s).
    pub max_wait: Duration,
    /// When a server says `r = 0`, the next send is at `reset + uniform(0, reset_jitter x t)`
    /// (default 0.1). Clamped to `[0, 1]`; NaN reads as 0.
    pub reset_jitter: f64,
    /// Hosts tracked at most (default 10 000); past it, state of idle hosts is dropped and
    /// new hosts are not paced until room frees up.
    pub max_hosts: usize,
    /// Policies tracked per host at most (default 16).
    pub max_policies: usize,
    /// Fraction of headroom kept below the advertised rate: sends go `(1 + headroom) x`
    /// the advertised spacing apart (default 0: exactly the advertised rate; the polite
    /// engine sets its own, see `PoliteConfig::pace_headroom`). Clamped to `[0, 1]`; NaN
    /// reads as 0.
    pub headroom: f64,
}

impl Default for PacerConfig {
    fn default() -> Self {
        PacerConfig {
            max_wait: Duration::from_secs(60),
            reset_jitter: 0.1,
            max_hosts: 10_000,
            max_policies: 16,
            headroom: 0.0,
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    policy: String,
    /// Earliest instant the next send may go.
    next: Nanos,
    /// The latest send booked, if any.
    last: Option<Nanos>,
    /// Spacing from the `RateLimit` advice (`t / r`), ns; in force until `until`.
    spread: u64,
    /// Spacing from the policy (`w / q`), ns; 0 when unknown. The policy does not go stale.
    sustained: u64,
    /// The `RateLimit` advice is stale after this instant (the `t` it covered has passed).
    until: Nanos,
}

impl Slot {
    /// The spacing to book after a send at `now`.
    fn interval(&self, now: Nanos) -> u64 {
        if self.until > now {
            self.spread.max(self.sustained)
        } else {
            self.sustained
        }
    }
}

#[derive(Debug, Default, Clone)]
struct HostState {
    blocked_until: Nanos,
    slots: Vec<Slot>,
}

impl HostState {
    fn idle(&self, now: Nanos) -> bool {
        self.blocked_until <= now && self.slots.iter().all(|s| s.until <= now && s.next <= now)
    }
}

/// Per-host, per-policy send schedule. Not synchronised: wrap it in a mutex to share.
#[derive(Debug, Clone)]
pub struct Pacer {
    cfg: PacerConfig,
    hosts: HashMap<String, HostState>,
}

impl Pacer {
    /// A pacer with no advice yet (every send goes at once).
    pub fn new(cfg: PacerConfig) -> Self {
        Pacer {
            cfg,
            hosts: HashMap::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &PacerConfig {
        &self.cfg
    }

    /// Number of hosts with state.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    fn host_mut(&mut self, host: &str, now: Nanos) -> Option<&mut HostState> {
        if !self.hosts.contains_key(host) {
            if self.hosts.len() >= self.cfg.max_hosts {
                self.hosts.retain(|_, h| !h.idle(now));
                if self.hosts.len() >= self.cfg.max_hosts {
                    return None;
                }
            }
            self.hosts.insert(host.to_owned(), HostState::default());
        }
        self.hosts.get_mut(host)
    }

    /// Take in the `RateLimit` advice of a response from `host` received at `now`.
    /// Members without a reset are ignored (there is nothing to spread over). Without the
    /// policies' quotas, sends are spaced `t / r` only, and sends queued behind an `r = 0`
    /// reset all go at that reset: prefer [`Pacer::observe_with_policies`].
    pub fn observe<R: Rng + ?Sized>(
        &mut self,
        host: &str,
        advice: &[Remaining],
        now: Nanos,
        rng: &mut R,
    ) {
        self.observe_with_policies(host, advice, &[], now, rng);
    }

    /// Whether `host` has state here: some response from it was observed (and not since
    /// dropped as idle).
    pub fn knows(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    /// [`Pacer::observe`], knowing the `RateLimit-Policy` members too: sends of a policy
    /// are never closer than `w / q` (the rate at which its quota comes back), after an
    /// `r = 0` reset as at any other time.
    pub fn observe_with_policies<R: Rng + ?Sized>(
        &mut self,
        host: &str,
        advice: &[Remaining],
        policies: &[Policy],
        now: Nanos,
        rng: &mut R,
    ) {
        let cfg = self.cfg;
        let jitter = if cfg.reset_jitter.is_nan() {
            0.0
        } else {
            cfg.reset_jitter.clamp(0.0, 1.0)
        };
        let max_wait = duration_to_nanos(cfg.max_wait);
        let headroom = if cfg.headroom.is_nan() {
            0.0
        } else {
            cfg.headroom.clamp(0.0, 1.0)
        };
        let stretch = |ns: u64| ns.saturating_add((ns as f64 * headroom).ceil() as u64);
        let Some(state) = self.host_mut(host, now) else {
            return;
        };
        for r in advice.iter().take(cfg.max_policies) {
            let Some(reset) = r.reset else { continue };
            let t = duration_to_nanos(reset).min(max_wait);
            let until = Nanos(now.0.saturating_add(t));
            let idx = match state.slots.iter().position(|s| s.policy == r.name) {
                Some(i) => i,
                None if state.slots.len() < cfg.max_policies => {
                    // the response being read is that of a send that went unbooked for
                    // this policy (the first one): count it as sent now
                    state.slots.push(Slot {
                        policy: r.name.clone(),
                        next: now,
                        last: Some(now),
                        spread: 0,
                        sustained: 0,
                        until,
                    });
                    state.slots.len() - 1
                }
                None => continue,
            };
            let slot = &mut state.slots[idx];
            // the policy's sustained spacing, w / q (kept from earlier responses when this
            // one does not restate the policy)
            if let Some(p) = policies
                .iter()
                .find(|p| p.name == r.name && p.unit == QuotaUnit::Requests)
            {
                slot.sustained = p
                    .window
                    .map_or(0, |w| {
                        stretch(duration_to_nanos(w).div_ceil(p.quota.max(1)))
                    })
                    .min(max_wait);
            }
            slot.until = until;
            if r.remaining == 0 {
                // nothing left until the reset; return at a jittered instant after it
                let extra = if jitter > 0.0 && t > 0 {
                    rng.random_range(0..=((t as f64 * jitter) as u64))
                } else {
                    0
                };
                let at = Nanos(now.0.saturating_add(t).saturating_add(extra));
                slot.next = slot.next.max(at);
                slot.spread = 0;
            } else {
                slot.spread = stretch(t.div_ceil(r.remaining)).min(max_wait);
                // the sends already booked stand; the next one goes the new spacing after
                // the last of them (this also ends a hold from an earlier r = 0)
                slot.next = match slot.last {
                    Some(last) => Nanos(last.0.saturating_add(slot.interval(now))),
                    None => now,
                };
            }
        }
    }

    /// Nothing may be sent to `host` before `until` (from a `Retry-After`).
    pub fn block_host(&mut self, host: &str, until: Nanos, now: Nanos) {
        let until = until.min(Nanos(
            now.0.saturating_add(duration_to_nanos(self.cfg.max_wait)),
        ));
        if let Some(state) = self.host_mut(host, now) {
            state.blocked_until = state.blocked_until.max(until);
        }
    }

    /// Reserve the next send to `host`: returns how long to wait from `now` (at most
    /// `max_wait`), and books the send so that the following caller is spaced after it.
    pub fn reserve(&mut self, host: &str, now: Nanos) -> Duration {
        let max_wait = duration_to_nanos(self.cfg.max_wait);
        let Some(state) = self.hosts.get_mut(host) else {
            return Duration::ZERO;
        };
        let mut at = now.max(state.blocked_until);
        for s in &state.slots {
            at = at.max(s.next);
        }
        let at = at.min(Nanos(now.0.saturating_add(max_wait)));
        for s in &mut state.slots {
            s.last = Some(at);
            s.next = Nanos(at.0.saturating_add(s.interval(now)));
        }
        at.saturating_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn rem(name: &str, r: u64, t: u64) -> Remaining {
        Remaining {
            name: name.into(),
            remaining: r,
            reset: Some(Duration::from_secs(t)),
            limit: None,
        }
    }

    #[test]
    fn spreads_remaining_over_reset() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut p = Pacer::new(PacerConfig::default());
        let now = Nanos::from_secs(100);
        // the response read at `now` is that of a send made then: the next go 500 ms apart
        p.observe("h", &[rem("default", 10, 5)], now, &mut rng);
        let waits: Vec<_> = (0..4).map(|_| p.reserve("h", now)).collect();
        assert_eq!(
            waits,
            [500, 1000, 1500, 2000].map(Duration::from_millis).to_vec()
        );
        // Another host is not affected.
        assert_eq!(p.reserve("other", now), Duration::ZERO);
    }

    #[test]
    fn zero_remaining_waits_for_reset_with_bounded_jitter() {
        let mut rng = StdRng::seed_from_u64(2);
        let cfg = PacerConfig::default();
        let mut p = Pacer::new(cfg);
        let now = Nanos::from_secs(1);
        p.observe("h", &[rem("default", 0, 10)], now, &mut rng);
        let w = p.reserve("h", now);
        assert!(
            w >= Duration::from_secs(10) && w <= Duration::from_secs(11),
            "{w:?}"
        );
    }

    #[test]
    fn queue_behind_a_zero_reset_goes_at_the_policy_rate() {
        let mut rng = StdRng::seed_from_u64(2);
        let cfg = PacerConfig {
            reset_jitter: 0.0,
            ..PacerConfig::default()
        };
        let now = Nanos::from_secs(1);
        let policy = Policy {
            name: "default".into(),
            quota: 5,
            window: Some(Duration::from_secs(10)),
            unit: QuotaUnit::Requests,
        };
        // q = 5 per w = 10 s: after the reset at 10 s, one send every 2 s
        let mut p = Pacer::new(cfg);
        p.observe_with_policies(
            "h",
            &[rem("default", 0, 10)],
            std::slice::from_ref(&policy),
            now,
            &mut rng,
        );
        let waits: Vec<_> = (0..4).map(|_| p.reserve("h", now)).collect();
        assert_eq!(waits, [10, 12, 14, 16].map(Duration::from_secs).to_vec());
        // a policy of another name does not apply; without one, the queue goes at the reset
        let mut other = policy;
        other.name = "other".into();
        let mut p = Pacer::new(cfg);
        p.observe_with_policies("h", &[rem("default", 0, 10)], &[other], now, &mut rng);
        let waits: Vec<_> = (0..3).map(|_| p.reserve("h", now)).collect();
        assert_eq!(waits, [10, 10, 10].map(Duration::from_secs).to_vec());
    }

    #[test]
    fn the_policy_rate_bounds_a_generous_remaining() {
        let mut rng = StdRng::seed_from_u64(5);
        let policy = Policy {
            name: "default".into(),
            quota: 100,
            window: Some(Duration::from_secs(1)),
            unit: QuotaUnit::Requests,
        };
        let now = Nanos::from_secs(1);
        let mut spaced = |r, t| {
            let mut p = Pacer::new(PacerConfig::default());
            p.observe_with_policies(
                "h",
                &[rem("default", r, t)],
                std::slice::from_ref(&policy),
                now,
                &mut rng,
            );
            p.reserve("h", now)
        };
        // 1000 over 1 s would be 1 ms apart: the policy's 100/s holds it at 10 ms
        assert_eq!(spaced(1000, 1), Duration::from_millis(10));
        // 5 left over 1 s: 200 ms apart, slower than the policy
        assert_eq!(spaced(5, 1), Duration::from_millis(200));
        // headroom: 2 % below the advertised rate
        let mut p = Pacer::new(PacerConfig {
            headroom: 0.02,
            ..PacerConfig::default()
        });
        p.observe_with_policies(
            "h",
            &[rem("default", 1000, 1)],
            std::slice::from_ref(&policy),
            now,
            &mut rng,
        );
        assert_eq!(p.reserve("h", now), Duration::from_micros(10_200));
        // without the policy, t / r alone, rounded up to the nanosecond
        let mut p = Pacer::new(PacerConfig::default());
        p.observe("h", &[rem("default", 3, 1)], now, &mut rng);
        assert_eq!(p.reserve("h", now), Duration::from_nanos(333_333_334));
    }

    #[test]
    fn strictest_policy_wins() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut p = Pacer::new(PacerConfig::default());
        let now = Nanos::ZERO;
        p.observe(
            "h",
            &[rem("burst", 100, 10), rem("daily", 10, 10)],
            now,
            &mut rng,
        );
        assert_eq!(p.reserve("h", now), Duration::from_secs(1));
        assert_eq!(p.reserve("h", now), Duration::from_secs(2));
    }

    #[test]
    fn block_and_cap() {
        let mut p = Pacer::new(PacerConfig {
            max_wait: Duration::from_secs(5),
            ..PacerConfig::default()
        });
        let now = Nanos::from_secs(1);
        p.block_host("h", Nanos::from_secs(1000), now);
        assert_eq!(p.reserve("h", now), Duration::from_secs(5));
        // Stale advice no longer paces.
        let later = Nanos::from_secs(10);
        assert_eq!(p.reserve("h", later), Duration::ZERO);
    }

    #[test]
    fn host_cap_holds() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut p = Pacer::new(PacerConfig {
            max_hosts: 3,
            ..PacerConfig::default()
        });
        for i in 0..10 {
            p.observe(&format!("h{i}"), &[rem("d", 1, 60)], Nanos::ZERO, &mut rng);
        }
        assert_eq!(p.hosts(), 3);
    }
}
