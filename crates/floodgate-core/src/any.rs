//! [`AnyAlgorithm`]: any of the algorithms chosen at run time (from a config file or flag),
//! behind the same [`Algorithm`] trait.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::algorithms::*;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::time::Nanos;

/// The algorithm families, by the names used in configs and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// [`FixedWindow`]: `fixed-window`.
    FixedWindow,
    /// [`SlidingLog`]: `sliding-log`.
    SlidingLog,
    /// [`SlidingCounter`]: `sliding-counter`.
    SlidingCounter,
    /// [`TokenBucket`]: `token-bucket`.
    TokenBucket,
    /// [`LeakyBucket`] as a meter (nodelay): `leaky-meter`.
    LeakyMeter,
    /// [`LeakyBucket`] as a delaying queue (nginx `limit_req`): `leaky-queue`.
    LeakyQueue,
    /// [`Gcra`]: `gcra`.
    Gcra,
}

impl Kind {
    /// Every kind, in the order tables list them.
    pub const ALL: [Kind; 7] = [
        Kind::FixedWindow,
        Kind::SlidingLog,
        Kind::SlidingCounter,
        Kind::TokenBucket,
        Kind::LeakyMeter,
        Kind::LeakyQueue,
        Kind::Gcra,
    ];

    /// The config / CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::FixedWindow => "fixed-window",
            Kind::SlidingLog => "sliding-log",
            Kind::SlidingCounter => "sliding-counter",
            Kind::TokenBucket => "token-bucket",
            Kind::LeakyMeter => "leaky-meter",
            Kind::LeakyQueue => "leaky-queue",
            Kind::Gcra => "gcra",
        }
    }

    /// The guarantee at a window boundary, in a phrase.
    pub fn guarantee(self) -> &'static str {
        match self {
            Kind::FixedWindow => "<= L per aligned window; up to 2L across a boundary",
            Kind::SlidingLog => "<= L in any rolling window, exactly",
            Kind::SlidingCounter => "<= L per aligned window; rolling estimate <= L",
            Kind::TokenBucket => "<= capacity + rate x t over any span t",
            Kind::LeakyMeter => "<= capacity + rate x t over any span t",
            Kind::LeakyQueue => "admits like the meter; forwards smoothed to rate",
            Kind::Gcra => "<= capacity + rate x t over any span t",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Kind, ConfigError> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == norm)
            .ok_or_else(|| {
                ConfigError::Inconsistent(format!(
                    "unknown algorithm {s:?}; expected one of: {}",
                    Kind::ALL.map(Kind::name).join(", ")
                ))
            })
    }
}

/// One limit in the common vocabulary: `rate.count()` units per `rate.period()`, with the
/// algorithm chosen by `kind`.
///
/// `capacity` is how many units a key at rest admits at once (default: the rate's count).
/// Windowed algorithms ignore it (their limit is the rate's count). nginx's and
/// redis-cell's `burst` is the excess above one request: `capacity = burst + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The algorithm.
    pub kind: Kind,
    /// Units per period.
    pub rate: Rate,
    /// Units admitted at once from rest (token bucket, leaky meter and queue, GCRA).
    pub capacity: Option<u64>,
    /// Leaky queue only: nginx `nodelay` / `delay=N`.
    pub delay: DelayMode,
}

impl Spec {
    /// `kind` at `rate` with the default capacity (the rate's count).
    pub fn new(kind: Kind, rate: Rate) -> Spec {
        Spec {
            kind,
            rate,
            capacity: None,
            delay: DelayMode::After(0),
        }
    }

    /// Build the algorithm, validating every parameter.
    pub fn build(&self) -> Result<AnyAlgorithm, ConfigError> {
        let count = self.rate.count();
        let window = self.rate.period();
        let cap = self.capacity.unwrap_or(count);
        Ok(match self.kind {
            Kind::FixedWindow => AnyAlgorithm::FixedWindow(FixedWindow::new(count, window)?),
            Kind::SlidingLog => AnyAlgorithm::SlidingLog(SlidingLog::new(count, window)?),
            Kind::SlidingCounter => {
                AnyAlgorithm::SlidingCounter(SlidingCounter::new(count, window)?)
            }
            Kind::TokenBucket => AnyAlgorithm::TokenBucket(TokenBucket::new(cap, self.rate)?),
            Kind::LeakyMeter => AnyAlgorithm::Leaky(LeakyBucket::meter(cap, self.rate)?),
            Kind::LeakyQueue => {
                let burst = cap
                    .checked_sub(1)
                    .ok_or(ConfigError::Zero { what: "capacity" })?;
                AnyAlgorithm::Leaky(LeakyBucket::queue(self.rate, burst, self.delay)?)
            }
            Kind::Gcra => AnyAlgorithm::Gcra(Gcra::new(self.rate, cap)?),
        })
    }

