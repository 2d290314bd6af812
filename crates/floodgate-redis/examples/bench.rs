//! Decisions per second and latency of every script against the seed's INCR+EXPIRE
//! baseline, on one Redis in one run; round trips per decision counted from
//! `INFO commandstats`; the deny cache under a flood; and redis-benchmark's view of the
//! baseline and GCRA scripts. With `--cell-module PATH` (redis-cell's
//! `libredis_cell.so`, built by `scripts/bench-redis.sh`) the bench's own redis-server
//! loads the native module and every table gains native `CL.THROTTLE` rows, measured
//! in the same run on the same server, and ratios against them.
//!
//! ```text
//! cargo run --release -p floodgate-redis --example bench            # own redis-server
//! cargo run --release -p floodgate-redis --example bench -- --url redis://127.0.0.1:6379 --seconds 3
//! scripts/bench-redis.sh --seconds 3                                # with native redis-cell
//! ```
//! Without `--url` it starts its own `redis-server` on a free loopback port (so the
//! command counts are not disturbed by anyone else) and stops it at the end.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::algorithms::*;
use floodgate_core::{AnyAlgorithm, Rate};
use floodgate_redis::multi::{self, Check};
use floodgate_redis::scripts::{GCRA, SEED_INCR_EXPIRE};
use floodgate_redis::{RedisLimiter, RedisStore, StoreConfig};

/// Per user and global, all-or-nothing.
async fn two_policies(
    user: &RedisLimiter,
    global: &RedisLimiter,
    key: &[u8],
) -> Result<multi::MultiOutcome, floodgate_redis::Error> {
    multi::check_all(&[
        Check {
            limiter: user,
            user: key,
            cost: 1,
        },
        Check {
            limiter: global,
            user: b"all",
            cost: 1,
        },
    ])
    .await
}

