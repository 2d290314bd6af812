//! The fault matrix: the real `floodgate proxy` process, its Redis store on our own
//! `redis-server`, an in-process backend, and one fault per case.
//!
//! Every case starts fresh processes: a `redis-server --save "" --appendonly no` on a
//! free loopback port (behind an in-process [`Relay`] for the slow-network case), a
//! backend, and two proxies on that Redis, one failing open (`fault_policy = "fail-open"`),
//! one failing closed (`fault_policy = "fail-closed"`, 503). Load runs through both for the whole
//! case: per proxy, `workers` clients with their own keys (`w0`, `w1`, ...; always
//! admitted) and one `hog` whose every request costs the whole limit (denied, 429, after
//! its first). Timeline: healthy, fault injected, fault held, recovery, then the tail.
//!
//! Checked for every case, on every request of both proxies:
//!
//! * **policy**: before the fault and from one second after recovery, every response is
//!   a normal decision (`RateLimit` header, 200 or 429). During a Redis fault each is a
//!   normal decision or the configured degraded answer (fail open: 200 from the backend
//!   without `RateLimit`; fail closed: 503 without it), and Redis faults that refuse
//!   service must produce degraded answers. During an upstream fault the limiter still
//!   decides (headers present, the hog still 429) and admitted requests get 502
//!   (killed, garbage) or 504 (slow).
//! * **no hang**: every request is answered within the case's bound: the store timeout
//!   (plus the upstream timeout for a slow upstream) plus a slack for a loaded machine.
//! * **no panic**: both proxies are alive at the end and their stderr has no "panicked".
//! * **blame**: without an upstream fault, `floodgate_upstream_errors_total` stays 0 (a
//!   client hanging up mid-body is not an upstream failure).
//! * **resume**: the first normal decision on a `w` key sent after recovery comes within
//!   `resume_within` (1 s) of it.
//! * **lost / duplicated**: requests without a response, 2xx responses the backend never
//!   saw, and requests the proxies counted (`floodgate_requests_total`) fewer times than
//!   they were sent are lost; requests the backend saw twice, denied requests that reached
//!   it, and extra counts are duplicated. Admitted versus charged: the fixed window's
//!   count in Redis (read back through a probe's `X-RateLimit-Remaining`) must cover every
//!   request the limiter admitted; extra charges (calls that timed out on the client but
//!   ran in Redis later) are reported, not counted as lost.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::Row;
use crate::load::{self, Load, Sample, Shape, Worker};
use crate::net::{Backend, Mode};
use crate::procs::{HarnessError, ProxyProcess, RedisServer, metric_sum};
use crate::relay::{Relay, Toxics};

/// The fixed window's limit per key (per day): `w` keys never reach it.
pub const LIMIT: u64 = 1_000_000;

/// One fault of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Redis SIGKILLed, down for the fault time, then started again (empty).
    RedisKilled,
    /// Redis SIGSTOPped for the fault time (beyond the store timeout), then SIGCONT.
    RedisPaused,
    /// `SHUTDOWN NOSAVE`, then started again at once: all state lost.
    RedisRestartedEmpty,
    /// `maxmemory 1` with `noeviction`: every write fails with OOM; then `maxmemory 0`.
    RedisOom,
    /// `SCRIPT FLUSH` every 50 ms: the scripts must be reloaded transparently.
    RedisScriptFlush,
    /// The relay adds `net_delay` each way (beyond the store timeout), then none.
    RedisSlowNetwork,
    /// The backend stops listening and drops its connections, then listens again.
    UpstreamKilled,
    /// The backend answers only after the upstream timeout plus 500 ms.
    UpstreamSlow,
    /// The backend answers bytes that are not HTTP.
    UpstreamGarbage,
    /// Clients send half a request body (Content-Length and chunked) and hang up.
    ClientDisconnect,
}

impl Fault {
    /// Every fault, in table order.
    pub const ALL: [Fault; 10] = [
        Fault::RedisKilled,
        Fault::RedisPaused,
        Fault::RedisRestartedEmpty,
        Fault::RedisOom,
        Fault::RedisScriptFlush,
        Fault::RedisSlowNetwork,
        Fault::UpstreamKilled,
        Fault::UpstreamSlow,
        Fault::UpstreamGarbage,
        Fault::ClientDisconnect,
    ];

