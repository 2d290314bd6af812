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
//! Sends are booked on a schedule (each `interval` after the one booked before it, not
//! after the moment a caller woke up), so a timer firing late does not slow the client
//! down, and a caller that comes late takes the next free slot: never a catch-up burst. Three margins keep a client pacing at the limit under it on a real clock
//! (`docs/ratelimit-fields.md`, "Pacing on a real clock", has the arithmetic):
//!
//! * [`PacerConfig::headroom`]: every interval a fixed fraction longer;
//! * [`PacerConfig::timer_resolution`]: a policy that tolerates no early send (capacity 1,
//!   told by `floodgate-capacity=1`) is spaced at least one timer tick above its interval,
//!   from the first send;
//! * adaptive widening ([`Pacer::throttled`]): when 429s to paced sends come to more than
//!   1 % of sends, each widens the host's intervals by [`PacerConfig::widen_step`], and the
//!   widening decays by half every [`PacerConfig::widen_half_life`].
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

/// A 429 counted within this many sends of the previous one widens the pace
/// ([`Pacer::throttled`]).
pub const WIDEN_WITHIN: u64 = 100;

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
    /// The resolution of the timer the waits are slept on (default 1 ms, tokio's). A
    /// policy with capacity 1 (`floodgate-capacity=1`: every unit must come at least one
    /// `w / q` after the last) is spaced at least `w / q + timer_resolution` apart: a timer
    /// that fires on whole ticks would otherwise put most sends exactly one interval apart,
    /// and the noise of waking up would make about half of those early. Zero turns this off.
    pub timer_resolution: Duration,
    /// A 429 to a paced send, when 429s come to more than 1 % of sends, widens the host's
    /// intervals by `widen_step` more (default 0.02), up to `widen_max`
    /// ([`Pacer::throttled`]). Clamped to `[0, 1]`; NaN reads as 0 (no widening).
    pub widen_step: f64,
    /// The most the widening reaches, as a fraction (default 0.5). Clamped to `[0, 1]`.
    pub widen_max: f64,
    /// The widening halves every `widen_half_life` without a 429 (default 30 s; zero:
    /// it is gone at once).
    pub widen_half_life: Duration,
}

impl Default for PacerConfig {
    fn default() -> Self {
        PacerConfig {
            max_wait: Duration::from_secs(60),
            reset_jitter: 0.1,
            max_hosts: 10_000,
            max_policies: 16,
            headroom: 0.0,
            timer_resolution: Duration::from_millis(1),
            widen_step: 0.02,
            widen_max: 0.5,
            widen_half_life: Duration::from_secs(30),
        }
    }
}

/// A fraction in `[0, 1]`; NaN reads as 0.
fn fraction(f: f64) -> f64 {
    if f.is_nan() { 0.0 } else { f.clamp(0.0, 1.0) }
}

/// `ns` made longer by the fraction `f`, rounded up to the nanosecond.
fn stretch(ns: u64, f: f64) -> u64 {
    ns.saturating_add((ns as f64 * f).ceil() as u64)
}

/// Whether two spacings differ by more than an eighth of the longer: a plan booked at
/// one is stale under the other (closer ones are the ordinary drift of `t / r`).
fn far_apart(a: u64, b: u64) -> bool {
    a.abs_diff(b) > a.max(b) / 8
}

/// The settings in the units the schedule works in.
#[derive(Debug, Clone, Copy)]
struct Tuning {
    max_wait: u64,
    headroom: f64,
    guard: u64,
    step: f64,
    widen_max: f64,
    half_life: u64,
}

