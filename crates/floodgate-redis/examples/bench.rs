//! Decisions per second and latency of every script against the seed's INCR+EXPIRE
//! baseline, on one Redis in one run; round trips per decision counted from
//! `INFO commandstats`; the deny cache under a flood; and redis-benchmark's view of the
//! baseline and GCRA scripts.
//!
//! ```text
//! cargo run --release -p floodgate-redis --example bench            # own redis-server
//! cargo run --release -p floodgate-redis --example bench -- --url redis://127.0.0.1:6379 --seconds 3
//! ```
//! Without `--url` it starts its own `redis-server` on a free loopback port (so the
//! command counts are not disturbed by anyone else) and stops it at the end.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::algorithms::*;
use floodgate_core::{AnyAlgorithm, Rate};
use floodgate_redis::scripts::{GCRA, SEED_INCR_EXPIRE};
use floodgate_redis::{RedisLimiter, RedisStore, StoreConfig};

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

/// `INFO commandstats` for EVALSHA: calls and microseconds spent executing them (the
/// whole script, its inner `redis.call`s included), counted by the server itself.
fn evalsha_stats(port: u16) -> (u64, u64) {
    let line = cli(port, &["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:").map(str::to_string))
        .unwrap_or_default();
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("usec="))
}

/// Round trips per decision and server µs per EVALSHA between two `evalsha_stats`.
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
    /// Server time per EVALSHA, µs (0 when no call reached Redis).
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: f64 = arg("--seconds")
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2.0);
    let (url, port, _server) = match arg("--url") {
        Some(u) => {
            let port = u
                .rsplit(':')
                .next()
                .and_then(|p| p.trim_end_matches('/').parse().ok())
                .unwrap_or(6379);
            (u, port, None)
        }
        None => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .stdout(Stdio::null())
                .spawn()?;
            let server = OwnServer(child);
            while cli(port, &["ping"]).trim() != "PONG" {
                std::thread::sleep(Duration::from_millis(20));
            }
            (format!("redis://127.0.0.1:{port}"), port, Some(server))
        }
    };
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
        let s = store.clone();
        let p = prefix.clone();
        let _: i64 = SEED_INCR_EXPIRE
            .key(format!("{p}warm"))
            .arg(60)
            .invoke_async(&mut raw(&url).await)
            .await?;
        let before = evalsha_stats(port);
        let (n, el, lat) = run(callers, secs, move |c, i| {
            let s = s.clone();
            let key = format!("{p}seed:{}", (c as u64 * 7919 + i) % 1000);
            async move {
                let mut inv = SEED_INCR_EXPIRE.prepare_invoke();
                inv.key(key).arg(60);
                let _ = s.eval(&inv).await;
            }
        })
        .await;
        let (rt, server_us) = per_decision(before, evalsha_stats(port), n);
        rows.push(Row {
            name: "seed INCR+EXPIRE (baseline)".into(),
            callers,
            decisions: n,
            secs: el,
            p50_us: pct(&lat, 0.5),
            p99_us: pct(&lat, 0.99),
            round_trips: rt,
            server_us,
        });
        for (name, alg) in &algs {
            let l = Arc::new(RedisLimiter::new(store.clone(), alg.clone())?);
            l.try_check(b"warm", 1).await?; // script load
            let before = evalsha_stats(port);
            let lc = l.clone();
            let (n, el, lat) = run(callers, secs, move |c, i| {
                let l = lc.clone();
                let key = format!("u{}", (c as u64 * 7919 + i) % 1000);
                async move {
                    l.try_check(key.as_bytes(), 1).await.expect("bench call");
                }
            })
            .await;
            let (rt, server_us) = per_decision(before, evalsha_stats(port), n);
            rows.push(Row {
                name: name.to_string(),
                callers,
                decisions: n,
                secs: el,
                p50_us: pct(&lat, 0.5),
                p99_us: pct(&lat, 0.99),
                round_trips: rt,
                server_us,
            });
        }
    }
    // the deny cache: 16 callers flooding one key that is over its limit
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
        let before = evalsha_stats(port);
        let lc = l.clone();
        let (n, el, lat) = run(16, secs, move |_, _| {
            let l = lc.clone();
            async move {
                l.check(b"flooded", 1).await.expect("bench call");
            }
        })
        .await;
        let (rt, server_us) = per_decision(before, evalsha_stats(port), n);
        rows.push(Row {
            name: label.into(),
            callers: 16,
            decisions: n,
            secs: el,
            p50_us: pct(&lat, 0.5),
            p99_us: pct(&lat, 0.99),
            round_trips: rt,
            server_us,
        });
        eprintln!("{label}: {:?}", s.stats());
    }
    let seed16 = rows
        .iter()
        .find(|r| r.callers == 16)
        .map(|r| r.decisions as f64 / r.secs)
        .unwrap();
    println!(
        "| workload | callers | decisions/s | vs seed (16) | p50 µs | p99 µs | round trips / decision | server µs / call |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let rate = r.decisions as f64 / r.secs;
        let ratio = if r.callers == 16 {
            format!("{:.2}x", rate / seed16)
        } else {
            "".into()
        };
        println!(
            "| {} | {} | {:.0} | {} | {:.0} | {:.0} | {:.3} | {:.2} |",
            r.name, r.callers, rate, ratio, r.p50_us, r.p99_us, r.round_trips, r.server_us
        );
    }
    // redis-benchmark on the same server: the seed script and the GCRA script
    let seed_sha = SEED_INCR_EXPIRE.get_hash().to_string();
    let gcra_sha = GCRA.get_hash().to_string();
    let seed_args: Vec<String> = ["evalsha", &seed_sha, "1", "key", "60"]
        .map(String::from)
        .to_vec();
    // GCRA: Redis TIME, cost 1, no padding, 1 per µs, burst 1000 (nearly all admitted)
    let gcra_args: Vec<String> = [
        "evalsha", &gcra_sha, "1", "gkey", "redis", "0", "1", "0", "1000", "1000000", "1000",
    ]
    .map(String::from)
    .to_vec();
    let seed_rb = redis_benchmark(port, &seed_args);
    let gcra_rb = redis_benchmark(port, &gcra_args);
    let incr_rb = redis_benchmark(port, &["incr".to_string(), "ikey".to_string()]);
    println!();
    println!("redis-benchmark -p {port} -c 16 -n 200000 -q <command>:");
    println!("  incr ikey: {incr_rb:?} requests/s");
    println!("  {}: {seed_rb:?} requests/s", seed_args.join(" "));
    println!("  {}: {gcra_rb:?} requests/s", gcra_args.join(" "));
    if let (Some(s), Some(g)) = (seed_rb, gcra_rb) {
        println!("  GCRA script / seed script = {:.2}", g / s);
    }
    // leave nothing behind
    for k in cli(port, &["--scan", "--pattern", &format!("{prefix}*")]).lines() {
        cli(port, &["del", k]);
    }
    let _ = cli(port, &["del", "key", "gkey", "ikey"]);
    Ok(())
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