    /// The case's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Fault::RedisKilled => "redis SIGKILL, down, restarted",
            Fault::RedisPaused => "redis SIGSTOP beyond timeout, SIGCONT",
            Fault::RedisRestartedEmpty => "redis restarted empty",
            Fault::RedisOom => "redis OOM errors (maxmemory 1, noeviction)",
            Fault::RedisScriptFlush => "redis SCRIPT FLUSH every 50 ms",
            Fault::RedisSlowNetwork => "redis behind a slow network",
            Fault::UpstreamKilled => "upstream killed, restarted",
            Fault::UpstreamSlow => "upstream slower than its timeout",
            Fault::UpstreamGarbage => "upstream answers garbage",
            Fault::ClientDisconnect => "clients hang up mid-body",
        }
    }

    fn redis_state_lost(self) -> bool {
        matches!(self, Fault::RedisKilled | Fault::RedisRestartedEmpty)
    }

    /// Redis faults that refuse service for the whole fault time: degraded answers must
    /// appear during it.
    fn must_degrade(self) -> bool {
        matches!(
            self,
            Fault::RedisKilled | Fault::RedisPaused | Fault::RedisOom | Fault::RedisSlowNetwork
        )
    }

    /// Whether the fault is in Redis (the store), not the upstream or the clients.
    pub fn is_redis(self) -> bool {
        matches!(
            self,
            Fault::RedisKilled
                | Fault::RedisPaused
                | Fault::RedisRestartedEmpty
                | Fault::RedisOom
                | Fault::RedisScriptFlush
                | Fault::RedisSlowNetwork
        )
    }

    /// The status an admitted request gets during an upstream fault.
    fn upstream_status(self) -> Option<u16> {
        match self {
            Fault::UpstreamKilled | Fault::UpstreamGarbage => Some(502),
            Fault::UpstreamSlow => Some(504),
            _ => None,
        }
    }
}

/// Sizes and timeouts of the matrix.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `floodgate` binary.
    pub bin: PathBuf,
    /// `store.redis.timeout` of the proxies.
    pub store_timeout: Duration,
    /// `upstream_timeout` of the proxies.
    pub upstream_timeout: Duration,
    /// `connect_timeout` of the proxies.
    pub connect_timeout: Duration,
    /// Load before the fault.
    pub healthy: Duration,
    /// How long the fault is held.
    pub fault_for: Duration,
    /// Load after recovery.
    pub after: Duration,
    /// `w` clients per proxy (plus one hog).
    pub workers: usize,
    /// Pause between a client's requests.
    pub gap: Duration,
    /// Added to every latency bound (scheduling on a loaded machine).
    pub slack: Duration,
    /// Delay per direction in the slow-network case.
    pub net_delay: Duration,
    /// Normal decisions must resume within this long after recovery.
    pub resume_within: Duration,
    /// A request unanswered after this long is abandoned and counted lost.
    pub hang: Duration,
}

impl Settings {
    /// The fast matrix (about 3 s per case): 50 ms store timeout, 500 ms upstream timeout.
    pub fn fast(bin: PathBuf) -> Settings {
        Settings {
            bin,
            store_timeout: Duration::from_millis(50),
            upstream_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_millis(200),
            healthy: Duration::from_millis(400),
            fault_for: Duration::from_millis(800),
            after: Duration::from_millis(1500),
            workers: 3,
            gap: Duration::from_millis(10),
            slack: Duration::from_millis(450),
            net_delay: Duration::from_millis(80),
            resume_within: Duration::from_secs(1),
            hang: Duration::from_secs(10),
        }
    }

    /// The long matrix: the same timeouts, faults held 5 s, more clients.
    pub fn long(bin: PathBuf) -> Settings {
        Settings {
            healthy: Duration::from_secs(2),
            fault_for: Duration::from_secs(5),
            after: Duration::from_secs(4),
            workers: 6,
            ..Settings::fast(bin)
        }
    }
}

/// Run every fault of the matrix, one row each.
pub async fn run_all(s: &Settings) -> Vec<Row> {
    let mut rows = Vec::new();
    for f in Fault::ALL {
        rows.push(run(f, s).await);
    }
    rows
}

