//! floodgate against governor on the workloads a service sees, in one run, interleaved and
//! repeated: `cargo bench -p floodgate-core --bench limiters -- [--reps N] [--ms M] [CELL..]`.
//!
//! * **A moving clock.** Both libraries read the same per-thread virtual clock (governor
//!   through its `Clock` trait, floodgate as the `now` argument), advanced by a fixed step
//!   per check, so admitted and denied checks both happen as in a service.
//! * **Mostly admitted, some denied.** Every key has the same quota (GCRA, one unit per
//!   second, bursts of [`BURST`]); the clock's step is chosen from the key distribution so
//!   that a fluid model of the workload denies 10% of checks. The admitted share each
//!   library actually reports is printed next to its time.
//! * **Keys:** uniform or Zipf-skewed (exponent 1) over 1k, 100k and 1M `u64` keys, read
//!   from a precomputed sequence of 2M keys (sequential reads for both libraries).
//!   Limiters are warmed with one pass of the sequence before timing.
//! * **Threads:** 1 and 2; with 2, each thread walks its own half of the sequence and the
//!   clock advances at the same total pace as with one.
//! * **Direct:** one key, governor's direct limiter against `AtomicGcra`, `Limiter<Gcra>`
//!   and `Limiter<AnyAlgorithm>`.
//!
//! Each repetition times governor then floodgate (then the reverse order on the next
//! repetition) over the same number of checks; the table gives each library's median
//! time per check with its min-max spread, and the median of the per-repetition ratios
//! (governor's time / floodgate's: above 1 means floodgate has the higher throughput).
//!
//! The keyed limiters hold every key: governor's DashMap never evicts, floodgate's cap is
//! the engine's default of 1M keys or twice the key count, whichever is larger.
//!
//! `--cas` adds, to the keyed cells, a prototype of governor's design built from floodgate's
//! parts (a shard read lock and a compare-and-swap on the entry; `limiters/cas.rs`).
//!
//! `--instructions CELL LIBRARY CHECKS` runs one single-thread cell once, for
//! `scripts/core-instructions.sh` (callgrind counts only inside `hot_loop`).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use floodgate_core::algorithms::Gcra;
use floodgate_core::{AnyAlgorithm, AtomicGcra, KeyedLimiter, Limiter, Nanos, Rate};
use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

#[path = "limiters/cas.rs"]
mod cas;

type NoOp = NoOpMiddleware<governor::nanos::Nanos>;

/// Burst of every key.
const BURST: u32 = 10;
/// One unit per second per key.
const PERIOD_NS: u64 = 1_000_000_000;
/// Keys in the precomputed sequence.
const SEQ_LEN: usize = 1 << 21;
/// The clock starts here (far from zero, as a monotonic clock would be).
const BASE_NS: u64 = 1_000 * PERIOD_NS;

