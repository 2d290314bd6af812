//! The run: workers that pick requests from the schedule, one aggregator, a hard deadline.
//!
//! # Scheduling
//! * **Open loop** (rate given): request `i` has the intended send time `i / rate` after
//!   the start. Workers take the next `i` from a shared counter, sleep until its time (or
//!   send at once when late) and record the latency from the intended time. When all
//!   connections are stuck behind a slow response, the requests due meanwhile go out late
//!   and carry the wait in their latency: the stall is measured, not omitted.
//! * **Scheduled** ([`LoadConfig::scheduled`]): open loop with explicit offsets instead
//!   of `i / rate` (bursts are repeated offsets), optionally from a wall-clock start
//!   ([`LoadConfig::start_at`]) so that a burst lands just before a window boundary.
//! * **Closed loop**: each worker sends its next request after the previous response.
//!   With a rate, each worker is paced at `rate / concurrency` and slots missed while
//!   waiting are dropped (hey's `-q` behaves like this, per worker). Latency is measured
//!   from the actual send time.
//!
//! # Threads
//! Workers run on one thread per core (at most one per connection), each with its own
//! single-threaded tokio runtime; the aggregator and the deadline run on the caller's
//! runtime. A worker and its hyper connection task always share a thread.
//!
//! # Polite workers
//! With [`LoadConfig::polite`], all workers share one [`Polite`] engine from
//! floodgate-client (one client with `concurrency` connections) and drive it the way its
//! tower layer does, per request: `begin`, then around each attempt `before_send` (wait
//! as the advertised `RateLimit` headers and any `Retry-After` say) and `after_send`
//! (read the advice; decide whether to retry and after what wait, `Retry-After` plus
//! jitter or backoff, within the retry budget). Every attempt is a record (the server's
//! view: statuses, timeline); the request's latency runs from its intended (open loop) or
//! start (closed loop) time to the end of its last attempt. A request still waiting when
//! the run is stopped is counted as abandoned.
//!
//! # Bounds
//! A count run stops after `n` requests, a duration run when the schedule passes the
//! duration; both are also stopped at a hard deadline (the planned duration, or the
//! one-hour cap for count runs, plus one timeout), and at [`Stop::stop`]. In-flight
//! requests finish or time out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use floodgate_client::Polite;
use floodgate_client::polite::{Attempt, Verdict};
use floodgate_core::{Clock, WallClock};
use tokio::sync::{mpsc, watch};

use crate::arrivals::{Arrivals, PoissonClock};
use crate::boundary::Windows;
use crate::classes::ClassMix;
use crate::client::{Connection, ErrorKind, RequestTemplate};
use crate::config::{Bound, LoadConfig, Mode};
use crate::error::{LoadError, caps};
use crate::report::Report;
use crate::stats::{Live, Outcome, Record, Stats};
use crate::summary::WorkerSummary;
use crate::target::{self, Target};

/// Records per batch sent from a worker to the aggregator.
const BATCH: usize = 128;
/// A worker about to sleep longer than this flushes its batch first (keeps progress live).
const FLUSH_BEFORE_SLEEP: Duration = Duration::from_millis(20);

/// Stops a run early (e.g. on Ctrl-C): no new requests are sent, in-flight ones finish.
#[derive(Clone, Debug)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    tx: Arc<watch::Sender<bool>>,
}

impl Default for Stop {
    fn default() -> Self {
        Stop {
            flag: Arc::new(AtomicBool::new(false)),
            tx: Arc::new(watch::channel(false).0),
        }
    }
}

impl Stop {
    /// Ask the run to stop.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.tx.send_replace(true);
    }

    /// Whether a stop was asked.
    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    async fn stopped(mut rx: watch::Receiver<bool>) {
        let _ = rx.wait_for(|s| *s).await;
    }
}

struct Shared {
    template: RequestTemplate,
    timeout: Duration,
    /// Open loop, naive: each request's timeout runs from its intended send time.
    timeout_from_intended: bool,
    addr: std::net::SocketAddr,
    start: Instant,
    mode: Mode,
    /// Nanoseconds between intended sends (total, across workers); 0 = unpaced.
    interval_ns: f64,
    /// Open loop on explicit offsets (ns since the start) instead of `interval_ns`.
    schedule: Option<Arc<[u64]>>,
    concurrency: usize,
    bound: Bound,
    next: AtomicU64,
    stop: Stop,
    /// The polite engine shared by all workers, and the host key it paces by.
    polite: Option<(Polite, String)>,
    /// Poisson arrivals: hands out the open-loop send times instead of `i / rate`.
    poisson: Option<PoissonClock>,
    /// The class mix requests are drawn from, and the seed of the draws.
    classes: Option<ClassMix>,
    seed: u64,
    /// Closed loop: the sequence number a class is drawn for (open loop uses `i`).
    class_seq: AtomicU64,
}

