//! Added latency, measured fairly on a noisy machine: one request at a time to several
//! HTTP/1.1 targets **in turn**, so a scheduling hiccup of the machine falls on every
//! target alike, instead of on whichever target a separate run happened to measure.
//!
//! ```text
//! latency_probe ROUNDS INTERVAL_US NAME=HOST:PORT [NAME=HOST:PORT ...]
//! ```
//!
//! Each round sends one `GET /` to every target, in an order shuffled per round, on one
//! kept-alive connection per target, and times it from the first byte written to the last
//! byte of the response read (microseconds). Rounds start every `INTERVAL_US`
//! microseconds (open loop: a slow round does not delay the schedule of the next). The
//! first tenth of the rounds warm up and are not counted. The first target is the
//! baseline (the backend alone): the report gives every target's p50, p90, p99, p99.9
//! and max, and how much each adds to the baseline's at the same percentile.
//!
//! Loopback targets only; used by `scripts/bench-latency.sh`, not part of the tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

struct Target {
    name: String,
    conn: TcpStream,
    buf: Vec<u8>,
    /// latencies of the counted rounds, nanoseconds
    samples: Vec<u64>,
    non_200: u64,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("latency_probe: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        return Err("usage: latency_probe ROUNDS INTERVAL_US NAME=HOST:PORT ...".into());
    }
    let rounds: usize = args[0]
        .parse()
        .map_err(|e| format!("ROUNDS {:?}: {e}", args[0]))?;
    let interval_us: u64 = args[1]
        .parse()
        .map_err(|e| format!("INTERVAL_US {:?}: {e}", args[1]))?;
    let mut targets = Vec::new();
    for a in &args[2..] {
        let (name, addr) = a
            .split_once('=')
            .ok_or_else(|| format!("target {a:?}: expected NAME=HOST:PORT"))?;
        let addr: SocketAddr = addr
            .parse()
            .map_err(|e| format!("target {a:?}: address: {e}"))?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "target {a:?}: only loopback addresses may be probed"
            ));
        }
        let conn = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        conn.set_nodelay(true).map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        targets.push(Target {
            name: name.to_string(),
            conn,
            buf: vec![0; 64 * 1024],
            samples: Vec::with_capacity(rounds),
            non_200: 0,
        });
    }
    let warmup = rounds / 10;
    let interval = Duration::from_micros(interval_us);
    let mut order: Vec<usize> = (0..targets.len()).collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let start = Instant::now();
    for round in 0..warmup + rounds {
        // Fisher-Yates with xorshift: no target is always first or always last
        for i in (1..order.len()).rev() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            order.swap(i, (rng % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            let t = &mut targets[i];
            let t0 = Instant::now();
            let ok = exchange(&mut t.conn, &mut t.buf).map_err(|e| format!("{}: {e}", t.name))?;
            let ns = t0.elapsed().as_nanos() as u64;
            if round >= warmup {
                t.samples.push(ns);
                if !ok {
                    t.non_200 += 1;
                }
            }
        }
        // spin, not sleep, until the next round: a CPU that went idle (on a virtual
        // machine, a halted vCPU) wakes slowly, and that would be measured as latency
        let next = start + interval * (round as u32 + 1);
        while Instant::now() < next {
            std::hint::spin_loop();
        }
    }
    report(&mut targets, rounds, interval_us);
    Ok(())
}

/// One `GET /` and its whole response; `Ok(true)` for a 200.
fn exchange(conn: &mut TcpStream, buf: &mut [u8]) -> Result<bool, String> {
    conn.write_all(b"GET / HTTP/1.1\r\nHost: probe\r\nUser-Agent: latency_probe\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut have = 0;
    loop {
        if have == buf.len() {
            return Err("response head over 64 KiB".into());
        }
        let n = conn
            .read(&mut buf[have..])
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed mid-response".into());
        }
        have += n;
        let Some(end) = find(&buf[..have], b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&buf[..end]).map_err(|_| "response head is not UTF-8")?;
        let ok = head.split(' ').nth(1) == Some("200");
        let len = head
            .split("\r\n")
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .ok_or("response without Content-Length (the probe reads only those)")?;
        let total = end + 4 + len;
        if total > buf.len() {
            return Err("response over 64 KiB".into());
        }
        while have < total {
            let n = conn
                .read(&mut buf[have..])
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("connection closed mid-body".into());
            }
            have += n;
        }
        if have > total {
            return Err("bytes after the response: the target sent more than asked".into());
        }
        return Ok(ok);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("max", 1.0),
];

/// The nearest-rank percentile of sorted samples, in microseconds.
fn pct(sorted: &[u64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1000.0
}

fn report(targets: &mut [Target], rounds: usize, interval_us: u64) {
    for t in targets.iter_mut() {
        t.samples.sort_unstable();
    }
    println!(
        "{rounds} rounds, one every {interval_us} us, targets in shuffled turn; latency in us"
    );
    print!("{:<22}", "target");
    for (label, _) in PERCENTILES {
        print!("{label:>9}");
    }
    println!("{:>9}", "non-200");
    let base: Vec<f64> = PERCENTILES
        .iter()
        .map(|(_, q)| pct(&targets[0].samples, *q))
        .collect();
    for t in targets.iter() {
        print!("{:<22}", t.name);
        for (_, q) in PERCENTILES {
            print!("{:>9.1}", pct(&t.samples, q));
        }
        println!("{:>9}", t.non_200);
    }
    for t in targets.iter().skip(1) {
        print!("{:<22}", format!("{} added", t.name));
        for (i, (_, q)) in PERCENTILES.iter().enumerate() {
            print!("{:>+9.1}", pct(&t.samples, *q) - base[i]);
        }
        println!();
    }
}