    /// The window the RateLimit-Policy `w` parameter advertises: the rate's period.
    pub fn window(&self) -> Duration {
        self.rate.period()
    }
}

/// Any algorithm, chosen at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum AnyAlgorithm {
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingCounter(SlidingCounter),
    TokenBucket(TokenBucket),
    Leaky(LeakyBucket),
    Gcra(Gcra),
}

/// Per-key state of an [`AnyAlgorithm`]. `Empty` is a key never seen; a state of another
/// variant (after a runtime change of algorithm) is treated as `Empty`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum AnyState {
    #[default]
    Empty,
    FixedWindow(FixedWindowState),
    SlidingLog(SlidingLogState),
    SlidingCounter(SlidingCounterState),
    TokenBucket(TokenBucketState),
    Leaky(LeakyState),
    Gcra(GcraState),
}

/// The pending write of an [`AnyAlgorithm`].
#[derive(Debug)]
#[allow(missing_docs)]
pub enum AnyPending {
    FixedWindow(FixedWindowState),
    SlidingLog((Nanos, u64)),
    SlidingCounter(SlidingCounterState),
    TokenBucket(TokenBucketState),
    Leaky(LeakyState),
    Gcra(Nanos),
}

macro_rules! dispatch {
    ($self:ident, $state:expr, $a:ident, $s:ident => $body:expr, $empty:expr) => {
        match ($self, $state) {
            (AnyAlgorithm::FixedWindow($a), AnyState::FixedWindow($s)) => $body,
            (AnyAlgorithm::SlidingLog($a), AnyState::SlidingLog($s)) => $body,
            (AnyAlgorithm::SlidingCounter($a), AnyState::SlidingCounter($s)) => $body,
            (AnyAlgorithm::TokenBucket($a), AnyState::TokenBucket($s)) => $body,
            (AnyAlgorithm::Leaky($a), AnyState::Leaky($s)) => $body,
            (AnyAlgorithm::Gcra($a), AnyState::Gcra($s)) => $body,
            _ => $empty,
        }
    };
}

impl AnyAlgorithm {
    /// The family of this algorithm.
    pub fn kind(&self) -> Kind {
        match self {
            AnyAlgorithm::FixedWindow(_) => Kind::FixedWindow,
            AnyAlgorithm::SlidingLog(_) => Kind::SlidingLog,
            AnyAlgorithm::SlidingCounter(_) => Kind::SlidingCounter,
            AnyAlgorithm::TokenBucket(_) => Kind::TokenBucket,
            AnyAlgorithm::Leaky(l) if l.delay_mode() == DelayMode::NoDelay => Kind::LeakyMeter,
            AnyAlgorithm::Leaky(_) => Kind::LeakyQueue,
            AnyAlgorithm::Gcra(_) => Kind::Gcra,
        }
    }

    /// Whether `state` is of this algorithm's variant.
    #[inline]
    fn owns(&self, state: &AnyState) -> bool {
        dispatch!(self, state, _a, _s => true, false)
    }

    /// A key never seen, as a state of this algorithm's own variant (not
    /// [`AnyState::Empty`]).
    pub fn fresh(&self) -> AnyState {
        match self {
            AnyAlgorithm::FixedWindow(_) => AnyState::FixedWindow(Default::default()),
            AnyAlgorithm::SlidingLog(_) => AnyState::SlidingLog(Default::default()),
            AnyAlgorithm::SlidingCounter(_) => AnyState::SlidingCounter(Default::default()),
            AnyAlgorithm::TokenBucket(_) => AnyState::TokenBucket(Default::default()),
            AnyAlgorithm::Leaky(_) => AnyState::Leaky(Default::default()),
            AnyAlgorithm::Gcra(_) => AnyState::Gcra(Default::default()),
        }
    }
}

impl Algorithm for AnyAlgorithm {
    type State = AnyState;
    type Pending = AnyPending;