thread_local! {
    /// The virtual clock of this thread, read by both libraries.
    static NOW: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// governor's view of the virtual clock.
#[derive(Debug, Clone, Copy, Default)]
struct VirtualClock;

impl Clock for VirtualClock {
    type Instant = governor::nanos::Nanos;
    #[inline(always)]
    fn now(&self) -> Self::Instant {
        NOW.with(|c| c.get()).into()
    }
}

#[inline(always)]
fn now() -> Nanos {
    Nanos(NOW.with(|c| c.get()))
}

fn quota() -> Quota {
    Quota::with_period(Duration::from_nanos(PERIOD_NS))
        .unwrap()
        .allow_burst(NonZeroU32::new(BURST).unwrap())
}

fn gcra() -> Gcra {
    Gcra::new(Rate::from_nanos(1, PERIOD_NS).unwrap(), BURST as u64).unwrap()
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Dist {
    Uniform,
    Zipf,
}

/// A workload: the key sequence and the clock's step per check.
struct Workload {
    seq: Vec<u64>,
    step_ns: u64,
    /// Ticks a thread takes from a shared clock at once.
    chunk: u64,
}

impl Workload {
    fn new(dist: Dist, n: usize) -> Workload {
        // probabilities of the n keys, in rank order
        let weights: Vec<f64> = match dist {
            Dist::Uniform => vec![1.0; n],
            Dist::Zipf => (1..=n).map(|r| 1.0 / r as f64).collect(),
        };
        let total: f64 = weights.iter().sum();
        let p: Vec<f64> = weights.iter().map(|w| w / total).collect();
        // the share c of one key's quota per check such that sum(max(0, p_k - c)) = 10%:
        // a key asked p_k per check and granted at most c per check is denied the excess
        let denied = |c: f64| p.iter().map(|&pk| (pk - c).max(0.0)).sum::<f64>();
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if denied(mid) > 0.10 {
                lo = mid
            } else {
                hi = mid
            }
        }
        let step_ns = ((hi * PERIOD_NS as f64) as u64).max(1);
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for pk in &p {
            acc += pk;
            cdf.push(acc);
        }
        let mut key_seed = 0xF100_D6A7_E000_0000u64 ^ n as u64;
        let keys: Vec<u64> = (0..n).map(|_| splitmix(&mut key_seed)).collect();
        let mut rng = 0x5EED_0000_0000_0001u64 ^ ((dist as u64) << 32) ^ n as u64;
        let seq = (0..SEQ_LEN)
            .map(|_| {
                let u = (splitmix(&mut rng) >> 11) as f64 / (1u64 << 53) as f64;
                let rank = cdf.partition_point(|&c| c < u).min(n - 1);
                keys[rank]
            })
            .collect();
        Workload {
            seq,
            step_ns,
            chunk: clock_chunk(n),
        }
    }
}

/// The limiters one cell compares.
enum Lib {
    GovKeyed(RateLimiter<u64, DefaultKeyedStateStore<u64>, VirtualClock, NoOp>),
    FgKeyed(KeyedLimiter<u64, Gcra>),
    CasKeyed(cas::CasKeyed),
    GovDirect(RateLimiter<NotKeyed, InMemoryState, VirtualClock, NoOp>),
    FgAtomic(AtomicGcra),
    FgMutex(Limiter<Gcra>),
    FgAny(Limiter<AnyAlgorithm>),
}

impl Lib {
    fn name(&self) -> &'static str {
        match self {
            Lib::GovKeyed(_) | Lib::GovDirect(_) => "governor",
            Lib::FgKeyed(_) => "floodgate",
            Lib::CasKeyed(_) => "prototype: read lock + CAS",
            Lib::FgAtomic(_) => "floodgate AtomicGcra",
            Lib::FgMutex(_) => "floodgate Limiter<Gcra>",
            Lib::FgAny(_) => "floodgate Limiter<AnyAlgorithm>",
        }
    }
}

/// The clock of one library in one cell, shared by its threads: checks made so far.
/// With two threads each takes [`CLOCK_CHUNK`] ticks at a time (one atomic add per chunk),
/// so a thread that was descheduled resumes at the current time, as with a real clock.
type SharedClock = AtomicU64;

/// Ticks a thread takes from the shared clock at once (1 for one key, where a lag of even
/// a few ticks is a burst's worth).
fn clock_chunk(cell_keys: usize) -> u64 {
    if cell_keys == 1 { 1 } else { 64 }
}

/// One thread's share of a run: `checks` checks by thread `t` of `threads`, from
/// position `start` of its walk through the sequence.
#[derive(Clone, Copy)]
struct Walk<'a> {
    w: &'a Workload,
    clock: &'a SharedClock,
    t: usize,
    threads: usize,
    start: u64,
    checks: u64,
}

/// Make the checks of `walk`; returns how many were admitted. Callgrind counts
/// instructions inside this function only.
#[inline(never)]
fn hot_loop<F: Fn(&u64) -> bool>(check: F, walk: Walk<'_>) -> u64 {
    checks(check, walk)
}

