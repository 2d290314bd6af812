#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod backend;
pub mod plan;
pub mod queue_backend;
pub mod svg;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use floodgate_core::{Clock, Kind, Rate, Spec, WallClock};
use floodgate_engine::SharedStore;
use floodgate_http::{Policy, RateLimiter, StoreFailure};
use floodgate_load::{LoadConfig, LoadError};
use floodgate_proxy::proxy::{Proxy, ProxySettings};
use serde::Serialize;
use tokio::sync::watch;

use crate::backend::Backend;
use crate::plan::{Plan, max_in_span, nanos};

/// The algorithms the demo runs, in table order.
pub const ALGORITHMS: [Kind; 6] = [
    Kind::FixedWindow,
    Kind::SlidingLog,
    Kind::SlidingCounter,
    Kind::TokenBucket,
    Kind::Gcra,
    Kind::LeakyQueue,
];

/// Smallest and largest limit (`L`, requests per window) the demo accepts.
pub const LIMIT_RANGE: (u64, u64) = (4, 200);
/// Shortest and longest window the demo accepts.
pub const WINDOW_RANGE: (Duration, Duration) =
    (Duration::from_millis(500), Duration::from_secs(10));

/// Where the proxies keep their counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoStore {
    /// Each proxy's in-process store (no setup).
    Memory,
    /// One Redis (`redis://host:port[/db]`), under a key prefix unique to the run.
    Redis(String),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The limit of every algorithm: `L` requests per window `W` (default 20 per 2 s).
    pub rate: Rate,
    /// Units admitted at once from rest by token bucket, GCRA and leaky queue (default
    /// `L / 4`). The windowed algorithms have no capacity: their limit is `L`.
    pub capacity: Option<u64>,
    /// The store.
    pub store: DemoStore,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            rate: Rate::new(20, Duration::from_secs(2)).expect("a valid rate"),
            capacity: None,
            store: DemoStore::Memory,
        }
    }
}

impl DemoConfig {
    /// The capacity in effect.
    pub fn capacity(&self) -> u64 {
        self.capacity.unwrap_or((self.rate.count() / 4).max(1))
    }

    /// Check the settings; the error names the bad one.
    pub fn validate(&self) -> Result<(), DemoError> {
        let l = self.rate.count();
        let w = self.rate.period();
        if !(LIMIT_RANGE.0..=LIMIT_RANGE.1).contains(&l) {
            return Err(DemoError::Invalid {
                what: "--rate",
                reason: format!(
                    "a limit of {l} per window; the demo runs {} to {} (every request is a real one on loopback)",
                    LIMIT_RANGE.0, LIMIT_RANGE.1
                ),
            });
        }
        if w < WINDOW_RANGE.0 || w > WINDOW_RANGE.1 {
            return Err(DemoError::Invalid {
                what: "--rate",
                reason: format!(
                    "a window of {w:?}; the demo runs windows of {:?} to {:?} (it lasts about 3 windows)",
                    WINDOW_RANGE.0, WINDOW_RANGE.1
                ),
            });
        }
        let c = self.capacity();
        if c == 0 || c > l {
            return Err(DemoError::Invalid {
                what: "--capacity",
                reason: format!("{c}; expected 1 to the limit ({l})"),
            });
        }
        if let DemoStore::Redis(url) = &self.store
            && !(url.starts_with("redis://") || url.starts_with("rediss://"))
        {
            return Err(DemoError::Invalid {
                what: "--redis",
                reason: format!("{url:?} is not a Redis URL; expected redis://host:port[/db]"),
            });
        }
        Ok(())
    }

    fn spec(&self, kind: Kind) -> Spec {
        let mut spec = Spec::new(kind, self.rate);
        spec.capacity = Some(self.capacity());
        spec
    }
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A setting is out of range or malformed.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The flag.
        what: &'static str,
        /// What is wrong, with the value.
        reason: String,
    },
    /// The backend could not listen on loopback.
    #[error("cannot start the demo backend on 127.0.0.1: {0}")]
    Backend(#[source] std::io::Error),
    /// Redis could not be reached or used.
    #[error("Redis store: {0}")]
    Redis(String),
    /// A proxy could not be built or bound.
    #[error("floodgate proxy for {algorithm}: {message}")]
    Proxy {
        /// The algorithm.
        algorithm: &'static str,
        /// What failed.
        message: String,
    },
    /// The load run against one proxy failed to start.
    #[error("load against the {algorithm} proxy: {source}")]
    Load {
        /// The algorithm.
        algorithm: &'static str,
        /// What failed.
        #[source]
        source: LoadError,
    },
    /// The plots could not be written.
    #[error("cannot write the plots: {0}")]
    Plot(String),
}

