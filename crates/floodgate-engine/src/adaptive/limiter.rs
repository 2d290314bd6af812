//! [`PartitionedLimiter`]: one adaptive limit shared by priority classes, the permits it
//! hands out and its bounded queue (rule and queue order: the module docs of
//! [`crate::adaptive`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use floodgate_core::concurrency::{ExpAvg, LimitAlgorithm, Sample};
use floodgate_core::{Clock, ConfigError, Nanos};
use tokio::sync::oneshot;

use super::view::{AdaptiveView, ClassView};
use super::{AdaptiveMetrics, AdaptiveSpec, LATENCY_WINDOW, PRESSURE_WAIT};

/// How a request guarded by an [`AdaptivePermit`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Completed: its latency is a sample.
    Success,
    /// Dropped (a 5xx, an upstream timeout): a sample with `dropped = true`.
    Dropped,
    /// Not a meaningful sample (the client went away): released without a sample.
    Ignore,
}

/// Why a request got no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The request's class.
    pub class: usize,
    /// The queue was full (the request did not wait at all).
    pub queue_full: bool,
    /// The limit when it was refused.
    pub limit: usize,
}

/// A permit and how long its request waited for it.
#[derive(Debug)]
pub struct Admitted {
    /// The permit: hold it while the request runs, then release it with its outcome.
    pub permit: AdaptivePermit,
    /// Time spent in the queue (zero when admitted at once).
    pub waited: Duration,
}

struct Waiter {
    id: u64,
    tx: oneshot::Sender<AdaptivePermit>,
}

struct State {
    algorithm: Box<dyn LimitAlgorithm>,
    /// `L`, >= 1.
    limit: usize,
    /// Permits held, all classes.
    total: usize,
    /// Permits held per class.
    in_flight: Vec<usize>,
    /// When a request of each class last arrived.
    last_seen: Vec<Option<Nanos>>,
    /// Waiters per class, first come first.
    waiters: Vec<VecDeque<Waiter>>,
    /// Waiters, all classes.
    queued: usize,
    next_id: u64,
    /// Exponential average of the latency samples, in nanoseconds (0 before the first).
    latency: ExpAvg,
    /// Per class, when a request of it last lost its place for a full queue (refused at
    /// once, or evicted by a higher class): the class is under pressure for a demand
    /// window after.
    full_at: Vec<Option<Nanos>>,
}

struct Shared {
    name: String,
    spec: AdaptiveSpec,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    metrics: OnceLock<AdaptiveMetrics>,
    /// Requests refused (or, dry-run, that would have been) per class, since start.
    shed: Vec<AtomicU64>,
    /// Latency samples fed to the algorithm, and their sum in nanoseconds.
    samples: AtomicU64,
    latency_nanos: AtomicU64,
}

