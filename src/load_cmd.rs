//! `floodgate load URL`: flags, progress bar and output around `floodgate_load`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use floodgate_core::rate::parse_duration;
use floodgate_load::http::HeaderMap;
use floodgate_load::{Arrivals, Bound, Jitter, Live, LoadConfig, Mode, PoliteConfig, Report, Stop};

use crate::exit::UsageContext;

pub(crate) const ABOUT: &str = "\
Send HTTP load to URL and show what the server's rate limiter did: status counts, latency
percentiles (HDR histograms) overall and by status, a timeline with window boundaries
marked, a boundary verdict, and the rate-limit headers the server advertised.

Open loop (the default with -q): request i is due at i / RATE seconds after the start,
whatever happened to the others, and its latency is measured from that intended send
time. A server that stalls cannot hide behind coordinated omission: every request it held
up carries the wait (wrk2's rule; oha's --latency-correction). --closed-loop (or no -q)
sends each connection's next request only after the previous response and measures from
the actual send, as hey does, which hides stalls.

-q is the TOTAL rate across all connections, as in oha. hey's -q is per worker: hey
-c 10 -q 5 sends up to 50/s; floodgate load -c 10 -q 50 is the same load.

Naive or polite: by default every request is sent once, whatever the server answers
(naive). --polite makes the workers one polite client built from floodgate-client, shared
by all connections: it paces its sends from the RateLimit / X-RateLimit-* headers the
server advertises, waits Retry-After plus jitter on 429/503, retries 429/502/503/504 and
transport errors with exponential backoff (--jitter) up to --max-attempts within a retry
budget (--retry-budget), and retries only idempotent methods (GET, HEAD, OPTIONS, PUT,
DELETE, TRACE, or a request with an Idempotency-Key header) unless
--retry-non-idempotent. Its latency is per request, from the intended send time (open
loop) or the start of the request (closed loop) to the end of its last attempt: pacing
waits, Retry-After waits, backoff and retries are INCLUDED. The report's Outcome section
(and outcome / polite in --json) counts 429s seen, retries, requests that finally
succeeded or failed, and the time spent waiting, for both modes, so two runs compare side
by side. --polite works in open loop (the offered load stays i / RATE; requests the
client holds back run late, and the run lasts until they are through or the deadline of
-z plus -t passes, where they count as abandoned) and in closed loop (each connection's
next request waits for the previous one, its retries included).

Goodput: every report has a Goodput section: successful responses (2xx/3xx that are not
denials) per second completed within the -z of sending, the success rate, and p50/p99 of
the successes alone. With --class-header NAME --class-mix critical=0.2,default=0.5,...
each request carries NAME set to a class drawn from the mix (repeatable with --seed), and
the section has a row per class: requests, successes, success rate, p50/p99. With
--arrivals poisson the open-loop gaps are exponential (mean 1 / RATE), as the arrivals
of many independent clients are.

Safety: only loopback addresses (127.0.0.0/8, ::1) are contacted unless you name the
host with --allow-host; redirects are never followed; every run is bounded by -n or -z
(caps: 10,000,000 requests, 1 hour) plus one timeout. Plain HTTP/1.1 only.";

const EXAMPLES: &str = "\
Examples:
  floodgate load http://127.0.0.1:8080/ -z 10s -q 200
      open loop, 200 req/s in total over 50 connections for 10 s
  floodgate load http://127.0.0.1:8080/api -n 1000 -c 10 -m POST -H 'Content-Type: application/json' -d '{}'
  floodgate load http://127.0.0.1:8080/ -z 30s -q 100 --window 10s --near 500ms --svg run.svg
      mark the 10 s windows (aligned to the Unix epoch) and judge their boundaries
  floodgate load http://127.0.0.1:8080/ -z 10s -c 1 --json > run.json
      closed loop, as fast as one connection goes, JSON on stdout
  floodgate load http://127.0.0.1:8080/ -z 10s -q 100 -c 20
  floodgate load http://127.0.0.1:8080/ -z 10s -q 100 -c 20 --polite --jitter equal
      the same offered load, naive then polite: compare the Outcome sections
  floodgate load http://127.0.0.1:8080/ -z 10s -q 2000 -c 2000 -t 2s --arrivals poisson \
      --class-header x-priority --class-mix critical=0.2,default=0.5,sheddable=0.3
      Poisson arrivals in three classes: goodput and success rate per class";

