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
//! # Bounds
//! A count run stops after `n` requests, a duration run when the schedule passes the
//! duration; both are also stopped at a hard deadline (the planned duration, or the
//! one-hour cap for count runs, plus one timeout), and at [`Stop::stop`]. In-flight
//! requests finish or time out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use floodgate_core::{Clock, WallClock};
use tokio::sync::{mpsc, watch};

use crate::boundary::Windows;
use crate::client::{Connection, RequestTemplate};
use crate::config::{Bound, LoadConfig, Mode};
use crate::error::{LoadError, caps};
use crate::report::Report;
use crate::stats::{Advertised, Live, Outcome, Record, Stats};
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

/// What each worker hands back at the end.
#[derive(Default)]
pub(crate) struct WorkerSummary {
    pub advertised: Advertised,
    pub examples: [Option<String>; 3],
}

struct Shared {
    template: RequestTemplate,
    timeout: Duration,
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
    let template = RequestTemplate::new(
        &target,
        config.method.clone(),
        &config.headers,
        config.body.clone(),
    );
    let windows = config.window.map(|w| Windows {
        window_ns: nanos(w),
        offset_ns: nanos(config.window_offset),
        near_ns: nanos(config.near),
    });
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
        addr: target.addr,
        start,
        mode: config.mode,
        interval_ns,
        schedule: schedule.clone(),
        concurrency: config.concurrency,
        bound: config.bound,
        next: AtomicU64::new(0),
        stop: stop.clone(),
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
    let mut stats = Stats::new(
        config.mode,
        wall0,
        nanos(config.bucket),
        windows,
        &config.deny_statuses,
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
    let workers: Vec<_> = (0..config.concurrency)
        .map(|id| tokio::spawn(worker(id, shared.clone(), tx.clone())))
        .collect();
    drop(tx);
    let mut summaries = Vec::with_capacity(workers.len());
    for w in workers {
        summaries.push(w.await.unwrap_or_default());
    }
    let elapsed = Instant::now().saturating_duration_since(start);
    deadline.abort();
    let stats = aggregator
        .await
        .map_err(|e| LoadError::Runtime(std::io::Error::other(e.to_string())))?;
    let stopped_early = stop.is_stopped();
    Ok(Report::build(
        config,
        &target,
        stats,
        summaries,
        wall0,
        elapsed,
        stopped_early,
    ))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
        let intended: u64 = match s.mode {
            Mode::OpenLoop => {
                let i = s.next.fetch_add(1, Ordering::Relaxed);
                if matches!(s.bound, Bound::Count(n) if i >= n) {
                    break;
                }
                match &s.schedule {
                    Some(sch) => match sch.get(i as usize) {
                        Some(&t) => t,
                        None => break,
                    },
                    None => (i as f64 * s.interval_ns) as u64,
                }
            }
            Mode::ClosedLoop => {
                if !s.take_count() {
                    break;
                }
                let now = s.elapsed();
                if per_worker > 0.0 {
                    let mut slot = next_slot as u64;
                    if slot < now {
                        // Missed slots are dropped, as a closed-loop client does.
                        slot = now;
                        next_slot = now as f64;
                    }
                    next_slot += per_worker;
                    slot
                } else {
                    now
                }
            }
        };
        if s.past_duration(intended) {
            break;
        }
        let now = s.elapsed();
        if intended > now {
            let wait = Duration::from_nanos(intended - now);
            if wait > FLUSH_BEFORE_SLEEP && !batch.is_empty() {
                let _ = tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
            }
            let at = tokio::time::Instant::from_std(s.start + Duration::from_nanos(intended));
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = Stop::stopped(stop_rx.clone()) => break,
            }
        }
        let sent = s.elapsed();
        if s.mode == Mode::ClosedLoop && s.past_duration(sent) {
            break;
        }
        let result = conn.send(&s.template, s.timeout).await;
        let done = s.elapsed();
        let outcome = match result {
            Ok(resp) => {
                summary.advertised.observe(resp.headers(), done);
                Outcome::Status(resp.status().as_u16())
            }
            Err(e) => {
                let slot = &mut summary.examples[e.kind.index()];
                if slot.is_none() {
                    *slot = Some(e.message);
                }
                Outcome::Error(e.kind)
            }
        };
        batch.push(Record {
            intended: if s.mode == Mode::OpenLoop {
                intended
            } else {
                sent
            },
            sent,
            done,
            outcome,
        });
        if batch.len() >= BATCH {
            let _ = tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(batch);
    }
    summary
}
