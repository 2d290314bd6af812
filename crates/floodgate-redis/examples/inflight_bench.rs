//! In-flight leases on Redis: acquire + release pairs per second at 16 callers (one
//! round trip each), against the GCRA script's decisions per second (one round trip) in
//! the same run on the same server: an own `redis-server` on a free loopback port.
//!
//!   cargo run --release -p floodgate-redis --example inflight_bench -- --seconds 3
//!
//! Rows: `gcra` (16 callers, 1000 keys), `acquire+release` (16 callers, each on a key of
//! its own, N = 4, so every acquire is admitted) and `acquire+release, one key` (16
//! callers on one key with N = 16). Round trips are Redis's own count (`INFO
//! commandstats`, EVALSHA calls per operation).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_core::algorithms::Gcra;
use floodgate_core::inflight::LeaseTtl;
use floodgate_core::{AnyAlgorithm, Rate};
use floodgate_redis::{RedisInFlight, RedisLimiter, RedisStore, StoreConfig};

struct OwnServer(Child);

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn evalsha_calls(port: u16) -> u64 {
    cli(port, &["INFO", "commandstats"])
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `callers` loops of `op` for `secs`: operations, seconds, p50 and p99 in µs.
async fn run<F, Fut>(callers: usize, secs: f64, op: F) -> (u64, f64, f64, f64)
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
                let (mut lat, mut i) = (Vec::new(), 0u64);
                while Instant::now() < stop {
                    let t0 = Instant::now();
                    op(c, i).await;
                    lat.push(t0.elapsed().as_nanos() as u64);
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
    let el = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0;
    (all.len() as u64, el, pct(0.5), pct(0.99))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(3.0), |s| s.parse())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let _server = OwnServer(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()?,
    );
    while cli(port, &["ping"]).trim() != "PONG" {
        std::thread::sleep(Duration::from_millis(20));
    }
    let config = StoreConfig {
        timeout: Duration::from_secs(2),
        deny_cache_keys: 0,
        ..StoreConfig::default()
    };
    let store = Arc::new(RedisStore::connect(&format!("redis://127.0.0.1:{port}"), config).await?);
    let ttl = LeaseTtl::new(Duration::from_secs(30))?;
    let gcra = Arc::new(RedisLimiter::new(
        store.clone(),
        AnyAlgorithm::Gcra(Gcra::new(Rate::per_second(1_000_000)?, 1_000)?),
    )?);
    let per_key = Arc::new(RedisInFlight::new(store.clone(), 4)?);
    let one_key = Arc::new(RedisInFlight::new(store.clone(), 16)?);
    println!(
        "| workload (16 callers) | operations/s | vs gcra | p50 µs | p99 µs | round trips / operation |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut base = 0.0;
    for name in ["gcra", "acquire+release", "acquire+release, one key"] {
        let before = evalsha_calls(port);
        let (n, el, p50, p99) = match name {
            "gcra" => {
                let l = gcra.clone();
                run(16, secs, move |c, i| {
                    let l = l.clone();
                    async move {
                        let key = format!("k{}", (c as u64 * 7919 + i) % 1000);
                        l.try_check(key.as_bytes(), 1).await.expect("gcra");
                    }
                })
                .await
            }
            _ => {
                let t = if name.ends_with("one key") {
                    one_key.clone()
                } else {
                    per_key.clone()
                };
                let shared = name.ends_with("one key");
                run(16, secs, move |c, _| {
                    let t = t.clone();
                    async move {
                        let key = if shared {
                            "gpu".to_string()
                        } else {
                            format!("gpu{c}")
                        };
                        let lease = t.acquire(key.as_bytes(), ttl).await.expect("acquire");
                        let lease = lease.expect("a place is free: N >= callers on the key");
                        assert!(t.release(key.as_bytes(), lease.id).await.expect("release"));
                    }
                })
                .await
            }
        };
        let rate = n as f64 / el;
        if name == "gcra" {
            base = rate;
        }
        let rt = (evalsha_calls(port) - before) as f64 / n.max(1) as f64;
        println!(
            "| {name} | {rate:.0} | {:.2}x | {p50:.0} | {p99:.0} | {rt:.2} |",
            rate / base
        );
    }
    println!("(an acquire+release operation is two round trips; gcra is one)");
    Ok(())
}