struct OwnServer(Child);

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `INFO commandstats` for one command (lower case: `evalsha`, `cl.throttle`): calls
/// and microseconds spent executing them (for EVALSHA the whole script, its inner
/// `redis.call`s included), counted by the server itself.
fn command_stats(port: u16, command: &str) -> (u64, u64) {
    let prefix = format!("cmdstat_{command}:");
    let line = cli(port, &["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string))
        .unwrap_or_default();
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("usec="))
}

/// Round trips per decision and server µs per call between two `command_stats`.
fn per_decision(before: (u64, u64), after: (u64, u64), decisions: u64) -> (f64, f64) {
    let calls = after.0 - before.0;
    let usec = after.1 - before.1;
    let server = if calls == 0 {
        0.0
    } else {
        usec as f64 / calls as f64
    };
    (calls as f64 / decisions.max(1) as f64, server)
}

struct Row {
    name: String,
    callers: usize,
    decisions: u64,
    secs: f64,
    p50_us: f64,
    p99_us: f64,
    round_trips: f64,
    /// Server time per call (EVALSHA or CL.THROTTLE), µs (0 when no call reached Redis).
    server_us: f64,
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
}

/// Run `callers` loops of `op` for `secs`; latencies in ns.
async fn run<F, Fut>(callers: usize, secs: f64, op: F) -> (u64, f64, Vec<u32>)
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(200_000);
                let mut i = 0u64;
                while Instant::now() < stop {
                    let t0 = Instant::now();
                    op(c, i).await;
                    lat.push(t0.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                    i += 1;
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    (all.len() as u64, elapsed, all)
}

/// redis-benchmark with 16 connections: requests/s as it reports them.
fn redis_benchmark(port: u16, args: &[String]) -> Option<f64> {
    let out = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-c", "16", "-n", "200000", "-q"])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let tail = text.rsplit('\r').next().unwrap_or(&text).to_string();
    let rps = tail
        .split("requests per second")
        .next()?
        .rsplit(':')
        .next()?
        .trim();
    rps.parse().ok()
}

/// Start an own redis-server on a free loopback port, loading `module` if given; waits
/// (at most 5 s) until it answers.
fn own_server(module: Option<&str>) -> Result<(u16, OwnServer), Box<dyn std::error::Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]);
    if let Some(m) = module {
        cmd.args(["--loadmodule", m]);
    }
    let mut server = OwnServer(cmd.stdout(Stdio::null()).spawn()?);
    for _ in 0..250 {
        if cli(port, &["ping"]).trim() == "PONG" {
            return Ok((port, server));
        }
        if let Some(status) = server.0.try_wait()? {
            return Err(format!("redis-server exited ({status}); module {module:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("redis-server did not answer PING within 5 s".into())
}

/// One client-bench row: `callers` loops of `op` for `secs`, with the calls and server
/// time of `command` (as `INFO commandstats` names it) over the run.
async fn measure<F, Fut>(
    name: &str,
    port: u16,
    command: &str,
    callers: usize,
    secs: f64,
    op: F,
) -> Row
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let before = command_stats(port, command);
    let (n, el, lat) = run(callers, secs, op).await;
    let (rt, server_us) = per_decision(before, command_stats(port, command), n);
    Row {
        name: name.to_string(),
        callers,
        decisions: n,
        secs: el,
        p50_us: pct(&lat, 0.5),
        p99_us: pct(&lat, 0.99),
        round_trips: rt,
        server_us,
    }
}

/// Native redis-cell: `CL.THROTTLE key max_burst count period 1` on the store's
/// connection (the same multiplexed connection and timeout wrapper the scripts use).
async fn cell_throttle(store: &RedisStore, key: String, cell: [u64; 3]) {
    let mut cmd = redis::cmd("CL.THROTTLE");
    cmd.arg(key).arg(cell[0]).arg(cell[1]).arg(cell[2]).arg(1);
    let reply: Vec<i64> = store.command(&cmd).await.expect("CL.THROTTLE");
    assert_eq!(reply.len(), 5, "CL.THROTTLE reply {reply:?}");
}

const NATIVE: &str = "native redis-cell CL.THROTTLE";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: f64 = arg("--seconds")
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2.0);
    let module = arg("--cell-module");
    let (url, port, _server) = match arg("--url") {
        Some(_) if module.is_some() => {
            return Err(
                "--cell-module loads redis-cell into the bench's own redis-server; leave out --url"
                    .into(),
            );
        }
        Some(u) => {
            let port = u
                .rsplit(':')
                .next()
                .and_then(|p| p.trim_end_matches('/').parse().ok())
                .unwrap_or(6379);
            (u, port, None)
        }
        None => {
            let (port, server) = own_server(module.as_deref())?;
            (format!("redis://127.0.0.1:{port}"), port, Some(server))
        }
    };
    let native = module.is_some();
    if native {
        let probe = cli(port, &["CL.THROTTLE", "fgbench:probe", "0", "1", "1", "0"]);
        if probe.lines().count() != 5 {
            return Err(format!("the module does not answer CL.THROTTLE: {probe:?}").into());
        }
        cli(port, &["del", "fgbench:probe"]);
    }
    let prefix = format!("fgbench:{}:", std::process::id());
    let store = Arc::new(
        RedisStore::connect(
            &url,
            StoreConfig {
                prefix: prefix.clone(),
                timeout: Duration::from_secs(2),
                deny_cache_keys: 0,
                ..StoreConfig::default()
            },
        )
        .await?,
    );
    let big = Rate::per_second(1_000_000_000 / 1000)?; // generous: nearly all admitted
    // the same GCRA as redis-cell arguments: max_burst 999 (capacity 1000), 10^6 per 1 s
    let big_cell = [999, 1_000_000, 1];
    let w = Duration::from_secs(60);
    let algs: Vec<(&str, AnyAlgorithm)> = vec![
        (
            "fixed-window",
            AnyAlgorithm::FixedWindow(FixedWindow::new(1_000_000, w)?),
        ),
        (
            "sliding-log",
            AnyAlgorithm::SlidingLog(SlidingLog::new(1_000, Duration::from_millis(10))?),
        ),
        (
            "sliding-counter",
            AnyAlgorithm::SlidingCounter(SlidingCounter::new(1_000_000, w)?),
        ),
        (
            "token-bucket",
            AnyAlgorithm::TokenBucket(TokenBucket::new(1_000, big)?),
        ),
        (
            "leaky-meter",
            AnyAlgorithm::Leaky(LeakyBucket::meter(1_000, big)?),
        ),
        (
            "leaky-queue",
            AnyAlgorithm::Leaky(LeakyBucket::queue(big, 999, DelayMode::After(10))?),
        ),
        ("gcra", AnyAlgorithm::Gcra(Gcra::new(big, 1_000)?)),
    ];
    let mut rows = Vec::new();
    for callers in [1usize, 16] {
        // the seed's baseline: INCR + EXPIRE via EVALSHA
        let _: i64 = SEED_INCR_EXPIRE
            .key(format!("{prefix}warm"))
            .arg(60)
            .invoke_async(&mut raw(&url).await)
            .await?;
        let (s, p) = (store.clone(), prefix.clone());
        rows.push(
            measure(
                "seed INCR+EXPIRE (baseline)",
                port,
                "evalsha",
                callers,
                secs,
                move |c, i| {
                    let s = s.clone();
                    let key = format!("{p}seed:{}", (c as u64 * 7919 + i) % 1000);
                    async move {
                        let mut inv = SEED_INCR_EXPIRE.prepare_invoke();
                        inv.key(key).arg(60);
                        let _ = s.eval(&inv).await;
                    }
                },
            )
            .await,
        );
        if native {
            let (s, p) = (store.clone(), prefix.clone());
            rows.push(
                measure(NATIVE, port, "cl.throttle", callers, secs, move |c, i| {
                    let s = s.clone();
                    let key = format!("{p}cell:{}", (c as u64 * 7919 + i) % 1000);
                    async move { cell_throttle(&s, key, big_cell).await }
                })
                .await,
            );
        }
        for (name, alg) in &algs {
            let l = Arc::new(RedisLimiter::new(store.clone(), alg.clone())?);
            l.try_check(b"warm", 1).await?; // script load
            rows.push(
                measure(name, port, "evalsha", callers, secs, move |c, i| {
                    let l = l.clone();
                    let key = format!("u{}", (c as u64 * 7919 + i) % 1000);
                    async move {
                        l.try_check(key.as_bytes(), 1).await.expect("bench call");
                    }
                })
                .await,
            );
        }
    }
    // two policies on every request, all-or-nothing (multi::check_all): per user and
    // global, both GCRA; one EVALSHA per decision
    for callers in [1usize, 16] {
        let user = Arc::new(RedisLimiter::new(
            store.clone(),
            AnyAlgorithm::Gcra(Gcra::new(big, 1_000)?),
        )?);
        let global = Arc::new(RedisLimiter::new(
            store.clone(),
            AnyAlgorithm::Gcra(Gcra::new(Rate::per_second(1_000_000_000)?, 1_000_000)?),
        )?);
        two_policies(&user, &global, b"warm").await?; // script load
        rows.push(
            measure(
                "2 policies, all-or-nothing (gcra + gcra)",
                port,
                "evalsha",
                callers,
                secs,
                move |c, i| {
                    let (user, global) = (user.clone(), global.clone());
                    let key = format!("u{}", (c as u64 * 7919 + i) % 1000);
                    async move {
                        let out = two_policies(&user, &global, key.as_bytes())
                            .await
                            .expect("bench call");
                        assert_eq!(out.source, floodgate_redis::Source::Redis);
                    }
                },
            )
            .await,
        );
    }
    // the deny cache: 16 callers flooding one key that is over its limit (1/min, burst 10)
    for (label, cache) in [
        ("gcra flood, deny cache off", 0usize),
        ("gcra flood, deny cache on", 100_000),
    ] {
        let s = Arc::new(
            RedisStore::connect(
                &url,
                StoreConfig {
                    prefix: format!("{prefix}{cache}:"),
                    timeout: Duration::from_secs(2),
                    deny_cache_keys: cache,
                    ..StoreConfig::default()
                },
            )
            .await?,
        );
        let l = Arc::new(RedisLimiter::new(
            s.clone(),
            AnyAlgorithm::Gcra(Gcra::new(Rate::per_minute(1)?, 10)?),
        )?);
        l.check(b"flooded", 1).await?;
        rows.push(
            measure(label, port, "evalsha", 16, secs, move |_, _| {
                let l = l.clone();
                async move {
                    l.check(b"flooded", 1).await.expect("bench call");
                }
            })
            .await,
        );
        eprintln!("{label}: {:?}", s.stats());
    }
    if native {
        let (s, key) = (store.clone(), format!("{prefix}cell:flooded"));
        rows.push(
            measure(
                "native CL.THROTTLE flood",
                port,
                "cl.throttle",
                16,
                secs,
                move |_, _| {
                    let s = s.clone();
                    let key = key.clone();
                    async move { cell_throttle(&s, key, [9, 1, 60]).await }
                },
            )
            .await,
        );
    }
    let rate = |name: &str, callers: usize| {
        rows.iter()
            .find(|r| r.name.starts_with(name) && r.callers == callers)
            .map(|r| r.decisions as f64 / r.secs)
    };
    let ratio =
        |x: f64, base: Option<f64>| base.map_or(String::new(), |b| format!("{:.2}x", x / b));
    println!(
        "| workload | callers | decisions/s | vs seed | vs native | p50 µs | p99 µs | round trips / decision | server µs / call |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let x = r.decisions as f64 / r.secs;
        println!(
            "| {} | {} | {:.0} | {} | {} | {:.0} | {:.0} | {:.3} | {:.2} |",
            r.name,
            r.callers,
            x,
            ratio(x, rate("seed", r.callers)),
            ratio(x, rate(NATIVE, r.callers)),
            r.p50_us,
            r.p99_us,
            r.round_trips,
            r.server_us
        );
    }
    println!("(ratios against the seed and native rows with the same number of callers)");
    // redis-benchmark on the same server: seed script, GCRA script, native CL.THROTTLE
    let seed_sha = SEED_INCR_EXPIRE.get_hash().to_string();
    let gcra_sha = GCRA.get_hash().to_string();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let mut cmds: Vec<(&str, &str, Vec<String>)> = vec![
        ("INCR", "incr", words(&["incr", "ikey"])),
        (
            "seed script",
            "evalsha",
            words(&["evalsha", &seed_sha, "1", "key", "60"]),
        ),
        // GCRA: Redis TIME, cost 1, no padding, 1 per µs, burst 1000 (nearly all admitted)
        (
            "GCRA script",
            "evalsha",
            words(&[
                "evalsha", &gcra_sha, "1", "gkey", "redis", "0", "1", "0", "1000", "1000000",
            ]),
        ),
    ];
    if native {
        cmds.push((
            "native",
            "cl.throttle",
            words(&["CL.THROTTLE", "ckey", "999", "1000000", "1", "1"]),
        ));
    }
    println!();
    println!(
        "redis-benchmark -p {port} -c 16 -n 200000 -q <command>; server µs/call from INFO commandstats:"
    );
    let mut rb = Vec::new();
    for (label, stat, args) in &cmds {
        cli(port, &["CONFIG", "RESETSTAT"]);
        let rps = redis_benchmark(port, args);
        let (calls, usec) = command_stats(port, stat);
        let us = usec as f64 / calls.max(1) as f64;
        println!(
            "  {label:<12} {}: {} requests/s, {us:.2} µs/call",
            args.join(" "),
            rps.map_or("?".into(), |r| format!("{r:.0}"))
        );
        rb.push((*label, rps, us));
    }
    let get = |l: &str| rb.iter().find(|r| r.0 == l).copied();
    if let (Some((_, Some(g), gus)), Some((_, Some(s), sus))) =
        (get("GCRA script"), get("seed script"))
    {
        println!(
            "  GCRA script / seed script: {:.2}x requests/s, {:.2}x server µs/call",
            g / s,
            gus / sus
        );
    }
    if let (Some((_, Some(n), nus)), Some((_, Some(g), gus)), Some((_, Some(s), _))) =
        (get("native"), get("GCRA script"), get("seed script"))
    {
        println!(
            "  GCRA script / native: {:.2}x requests/s (target: at least 0.80x), {:.2}x server µs/call; seed script / native: {:.2}x requests/s",
            g / n,
            gus / nus,
            s / n
        );
    }
    if let Some(c) = rate("gcra flood, deny cache on", 16) {
        for base in [NATIVE, "native CL.THROTTLE flood"] {
            if let Some(n) = rate(base, 16) {
                println!(
                    "gcra flood with the deny cache / {base} (16 callers): {:.2}x decisions/s (target: at least 2x)",
                    c / n
                );
            }
        }
    }
    // leave nothing behind
    for k in cli(port, &["--scan", "--pattern", &format!("{prefix}*")]).lines() {
        cli(port, &["del", k]);
    }
    let _ = cli(port, &["del", "key", "gkey", "ikey", "ckey"]);
    Ok(())
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