impl Tuning {
    fn of(cfg: &PacerConfig) -> Tuning {
        Tuning {
            max_wait: duration_to_nanos(cfg.max_wait),
            headroom: fraction(cfg.headroom),
            guard: duration_to_nanos(cfg.timer_resolution),
            step: fraction(cfg.widen_step),
            widen_max: fraction(cfg.widen_max),
            half_life: duration_to_nanos(cfg.widen_half_life),
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
    /// Spacing from the `RateLimit` advice (`t / r`), ns, before any margin; in force until
    /// `until`.
    spread: u64,
    /// Spacing from the policy (`w / q`), ns, before any margin; 0 when unknown. The policy
    /// does not go stale.
    sustained: u64,
    /// The `RateLimit` advice is stale after this instant (the `t` it covered has passed).
    until: Nanos,
    /// The policy tolerates no early send (capacity 1): one timer tick of margin.
    strict: bool,
    /// The adaptive widening, a fraction of the interval, as set at `widened_at`.
    widen: f64,
    widened_at: Nanos,
    /// The latest send booked when a 429 was last counted: a 429 to a send booked no
    /// later than this was in flight already and tells nothing new.
    counted_for: Option<Nanos>,
    /// Sends booked since the last 429 counted (`u64::MAX`: none yet).
    since_429: u64,
    /// Strict policies: when the latest send actually went out ([`Pacer::confirm`]).
    went: Option<Nanos>,
    /// Held by an `r = 0` until a reset: the next advice with `r > 0` rebooks.
    held: bool,
    /// The spacing the latest send was booked at ([`Pacer::reserve`]): an answer that
    /// gives one far from it (more than an eighth) makes the plan again.
    booked_at: u64,
}

impl Slot {
    fn new(policy: String, now: Nanos, until: Nanos) -> Slot {
        Slot {
            policy,
            next: now,
            last: Some(now),
            spread: 0,
            sustained: 0,
            until,
            strict: false,
            widen: 0.0,
            widened_at: now,
            counted_for: None,
            since_429: u64::MAX,
            went: None,
            held: false,
            booked_at: 0,
        }
    }

    /// Whether this policy spaces sends at all.
    fn paces(&self) -> bool {
        self.sustained > 0 || self.spread > 0
    }

    /// The widening in force at `now` (halved every half-life since it was set).
    fn widening(&self, now: Nanos, tu: &Tuning) -> f64 {
        if self.widen <= 0.0 || tu.half_life == 0 {
            return 0.0;
        }
        let lives = now.saturating_since(self.widened_at).as_nanos() as f64 / tu.half_life as f64;
        self.widen * 0.5f64.powf(lives)
    }

    /// The spacing to book after a send at `now`: the advice's, the headroom, the timer
    /// guard of a strict policy, then the widening.
    fn interval(&self, now: Nanos, tu: &Tuning) -> u64 {
        let base = if self.until > now {
            self.spread.max(self.sustained)
        } else {
            self.sustained
        };
        if base == 0 {
            return 0;
        }
        let mut ns = stretch(base, tu.headroom);
        if self.strict {
            ns = ns.max(base.saturating_add(tu.guard));
        }
        stretch(ns, self.widening(now, tu)).min(tu.max_wait)
    }

    /// The next send goes one interval after the last booked one (and no earlier than any
    /// hold already in place when `keep_hold`).
    fn rebook(&mut self, now: Nanos, tu: &Tuning, keep_hold: bool) {
        let after_last = match self.last {
            Some(last) => Nanos(last.0.saturating_add(self.interval(now, tu))),
            None => now,
        };
        self.next = if keep_hold {
            self.next.max(after_last)
        } else {
            after_last
        };
    }
}

#[derive(Debug, Default, Clone)]
struct HostState {
    blocked_until: Nanos,
    slots: Vec<Slot>,
    /// Bumped each time a fresh answer re-plans the host's sends ([`Pacer::plan`]).
    plan: u64,
    /// When the latest send actually went out ([`Pacer::confirm`]): what a re-plan
    /// spaces the next send after, instead of sends booked on the plan it replaces.
    departed: Option<Nanos>,
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
    /// `r = 0` reset as at any other time; a policy with `floodgate-capacity=1` gets the
    /// timer guard ([`PacerConfig::timer_resolution`]).
    pub fn observe_with_policies<R: Rng + ?Sized>(
        &mut self,
        host: &str,
        advice: &[Remaining],
        policies: &[Policy],
        now: Nanos,
        rng: &mut R,
    ) {
        let cfg = self.cfg;
        let tu = Tuning::of(&cfg);
        let jitter = fraction(cfg.reset_jitter);
        let Some(state) = self.host_mut(host, now) else {
            return;
        };
        let departed = state.departed;
        let mut replanned = false;
        for r in advice.iter().take(cfg.max_policies) {
            let Some(reset) = r.reset else { continue };
            // a concurrency cap is not a rate: not paced (inflight_cap holds it)
            if policies
                .iter()
                .any(|p| p.name == r.name && p.unit == QuotaUnit::ConcurrentRequests)
            {
                continue;
            }
            let t = duration_to_nanos(reset).min(tu.max_wait);
            let until = Nanos(now.0.saturating_add(t));
            let idx = match state.slots.iter().position(|s| s.policy == r.name) {
                Some(i) => i,
                None if state.slots.len() < cfg.max_policies => {
                    // the response being read is that of a send that went unbooked for
                    // this policy (the first one): count it as sent now
                    state.slots.push(Slot::new(r.name.clone(), now, until));
                    state.slots.len() - 1
                }
                None => continue,
            };
            let slot = &mut state.slots[idx];
            let before = slot.interval(now, &tu);
            // the policy's sustained spacing, w / q (kept from earlier responses when this
            // one does not restate the policy)
            if let Some(p) = policies
                .iter()
                .find(|p| p.name == r.name && p.unit == QuotaUnit::Requests)
            {
                slot.sustained = p
                    .window
                    .map_or(0, |w| duration_to_nanos(w).div_ceil(p.quota.max(1)))
                    .min(tu.max_wait);
                slot.strict = p.capacity == Some(1);
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
                replanned |= at > slot.next;
                slot.next = slot.next.max(at);
                slot.spread = 0;
                slot.held = true;
            } else {
                slot.spread = t.div_ceil(r.remaining).min(tu.max_wait);
                // on a new spacing (or after a hold from an earlier r = 0) the plan is
                // made again from this answer: the next send goes that spacing after the
                // latest one that went out, and sends booked on the old plan but not yet
                // gone are booked again ([`Pacer::plan`]); without a send known to have
                // gone, after the last one booked
                let spacing = slot.interval(now, &tu);
                let stale = far_apart(spacing, slot.booked_at);
                if slot.held || spacing != before || stale {
                    if stale && departed.is_some() {
                        slot.last = departed;
                        replanned = true;
                    }
                    slot.rebook(now, &tu, false);
                }
                slot.held = false;
            }
        }
        if replanned {
            state.plan = state.plan.wrapping_add(1);
        }
    }

    /// The plan `host`'s sends are booked on: it changes each time a fresh answer makes
    /// the plan again (a new spacing, a hold lifted or imposed). A caller waiting on a
    /// send booked under an older plan books it again ([`Pacer::reserve`]), so a plan
    /// made from a stale answer does not hold sends the server would now take.
    pub fn plan(&self, host: &str) -> u64 {
        self.hosts.get(host).map_or(0, |h| h.plan)
    }

    /// A send to `host` booked for `sent` (`None`: not known) was answered 429 at `now`.
    /// A 429 to a send booked before the last one counted is not counted again (the sends
    /// in flight when a pace proved too tight all hear it). When a counted 429 comes within
    /// [`WIDEN_WITHIN`] sends of the previous one (more than 1 % of sends denied), every
    /// policy of the host that paces it widens its interval (see
    /// [`PacerConfig::widen_step`]) and the next send is rebooked on the wider spacing; a
    /// rarer 429 (the noise of a busy machine against a small burst) costs a retry, not
    /// the pace. Returns whether anything widened.
    pub fn throttled(&mut self, host: &str, sent: Option<Nanos>, now: Nanos) -> bool {
        let tu = Tuning::of(&self.cfg);
        let Some(state) = self.hosts.get_mut(host) else {
            return false;
        };
        let mut widened = false;
        for slot in state.slots.iter_mut().filter(|s| s.paces()) {
            if let (Some(sent), Some(upto)) = (sent, slot.counted_for)
                && sent <= upto
            {
                continue;
            }
            slot.counted_for = Some(slot.last.unwrap_or(now).max(sent.unwrap_or(now)));
            let frequent = slot.since_429 < WIDEN_WITHIN;
            slot.since_429 = 0;
            if !frequent {
                continue;
            }
            slot.widen = (slot.widening(now, &tu) + tu.step).min(tu.widen_max);
            slot.widened_at = now;
            slot.rebook(now, &tu, true);
            widened = true;
        }
        widened
    }

    /// Just before a send booked by [`Pacer::reserve`] goes out at `now`: how much longer
    /// it must wait. Zero unless a policy of the host tolerates no early send (capacity 1):
    /// then the send goes no earlier than its interval less half a timer tick after the
    /// previous send actually went out, so that a send that left late (a busy machine, a
    /// slow wake-up) pushes the ones booked behind it back instead of leaving them too
    /// close after it. The send is recorded as going out after that wait.
    pub fn confirm(&mut self, host: &str, now: Nanos) -> Duration {
        let tu = Tuning::of(&self.cfg);
        let Some(state) = self.hosts.get_mut(host) else {
            return Duration::ZERO;
        };
        let mut at = now;
        for s in state.slots.iter().filter(|s| s.strict) {
            if let Some(prev) = s.went {
                let gap = s.interval(now, &tu).saturating_sub(tu.guard / 2);
                at = at.max(Nanos(prev.0.saturating_add(gap)));
            }
        }
        let at = at.min(Nanos(now.0.saturating_add(tu.max_wait)));
        for s in state.slots.iter_mut().filter(|s| s.strict) {
            s.went = Some(at);
        }
        state.departed = Some(at);
        at.saturating_since(now)
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
        let tu = Tuning::of(&self.cfg);
        let Some(state) = self.hosts.get_mut(host) else {
            return Duration::ZERO;
        };
        let mut at = now.max(state.blocked_until);
        for s in &state.slots {
            at = at.max(s.next);
        }
        let at = at.min(Nanos(now.0.saturating_add(tu.max_wait)));
        for s in &mut state.slots {
            s.last = Some(at);
            s.booked_at = s.interval(now, &tu);
            s.next = Nanos(at.0.saturating_add(s.booked_at));
            s.since_429 = s.since_429.saturating_add(1);
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
            capacity: None,
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
            capacity: None,
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
    fn a_fresh_answer_replans_the_sends_booked_on_a_stale_one() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut p = Pacer::new(PacerConfig::default());
        let pol = [policy(10, 1, Some(10))];
        let now = Nanos::from_secs(100);
        // a stale answer: 1 left over 3 s (a key another client had emptied)
        p.observe_with_policies("h", &[rem("default", 1, 3)], &pol, now, &mut rng);
        let plan = p.plan("h");
        let stale: Vec<_> = (0..3).map(|_| p.reserve("h", now)).collect();
        assert_eq!(stale, [3, 6, 9].map(Duration::from_secs).to_vec());
        // the first of them goes out 3 s on; its answer: the key has refilled
        let went = Nanos::from_secs(103);
        assert_eq!(p.confirm("h", went), Duration::ZERO);
        let fresh = Nanos::from_secs(103).saturating_add(Duration::from_millis(20));
        p.observe_with_policies("h", &[rem("default", 10, 1)], &pol, fresh, &mut rng);
        assert_ne!(p.plan("h"), plan, "the plan is made again");
        // the sends still waiting book again: at the policy's 10/s from the one that went
        // (100 ms after it, then 100 ms apart), not 6 s and 9 s on
        let again: Vec<_> = (0..3).map(|_| p.reserve("h", fresh)).collect();
        assert_eq!(again, [80, 180, 280].map(Duration::from_millis).to_vec());
        // an answer that changes nothing keeps the plan
        let plan = p.plan("h");
        p.observe_with_policies("h", &[rem("default", 10, 1)], &pol, fresh, &mut rng);
        assert_eq!(p.plan("h"), plan);
        // an r = 0 holds the sends booked on the plan before it: a new plan
        p.observe_with_policies("h", &[rem("default", 0, 2)], &pol, fresh, &mut rng);
        assert_ne!(p.plan("h"), plan);
        assert!(p.reserve("h", fresh) >= Duration::from_secs(2));
    }

    fn policy(q: u64, w: u64, capacity: Option<u64>) -> Policy {
        Policy {
            name: "default".into(),
            quota: q,
            window: Some(Duration::from_secs(w)),
            unit: QuotaUnit::Requests,
            capacity,
        }
    }

    /// The waits of `n` sends reserved at once after a response at `now` with `r`, `t` and
    /// `policy`.
    fn waits(p: &mut Pacer, policy: Policy, r: u64, now: Nanos, n: usize) -> Vec<Duration> {
        let mut rng = StdRng::seed_from_u64(9);
        p.observe_with_policies("h", &[rem("default", r, 1)], &[policy], now, &mut rng);
        (0..n).map(|_| p.reserve("h", now)).collect()
    }

    #[test]
    fn capacity_one_is_paced_a_timer_tick_above_its_interval() {
        let cfg = PacerConfig {
            headroom: 0.02,
            ..PacerConfig::default()
        };
        let now = Nanos::from_secs(1);
        // 100/s with capacity 1: 10 ms + 1 ms (above the 2 % headroom's 10.2 ms)
        let mut p = Pacer::new(cfg);
        let w = waits(&mut p, policy(100, 1, Some(1)), 100, now, 3);
        assert_eq!(w, [11, 22, 33].map(Duration::from_millis).to_vec());
        // with a burst the headroom alone
        let mut p = Pacer::new(cfg);
        let w = waits(&mut p, policy(100, 1, Some(6)), 100, now, 2);
        assert_eq!(w, [10_200, 20_400].map(Duration::from_micros).to_vec());
        // 10/s with capacity 1: the headroom (102 ms) is above 100 ms + 1 ms
        let mut p = Pacer::new(cfg);
        let w = waits(&mut p, policy(10, 1, Some(1)), 10, now, 1);
        assert_eq!(w, [Duration::from_millis(102)]);
        // a send that goes out late pushes the next back: booked at +11 ms and +22 ms, the
        // first leaves at +15 ms, so the second waits until 10.5 ms after it
        let mut p = Pacer::new(cfg);
        let w = waits(&mut p, policy(100, 1, Some(1)), 100, now, 2);
        assert_eq!(w, [11, 22].map(Duration::from_millis).to_vec());
        let at = |ms: u64| now.saturating_add(Duration::from_millis(ms));
        assert_eq!(p.confirm("h", at(15)), Duration::ZERO);
        assert_eq!(p.confirm("h", at(22)), Duration::from_micros(3_500));
        // with a burst, no such wait
        let mut p = Pacer::new(cfg);
        waits(&mut p, policy(100, 1, Some(6)), 100, now, 2);
        assert_eq!(p.confirm("h", at(15)), Duration::ZERO);
        assert_eq!(p.confirm("h", at(16)), Duration::ZERO);
        // the guard can be turned off
        let mut p = Pacer::new(PacerConfig {
            timer_resolution: Duration::ZERO,
            ..cfg
        });
        let w = waits(&mut p, policy(100, 1, Some(1)), 100, now, 1);
        assert_eq!(w, [Duration::from_micros(10_200)]);
    }

    #[test]
    fn frequent_429s_widen_the_pace_once_per_booking_and_the_widening_decays() {
        let cfg = PacerConfig::default();
        let now = Nanos::from_secs(1);
        let mut p = Pacer::new(cfg);
        // 100/s, no headroom: sends booked 10 ms apart
        let w = waits(&mut p, policy(100, 1, None), 100, now, 2);
        assert_eq!(w, [10, 20].map(Duration::from_millis).to_vec());
        let booked = |d: u64| Some(now.saturating_add(Duration::from_millis(d)));
        let at = now.saturating_add(Duration::from_millis(11));
        // a first 429 (to the send booked at +10 ms) is counted, but one is no pattern
        assert!(!p.throttled("h", booked(10), at));
        // the send booked at +20 ms was in flight already: not counted
        assert!(!p.throttled("h", booked(20), at));
        // the next send is booked at +30 ms; a 429 to it comes within 100 sends of the
        // first: 2 % wider from the last booked
        assert_eq!(p.reserve("h", at), Duration::from_millis(19));
        assert!(p.throttled("h", booked(30), at));
        assert_eq!(p.reserve("h", at), Duration::from_micros(40_200 - 11_000));
        // and again: 2 % + 2 % = 4 %
        assert!(p.throttled("h", booked(41), at));
        assert_eq!(
            p.reserve("h", at),
            Duration::from_micros(40_200 + 10_400 - 11_000)
        );
        // one half-life later the widening is half of 4 %
        let later = at.saturating_add(Duration::from_secs(30));
        let w = waits(&mut p, policy(100, 1, None), 100, later, 2);
        assert_eq!(w[1] - w[0], Duration::from_micros(10_200));
        // a 429 after more than 100 quiet sends does not widen
        for _ in 0..WIDEN_WITHIN {
            p.reserve("h", later);
        }
        assert!(!p.throttled("h", None, later));
        // a host without pacing state is not widened
        assert!(!p.throttled("other", None, at));
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