/// Run one case. Setup failures and panics of the harness give a failed row.
pub async fn run(fault: Fault, s: &Settings) -> Row {
    let start_kib = crate::mem::rss_kib();
    let failed = |panics: u64, detail: String| Row {
        area: "faults",
        case: fault.name().into(),
        cases: 2,
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
    match tokio::spawn(case(fault, s.clone())).await {
        Ok(Ok(row)) => row,
        Ok(Err(e)) => failed(0, format!("setup failed: {e}")),
        Err(e) => failed(
            u64::from(e.is_panic()),
            format!("the harness panicked: {e}"),
        ),
    }
}

fn config(upstream: std::net::SocketAddr, store: &str, deny: bool, s: &Settings) -> String {
    let ms = |d: Duration| d.as_millis();
    format!(
        r#"upstream = "http://{upstream}"
upstream_timeout = "{}ms"
connect_timeout = "{}ms"
shutdown_grace = "1s"

[store]
type = "redis"

[store.redis]
url = "{store}"
prefix = "fg-faults-{}:"
timeout = "{}ms"
fault_policy = "{}"

[headers]
legacy = "delta"
retry_after_jitter = "0s"

[[policy]]
name = "count"
algorithm = "fixed-window"
rate = "{LIMIT}/d"
key = "header:x-client"

[[route]]
prefix = "/heavy"
policies = ["count"]
cost = {LIMIT}

[[route]]
prefix = "/"
policies = ["count"]
"#,
        ms(s.upstream_timeout),
        ms(s.connect_timeout),
        if deny { "deny" } else { "allow" },
        ms(s.store_timeout),
        if deny { "fail-closed" } else { "fail-open" },
    )
}

/// When each phase began and ended.
#[derive(Debug, Clone, Copy)]
struct Timeline {
    fault: Instant,
    fault_done: Instant,
    recover: Instant,
    recovered: Instant,
}

/// Block this worker thread for a blocking call (redis-cli, process start), letting the
/// runtime move other tasks away. Needs the multi-threaded runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn day() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

async fn case(fault: Fault, s: Settings) -> Result<Row, HarnessError> {
    let day_start = day();
    let mut redis = blocking(RedisServer::start)?;
    let redis_addr = std::net::SocketAddr::from(([127, 0, 0, 1], redis.port));
    let delay = if fault == Fault::RedisSlowNetwork {
        Some(Relay::start(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), redis_addr).await?)
    } else {
        None
    };
    let store_url = match &delay {
        Some(d) => format!("redis://{}/", d.addr),
        None => redis.url(),
    };
    let mut backend = Backend::start().await?;
    let mut proxies = Vec::new();
    for deny in [false, true] {
        let name = if deny { "deny" } else { "allow" };
        proxies.push(
            ProxyProcess::start(&s.bin, name, &config(backend.addr, &store_url, deny, &s)).await?,
        );
    }
    let mem_start: u64 = proxies.iter().map(ProxyProcess::rss_kib).sum();
    let mut workers = Vec::new();
    for (t, p) in proxies.iter().enumerate() {
        for i in 0..s.workers {
            workers.push(Worker {
                target: t,
                addr: p.listen,
                shape: Shape::keyed("/", &format!("w{i}")),
                gap: s.gap,
            });
        }
        workers.push(Worker {
            target: t,
            addr: p.listen,
            shape: Shape::keyed("/heavy", "hog"),
            gap: s.gap,
        });
    }
    let load = Load::start(workers, s.hang);
    tokio::time::sleep(s.healthy).await;
    let fds_before: Vec<u64> = proxies.iter().map(ProxyProcess::fds).collect();

    // the fault
    let t_fault = Instant::now();
    let mut injected = 1u64;
    let mut rude = [0u64; 2];
    let mut inject_ok = true;
    match fault {
        Fault::RedisKilled => blocking(|| redis.kill()),
        Fault::RedisPaused => inject_ok = redis.pause(),
        Fault::RedisRestartedEmpty => {
            // SHUTDOWN closes the connection as the server exits: no reply
            let _ = blocking(|| redis.cli(&["SHUTDOWN", "NOSAVE"]));
        }
        Fault::RedisOom => {
            inject_ok = blocking(|| {
                redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]) == "OK"
                    && redis.cli(&["CONFIG", "SET", "maxmemory", "1"]) == "OK"
            });
        }
        Fault::RedisScriptFlush => injected = 0,
        Fault::RedisSlowNetwork => {
            if let Some(d) = &delay {
                d.set(Toxics::each_way(s.net_delay));
            }
        }
        Fault::UpstreamKilled => backend.kill(),
        Fault::UpstreamSlow => {
            backend.set_mode(Mode::Slow(s.upstream_timeout + Duration::from_millis(500)))
        }
        Fault::UpstreamGarbage => backend.set_mode(Mode::Garbage),
        Fault::ClientDisconnect => injected = 0,
    }
    let t_fault_done = Instant::now();
    // a slow upstream answers one request per upstream timeout per client: hold it long
    // enough for every client to be answered (504) more than once within the fault
    let fault_end = t_fault
        + if fault == Fault::UpstreamSlow {
            s.fault_for.max(s.upstream_timeout * 3)
        } else {
            s.fault_for
        };
    match fault {
        Fault::RedisScriptFlush => {
            while Instant::now() < fault_end {
                if blocking(|| redis.cli(&["SCRIPT", "FLUSH"])) == "OK" {
                    injected += 1;
                } else {
                    inject_ok = false;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Fault::ClientDisconnect => {
            let mut n = 0usize;
            while Instant::now() < fault_end {
                for (t, p) in proxies.iter().enumerate() {
                    // 64 KiB announced, 32 KiB sent; every other one chunked
                    if load::half_body(p.listen, "/upload", "rude", 65_536, 32_768, n % 2 == 1)
                        .await
                    {
                        rude[t] += 1;
                        injected += 1;
                    }
                    n += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        _ => tokio::time::sleep_until(fault_end.into()).await,
    }

    // recovery
    let t_recover = Instant::now();
    let recovered = match fault {
        Fault::RedisKilled | Fault::RedisRestartedEmpty => blocking(|| redis.restart()),
        Fault::RedisPaused => {
            inject_ok &= redis.resume();
            Ok(())
        }
        Fault::RedisOom => {
            inject_ok &= blocking(|| redis.cli(&["CONFIG", "SET", "maxmemory", "0"]) == "OK");
            Ok(())
        }
        Fault::RedisSlowNetwork => {
            if let Some(d) = &delay {
                d.set(Toxics::NONE);
            }
            Ok(())
        }
        Fault::UpstreamKilled => backend.restart().await,
        Fault::UpstreamSlow | Fault::UpstreamGarbage => {
            backend.set_mode(Mode::Normal);
            Ok(())
        }
        Fault::RedisScriptFlush | Fault::ClientDisconnect => Ok(()),
    };
    let t_recovered = Instant::now();
    recovered?;
    tokio::time::sleep(s.after).await;
    let (samples, load_panics) = load.stop().await;
    let timeline = Timeline {
        fault: t_fault,
        fault_done: t_fault_done,
        recover: t_recover,
        recovered: t_recovered,
    };

    // read back what each `w` key was charged: one probe each
    // (a probe degraded by a slow store call charges nothing: ask again, up to 5 times)
    let c = load::client();
    let mut probes = Vec::new();
    for (t, p) in proxies.iter().enumerate() {
        for i in 0..s.workers {
            for _ in 0..5 {
                let x = load::send(
                    &c,
                    t,
                    p.listen,
                    &Shape::keyed("/", &format!("w{i}")),
                    s.hang,
                )
                .await;
                let normal = x.ratelimit;
                probes.push(x);
                if normal {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    // let the proxies finish with the rude connections before counting
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut metrics = Vec::new();
    for p in &proxies {
        metrics.push(p.metrics().await);
    }
    let fds_end: Vec<u64> = proxies.iter().map(ProxyProcess::fds).collect();
    let mem_end: u64 = proxies.iter().map(ProxyProcess::rss_kib).sum();
    let mut panics = load_panics;
    let mut notes = Vec::new();
    for (t, p) in proxies.iter_mut().enumerate() {
        let name = ["allow", "deny"][t];
        if !p.alive() {
            panics += 1;
            notes.push(format!("{name} proxy died: {}", tail(&p.stderr())));
        } else if p.panicked() {
            panics += 1;
            notes.push(format!("{name} proxy panicked: {}", tail(&p.stderr())));
        }
    }
    let seen = backend.seen();
    let charged_measurable = day() == day_start;
    let mut an = Analysis::default();
    for t in 0..proxies.len() {
        analyse(
            &mut an,
            fault,
            &s,
            t,
            &samples,
            &probes,
            &timeline,
            &seen,
            &metrics[t],
            rude[t],
            charged_measurable,
        );
    }
    if fault == Fault::ClientDisconnect {
        for (t, (b, e)) in fds_before.iter().zip(&fds_end).enumerate() {
            if *e > b + 4 {
                an.fail.push(format!(
                    "{} proxy holds {e} fds after the hang-ups, {b} before",
                    ["allow", "deny"][t]
                ));
            }
        }
        an.detail.push(format!(
            "{} half bodies; backend saw {} cut bodies; fds before/after {:?}/{:?}",
            rude[0] + rude[1],
            backend.body_errors(),
            fds_before,
            fds_end
        ));
    }
    if !inject_ok {
        an.fail.push("the fault could not be injected".into());
    }
    if !charged_measurable {
        an.detail
            .push("the UTC day changed during the case: charges not compared".into());
    }
    an.fail.extend(notes);
    let pass = an.fail.is_empty() && panics == 0;
    let mut detail = an.detail;
    if !pass {
        detail.insert(0, format!("FAILED: {}", an.fail.join("; ")));
    }
    Ok(Row {
        area: "faults",
        case: fault.name().into(),
        cases: 2,
        faults: injected,
        requests: samples.len() as u64 + probes.len() as u64 + rude[0] + rude[1],
        lost: an.lost,
        duplicated: an.duplicated,
        panics,
        mem_start_kib: mem_start,
        mem_end_kib: mem_end,
        pass,
        detail: detail.join("; "),
    })
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

#[derive(Debug, Default)]
struct Analysis {
    lost: u64,
    duplicated: u64,
    fail: Vec<String>,
    detail: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Answered before the fault began.
    Before,
    /// In flight when it began, or sent while it was being injected.
    Into,
    /// Sent and answered while the fault held.
    During,
    /// Answered during or after recovery, and sent before `resume_within` after it.
    Out,
    /// Sent later.
    After,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    /// Degraded outside a store fault: a store call was slower than the timeout.
    Spurious,
    Bad,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A decision from the store: `RateLimit` header, 200 or 429.
    Normal,
    /// The store failed and the configured outcome applied.
    Degraded,
    /// 502 or 504 from the proxy.
    Upstream(u16),
    /// No response.
    Failed,
    /// Anything else.
    Unexpected(u16),
}

fn classify(s: &Sample, deny: bool) -> Class {
    match s.status {
        None => Class::Failed,
        Some(200 | 429) if s.ratelimit => Class::Normal,
        Some(200) if !deny => Class::Degraded,
        Some(503) if deny && !s.ratelimit => Class::Degraded,
        Some(st @ (502 | 504)) => Class::Upstream(st),
        Some(st) => Class::Unexpected(st),
    }
}

#[allow(clippy::too_many_arguments)]
fn analyse(
    an: &mut Analysis,
    fault: Fault,
    s: &Settings,
    t: usize,
    samples: &[Sample],
    probes: &[Sample],
    tl: &Timeline,
    seen: &HashMap<u64, u32>,
    metrics: &str,
    rude: u64,
    charged_measurable: bool,
) {
    let deny = t == 1;
    let name = if deny { "deny" } else { "allow" };
    let mine: Vec<&Sample> = samples.iter().filter(|x| x.target == t).collect();
    let bound = s.store_timeout
        + s.slack
        + if fault == Fault::UpstreamSlow {
            s.upstream_timeout
        } else {
            Duration::ZERO
        };
    let (mut degraded_during, mut expected_upstream, mut spurious, mut over_bound) =
        (0u64, 0u64, 0u64, 0u64);
    let mut bad_policy: std::collections::BTreeMap<String, u64> = Default::default();
    let mut max_took = Duration::ZERO;
    let mut first_bad = None;
    let mut recovery: Option<Duration> = None;
    for x in &mine {
        let c = classify(x, deny);
        let hog = &*x.key == "hog";
        max_took = max_took.max(x.took);
        if x.took > bound {
            over_bound += 1;
        }
        let phase = if x.sent + x.took < tl.fault {
            Phase::Before
        } else if x.sent < tl.fault_done {
            Phase::Into
        } else if x.sent + x.took < tl.recover {
            Phase::During
        } else if x.sent < tl.recovered + s.resume_within {
            Phase::Out
        } else {
            Phase::After
        };
        let verdict = match phase {
            Phase::Before | Phase::After => match c {
                Class::Normal => Verdict::Ok,
                Class::Degraded => Verdict::Spurious,
                _ => Verdict::Bad,
            },
            Phase::During if fault.is_redis() => match c {
                Class::Normal => Verdict::Ok,
                // reloaded transparently: scripts flushed are not a store failure
                Class::Degraded if fault == Fault::RedisScriptFlush => Verdict::Spurious,
                Class::Degraded => {
                    degraded_during += 1;
                    Verdict::Ok
                }
                _ => Verdict::Bad,
            },
            Phase::During => match (fault.upstream_status(), c) {
                (Some(_), Class::Normal) if hog && x.status == Some(429) => Verdict::Ok,
                (Some(want), Class::Upstream(got)) if got == want && x.ratelimit => {
                    expected_upstream += 1;
                    Verdict::Ok
                }
                (Some(want), Class::Upstream(got)) if got == want => Verdict::Spurious,
                (None, Class::Normal) => Verdict::Ok,
                (_, Class::Degraded) => Verdict::Spurious,
                _ => Verdict::Bad,
            },
            Phase::Into | Phase::Out => match c {
                Class::Normal | Class::Degraded => Verdict::Ok,
                Class::Upstream(_) if fault.upstream_status().is_some() => Verdict::Ok,
                _ => Verdict::Bad,
            },
        };
        match verdict {
            Verdict::Ok => {}
            Verdict::Spurious => spurious += 1,
            Verdict::Bad => {
                *bad_policy
                    .entry(format!(
                        "{phase:?} {c:?}{}",
                        if x.ratelimit { "+rl" } else { "" }
                    ))
                    .or_insert(0u64) += 1;
                if first_bad.is_none() {
                    first_bad = Some(format!(
                        "{c:?} (status {:?}, key {}, sent {} ms after the fault{})",
                        x.status,
                        x.key,
                        x.sent.saturating_duration_since(tl.fault).as_millis(),
                        x.error
                            .as_deref()
                            .map_or(String::new(), |e| format!(", {e}"))
                    ));
                }
            }
        }
        if !hog && x.sent >= tl.recovered && c == Class::Normal {
            let at = (x.sent + x.took).saturating_duration_since(tl.recovered);
            recovery = Some(recovery.map_or(at, |r: Duration| r.min(at)));
        }
    }
    // lost and duplicated
    let no_answer = mine.iter().filter(|x| x.status.is_none()).count() as u64;
    let unseen_2xx = mine
        .iter()
        .filter(|x| x.status == Some(200) && !seen.contains_key(&x.id))
        .count() as u64;
    let denied_forwarded = mine
        .iter()
        .filter(|x| matches!(x.status, Some(429 | 503)) && seen.contains_key(&x.id))
        .count() as u64;
    let my_probes: Vec<&Sample> = probes.iter().filter(|p| p.target == t).collect();
    let twice: u64 = mine
        .iter()
        .chain(&my_probes)
        .filter_map(|x| seen.get(&x.id))
        .map(|n| u64::from(n.saturating_sub(1)))
        .sum();
    let sent = mine.len() as u64 + my_probes.len() as u64 + rude;
    let counted = metric_sum(metrics, "floodgate_requests_total", "");
    let (lost_count, dup_count) = (sent.saturating_sub(counted), counted.saturating_sub(sent));
    // only an upstream fault may be counted as one
    let upstream_errors = metric_sum(metrics, "floodgate_upstream_errors_total", "");
    // admitted versus charged, per `w` key
    let (mut admitted_total, mut charged_total, mut uncharged) = (0u64, 0u64, 0u64);
    let mut charge_note = String::new();
    if charged_measurable {
        for p in my_probes
            .iter()
            .filter(|p| p.ratelimit || !my_probes.iter().any(|q| q.key == p.key && q.ratelimit))
        {
            let Some(r) = p.remaining.filter(|_| p.status == Some(200)) else {
                charge_note = format!(", probe on {} got {:?}", p.key, p.status);
                uncharged += 1;
                continue;
            };
            let charged = LIMIT - r - 1;
            // after a restart only what the new Redis admitted is in it
            let since = fault.redis_state_lost().then_some(tl.fault_done);
            let admitted = mine
                .iter()
                .filter(|x| {
                    x.key == p.key
                        && x.ratelimit
                        && x.status != Some(429)
                        && since.is_none_or(|s| x.sent >= s)
                })
                .count() as u64;
            admitted_total += admitted;
            charged_total += charged;
            uncharged += admitted.saturating_sub(charged);
        }
    }
    let lost = no_answer + unseen_2xx + lost_count + uncharged;
    let duplicated = twice + denied_forwarded + dup_count;
    an.lost += lost;
    an.duplicated += duplicated;
    // verdicts
    let mut fails = Vec::new();
    if !bad_policy.is_empty() {
        fails.push(format!(
            "responses off policy {bad_policy:?}, first {}",
            first_bad.unwrap_or_default()
        ));
    }
    // a store call slower than the timeout on a loaded machine degrades a few answers
    // (and opens the breaker): tolerated outside the fault, up to 5% of the requests
    let spurious_budget = (mine.len() as u64 / 20).max(5);
    if spurious > spurious_budget {
        fails.push(format!(
            "{spurious} degraded answers while the store was not down (budget {spurious_budget})"
        ));
    }
    if over_bound > 0 {
        fails.push(format!(
            "{over_bound} requests over {} ms (max {} ms)",
            bound.as_millis(),
            max_took.as_millis()
        ));
    }
    if fault.upstream_status().is_none() && upstream_errors > 0 {
        fails.push(format!(
            "{upstream_errors} upstream errors counted without an upstream fault"
        ));
    }
    if fault.must_degrade() && degraded_during == 0 {
        fails.push("no degraded answer during the fault".into());
    }
    if let Some(want) = fault.upstream_status()
        && expected_upstream == 0
    {
        fails.push(format!("no {want} during the fault"));
    }
    match recovery {
        Some(r) if r <= s.resume_within => {}
        Some(r) => fails.push(format!(
            "normal decisions resumed after {} ms",
            r.as_millis()
        )),
        None => fails.push("normal decisions never resumed".into()),
    }
    if lost > 0 || duplicated > 0 {
        fails.push(format!(
            "lost {lost} (no answer {no_answer}, 2xx unseen by the backend {unseen_2xx}, uncounted {lost_count}, admitted uncharged {uncharged}{charge_note}), duplicated {duplicated} (backend saw twice {twice}, denied but forwarded {denied_forwarded}, over-counted {dup_count})"
        ));
    }
    for f in fails {
        an.fail.push(format!("{name}: {f}"));
    }
    let degraded_word = if deny { "503" } else { "200 open" };
    an.detail.push(format!(
        "{name}: {} req, {degraded_during} {degraded_word} in fault{}, {spurious} degraded outside, resumed {} ms, max {} ms (bound {}), charged {charged_total}/admitted {admitted_total}",
        mine.len(),
        fault
            .upstream_status()
            .map_or(String::new(), |w| format!(", {expected_upstream} {w}")),
        recovery.map_or("never".into(), |r| r.as_millis().to_string()),
        max_took.as_millis(),
        bound.as_millis(),
    ));
}

#[cfg(test)]
mod tests {
    //! The checker itself: a clean synthetic run passes, and each kind of violation is
    //! caught.
    use super::*;

    struct Fixture {
        s: Settings,
        tl: Timeline,
        t0: Instant,
        samples: Vec<Sample>,
        probes: Vec<Sample>,
        seen: HashMap<u64, u32>,
        extra_counted: i64,
    }

    fn sample(t0: Instant, id: u64, sent_ms: u64, took_ms: u64, status: u16, rl: bool) -> Sample {
        Sample {
            target: 1,
            key: "w0".into(),
            id,
            sent: t0 + Duration::from_millis(sent_ms),
            took: Duration::from_millis(took_ms),
            status: Some(status),
            ratelimit: rl,
            remaining: None,
            delayed: false,
            error: None,
        }
    }

    /// The deny proxy (target 1) through a Redis pause from 1 s to 2 s: 503 during it.
    fn fixture() -> Fixture {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let tl = Timeline {
            fault: t0 + ms(1000),
            fault_done: t0 + ms(1001),
            recover: t0 + ms(2000),
            recovered: t0 + ms(2001),
        };
        let mut samples = Vec::new();
        for i in 0..400u64 {
            let sent = i * 10;
            let degraded = (1001..1990).contains(&sent);
            let (status, rl) = if degraded { (503, false) } else { (200, true) };
            samples.push(sample(t0, i + 1, sent, 5, status, rl));
        }
        let admitted = samples.iter().filter(|x| x.ratelimit).count() as u64;
        let mut probe = sample(t0, 10_000, 4100, 5, 200, true);
        probe.remaining = Some(LIMIT - admitted - 1);
        let seen = samples
            .iter()
            .chain([&probe])
            .filter(|x| x.status == Some(200))
            .map(|x| (x.id, 1))
            .collect();
        Fixture {
            s: Settings::fast(PathBuf::from("/nonexistent")),
            tl,
            t0,
            samples,
            probes: vec![probe],
            seen,
            extra_counted: 0,
        }
    }

    fn check(f: &Fixture, fault: Fault) -> Analysis {
        let counted = (f.samples.len() as i64 + f.probes.len() as i64 + f.extra_counted) as u64;
        let metrics = format!(
            "floodgate_requests_total{{outcome=\"passed\"}} {counted}\nfloodgate_upstream_errors_total{{kind=\"connect\"}} 0\n"
        );
        let mut an = Analysis::default();
        analyse(
            &mut an, fault, &f.s, 1, &f.samples, &f.probes, &f.tl, &f.seen, &metrics, 0, true,
        );
        an
    }

    #[test]
    fn a_clean_run_passes() {
        let an = check(&fixture(), Fault::RedisPaused);
        assert!(an.fail.is_empty(), "{:?}", an.fail);
        assert_eq!((an.lost, an.duplicated), (0, 0));
        assert!(an.detail[0].contains("resumed"), "{:?}", an.detail);
    }

    #[test]
    fn fail_open_on_a_fail_closed_proxy_is_off_policy() {
        let mut f = fixture();
        f.samples[150].status = Some(200); // during the fault, without RateLimit
        let id = f.samples[150].id;
        f.seen.insert(id, 1);
        let an = check(&f, Fault::RedisPaused);
        assert!(
            an.fail.iter().any(|m| m.contains("off policy")),
            "{:?}",
            an.fail
        );
    }

    #[test]
    fn a_request_past_the_bound_is_a_hang() {
        let mut f = fixture();
        f.samples[50].took = Duration::from_secs(2);
        let an = check(&f, Fault::RedisPaused);
        assert!(
            an.fail.iter().any(|m| m.contains("requests over")),
            "{:?}",
            an.fail
        );
    }

    #[test]
    fn no_normal_decision_after_recovery_fails() {
        let mut f = fixture();
        for x in f.samples.iter_mut().filter(|x| x.sent >= f.tl.recover) {
            x.status = Some(503);
            x.ratelimit = false;
        }
        let an = check(&f, Fault::RedisPaused);
        assert!(
            an.fail.iter().any(|m| m.contains("never resumed")),
            "{:?}",
            an.fail
        );
        // and a late resume is caught too
        let mut f = fixture();
        for x in f
            .samples
            .iter_mut()
            .filter(|x| x.sent >= f.tl.recover && x.sent < f.t0 + Duration::from_millis(3300))
        {
            x.status = Some(503);
            x.ratelimit = false;
        }
        let an = check(&f, Fault::RedisPaused);
        assert!(
            an.fail.iter().any(|m| m.contains("resumed after")),
            "{:?}",
            an.fail
        );
    }

    #[test]
    fn lost_and_duplicated_decisions_are_counted() {
        let mut f = fixture();
        let (a, b) = (f.samples[10].id, f.samples[20].id);
        f.seen.remove(&a); // admitted, never reached the backend
        f.seen.insert(b, 2); // reached it twice
        let an = check(&f, Fault::RedisPaused);
        assert_eq!((an.lost, an.duplicated), (1, 1), "{:?}", an.fail);
        let mut f = fixture();
        f.extra_counted = -1; // the proxy counted one request fewer than were sent
        assert_eq!(check(&f, Fault::RedisPaused).lost, 1);
        let mut f = fixture();
        f.extra_counted = 2;
        assert_eq!(check(&f, Fault::RedisPaused).duplicated, 2);
        let mut f = fixture();
        let r = f.probes[0].remaining.unwrap();
        f.probes[0].remaining = Some(r + 3); // Redis charged 3 fewer than were admitted
        assert_eq!(check(&f, Fault::RedisPaused).lost, 3);
    }

    #[test]
    fn a_redis_outage_without_degraded_answers_fails() {
        let mut f = fixture();
        for x in &mut f.samples {
            x.status = Some(200);
            x.ratelimit = true;
            f.seen.insert(x.id, 1);
        }
        let admitted = f.samples.len() as u64;
        f.probes[0].remaining = Some(LIMIT - admitted - 1);
        let an = check(&f, Fault::RedisPaused);
        assert!(
            an.fail.iter().any(|m| m.contains("no degraded")),
            "{:?}",
            an.fail
        );
        // while flushed scripts must not degrade at all
        assert!(check(&f, Fault::RedisScriptFlush).fail.is_empty());
        assert!(
            check(&fixture(), Fault::RedisScriptFlush)
                .fail
                .iter()
                .any(|m| m.contains("store was not down")),
        );
    }
}