/// [`hot_loop`] for warming up, which callgrind does not count (inlined into its caller,
/// so that it is not merged with `hot_loop` as an identical function).
#[inline(always)]
fn warm_loop<F: Fn(&u64) -> bool>(check: F, walk: Walk<'_>) -> u64 {
    checks(check, walk)
}

#[inline(always)]
fn checks<F: Fn(&u64) -> bool>(check: F, walk: Walk<'_>) -> u64 {
    let Walk {
        w,
        clock,
        t,
        threads,
        start,
        checks,
    } = walk;
    let seq = &w.seq[..];
    let mut i = (t * SEQ_LEN / threads + start as usize) % SEQ_LEN;
    let mut admitted = 0u64;
    let chunk = if threads == 1 { checks } else { w.chunk };
    let (mut tick, mut left) = (0u64, 0u64);
    for _ in 0..checks {
        if left == 0 {
            tick = clock.fetch_add(chunk, Ordering::Relaxed);
            left = chunk;
        }
        NOW.with(|c| c.set(BASE_NS + tick * w.step_ns));
        tick += 1;
        left -= 1;
        admitted += u64::from(black_box(check(&seq[i])));
        i += 1;
        if i == SEQ_LEN {
            i = 0;
        }
    }
    admitted
}

/// [`hot_loop`] (or [`warm_loop`] when `warm`) with `lib`'s check.
fn walk(lib: &Lib, walk: Walk<'_>, warm: bool) -> u64 {
    macro_rules! go {
        ($f:expr) => {
            if warm {
                warm_loop($f, walk)
            } else {
                hot_loop($f, walk)
            }
        };
    }
    match lib {
        Lib::GovKeyed(l) => go!(|k| l.check_key(k).is_ok()),
        Lib::FgKeyed(l) => go!(|k| l.check(k, now(), 1).allowed),
        Lib::CasKeyed(l) => go!(|k| l.check(*k, now())),
        Lib::GovDirect(l) => go!(|_| l.check().is_ok()),
        Lib::FgAtomic(l) => go!(|_| l.check(now(), 1).allowed),
        Lib::FgMutex(l) => go!(|_| l.check(now(), 1).allowed),
        Lib::FgAny(l) => go!(|_| l.check(now(), 1).allowed),
    }
}

/// CPU time consumed by the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid pointer to a timespec
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One timed run: wall time, CPU time of all threads, admitted checks.
struct Run {
    wall: Duration,
    cpu: Duration,
    admitted: u64,
}

/// Run `checks` per thread on `threads` threads.
fn run(
    warm: bool,
    lib: &Lib,
    w: &Workload,
    clock: &SharedClock,
    threads: usize,
    start: u64,
    checks: u64,
) -> Run {
    let t0 = Instant::now();
    let (cpu, admitted) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let c0 = thread_cpu();
                    let a = walk(
                        lib,
                        Walk {
                            w,
                            clock,
                            t,
                            threads,
                            start,
                            checks,
                        },
                        warm,
                    );
                    (thread_cpu() - c0, a)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .fold((Duration::ZERO, 0), |(c, a), (c2, a2)| (c + c2, a + a2))
    });
    Run {
        wall: t0.elapsed(),
        cpu,
        admitted,
    }
}

struct Cell {
    name: String,
    threads: usize,
    workload: Arc<Workload>,
    libs: Vec<Lib>,
}

fn keyed_cell(dist: Dist, n: usize, threads: usize, w: Arc<Workload>, with: Extra) -> Cell {
    let gov = RateLimiter::dashmap_with_clock(quota(), VirtualClock);
    let fg = KeyedLimiter::new(gcra(), (2 * n).max(1_000_000)).unwrap();
    let mut libs = vec![Lib::GovKeyed(gov), Lib::FgKeyed(fg)];
    if with.cas {
        libs.push(Lib::CasKeyed(cas::CasKeyed::new(gcra(), 64)));
    }
    Cell {
        name: format!("keyed, {} {}", dist_name(dist), count_name(n)),
        threads,
        workload: w,
        libs,
    }
}