/// One adaptive limit `L` shared by the classes of an [`AdaptiveSpec`]. Cheap to clone
/// (shared state).
///
/// Invariants: the requests in flight never exceed `L` at the moment one is admitted
/// (a falling `L` may leave more in flight until they finish: none is cut); `L` stays
/// within `[min_limit, max_limit]`; every permit is counted once and uncounted once
/// (released, or dropped unreleased).
///
/// ```
/// use floodgate_engine::adaptive::{AdaptiveSpec, AlgorithmKind, ClassSpec, Outcome, PartitionedLimiter};
/// use floodgate_core::{ManualClock, Nanos};
/// use std::sync::Arc;
///
/// // L = 4: critical is guaranteed 2, sheddable 1
/// let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, 4, 4, 4)?.with_classes(vec![
///     ClassSpec { name: "critical".into(), share: 0.5 },
///     ClassSpec { name: "sheddable".into(), share: 0.25 },
/// ])?;
/// let limiter = PartitionedLimiter::new("backend", spec, Arc::new(ManualClock::new(Nanos::ZERO)))?;
/// let c1 = limiter.try_acquire(0).unwrap(); // critical asks: 1 of its 2
/// let s1 = limiter.try_acquire(1).unwrap(); // sheddable: its own 1
/// let s2 = limiter.try_acquire(1).unwrap(); // borrowed: 2 in flight + 1 kept for critical < 4
/// assert!(limiter.try_acquire(1).is_err()); // the last place is critical's
/// let c2 = limiter.try_acquire(0).unwrap(); // critical: within its guarantee
/// assert_eq!(limiter.in_flight(), 4);
/// for p in [c1, c2, s1, s2] {
///     p.release(Outcome::Success);
/// }
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct PartitionedLimiter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PartitionedLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedLimiter")
            .field("name", &self.shared.name)
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl PartitionedLimiter {
    /// The limiter of the policy `name`, `spec` checked, timing on `clock`.
    pub fn new(
        name: impl Into<String>,
        spec: AdaptiveSpec,
        clock: Arc<dyn Clock>,
    ) -> Result<PartitionedLimiter, ConfigError> {
        spec.validate()?;
        let algorithm = spec.build_algorithm()?;
        let n = spec.classes.len();
        let state = State {
            limit: algorithm.limit().max(1),
            algorithm,
            total: 0,
            in_flight: vec![0; n],
            last_seen: vec![None; n],
            waiters: (0..n).map(|_| VecDeque::new()).collect(),
            queued: 0,
            next_id: 0,
            latency: ExpAvg::new(LATENCY_WINDOW, 10),
            full_at: vec![None; n],
        };
        Ok(PartitionedLimiter {
            shared: Arc::new(Shared {
                name: name.into(),
                spec,
                clock,
                state: Mutex::new(state),
                metrics: OnceLock::new(),
                shed: (0..n).map(|_| AtomicU64::new(0)).collect(),
                samples: AtomicU64::new(0),
                latency_nanos: AtomicU64::new(0),
            }),
        })
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The spec.
    pub fn spec(&self) -> &AdaptiveSpec {
        &self.shared.spec
    }

    /// Show the limit, the permits held and the refusals in `metrics` (the first attached
    /// stays).
    pub fn attach_metrics(&self, metrics: AdaptiveMetrics) {
        let st = self.shared.lock();
        metrics.limit.set(st.limit as i64);
        for (c, n) in st.in_flight.iter().enumerate() {
            metrics.in_flight[c].set(*n as i64);
        }
        let _ = self.shared.metrics.set(metrics);
    }

    /// The current limit `L`.
    pub fn limit(&self) -> usize {
        self.shared.lock().limit
    }

    /// Permits held, all classes.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().total
    }

    /// Permits held by `class`.
    pub fn class_in_flight(&self, class: usize) -> usize {
        self.shared
            .lock()
            .in_flight
            .get(class)
            .copied()
            .unwrap_or(0)
    }

    /// Requests waiting in the queue, all classes.
    pub fn queued(&self) -> usize {
        self.shared.lock().queued
    }

    /// The limit, the permits held, the queue and the refusals per class, and the
    /// latency samples, now (one lock).
    pub fn view(&self) -> AdaptiveView {
        let sh = &*self.shared;
        let st = sh.lock();
        let classes = sh
            .spec
            .classes
            .iter()
            .enumerate()
            .map(|(c, spec)| ClassView {
                name: spec.name.clone(),
                share: spec.share,
                in_flight: st.in_flight[c],
                queued: st.waiters[c].len(),
                shed: sh.shed[c].load(Ordering::Relaxed),
            })
            .collect();
        let samples = sh.samples.load(Ordering::Relaxed);
        let nanos = sh.latency_nanos.load(Ordering::Relaxed);
        AdaptiveView {
            name: sh.name.clone(),
            algorithm: sh.spec.algorithm.name(),
            limit: st.limit,
            min_limit: sh.spec.min_limit,
            max_limit: sh.spec.max_limit,
            in_flight: st.total,
            queued: st.queued,
            queue: sh.spec.queue,
            classes,
            samples,
            mean_latency: (samples > 0).then(|| Duration::from_nanos(nanos / samples)),
        }
    }

    /// A permit for a request of `class` if the rule admits it now (never waits). A
    /// class index past the spec's classes is taken as the last (lowest) class.
    pub fn try_acquire(&self, class: usize) -> Result<AdaptivePermit, Refused> {
        let class = self.shared.class(class);
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        st.last_seen[class] = Some(now);
        if self.shared.admits(&st, class, now) {
            let permit = self.shared.grant(&mut st, class, now);
            drop(st);
            self.shared.show(class);
            return Ok(permit);
        }
        let refused = Refused {
            class,
            queue_full: false,
            limit: st.limit,
        };
        drop(st);
        self.shared.count_shed(class);
        Err(refused)
    }

    /// A permit for a request of `class`, waiting in the queue (served highest class
    /// first) up to the spec's `queue_timeout` (its class under pressure, up to
    /// [`PRESSURE_WAIT`] times the mean latency, if shorter) when the rule does not admit
    /// it at once.
    pub async fn acquire(&self, class: usize) -> Result<Admitted, Refused> {
        let class = self.shared.class(class);
        let (id, mut rx, timeout) = match self.shared.admit_or_enqueue(class) {
            Entry::Admitted(permit) => {
                self.shared.show(class);
                return Ok(Admitted {
                    permit,
                    waited: Duration::ZERO,
                });
            }
            Entry::Refused(refused) => {
                self.shared.count_shed(class);
                return Err(refused);
            }
            Entry::Queued(id, rx, timeout) => (id, rx, timeout),
        };
        let started = tokio::time::Instant::now();
        // leaves the queue on every way out (a dropped request future included)
        let mut leave = Leave {
            shared: &self.shared,
            class,
            id,
            armed: true,
        };
        let got = tokio::time::timeout(timeout, &mut rx).await;
        let waited = match got {
            Ok(Ok(p)) => Waited::Served(p),
            // the sender is dropped without a permit only by an eviction
            Ok(Err(_)) => Waited::Evicted,
            Err(_) => {
                // timed out: out of the queue, unless served or evicted in the meantime
                if leave.remove() {
                    Waited::TimedOut
                } else {
                    match rx.try_recv() {
                        Ok(p) => Waited::Served(p),
                        Err(_) => Waited::Evicted,
                    }
                }
            }
        };
        leave.armed = false;
        let queue_full = match waited {
            Waited::Served(permit) => {
                return Ok(Admitted {
                    permit,
                    waited: started.elapsed(),
                });
            }
            Waited::Evicted => true,
            Waited::TimedOut => false,
        };
        self.shared.count_shed(class);
        Err(Refused {
            class,
            queue_full,
            limit: self.limit(),
        })
    }

    /// A permit for a dry-run request of `class`: always granted (so that the limit
    /// keeps learning), with whether the rule would have refused it (counted as shed).
    pub fn admit_shadow(&self, class: usize) -> (AdaptivePermit, bool) {
        let class = self.shared.class(class);
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        st.last_seen[class] = Some(now);
        let would_refuse = !self.shared.admits(&st, class, now);
        let permit = self.shared.grant(&mut st, class, now);
        drop(st);
        self.shared.show(class);
        if would_refuse {
            self.shared.count_shed(class);
        }
        (permit, would_refuse)
    }
}