impl Shared {
    fn elapsed(&self) -> u64 {
        u64::try_from(
            Instant::now()
                .saturating_duration_since(self.start)
                .as_nanos(),
        )
        .unwrap_or(u64::MAX)
    }

    fn past_duration(&self, t: u64) -> bool {
        matches!(self.bound, Bound::Duration(d) if u128::from(t) >= d.as_nanos())
    }

    fn take_count(&self) -> bool {
        match self.bound {
            Bound::Count(n) => self.next.fetch_add(1, Ordering::Relaxed) < n,
            Bound::Duration(_) => true,
        }
    }
}

/// Run with fresh live counters and no external stop.
pub async fn run(config: &LoadConfig) -> Result<Report, LoadError> {
    run_with(config, Arc::new(Live::default()), Stop::default()).await
}

/// Run, updating `live` as results come in, until done or `stop` is triggered.
pub async fn run_with(
    config: &LoadConfig,
    live: Arc<Live>,
    stop: Stop,
) -> Result<Report, LoadError> {
    config.validate()?;
    let target: Target = target::resolve(&config.url, &config.allow_hosts, config.timeout).await?;
    let mut template = RequestTemplate::new(
        &target,
        config.method.clone(),
        &config.headers,
        config.body.clone(),
    );
    if let Some(mix) = &config.classes {
        template = template.with_classes(mix);
    }
    let windows = config.window.map(|w| Windows {
        window_ns: nanos(w),
        offset_ns: nanos(config.window_offset),
        near_ns: nanos(config.near),
    });
    let polite = match &config.polite {
        Some(p) => Some((
            Polite::new(p.clone())?,
            target.authority.as_str().to_ascii_lowercase(),
        )),
        None => None,
    };
    let interval_ns = config.rate.map_or(0.0, |q| 1e9 / q);
    let schedule: Option<Arc<[u64]>> = config
        .schedule
        .as_ref()
        .map(|s| s.iter().map(|&d| nanos(d)).collect());
    let (start, wall0) = match config.start_at {
        None => (Instant::now(), WallClock.now().as_u64()),
        Some(at) => {
            let lead = at
                .duration_since(std::time::SystemTime::now())
                .map_err(|e| LoadError::OutOfRange {
                    what: "start time",
                    reason: format!("{:?} in the past", e.duration()),
                })?;
            let wall =
                at.duration_since(std::time::UNIX_EPOCH)
                    .map_err(|_| LoadError::OutOfRange {
                        what: "start time",
                        reason: "before the Unix epoch".into(),
                    })?;
            (Instant::now() + lead, nanos(wall))
        }
    };
    let shared = Arc::new(Shared {
        template,
        timeout: config.timeout,
        timeout_from_intended: config.timeout_from_intended && config.mode == Mode::OpenLoop,
        addr: target.addr,
        start,
        mode: config.mode,
        interval_ns,
        schedule: schedule.clone(),
        concurrency: config.concurrency,
        bound: config.bound,
        next: AtomicU64::new(0),
        stop: stop.clone(),
        polite,
        poisson: match (config.arrivals, config.rate) {
            (Arrivals::Poisson, Some(q)) => Some(PoissonClock::new(q, config.seed)),
            _ => None,
        },
        classes: config.classes.clone(),
        seed: config.seed,
        class_seq: AtomicU64::new(0),
    });

    // The hard deadline: no run outlives its plan (or the cap) by more than one timeout.
    let planned = match (config.bound, &schedule) {
        (Bound::Duration(d), _) => d,
        (Bound::Count(_), Some(s)) => Duration::from_nanos(s.last().copied().unwrap_or(0)),
        (Bound::Count(_), None) => caps::MAX_DURATION,
    };
    let deadline = {
        let stop = stop.clone();
        let at = start.saturating_duration_since(Instant::now()) + planned + config.timeout;
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            stop.stop();
        })
    };

    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<Record>>();
    let sending_window = match config.bound {
        Bound::Duration(d) => Some(nanos(d)),
        Bound::Count(_) => None,
    };
    let mut stats = Stats::new(
        config.mode,
        wall0,
        nanos(config.bucket),
        windows,
        &config.deny_statuses,
    )
    .with_goodput(
        sending_window,
        config.classes.as_ref().map_or(0, |m| m.classes.len()),
    );
    let aggregator = {
        let live = live.clone();
        tokio::spawn(async move {
            while let Some(batch) = rx.recv().await {
                stats.add(&batch, &live);
            }
            stats
        })
    };
    let threads = spawn_worker_threads(&shared, &tx)?;
    drop(tx);
    let mut summaries = Vec::with_capacity(config.concurrency);
    for t in threads {
        summaries.extend(t.await.unwrap_or_default());
    }
    let elapsed = Instant::now().saturating_duration_since(start);
    deadline.abort();
    let stats = aggregator
        .await
        .map_err(|e| LoadError::Runtime(std::io::Error::other(e.to_string())))?;
    let stopped_early = stop.is_stopped();
    let engine = shared.polite.as_ref().map(|(p, _)| p.stats());
    Ok(Report::build(
        config,
        &target,
        stats,
        summaries,
        engine,
        wall0,
        elapsed,
        stopped_early,
    ))
}