/// One algorithm's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The algorithm (`fixed-window`, ...).
    pub algorithm: &'static str,
    /// Its guarantee with this run's numbers.
    pub guarantee: String,
    /// What the guarantee bounds in any window-length span, requests; `None` for the
    /// sliding counter, whose guarantee is per aligned window and approximate on a
    /// rolling span.
    pub bound: Option<u64>,
    /// Whether the backend's records kept `bound` (`None` without one).
    pub held: Option<bool>,
    /// Requests sent.
    pub sent: u64,
    /// 200 responses.
    pub admitted: u64,
    /// 429 responses.
    pub denied: u64,
    /// Anything else: other statuses and failed requests.
    pub errors: u64,
    /// Requests the backend received from this proxy.
    pub backend_received: u64,
    /// Most backend arrivals in any span of one window.
    pub max_in_window: u64,
    /// Most backend arrivals in any 1 s span.
    pub max_in_second: u64,
    /// p99 latency of all responses, ms, from the intended send time.
    pub p99_ms: f64,
    /// Largest latency, ms.
    pub max_ms: f64,
    /// Backend arrival instants, ns since the epoch (for the plots).
    #[serde(skip)]
    pub arrivals: Vec<u64>,
    /// The load generator's report (for the plots).
    #[serde(skip)]
    pub load: floodgate_load::Report,
}

/// The whole demo's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// `"in-process"` or `"redis"`.
    pub store: &'static str,
    /// `L`, requests per window.
    pub limit: u64,
    /// `W`, seconds.
    pub window_s: f64,
    /// Capacity of token bucket, GCRA and leaky queue.
    pub capacity: u64,
    /// The boundary the bursts straddle, seconds since the epoch.
    pub boundary_unix_s: f64,
    /// First steady request, seconds since the epoch.
    pub start_unix_s: f64,
    /// Steady requests, sent at `steady_rps` over the window before the previous one.
    pub steady: u64,
    /// Steady rate, requests per second.
    pub steady_rps: f64,
    /// Requests in each burst.
    pub burst: u64,
    /// Distance of each burst from the boundary, seconds.
    pub burst_gap_s: f64,
    /// Decision-store faults during the run (Redis); requests hit by one got a 503.
    pub store_errors: u64,
    /// Wall time of the whole demo, seconds.
    pub elapsed_s: f64,
    /// One row per algorithm.
    pub rows: Vec<Row>,
}

/// The guarantee of `kind` for this run and its bound on any window-length span.
fn guarantee(kind: Kind, limit: u64, capacity: u64, window: Duration) -> (String, Option<u64>) {
    let w = fmt_secs(window.as_secs_f64());
    match kind {
        Kind::FixedWindow => (
            format!(
                "<= {limit} per aligned window, so up to {} in a {w} span across a boundary",
                2 * limit
            ),
            Some(2 * limit),
        ),
        Kind::SlidingLog => (format!("<= {limit} in any {w} span, exactly"), Some(limit)),
        Kind::SlidingCounter => (
            format!("<= {limit} per aligned window; rolling estimate <= {limit} (approximate)"),
            None,
        ),
        Kind::TokenBucket | Kind::Gcra | Kind::LeakyMeter => (
            format!(
                "<= {} in any {w} span (capacity {capacity} + rate x {w})",
                capacity + limit
            ),
            Some(capacity + limit),
        ),
        Kind::LeakyQueue => (
            format!(
                "forwards <= {} in any {w} span (1 + rate x {w}), delaying what it admits",
                limit + 1
            ),
            Some(limit + 1),
        ),
    }
}

/// A duration in seconds as the CLI reads it back.
///
/// ```
/// use floodgate_demo::fmt_secs;
/// assert_eq!((fmt_secs(2.0), fmt_secs(0.5), fmt_secs(1.25)), ("2s".into(), "500ms".into(), "1.25s".into()));
/// ```
pub fn fmt_secs(s: f64) -> String {
    let ms = (s * 1000.0).round();
    if ms % 1000.0 == 0.0 {
        format!("{}s", ms / 1000.0)
    } else if s < 1.0 {
        format!("{ms}ms")
    } else {
        format!("{s}s")
    }
}

/// A running proxy and how to stop it.
struct Running {
    kind: Kind,
    addr: SocketAddr,
    limiter: RateLimiter,
    task: tokio::task::JoinHandle<()>,
}