    #[inline]
    fn limit(&self) -> u64 {
        match self {
            AnyAlgorithm::FixedWindow(a) => a.limit(),
            AnyAlgorithm::SlidingLog(a) => a.limit(),
            AnyAlgorithm::SlidingCounter(a) => a.limit(),
            AnyAlgorithm::TokenBucket(a) => a.limit(),
            AnyAlgorithm::Leaky(a) => a.limit(),
            AnyAlgorithm::Gcra(a) => a.limit(),
        }
    }

    #[inline]
    fn decide(&self, state: &AnyState, now: Nanos, cost: u64) -> (Decision, Option<AnyPending>) {
        macro_rules! go {
            ($a:ident, $s:ident, $variant:ident) => {{
                let (d, p) = $a.decide($s, now, cost);
                (d, p.map(AnyPending::$variant))
            }};
        }
        match (self, state) {
            (AnyAlgorithm::FixedWindow(a), AnyState::FixedWindow(s)) => go!(a, s, FixedWindow),
            (AnyAlgorithm::SlidingLog(a), AnyState::SlidingLog(s)) => go!(a, s, SlidingLog),
            (AnyAlgorithm::SlidingCounter(a), AnyState::SlidingCounter(s)) => {
                go!(a, s, SlidingCounter)
            }
            (AnyAlgorithm::TokenBucket(a), AnyState::TokenBucket(s)) => go!(a, s, TokenBucket),
            (AnyAlgorithm::Leaky(a), AnyState::Leaky(s)) => go!(a, s, Leaky),
            (AnyAlgorithm::Gcra(a), AnyState::Gcra(s)) => go!(a, s, Gcra),
            _ => self.decide(&self.fresh(), now, cost),
        }
    }

    #[inline]
    fn apply(&self, state: &mut AnyState, pending: AnyPending) {
        match (self, &mut *state, pending) {
            (
                AnyAlgorithm::FixedWindow(a),
                AnyState::FixedWindow(s),
                AnyPending::FixedWindow(p),
            ) => a.apply(s, p),
            (AnyAlgorithm::SlidingLog(a), AnyState::SlidingLog(s), AnyPending::SlidingLog(p)) => {
                a.apply(s, p)
            }
            (
                AnyAlgorithm::SlidingCounter(a),
                AnyState::SlidingCounter(s),
                AnyPending::SlidingCounter(p),
            ) => a.apply(s, p),
            (
                AnyAlgorithm::TokenBucket(a),
                AnyState::TokenBucket(s),
                AnyPending::TokenBucket(p),
            ) => a.apply(s, p),
            (AnyAlgorithm::Leaky(a), AnyState::Leaky(s), AnyPending::Leaky(p)) => a.apply(s, p),
            (AnyAlgorithm::Gcra(a), AnyState::Gcra(s), AnyPending::Gcra(p)) => a.apply(s, p),
            // a state of another algorithm (never seen, or kept across a runtime change):
            // start from a fresh one; the state then matches, so this recurses at most once
            (_, s, p) if !self.owns(s) => {
                *s = self.fresh();
                self.apply(s, p)
            }
            _ => {} // a pending write from another algorithm: decide() never produces one
        }
    }

    /// One match on the pair, then the algorithm's own check: no [`AnyPending`] built,
    /// no second match to apply it. Inlined, so that a caller not reading every field of
    /// the decision does not pay for computing them.
    #[inline(always)]
    fn check(&self, state: &mut AnyState, now: Nanos, cost: u64) -> Decision {
        match (self, &mut *state) {
            (AnyAlgorithm::FixedWindow(a), AnyState::FixedWindow(s)) => a.check(s, now, cost),
            (AnyAlgorithm::SlidingLog(a), AnyState::SlidingLog(s)) => a.check(s, now, cost),
            (AnyAlgorithm::SlidingCounter(a), AnyState::SlidingCounter(s)) => a.check(s, now, cost),
            (AnyAlgorithm::TokenBucket(a), AnyState::TokenBucket(s)) => a.check(s, now, cost),
            (AnyAlgorithm::Leaky(a), AnyState::Leaky(s)) => a.check(s, now, cost),
            (AnyAlgorithm::Gcra(a), AnyState::Gcra(s)) => a.check(s, now, cost),
            // a state of another variant: decided as a fresh one, replaced when admitted
            _ => {
                let (decision, pending) = self.decide(state, now, cost);
                if let Some(p) = pending {
                    self.apply(state, p);
                }
                decision
            }
        }
    }

    #[inline]
    fn full_at(&self, state: &AnyState) -> Nanos {
        dispatch!(self, state, a, s => a.full_at(s), Nanos::ZERO)
    }
}
