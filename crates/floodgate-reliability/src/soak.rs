//! The soak: the real `floodgate proxy` (in-process store) under steady mixed load for a
//! bounded time, its resident memory (`/proc/PID/statm`) and open file descriptors
//! (`/proc/PID/fd`) sampled every second.
//!
//! The load, through one proxy in front of an in-process backend:
//!
//! * steady clients (`steady-N`, 10/s each under a 20/s GCRA with burst 5): admitted;
//! * heavy clients (`heavy-N`, about 100/s each against the same 20/s): mostly 429;
//! * a rotating client on `/rotating`: a new key on every request, on a new TCP
//!   connection (`Connection: close`), under 10/min (a key stays live for 30 s), so the
//!   capped store (`max_keys`) fills within seconds and then evicts;
//! * queued clients (`queue-N`) on `/queued`, a leaky queue (nginx `rate=50r/s burst=10
//!   delay=2`) at about 70/s: some pass at once, some are held, some rejected.
//!
//! Verdict: after warm-up (its stated seconds, and until the capped store is full and
//! evicting: filling it is growth by design), neither memory nor descriptors grow beyond a
//! small tolerance;
//! every request is answered (200 or 429, with `RateLimit` headers) within a bound; the
//! proxy counted every request once; it did not die or panic.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::Row;
use crate::load::{Load, Shape, Worker};
use crate::net::Backend;
use crate::procs::{HarnessError, ProxyProcess, metric_sum};

/// Soak parameters.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `floodgate` binary.
    pub bin: PathBuf,
    /// Length of the load, seconds.
    pub secs: u64,
    /// Seconds of warm-up: samples up to here set the baseline.
    pub warmup_secs: u64,
    /// Allowed RSS growth beyond the warm-up peak, KiB.
    pub rss_tolerance_kib: u64,
    /// Allowed descriptor growth beyond the warm-up peak.
    pub fd_tolerance: u64,
    /// `max_keys` of the proxy (per policy).
    pub max_keys: u64,
    /// No request may take longer (the leaky queue holds up to 200 ms, plus slack).
    pub latency_bound: Duration,
}

impl Settings {
    /// A soak of `secs` seconds; the first quarter (at least 3 s) is warm-up.
    pub fn new(bin: PathBuf, secs: u64) -> Settings {
        Settings {
            bin,
            secs,
            warmup_secs: (secs / 4).max(3),
            rss_tolerance_kib: 2048,
            fd_tolerance: 8,
            max_keys: 250,
            latency_bound: Duration::from_millis(1500),
        }
    }
}

/// One `/proc` sample of the proxy.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Seconds since the load started.
    pub at_s: f64,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// The capped store had evicted a key by then (`floodgate_store_evicted_total` > 0):
    /// it is full, and its memory no longer grows by design.
    pub full: bool,
}

fn config(upstream: std::net::SocketAddr, max_keys: u64) -> String {
    format!(
        r#"upstream = "http://{upstream}"
max_keys = {max_keys}
upstream_timeout = "5s"
shutdown_grace = "1s"

[deny]
retry_after_jitter = "0s"

[delay]
max_waiting = 1000

[[policy]]
name = "per-client"
algorithm = "gcra"
rate = "20/s"
burst = 4
key = "header:x-client"

[[policy]]
name = "queue"
algorithm = "leaky-queue"
rate = "50/s"
burst = 10
delay = 2
key = "header:x-client"

[[policy]]
name = "rotating"
algorithm = "gcra"
rate = "10/min"
burst = 4
key = "header:x-client"

[[route]]
prefix = "/rotating"
policies = ["rotating"]

[[route]]
prefix = "/queued"
policies = ["queue"]

[[route]]
prefix = "/"
policies = ["per-client"]
"#
    )
}