async fn start_proxies(
    cfg: &DemoConfig,
    upstream: SocketAddr,
    redis: Option<&SharedStore>,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<Running>, DemoError> {
    let upstream: http::Uri = format!("http://{upstream}")
        .parse()
        .map_err(|e| DemoError::Backend(std::io::Error::other(format!("{e}"))))?;
    let mut settings = ProxySettings::new(upstream);
    settings.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    settings.shutdown_grace = Duration::from_secs(1);
    let mut out = Vec::new();
    for kind in ALGORITHMS {
        let fail = |message: String| DemoError::Proxy {
            algorithm: kind.name(),
            message,
        };
        let mut b = RateLimiter::builder().policy(Policy::new(kind.name(), cfg.spec(kind)));
        if let Some(store) = redis {
            let infos = b.policy_infos().map_err(|e| fail(e.to_string()))?;
            let shared = store
                .decision_store(&infos)
                .map_err(|e| fail(e.kind.to_string()))?;
            // fail closed: a Redis fault shows up as a 503, never as an admission
            b = b
                .store(shared, store.name())
                .store_failure(StoreFailure::Deny);
        }
        let limiter = b.build().map_err(|e| fail(e.to_string()))?;
        let proxy = Proxy::bind(limiter.clone(), &settings)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let addr = proxy.local_addr();
        let mut stop = stop.clone();
        let task = tokio::spawn(proxy.run(async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
        out.push(Running {
            kind,
            addr,
            limiter,
            task,
        });
    }
    Ok(out)
}

async fn connect_redis(url: &str) -> Result<SharedStore, DemoError> {
    let cfg = floodgate_redis::StoreConfig {
        prefix: format!(
            "floodgate-demo:{}-{}:",
            WallClock.now().as_u64() / 1_000_000,
            std::process::id()
        ),
        // a loopback Redis answers in well under this; a loaded test machine may not in 50 ms
        timeout: Duration::from_millis(500),
        ..Default::default()
    };
    SharedStore::connect(url, cfg, None)
        .await
        .map_err(|e| DemoError::Redis(e.to_string()))
}

/// Run the demo: start the backend and the proxies, send the planned traffic through
/// every proxy at once, and read what the backend received.
pub async fn run(cfg: &DemoConfig) -> Result<DemoReport, DemoError> {
    cfg.validate()?;
    let began = std::time::Instant::now();
    let limit = cfg.rate.count();
    let window = cfg.rate.period();
    let capacity = cfg.capacity();
    let redis = match &cfg.store {
        DemoStore::Memory => None,
        DemoStore::Redis(url) => Some(connect_redis(url).await?),
    };
    let backend = Backend::start().await.map_err(DemoError::Backend)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let proxies = start_proxies(cfg, backend.addr(), redis.as_ref(), &stop_rx).await?;

    let plan = Plan::new(
        limit,
        window,
        WallClock.now().as_u64(),
        Duration::from_millis(300),
    );
    let start_at = UNIX_EPOCH + Duration::from_nanos(plan.start_ns);
    let mut loads = tokio::task::JoinSet::new();
    for (i, p) in proxies.iter().enumerate() {
        let mut lc = LoadConfig::scheduled(
            format!("http://{}/{}", p.addr, p.kind.name()),
            plan.offsets.clone(),
        );
        lc.start_at = Some(start_at);
        // a whole burst in flight at once, plus what the leaky queue holds
        lc.concurrency = (limit + capacity + 8) as usize;
        lc.timeout = window * 4;
        lc.bucket = window / 8;
        lc.window = Some(window);
        lc.near = window / 4;
        loads.spawn(async move { (i, floodgate_load::run(&lc).await) });
    }
    let mut reports: Vec<Option<floodgate_load::Report>> = vec![None; proxies.len()];
    let mut first_err = None;
    while let Some(joined) = loads.join_next().await {
        let Ok((i, result)) = joined else { continue };
        match result {
            Ok(r) => reports[i] = Some(r),
            Err(source) => {
                first_err.get_or_insert(DemoError::Load {
                    algorithm: proxies[i].kind.name(),
                    source,
                });
            }
        }
    }
    let store_errors = proxies
        .iter()
        .map(|p| p.limiter.metrics().store_error_count())
        .sum();
    let _ = stop_tx.send(true);
    for p in &proxies {
        p.task.abort();
    }
    if let Some(e) = first_err {
        return Err(e);
    }

    let mut rows = Vec::new();
    for (p, report) in proxies.iter().zip(reports) {
        let Some(load) = report else {
            return Err(DemoError::Proxy {
                algorithm: p.kind.name(),
                message: "the load task did not finish".into(),
            });
        };
        let arrivals = backend.arrivals(&format!("/{}", p.kind.name()));
        let (guarantee, bound) = guarantee(p.kind, limit, capacity, window);
        let max_in_window = max_in_span(&arrivals, nanos(window));
        let admitted = load.status(200);
        let denied = load.status(429);
        rows.push(Row {
            algorithm: p.kind.name(),
            guarantee,
            bound,
            held: bound.map(|b| max_in_window <= b),
            sent: load.requests,
            admitted,
            denied,
            errors: load.requests - admitted - denied,
            backend_received: arrivals.len() as u64,
            max_in_window,
            max_in_second: max_in_span(&arrivals, 1_000_000_000),
            p99_ms: load.latency.all.p99_ms,
            max_ms: load.latency.all.max_ms,
            arrivals,
            load,
        });
    }
    Ok(DemoReport {
        store: if redis.is_some() {
            "redis"
        } else {
            "in-process"
        },
        limit,
        window_s: window.as_secs_f64(),
        capacity,
        boundary_unix_s: plan.boundary_ns as f64 / 1e9,
        start_unix_s: plan.start_ns as f64 / 1e9,
        steady: plan.steady,
        steady_rps: plan.steady_rps,
        burst: plan.burst,
        burst_gap_s: plan.burst_gap.as_secs_f64(),
        store_errors,
        elapsed_s: began.elapsed().as_secs_f64(),
        rows,
    })
}

/// `HH:MM:SS.mmm` (UTC) of an instant in seconds since the epoch.
///
/// ```
/// assert_eq!(floodgate_demo::utc_time(1_700_000_001.25), "22:13:21.250");
/// ```
pub fn utc_time(unix_s: f64) -> String {
    let ms = (unix_s * 1000.0).round() as u64;
    let (s, ms) = (ms / 1000, ms % 1000);
    format!(
        "{:02}:{:02}:{:02}.{ms:03}",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60
    )
}

impl DemoReport {
    /// The report as the table `floodgate demo` prints.
    pub fn render_text(&self) -> String {
        use std::fmt::Write;
        let w = fmt_secs(self.window_s);
        let mut o = String::new();
        let _ = writeln!(
            o,
            "floodgate demo: {} requests per {w} behind floodgate proxy, {} store (capacity {} for token bucket, GCRA, leaky queue)",
            self.limit, self.store, self.capacity
        );
        let b = self.boundary_unix_s;
        let _ = writeln!(
            o,
            "traffic, the same through each proxy: {} requests at {:.0}/s from {} to {}, then {} at {} and {} at {}, around the boundary at {} UTC",
            self.steady,
            self.steady_rps,
            utc_time(self.start_unix_s),
            utc_time(self.start_unix_s + self.window_s),
            self.burst,
            utc_time(b - self.burst_gap_s),
            self.burst,
            utc_time(b + self.burst_gap_s),
            utc_time(b),
        );
        let _ = writeln!(o);
        let _ = writeln!(o, "{:<31}most received by the backend", "");
        let _ = writeln!(
            o,
            "{:<16} {:>8} {:>5}  {:>7} {:>7}  {:>8}  guarantee: held on the backend's records?",
            "algorithm",
            "admitted",
            "429",
            format!("any {w}"),
            "any 1s",
            "p99",
        );
        for r in &self.rows {
            let _ = writeln!(
                o,
                "{:<16} {:>8} {:>5}  {:>7} {:>7}  {:>8}  {}: {}",
                r.algorithm,
                r.admitted,
                r.denied,
                r.max_in_window,
                r.max_in_second,
                fmt_ms(r.p99_ms),
                r.guarantee,
                match r.held {
                    Some(true) => "held",
                    Some(false) => "NOT HELD",
                    None => "no exact bound on a span",
                }
            );
        }
        let _ = writeln!(o);
        if let Some(fw) = self.rows.iter().find(|r| r.algorithm == "fixed-window") {
            let others = self
                .rows
                .iter()
                .filter(|r| r.algorithm != "fixed-window")
                .map(|r| r.max_in_window)
                .max()
                .unwrap_or(0);
            let _ = writeln!(
                o,
                "fixed-window let {} requests reach the backend within {w} ({:.1} x the limit of {}); the others at most {others} ({:.1} x).",
                fw.max_in_window,
                fw.max_in_window as f64 / self.limit as f64,
                self.limit,
                others as f64 / self.limit as f64,
            );
        }
        let _ = writeln!(
            o,
            "most received: the most requests the backend received in any {w} span and in any 1s span, from its own arrival timestamps; p99: latency from the intended send time, 429s included."
        );
        let errors: u64 = self.rows.iter().map(|r| r.errors).sum();
        if errors > 0 {
            let _ = writeln!(
                o,
                "warning: {errors} requests got neither 200 nor 429 ({} store faults): the numbers above undercount.",
                self.store_errors
            );
        }
        o
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// Write one SVG per algorithm into `dir` (created if missing); returns the paths.
pub fn write_svgs(report: &DemoReport, dir: &std::path::Path) -> Result<Vec<PathBuf>, DemoError> {
    std::fs::create_dir_all(dir).map_err(|e| DemoError::Plot(format!("{}: {e}", dir.display())))?;
    let mut paths = Vec::new();
    for r in &report.rows {
        let path = dir.join(format!("demo-{}.svg", r.algorithm));
        svg::plot(report, r, &path)?;
        paths.push(path);
    }
    Ok(paths)
}