/// Takes a waiter out of the queue if it is still there when dropped armed.
struct Leave<'a> {
    shared: &'a Arc<Shared>,
    class: usize,
    id: u64,
    armed: bool,
}

impl Leave<'_> {
    /// Remove the waiter: `true` if it was still queued (so no permit was sent).
    fn remove(&mut self) -> bool {
        self.armed = false;
        let mut st = self.shared.lock();
        let q = &mut st.waiters[self.class];
        match q.iter().position(|w| w.id == self.id) {
            Some(i) => {
                q.remove(i);
                st.queued -= 1;
                true
            }
            None => false,
        }
    }
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.armed {
            // a permit sent to a dropped receiver is dropped with it: released unsampled
            self.remove();
        }
    }
}

/// How a wait in the queue ended.
enum Waited {
    Served(AdaptivePermit),
    /// Its place was taken by a request of a higher class: refused as if the queue was full.
    Evicted,
    TimedOut,
}

/// What [`Shared::admit_or_enqueue`] did with a request.
enum Entry {
    Admitted(AdaptivePermit),
    Refused(Refused),
    /// Queued: its id, where its permit comes, how long it may wait.
    Queued(u64, oneshot::Receiver<AdaptivePermit>, Duration),
}

impl Shared {
    /// Admit a request of `class` now, or queue it (when the queue has room, or when it
    /// can take the place of a waiter of a lower class), or refuse it: under one lock,
    /// never held across an await.
    fn admit_or_enqueue(self: &Arc<Self>, class: usize) -> Entry {
        let now = self.clock.now();
        let mut st = self.lock();
        st.last_seen[class] = Some(now);
        if self.admits(&st, class, now) {
            return Entry::Admitted(self.grant(&mut st, class, now));
        }
        let queue = self.spec.queue;
        if st.queued >= queue {
            match Self::evict_below(&mut st, class) {
                // its receiver sees the sender dropped: refused as queue-full
                Some((lower, evicted)) => {
                    st.full_at[lower] = Some(now);
                    drop(evicted);
                }
                None => {
                    if queue > 0 {
                        st.full_at[class] = Some(now);
                    }
                    return Entry::Refused(Refused {
                        class,
                        queue_full: queue > 0,
                        limit: st.limit,
                    });
                }
            }
        }
        let (tx, rx) = oneshot::channel();
        let id = st.next_id;
        st.next_id += 1;
        st.waiters[class].push_back(Waiter { id, tx });
        st.queued += 1;
        Entry::Queued(id, rx, self.wait_limit(&st, class, now))
    }