/// Flags of `floodgate load`.
#[derive(Args, Debug)]
#[command(long_about = ABOUT, after_help = EXAMPLES)]
pub struct LoadArgs {
    /// The target: http://host[:port]/path (loopback unless --allow-host names the host).
    url: String,
    /// Number of requests to send (one of -n or -z is required).
    #[arg(
        short = 'n',
        long = "requests",
        value_name = "N",
        conflicts_with = "duration"
    )]
    requests: Option<u64>,
    /// How long to send, e.g. 10s, 2m (one of -n or -z is required).
    #[arg(short = 'z', long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Total requests per second across all connections (oha's -q; hey's -q is per
    /// worker). With -q the run is open loop unless --closed-loop.
    #[arg(short = 'q', long = "rate", value_name = "RPS")]
    rate: Option<f64>,
    /// Connections (workers), each with one request in flight.
    #[arg(short = 'c', long, default_value_t = 50)]
    concurrency: usize,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Request header "Name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// Request body.
    #[arg(short = 'd', long = "body", value_name = "BODY")]
    body: Option<String>,
    /// Per-request timeout, connecting included.
    #[arg(short = 't', long, default_value = "20s", value_parser = parse_duration)]
    timeout: Duration,
    /// Closed loop: each connection waits for its response before the next request
    /// (paced at RATE / concurrency with -q); latency from the actual send time, so
    /// server stalls are hidden (coordinated omission).
    #[arg(long)]
    closed_loop: bool,
    /// Timeline bucket width, e.g. 1s, 100ms.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    bucket: Duration,
    /// Rate-limit window to mark and judge: boundaries at multiples of it on the wall
    /// clock (Unix epoch), as fixed windows align.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    window: Option<Duration>,
    /// Shift of the window boundaries from multiples of --window.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    window_offset: Option<Duration>,
    /// A request counts as near a boundary when sent within this distance of one.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    near: Duration,
    /// Status code meaning "denied by the limiter" (repeatable; default 429; nginx's
    /// limit_req denies with 503 unless configured).
    #[arg(long = "deny-status", value_name = "CODE")]
    deny_statuses: Vec<u16>,
    /// Allow this non-loopback host (must match the URL's host).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot of the timeline (admitted, denied, p99) with boundaries marked.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Never show the progress bar (it is shown only on a terminal, and not when CI is set).
    #[arg(long)]
    no_progress: bool,
    /// Send like a polite client (floodgate-client): pace from the advertised headers,
    /// honour Retry-After with jitter, retry within a budget. Latency then includes the
    /// waits and retries.
    #[arg(long)]
    polite: bool,
    /// With --polite: backoff jitter when no Retry-After is given: full (uniform(0, expo)),
    /// equal (expo/2 + uniform(0, expo/2)), decorrelated (min(cap, uniform(base, 3 x
    /// previous))) or none.
    #[arg(long, value_name = "KIND", requires = "polite", value_parser = parse_jitter)]
    jitter: Option<Jitter>,
    /// With --polite: attempts per request at most, the first included [default: 4].
    #[arg(long, value_name = "N", requires = "polite")]
    max_attempts: Option<u32>,
    /// With --polite: retries may be at most this fraction of requests over a sliding 10 s
    /// window, plus 10 per second [default: 0.2].
    #[arg(long, value_name = "FRACTION", requires = "polite")]
    retry_budget: Option<f64>,
    /// With --polite: longest backoff step (base 100ms) [default: 10s].
    #[arg(long, value_name = "DURATION", requires = "polite", value_parser = parse_duration)]
    backoff_cap: Option<Duration>,
    /// With --polite: cap on every wait (pacing, Retry-After, backoff) [default: 60s].
    #[arg(long, value_name = "DURATION", requires = "polite", value_parser = parse_duration)]
    max_wait: Option<Duration>,
    /// With --polite: retry non-idempotent methods (POST, PATCH) too.
    #[arg(long, requires = "polite")]
    retry_non_idempotent: bool,
    /// With --polite: do not pace from the RateLimit headers; only Retry-After, backoff
    /// and the budget (a "backoff only" client).
    #[arg(long, requires = "polite")]
    no_pacing: bool,
    /// Open loop: how send times are spaced: uniform (request i at i / RATE) or poisson
    /// (exponential gaps of mean 1 / RATE, the arrivals of many independent clients).
    #[arg(long, value_name = "KIND", default_value = "uniform", value_parser = parse_arrivals)]
    arrivals: Arrivals,
    /// Seed of the Poisson gaps and of the class draws: the same seed, the same traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Open loop: -t runs from each request's intended send time (the deadline of the
    /// client it stands for), not from when a connection was free to send it; a request
    /// already past it counts as a timeout, unsent.
    #[arg(long)]
    timeout_from_intended: bool,
    /// Send each request with this header set to a class drawn from --class-mix (e.g.
    /// x-priority); the report then has a goodput row per class.
    #[arg(long, value_name = "NAME", requires = "class_mix")]
    class_header: Option<String>,
    /// The classes and their weights, NAME=WEIGHT,... (e.g.
    /// critical=0.2,default=0.5,sheddable=0.3; weights are normalised by their sum).
    #[arg(long, value_name = "MIX", requires = "class_header")]
    class_mix: Option<String>,
}