/// Run the soak; setup failures and harness panics give a failed row.
pub async fn run(s: &Settings) -> Row {
    let start_kib = crate::mem::rss_kib();
    let case = format!("proxy, {} s mixed load, memory store", s.secs);
    let failed = |panics: u64, detail: String| Row {
        area: "soak",
        case: case.clone(),
        cases: 1,
        faults: 0,
        requests: 0,
        lost: 0,
        duplicated: 0,
        panics,
        mem_start_kib: start_kib,
        mem_end_kib: crate::mem::rss_kib(),
        pass: false,
        detail,
    };
    match tokio::spawn(soak(s.clone(), case.clone())).await {
        Ok(Ok(row)) => row,
        Ok(Err(e)) => failed(0, format!("setup failed: {e}")),
        Err(e) => failed(
            u64::from(e.is_panic()),
            format!("the harness panicked: {e}"),
        ),
    }
}

async fn soak(s: Settings, case: String) -> Result<Row, HarnessError> {
    let backend = Backend::start().await?;
    let mut proxy = ProxyProcess::start(&s.bin, "soak", &config(backend.addr, s.max_keys)).await?;
    let mut workers = Vec::new();
    let ms = Duration::from_millis;
    for i in 0..4 {
        workers.push(Worker {
            target: 0,
            addr: proxy.listen,
            shape: Shape::keyed("/", &format!("steady-{i}")),
            gap: ms(100),
        });
    }
    for i in 0..2 {
        workers.push(Worker {
            target: 0,
            addr: proxy.listen,
            shape: Shape::keyed("/", &format!("heavy-{i}")),
            gap: ms(10),
        });
    }
    workers.push(Worker {
        target: 0,
        addr: proxy.listen,
        shape: Shape {
            path: "/rotating".into(),
            key: None,
            fresh_prefix: "rot".into(),
            close: true,
        },
        gap: ms(2),
    });
    for i in 0..2 {
        workers.push(Worker {
            target: 0,
            addr: proxy.listen,
            shape: Shape::keyed("/queued", &format!("queue-{i}")),
            gap: ms(14),
        });
    }
    let start = Instant::now();
    let load = Load::start(workers, Duration::from_secs(10));
    let mut series = Vec::new();
    let end = start + Duration::from_secs(s.secs);
    let mut next = start;
    while next <= end {
        tokio::time::sleep_until(next.into()).await;
        let at_s = start.elapsed().as_secs_f64();
        let (rss_kib, fds) = (proxy.rss_kib(), proxy.fds());
        let evicted = metric_sum(&proxy.metrics().await, "floodgate_store_evicted_total", "");
        series.push(Sample {
            at_s,
            rss_kib,
            fds,
            full: evicted > 0,
        });
        next += Duration::from_secs(1);
    }
    let (samples, load_panics) = load.stop().await;
    // idle: every connection of the load closed
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_fds = proxy.fds();
    let metrics = proxy.metrics().await;
    let alive = proxy.alive();
    let panicked = proxy.panicked();
    let panics = load_panics + u64::from(!alive) + u64::from(panicked);

    // warm-up: the stated seconds, and until the capped store is full (on a loaded
    // machine the rotating client fills it later than the stated warm-up)
    let filled_at = series.iter().find(|x| x.full).map(|x| x.at_s);
    let warm_end = (s.warmup_secs as f64).max(filled_at.unwrap_or(f64::INFINITY)) + 0.5;
    let warm: Vec<&Sample> = series.iter().filter(|x| x.at_s <= warm_end).collect();
    let after: Vec<&Sample> = series.iter().filter(|x| x.at_s > warm_end).collect();
    let peak = |v: &[&Sample], f: fn(&Sample) -> u64| v.iter().map(|x| f(x)).max().unwrap_or(0);
    let (rss_warm, rss_after) = (peak(&warm, |x| x.rss_kib), peak(&after, |x| x.rss_kib));
    let (fds_warm, fds_after) = (peak(&warm, |x| x.fds), peak(&after, |x| x.fds));
    let first = series.first().copied();
    let last = series.last().copied();
    let rss_growth = rss_after.saturating_sub(rss_warm);
    let fd_growth = fds_after.saturating_sub(fds_warm);

    let n = samples.len() as u64;
    let no_answer = samples.iter().filter(|x| x.status.is_none()).count() as u64;
    let allowed = samples.iter().filter(|x| x.status == Some(200)).count() as u64;
    let denied = samples.iter().filter(|x| x.status == Some(429)).count() as u64;
    let delayed = samples.iter().filter(|x| x.delayed).count() as u64;
    let unexpected = samples
        .iter()
        .filter(|x| x.status.is_some() && (!matches!(x.status, Some(200 | 429)) || !x.ratelimit))
        .count() as u64;
    let max_took = samples.iter().map(|x| x.took).max().unwrap_or_default();
    let over = samples.iter().filter(|x| x.took > s.latency_bound).count() as u64;
    let counted = metric_sum(&metrics, "floodgate_requests_total", "");
    let evicted = metric_sum(&metrics, "floodgate_store_evicted_total", "");
    let keys_held = metric_sum(&metrics, "floodgate_store_keys", "policy=\"rotating\"");
    let lost = no_answer + n.saturating_sub(counted);
    let duplicated = counted.saturating_sub(n);
    let mut fails = Vec::new();
    if filled_at.is_none() {
        fails.push(format!(
            "the capped store never filled ({} keys)",
            s.max_keys
        ));
    } else if series.len() < 2 || after.is_empty() {
        fails.push(format!(
            "too few samples after the warm-up (store full at {:.1} s)",
            filled_at.unwrap_or_default()
        ));
    }
    if rss_growth > s.rss_tolerance_kib {
        fails.push(format!(
            "RSS grew {rss_growth} KiB after warm-up (tolerance {})",
            s.rss_tolerance_kib
        ));
    }
    if fd_growth > s.fd_tolerance || idle_fds > fds_warm {
        fails.push(format!(
            "fds grew: warm-up peak {fds_warm}, later peak {fds_after}, idle {idle_fds}"
        ));
    }
    if unexpected > 0 {
        fails.push(format!("{unexpected} responses not 200/429 with RateLimit"));
    }
    if over > 0 {
        fails.push(format!(
            "{over} requests over {} ms",
            s.latency_bound.as_millis()
        ));
    }
    if allowed == 0 || denied == 0 || delayed == 0 {
        fails.push("the mix lacks allowed, denied or delayed requests".into());
    }
    if keys_held > s.max_keys {
        fails.push(format!("{keys_held} keys held, cap {}", s.max_keys));
    }
    if lost > 0 || duplicated > 0 {
        fails.push(format!(
            "lost {lost} (unanswered {no_answer}), duplicated {duplicated}: sent {n}, proxy counted {counted}"
        ));
    }
    if !alive || panicked {
        fails.push(format!("proxy died or panicked: {}", proxy.stderr()));
    }
    let pass = fails.is_empty() && panics == 0;
    let elapsed = start.elapsed().as_secs_f64().max(1e-9);
    let mut detail = format!(
        "warm-up {warm_end:.1} s, RSS start {} KiB, warm-up peak {rss_warm}, peak after {rss_after} (+{rss_growth}, tol {}), end {}; fds start {}, warm-up peak {fds_warm}, peak after {fds_after}, idle {idle_fds}; {:.0} req/s: {allowed} 200 ({delayed} held), {denied} 429; max {} ms; keys {keys_held}/{} evicted {evicted}",
        first.map_or(0, |x| x.rss_kib),
        s.rss_tolerance_kib,
        last.map_or(0, |x| x.rss_kib),
        first.map_or(0, |x| x.fds),
        n as f64 / elapsed,
        max_took.as_millis(),
        s.max_keys,
    );
    if !pass {
        detail = format!("FAILED: {}; {detail}", fails.join("; "));
    }
    Ok(Row {
        area: "soak",
        case,
        cases: 1,
        faults: 0,
        requests: n,
        lost,
        duplicated,
        panics,
        mem_start_kib: first.map_or(0, |x| x.rss_kib),
        mem_end_kib: last.map_or(0, |x| x.rss_kib),
        pass,
        detail,
    })
}