    /// Whether `class` is under pressure at `now`: a request of it lost its place for a
    /// full queue (refused, or evicted) within the last demand window.
    fn pressure(&self, st: &State, class: usize, now: Nanos) -> bool {
        st.full_at[class].is_some_and(|t| now.saturating_since(t) < self.spec.demand_window)
    }

    /// How long a request of `class` queued at `now` may wait: `queue_timeout`, or with
    /// the class under pressure [`PRESSURE_WAIT`] times the mean latency when that is
    /// shorter (and known).
    fn wait_limit(&self, st: &State, class: usize, now: Nanos) -> Duration {
        let full = self.spec.queue_timeout;
        let mean = st.latency.value();
        if !self.pressure(st, class, now) || mean <= 0.0 {
            return full;
        }
        let nanos = (mean * f64::from(PRESSURE_WAIT)).min(u64::MAX as f64) as u64;
        full.min(Duration::from_nanos(nanos.max(1)))
    }

    /// Take out of the queue the waiter of the lowest class below `class` (a higher
    /// index) that was queued last, if there is one, with its class: a waiter is never
    /// evicted for a request of its own class or of a lower one.
    fn evict_below(st: &mut State, class: usize) -> Option<(usize, Waiter)> {
        let lowest = (class + 1..st.waiters.len())
            .rev()
            .find(|&c| !st.waiters[c].is_empty())?;
        let w = st.waiters[lowest].pop_back()?;
        st.queued -= 1;
        Some((lowest, w))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn class(&self, class: usize) -> usize {
        class.min(self.spec.classes.len() - 1)
    }

    /// `g(c) = floor(share(c) x L)`.
    fn guarantee(&self, limit: usize, class: usize) -> usize {
        (self.spec.classes[class].share * limit as f64).floor() as usize
    }

    /// Whether class `h` is demanding at `now`: a request of it arrived within the
    /// demand window, or one waits.
    fn demanding(&self, st: &State, h: usize, now: Nanos) -> bool {
        !st.waiters[h].is_empty()
            || st.last_seen[h].is_some_and(|t| now.saturating_since(t) < self.spec.demand_window)
    }

    /// The admission rule of the module docs.
    fn admits(&self, st: &State, class: usize, now: Nanos) -> bool {
        let limit = st.limit;
        if st.total >= limit {
            return false;
        }
        if st.in_flight[class] < self.guarantee(limit, class) {
            return true;
        }
        let reserved: usize = (0..class)
            .filter(|&h| self.demanding(st, h, now))
            .map(|h| self.guarantee(limit, h).saturating_sub(st.in_flight[h]))
            .sum();
        st.total + reserved < limit
    }

    fn grant(self: &Arc<Self>, st: &mut State, class: usize, now: Nanos) -> AdaptivePermit {
        st.total += 1;
        st.in_flight[class] += 1;
        AdaptivePermit {
            shared: Some(self.clone()),
            class,
            start: now,
            inflight: st.total,
            preset: Outcome::Success,
        }
    }

    /// Serve the queue after a release: highest class first, first come first within
    /// a class (a class under pressure: last come first), each as far as the rule
    /// admits. The permits are sent by the caller, outside the lock.
    fn serve(
        self: &Arc<Self>,
        st: &mut State,
        now: Nanos,
    ) -> Vec<(oneshot::Sender<AdaptivePermit>, AdaptivePermit)> {
        let mut out = Vec::new();
        for class in 0..st.waiters.len() {
            let newest_first = self.pressure(st, class, now);
            while !st.waiters[class].is_empty() && self.admits(st, class, now) {
                let w = if newest_first {
                    st.waiters[class].pop_back()
                } else {
                    st.waiters[class].pop_front()
                }
                .expect("not empty");
                st.queued -= 1;
                let permit = self.grant(st, class, now);
                out.push((w.tx, permit));
            }
        }
        out
    }

    fn show(&self, class: usize) {
        if let Some(m) = self.metrics.get() {
            let st = self.lock();
            m.limit.set(st.limit as i64);
            m.in_flight[class].set(st.in_flight[class] as i64);
        }
    }

    fn count_shed(&self, class: usize) {
        self.shed[class].fetch_add(1, Ordering::Relaxed);
        if let Some(m) = self.metrics.get() {
            m.shed[class].inc();
        }
    }

    fn release(self: &Arc<Self>, permit: &AdaptivePermit, outcome: Outcome) {
        let now = self.clock.now();
        let rtt = now.saturating_since(permit.start);
        let mut st = self.lock();
        if outcome != Outcome::Ignore {
            let sample = Sample {
                start: permit.start,
                rtt,
                inflight: permit.inflight,
                dropped: outcome == Outcome::Dropped,
            };
            st.limit = st.algorithm.on_sample(&sample).max(1);
            st.latency.add(duration_to_nanos_f64(rtt));
        }
        st.total -= 1;
        st.in_flight[permit.class] -= 1;
        let served = self.serve(&mut st, now);
        drop(st);
        if outcome != Outcome::Ignore {
            self.samples.fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
            self.latency_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
        if let Some(m) = self.metrics.get()
            && outcome != Outcome::Ignore
        {
            m.latency.observe(rtt.as_secs_f64());
        }
        self.show(permit.class);
        for (tx, p) in served {
            let class = p.class;
            // a waiter gone (its request dropped): the permit comes back unsampled
            let _ = tx.send(p);
            self.show(class);
        }
    }
}

/// One admitted request of a [`PartitionedLimiter`]. Release it with
/// [`release`](Self::release); dropped unreleased, it is released as [`Outcome::Ignore`]
/// (no sample).
pub struct AdaptivePermit {
    shared: Option<Arc<Shared>>,
    class: usize,
    start: Nanos,
    inflight: usize,
    preset: Outcome,
}

impl std::fmt::Debug for AdaptivePermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptivePermit")
            .field("class", &self.class)
            .field("start", &self.start)
            .field("inflight", &self.inflight)
            .finish()
    }
}