fn parse_arrivals(s: &str) -> Result<Arrivals, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "uniform" => Ok(Arrivals::Uniform),
        "poisson" => Ok(Arrivals::Poisson),
        _ => Err(format!(
            "unknown arrivals {s:?}; expected uniform or poisson"
        )),
    }
}

fn parse_jitter(s: &str) -> Result<Jitter, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "full" => Ok(Jitter::Full),
        "equal" => Ok(Jitter::Equal),
        "decorrelated" => Ok(Jitter::Decorrelated),
        "none" => Ok(Jitter::None),
        _ => Err(format!(
            "unknown jitter {s:?}; expected full, equal, decorrelated or none"
        )),
    }
}

impl LoadArgs {
    fn config(&self) -> Result<LoadConfig> {
        let bound = match (self.requests, self.duration) {
            (Some(n), None) => Bound::Count(n),
            (None, Some(z)) => Bound::Duration(z),
            (None, None) => {
                bail!("one of -n (requests) or -z (duration) is required: every run is bounded")
            }
            (Some(_), Some(_)) => bail!("-n and -z cannot be used together"),
        };
        let mut cfg = LoadConfig::new(self.url.clone(), bound);
        cfg.concurrency = self.concurrency;
        cfg.rate = self.rate;
        cfg.mode = if self.rate.is_some() && !self.closed_loop {
            Mode::OpenLoop
        } else {
            Mode::ClosedLoop
        };
        cfg.method = floodgate_load::parse_method(&self.method)?;
        let mut headers = HeaderMap::new();
        for h in &self.headers {
            let (n, v) = floodgate_load::parse_header(h)?;
            headers.append(n, v);
        }
        cfg.headers = headers;
        cfg.body = self.body.clone().unwrap_or_default().into();
        cfg.timeout = self.timeout;
        cfg.bucket = self.bucket;
        cfg.window = self.window;
        cfg.window_offset = self.window_offset.unwrap_or_default();
        if self.window_offset.is_some() && self.window.is_none() {
            bail!("--window-offset needs --window");
        }
        cfg.near = self.near;
        if !self.deny_statuses.is_empty() {
            cfg.deny_statuses = self.deny_statuses.clone();
        }
        cfg.allow_hosts = self.allow_hosts.clone();
        if self.polite {
            let mut p = PoliteConfig::default();
            if let Some(j) = self.jitter {
                p.backoff.jitter = j;
            }
            if let Some(n) = self.max_attempts {
                p.max_attempts = n;
            }
            if let Some(b) = self.retry_budget {
                p.budget.percent_can_retry = b;
            }
            if let Some(w) = self.max_wait {
                p.max_wait = w;
                p.backoff.cap = p.backoff.cap.min(w);
                p.backoff.base = p.backoff.base.min(w);
            }
            if let Some(c) = self.backoff_cap {
                p.backoff.cap = c;
            }
            p.retry_non_idempotent = self.retry_non_idempotent;
            p.pacing = !self.no_pacing;
            cfg.polite = Some(p);
        }
        cfg.arrivals = self.arrivals;
        cfg.seed = self.seed;
        cfg.timeout_from_intended = self.timeout_from_intended;
        if let (Some(h), Some(m)) = (&self.class_header, &self.class_mix) {
            cfg.classes = Some(floodgate_load::ClassMix::parse(h, m)?);
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// What a `-z` run's length is, said when it starts: requests still in flight (or, with
/// --polite, held back) when the sending ends are waited for up to the timeout, so the
/// run may last `-z` plus `-t`.
fn bound_note(cfg: &LoadConfig) -> Option<String> {
    let Bound::Duration(z) = cfg.bound else {
        return None;
    };
    Some(format!(
        "floodgate load: sending for {z:?}; what is still in flight then is waited for up to -t {:?}, so the run lasts at most {:?}",
        cfg.timeout,
        z + cfg.timeout
    ))
}

/// Whether to draw a progress bar: stderr is a terminal and CI is not set.
pub(crate) fn progress_wanted(no_progress: bool) -> bool {
    !no_progress && std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

pub fn run(args: LoadArgs) -> Result<()> {
    let cfg = args.config().usage_err()?;
    if let Some(note) = bound_note(&cfg) {
        eprintln!("{note}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let report = runtime.block_on(run_with_progress(&cfg, progress_wanted(args.no_progress)))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "floodgate load {} ({}{}, {})",
            report.url,
            report.mode,
            if report.polite.is_some() {
                ", polite"
            } else {
                ""
            },
            report
                .rate
                .map_or("max rate".to_string(), |q| format!("{q} req/s"))
        );
        floodgate_load::svg::plot_timeline(&report, &title, path)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Run with Ctrl-C stopping the run early and, when `show` is set, a progress bar on
/// stderr with the live rate and outcome counts.
pub(crate) async fn run_with_progress(cfg: &LoadConfig, show: bool) -> Result<Report> {
    let live = Arc::new(Live::default());
    let stop = Stop::default();
    let ctrl_c = {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.stop();
            }
        })
    };
    let bar = show.then(|| progress_bar(cfg));
    let ticker = bar.clone().map(|bar| {
        let live = live.clone();
        let by_count = bar.length().is_some_and(|l| l > 0) && !is_time_bar(cfg);
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut last = (start, 0u64);
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let s = live.snapshot();
                let now = tokio::time::Instant::now();
                let dt = (now - last.0).as_secs_f64();
                let rps = if dt > 0.0 {
                    (s.done - last.1) as f64 / dt
                } else {
                    0.0
                };
                if dt >= 0.5 {
                    last = (now, s.done);
                    bar.set_message(format!(
                        "{rps:>8.0} req/s  admitted {}  denied {}  errors {}",
                        s.admitted, s.denied, s.errors
                    ));
                }
                if by_count {
                    bar.set_position(s.done);
                } else {
                    bar.set_position((now - start).as_millis() as u64);
                }
            }
        })
    });
    let result = floodgate_load::run_with(cfg, live, stop).await;
    ctrl_c.abort();
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(result?)
}

fn is_time_bar(cfg: &LoadConfig) -> bool {
    matches!(cfg.bound, Bound::Duration(_)) && cfg.mode == Mode::ClosedLoop
}

fn progress_bar(cfg: &LoadConfig) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let (len, template) = match (cfg.bound, cfg.mode, cfg.rate) {
        (Bound::Count(n), _, _) => (n, "{bar:30} {pos}/{len} requests {msg}"),
        (Bound::Duration(z), Mode::OpenLoop, Some(q)) => (
            (z.as_secs_f64() * q).ceil() as u64,
            "{bar:30} {pos}/{len} requests {msg}",
        ),
        (Bound::Duration(z), _, _) => (z.as_millis() as u64, "{bar:30} {elapsed}/{duration} {msg}"),
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}