/// Run the workers on one thread per core (at most one per connection), each thread with
/// its own single-threaded runtime, connections dealt round-robin: a connection's worker
/// and hyper's connection task then always share a thread, so a response never wakes a
/// task across threads and no work is stolen (oha does the same). Returns, per thread,
/// the summaries of its workers when they are done.
fn spawn_worker_threads(
    shared: &Arc<Shared>,
    tx: &mpsc::UnboundedSender<Vec<Record>>,
) -> Result<Vec<tokio::sync::oneshot::Receiver<Vec<WorkerSummary>>>, LoadError> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let n = cores.min(shared.concurrency).max(1);
    let mut done = Vec::with_capacity(n);
    for t in 0..n {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(LoadError::Runtime)?;
        let (shared, tx) = (shared.clone(), tx.clone());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name(format!("floodgate-load-{t}"))
            .spawn(move || {
                let summaries = rt.block_on(async move {
                    let ids = (t..shared.concurrency).step_by(n);
                    let workers: Vec<_> = ids
                        .map(|id| tokio::spawn(worker(id, shared.clone(), tx.clone())))
                        .collect();
                    drop(tx);
                    let mut summaries = Vec::with_capacity(workers.len());
                    for w in workers {
                        summaries.push(w.await.unwrap_or_default());
                    }
                    summaries
                });
                let _ = done_tx.send(summaries);
            })
            .map_err(LoadError::Runtime)?;
        done.push(done_rx);
    }
    Ok(done)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sleep until `at` (a time since the start, ns), flushing `batch` first when the sleep is
/// long. False when the run was stopped meanwhile.
async fn sleep_until(
    s: &Shared,
    at: u64,
    batch: &mut Vec<Record>,
    tx: &mpsc::UnboundedSender<Vec<Record>>,
    stop_rx: &watch::Receiver<bool>,
) -> bool {
    let now = s.elapsed();
    if at <= now {
        return true;
    }
    if Duration::from_nanos(at - now) > FLUSH_BEFORE_SLEEP && !batch.is_empty() {
        let _ = tx.send(std::mem::replace(batch, Vec::with_capacity(BATCH)));
    }
    let at = tokio::time::Instant::from_std(s.start + Duration::from_nanos(at));
    tokio::select! {
        _ = tokio::time::sleep_until(at) => true,
        _ = Stop::stopped(stop_rx.clone()) => false,
    }
}

async fn worker(
    id: usize,
    s: Arc<Shared>,
    tx: mpsc::UnboundedSender<Vec<Record>>,
) -> WorkerSummary {
    let mut conn = Connection::new(s.addr);
    let mut summary = WorkerSummary::default();
    let mut batch: Vec<Record> = Vec::with_capacity(BATCH);
    let stop_rx = s.stop.tx.subscribe();
    // Closed loop, paced: this worker's slots are `id x interval + k x concurrency x interval`.
    let per_worker = s.interval_ns * s.concurrency as f64;
    let mut next_slot = s.interval_ns * id as f64;
    // a start in the future (`start_at`): nothing goes before it
    if s.start > Instant::now() {
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(s.start)) => {}
            _ = Stop::stopped(stop_rx.clone()) => return summary,
        }
    }
    loop {
        if s.stop.is_stopped() {
            break;
        }
        let (intended, seq): (u64, u64) = match s.mode {
            Mode::OpenLoop => {
                let i = s.next.fetch_add(1, Ordering::Relaxed);
                if matches!(s.bound, Bound::Count(n) if i >= n) {
                    break;
                }
                let at = match (&s.schedule, &s.poisson) {
                    (Some(sch), _) => match sch.get(i as usize) {
                        Some(&t) => t,
                        None => break,
                    },
                    (None, Some(clock)) => clock.next_ns(),
                    (None, None) => (i as f64 * s.interval_ns) as u64,
                };
                (at, i)
            }
            Mode::ClosedLoop => {
                if !s.take_count() {
                    break;
                }
                let seq = s.class_seq.fetch_add(1, Ordering::Relaxed);
                let now = s.elapsed();
                if per_worker > 0.0 {
                    let mut slot = next_slot as u64;
                    if slot < now {
                        // Missed slots are dropped, as a closed-loop client does.
                        slot = now;
                        next_slot = now as f64;
                    }
                    next_slot += per_worker;
                    (slot, seq)
                } else {
                    (now, seq)
                }
            }
        };
        let class = s.classes.as_ref().map_or(0, |m| m.class_of(s.seed, seq));
        if s.past_duration(intended) {
            break;
        }
        if !sleep_until(&s, intended, &mut batch, &tx, &stop_rx).await {
            break;
        }
        let sent = s.elapsed();
        if s.mode == Mode::ClosedLoop && s.past_duration(sent) {
            break;
        }
        // Closed loop measures from the start of the request (its actual send when naive).
        let from = if s.mode == Mode::OpenLoop {
            intended
        } else {
            sent
        };
        let completed = match &s.polite {
            None => {
                let timeout = match s.timeout_from_intended {
                    // the request's own deadline: intended time plus the timeout
                    true => nanos(s.timeout).saturating_add(from).saturating_sub(sent),
                    false => nanos(s.timeout),
                };
                let (outcome, done) = if timeout == 0 {
                    // the generator was too late for this request's deadline: the client
                    // it stands for has given up without a response
                    (Outcome::Error(ErrorKind::Timeout), sent)
                } else {
                    let timeout = Duration::from_nanos(timeout);
                    let ((o, _), done) = attempt(&s, &mut conn, class, timeout, &mut summary).await;
                    (o, done)
                };
                batch.push(Record {
                    intended: from,
                    sent,
                    done,
                    outcome,
                    attempt: 1,
                    last: true,
                    class,
                });
                true
            }
            Some((engine, host)) => {
                polite_request(
                    &s,
                    engine,
                    host,
                    from,
                    class,
                    &mut conn,
                    &mut summary,
                    &mut batch,
                    &tx,
                    &stop_rx,
                )
                .await
            }
        };
        if batch.len() >= BATCH {
            let _ = tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
        }
        if !completed {
            break;
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(batch);
    }
    summary
}