fn direct_cell(threads: usize, w: Arc<Workload>) -> Cell {
    let any = AnyAlgorithm::Gcra(gcra());
    Cell {
        name: "direct, one key".into(),
        threads,
        workload: w,
        libs: vec![
            Lib::GovDirect(RateLimiter::direct_with_clock(quota(), VirtualClock)),
            Lib::FgAtomic(AtomicGcra::new(gcra())),
            Lib::FgMutex(Limiter::new(gcra())),
            Lib::FgAny(Limiter::new(any)),
        ],
    }
}

fn dist_name(d: Dist) -> &'static str {
    match d {
        Dist::Uniform => "uniform",
        Dist::Zipf => "zipf",
    }
}

fn count_name(n: usize) -> String {
    match n {
        1 => "1 key".into(),
        n if n >= 1_000_000 => format!("{}M keys", n / 1_000_000),
        n => format!("{}k keys", n / 1_000),
    }
}

/// Every cell, workloads shared between the 1- and 2-thread cells.
/// Libraries added to the keyed cells on request.
#[derive(Debug, Clone, Copy, Default)]
struct Extra {
    /// `--cas`: the read lock + CAS prototype.
    cas: bool,
}

fn cells(filter: &[String], with: Extra) -> Vec<Cell> {
    let wanted = |name: &str, threads: usize| {
        let full = format!("{name}, {threads}t");
        filter.is_empty() || filter.iter().any(|f| full.contains(f.as_str()))
    };
    let mut out = Vec::new();
    if wanted("direct, one key", 1) || wanted("direct, one key", 2) {
        let w = Arc::new(Workload::new(Dist::Uniform, 1));
        for threads in [1, 2] {
            if wanted("direct, one key", threads) {
                out.push(direct_cell(threads, w.clone()));
            }
        }
    }
    for n in [1_000, 100_000, 1_000_000] {
        for dist in [Dist::Uniform, Dist::Zipf] {
            let name = format!("keyed, {} {}", dist_name(dist), count_name(n));
            if !(wanted(&name, 1) || wanted(&name, 2)) {
                continue;
            }
            let w = Arc::new(Workload::new(dist, n));
            for threads in [1, 2] {
                if wanted(&name, threads) {
                    out.push(keyed_cell(dist, n, threads, w.clone(), with));
                }
            }
        }
    }
    out
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn measure(cell: &Cell, reps: usize, budget: Duration) {
    let w = &*cell.workload;
    let k = cell.libs.len();
    let clocks: Vec<SharedClock> = (0..k).map(|_| AtomicU64::new(0)).collect();
    // warm-up: one pass of the sequence on one thread, then a short calibration run
    for (lib, clock) in cell.libs.iter().zip(&clocks) {
        run(true, lib, w, clock, 1, 0, SEQ_LEN as u64);
    }
    let mut start = SEQ_LEN as u64;
    let cal = run(
        false,
        &cell.libs[0],
        w,
        &clocks[0],
        cell.threads,
        start,
        20_000,
    );
    clocks[1..]
        .iter()
        .for_each(|c| c.store(clocks[0].load(Ordering::Relaxed), Ordering::Relaxed));
    start += 20_000;
    let per_check = cal.wall.as_secs_f64() / 20_000.0;
    let checks = ((budget.as_secs_f64() / per_check) as u64).clamp(10_000, 20_000_000);
    let total = (checks * cell.threads as u64) as f64;
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); k];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); k];
    let mut admitted = vec![0u64; k];
    for r in 0..reps {
        let order: Vec<usize> = if r % 2 == 0 {
            (0..k).collect()
        } else {
            (0..k).rev().collect()
        };
        for &l in &order {
            let run = run(
                false,
                &cell.libs[l],
                w,
                &clocks[l],
                cell.threads,
                start,
                checks,
            );
            wall[l].push(run.wall.as_nanos() as f64 / total);
            cpu[l].push(run.cpu.as_nanos() as f64 / total);
            admitted[l] += run.admitted;
        }
        start += checks;
    }
    for l in 0..k {
        let ratio = |v: &[Vec<f64>]| {
            let mut ratios: Vec<f64> = (0..reps).map(|r| v[0][r] / v[l][r]).collect();
            let (lo, hi) = min_max(&ratios);
            format!("{:.2}x ({lo:.2}-{hi:.2})", median(&mut ratios))
        };
        let time = |v: &mut Vec<f64>| {
            let (lo, hi) = min_max(v);
            format!("{:.1} ({lo:.1}-{hi:.1})", median(v))
        };
        let (wall_ratio, cpu_ratio) = if l == 0 {
            ("-".to_string(), "-".to_string())
        } else {
            (ratio(&wall), ratio(&cpu))
        };
        println!(
            "| {} | {} | {} | {} | {wall_ratio} | {} | {cpu_ratio} | {:.1}% |",
            cell.name,
            cell.threads,
            markdown_code(cell.libs[l].name()),
            time(&mut wall[l]),
            time(&mut cpu[l]),
            100.0 * admitted[l] as f64 / (total * reps as f64)
        );
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)))
}