impl AdaptivePermit {
    /// The request's class.
    pub fn class(&self) -> usize {
        self.class
    }

    /// When it was granted (the limiter's clock).
    pub fn start(&self) -> Nanos {
        self.start
    }

    /// Permits held when it was granted, itself included.
    pub fn inflight_at_start(&self) -> usize {
        self.inflight
    }

    /// The spec of its limiter (when the latency is taken, what is a drop).
    pub fn spec(&self) -> Option<&AdaptiveSpec> {
        self.shared.as_ref().map(|s| &s.spec)
    }

    /// Start timing now (a request held before it is forwarded, by a leaky queue's
    /// delay: the wait is not the backend's latency).
    pub fn restart(&mut self) {
        if let Some(shared) = &self.shared {
            self.start = shared.clock.now();
        }
    }

    /// Set the outcome [`release_preset`](Self::release_preset) reports (a surface
    /// knows it from the response head and releases at the body's end).
    pub fn preset(&mut self, outcome: Outcome) {
        self.preset = outcome;
    }

    /// Release with the outcome set by [`preset`](Self::preset) (`Success` unless set).
    pub fn release_preset(self) {
        let o = self.preset;
        self.release(o);
    }

    /// Release with `outcome`: a sample for the algorithm unless `Ignore`; the queue is
    /// served.
    pub fn release(mut self, outcome: Outcome) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Outcome) {
        if let Some(shared) = self.shared.take() {
            shared.release(self, outcome);
        }
    }
}

impl Drop for AdaptivePermit {
    fn drop(&mut self) {
        self.finish(Outcome::Ignore);
    }
}

/// `d` in nanoseconds, as a float.
fn duration_to_nanos_f64(d: Duration) -> f64 {
    d.as_nanos() as f64
}