/// One attempt on the worker's connection: its outcome (with the response's status and
/// headers, when there is one) and when it ended.
async fn attempt(
    s: &Shared,
    conn: &mut Connection,
    class: u8,
    timeout: Duration,
    summary: &mut WorkerSummary,
) -> ((Outcome, Option<http::Response<()>>), u64) {
    let result = conn.send(&s.template, class, timeout).await;
    let done = s.elapsed();
    let outcome = match result {
        Ok(resp) => {
            summary.advertised.observe(resp.headers(), done);
            (Outcome::Status(resp.status().as_u16()), Some(resp))
        }
        Err(e) => {
            let slot = &mut summary.examples[e.kind.index()];
            if slot.is_none() {
                *slot = Some(e.message);
            }
            (Outcome::Error(e.kind), None)
        }
    };
    (outcome, done)
}

/// One request the polite way: the engine's `before_send` (pacing) and `after_send`
/// (advice, verdict) around each attempt, and its retry wait. Records every attempt into
/// `batch`. False when the run was stopped while the request waited (it is then counted
/// as abandoned).
#[allow(clippy::too_many_arguments)]
async fn polite_request(
    s: &Shared,
    engine: &Polite,
    host: &str,
    from: u64,
    class: u8,
    conn: &mut Connection,
    summary: &mut WorkerSummary,
    batch: &mut Vec<Record>,
    tx: &mpsc::UnboundedSender<Vec<Record>>,
    stop_rx: &watch::Receiver<bool>,
) -> bool {
    engine.begin();
    let mut state = Attempt::first(engine, s.template.method(), s.template.headers(), true);
    loop {
        // Pacing may hold this worker for long: hand over what it has first.
        if !batch.is_empty() {
            let _ = tx.send(std::mem::replace(batch, Vec::with_capacity(BATCH)));
        }
        let t0 = s.elapsed();
        let sending = tokio::select! {
            sending = engine.before_send(host) => Some(sending),
            _ = Stop::stopped(stop_rx.clone()) => None,
        };
        summary.waits.paced_ns += s.elapsed() - t0;
        let Some(sending) = sending else {
            summary.waits.abandoned += 1;
            return false;
        };
        let sent = s.elapsed();
        let ((outcome, resp), done) = attempt(s, conn, class, s.timeout, summary).await;
        let reply = resp.as_ref().map(|r| (r.status(), r.headers()));
        let verdict = engine.after_send(host, sending, reply, &mut state);
        batch.push(Record {
            intended: from,
            sent,
            done,
            outcome,
            attempt: state.sent,
            last: verdict == Verdict::Done,
            class,
        });
        let Verdict::RetryAfter(wait) = verdict else {
            return true;
        };
        let t0 = s.elapsed();
        summary.waits.record_retry_wait(nanos(wait) / 1000);
        let ok = sleep_until(s, t0 + nanos(wait), batch, tx, stop_rx).await;
        summary.waits.retry_ns += s.elapsed() - t0;
        if !ok {
            summary.waits.abandoned += 1;
            return false;
        }
    }
}