fn instructions(args: &[String]) {
    let [cell, lib, checks] = args else {
        eprintln!("usage: --instructions CELL LIBRARY CHECKS (library: index in the cell)");
        std::process::exit(2);
    };
    let Some(cell) = cells(std::slice::from_ref(cell), Extra::default())
        .into_iter()
        .find(|c| c.threads == 1)
    else {
        eprintln!("no cell matches {cell:?}");
        std::process::exit(2);
    };
    let Some(lib) = cell.libs.iter().find(|l| l.name() == lib) else {
        let names: Vec<_> = cell.libs.iter().map(Lib::name).collect();
        eprintln!("no library {lib:?} in {:?}: one of {names:?}", cell.name);
        std::process::exit(2);
    };
    let checks: u64 = checks.parse().unwrap_or_else(|_| {
        eprintln!("CHECKS must be a number, got {checks:?}");
        std::process::exit(2)
    });
    let w = &*cell.workload;
    let clock = AtomicU64::new(0);
    run(true, lib, w, &clock, 1, 0, SEQ_LEN as u64);
    let admitted = run(false, lib, w, &clock, 1, SEQ_LEN as u64, checks).admitted;
    println!(
        "{} | {} | {checks} checks, {admitted} admitted",
        cell.name,
        lib.name()
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo bench -- --list` compatibility
    }
    if let Some(i) = args.iter().position(|a| a == "--instructions") {
        return instructions(&args[i + 1..]);
    }
    let mut reps = 7;
    let mut ms = 100;
    let mut with = Extra::default();
    let mut filter = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> u64 {
            it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("{what} needs a number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--reps" => reps = num("--reps") as usize,
            "--ms" => ms = num("--ms"),
            "--cas" => with.cas = true,
            _ => filter.push(a),
        }
    }
    println!(
        "GCRA, 1 unit/s per key, bursts of {BURST}; {reps} repetitions of ~{ms} ms per library, interleaved"
    );
    println!(
        "| cell | threads | library | wall ns per check | governor / floodgate, wall | CPU ns per check | governor / floodgate, CPU | admitted |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for cell in cells(&filter, with) {
        measure(&cell, reps.max(1), Duration::from_millis(ms));
    }
}

/// `name` for a Markdown table cell: a type name with generics (`Limiter<Gcra>`) in
/// backticks, so a renderer does not read `<Gcra>` as an HTML tag.
fn markdown_code(name: &str) -> String {
    match name.split_once(' ') {
        Some((lib, ty)) if ty.contains('<') => format!("{lib} `{ty}`"),
        _ => name.to_string(),
    }
}
