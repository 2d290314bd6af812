//! `CL.THROTTLE` against the real redis-cell 0.2.2 module, call by call.
//!
//! The module is built from crates.io by `scripts/lib/redis-cell.sh` (cached under the
//! target directory; `.ci/run` builds it before the tests) and loaded into a redis-server
//! of this test's own on a free port. A grid of first calls on fresh keys, then thousands
//! of random call sequences (bursts 0..=100, counts 1..=1000, periods 1 s..1 day,
//! quantities 0..=50, fresh and reused keys) go, call after call, to the module and to four
//! floodgate surfaces:
//!
//! * in process: floodgate-core's GCRA built with `Gcra::from_cell`, rendered with
//!   `Decision::throttle_reply`, at the instants around the module's own call;
//! * on Redis: floodgate-redis's `RedisStore::throttle` (the GCRA script, Redis `TIME`),
//!   on the same redis-server;
//! * `floodgate server`'s RESP door with its in-process store;
//! * `floodgate server`'s RESP door with its Redis store (the same redis-server);
//! * floodgate's Redis module (`crates/floodgate-redis-module`, built by the test if
//!   needed) in a second redis-server of the test's own (both modules answer
//!   `CL.THROTTLE`, so they cannot share one);
//!
//! and a few short sequences to redis-cell and to the `floodgate throttle` command.
//!
//! Each surface reads its own clock, so each call is bracketed by two host-clock readings
//! `t0 <= now <= t1` (the module, Redis `TIME` and the server all read the host's
//! `CLOCK_REALTIME`). floodgate's core answers at both ends of the bracket, from what the
//! surface's key can hold (the TAT is known to within the brackets of the admitted calls
//! before). Every integer of the reply is monotonic in time, so when both ends give the
//! same five integers, the surface must give exactly those: the module and every
//! floodgate surface. When they differ, the call straddles a boundary (a whole second of
//! `retry_after`/`reset_after`, one unit of `remaining`, or the admission itself); those
//! calls are counted separately, must stay under 3% of all calls (0.3% to 1.2% measured
//! in CI runs, the most on the RESP door over the Redis store, whose calls take two hops
//! while every other test binary runs), and each integer of the reply must still lie
//! between the two ends.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate_core::Algorithm;
use floodgate_core::Nanos;
use floodgate_core::algorithms::{Gcra, GcraState};
use floodgate_redis::scripts::GCRA_TOLERANCE_LIMIT;
use floodgate_redis::{RedisStore, StoreConfig, ThrottleArgs};

/// Redis-servers of the test's own, and floodgate's module built (shared with the
/// module's own tests).
#[path = "../crates/floodgate-redis-module/tests/support/mod.rs"]
mod module_support;
use module_support::{Proc, start_redis, wait_port};

/// Calls made at most (all sequences together) and the wall time spent at most.
const MAX_SEQUENCES: usize = 3_000;
const TIME_BUDGET: Duration = Duration::from_secs(40);
/// At least this many calls per surface, or the run says too little.
const MIN_CALLS: usize = 5_000;

/// The redis-cell module, built (or found in the cache) by scripts/lib/redis-cell.sh.
/// The test fails, naming why, when it cannot be built.
fn redis_cell_module() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("scripts/lib/redis-cell.sh"))
        .current_dir(root)
        .stderr(Stdio::piped())
        .output();
    let why = match out {
        Ok(o) if o.status.success() => {
            let path = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            if path.is_file() {
                return path;
            }
            format!("the script printed {path:?}, which is not a file")
        }
        Ok(o) => format!(
            "scripts/lib/redis-cell.sh failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("cannot run bash: {e}"),
    };
    panic!("redis-cell 0.2.2, the reference the test compares against, could not be built: {why}");
}

/// `floodgate server` with `config` (YAML); returns the process and its RESP port.
fn start_server(dir: &Path, name: &str, config: &str) -> (Proc, u16) {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, config).unwrap();
    let stderr = dir.join(format!("{name}.stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["server", "--config"])
        .arg(&path)
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--resp", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let proc = Proc(child);
    assert!(
        line.starts_with("floodgate server listening "),
        "{line:?}; stderr: {}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    let resp = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("resp="))
        .unwrap_or_else(|| panic!("no resp= in {line:?}"));
    let port: u16 = resp.rsplit(':').next().unwrap().parse().unwrap();
    wait_port(port, "floodgate server");
    (proc, port)
}

/// A minimal RESP2 client: commands out as arrays, replies of integers or an error in.
struct Resp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Resp {
    fn connect(port: u16) -> Resp {
        let w = TcpStream::connect(("127.0.0.1", port)).unwrap();
        w.set_nodelay(true).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Resp {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.r.read_line(&mut s).unwrap();
        assert!(s.ends_with("\r\n"), "truncated reply line {s:?}");
        s.truncate(s.len() - 2);
        s
    }

    /// Send a command; its reply as integers, or the error text.
    fn call(&mut self, args: &[&str]) -> Result<Vec<i64>, String> {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.w.write_all(out.as_bytes()).unwrap();
        let head = self.line();
        match head.as_bytes().first() {
            Some(b'-') => Err(head[1..].to_string()),
            Some(b':') => Ok(vec![head[1..].parse().unwrap()]),
            Some(b'+') => Ok(vec![]),
            Some(b'$') => {
                let n: i64 = head[1..].parse().unwrap();
                if n >= 0 {
                    let mut buf = vec![0; n as usize + 2];
                    self.r.read_exact(&mut buf).unwrap();
                }
                Ok(vec![])
            }
            Some(b'*') => {
                let n: usize = head[1..].parse().unwrap();
                (0..n)
                    .map(|_| {
                        let item = self.line();
                        item.strip_prefix(':')
                            .and_then(|v| v.parse().ok())
                            .ok_or_else(|| format!("not an integer: {item:?}"))
                    })
                    .collect()
            }
            _ => Err(format!("unexpected reply {head:?}")),
        }
    }
}

/// Log-uniform in `lo..=hi` (as many small values as large ones, per decade).
fn log_range(rng: &mut fastrand::Rng, lo: u64, hi: u64) -> u64 {
    let v = ((lo as f64).ln() + rng.f64() * ((hi as f64 + 1.0).ln() - (lo as f64).ln())).exp();
    (v as u64).clamp(lo, hi)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// What a surface's key can hold: its TAT lies in `lo..=hi` (ns; `0..=0` never admitted).
#[derive(Clone, Copy, Default)]
struct TatBounds {
    lo: u64,
    hi: u64,
}

/// floodgate's core on one call: GCRA built with `Gcra::from_cell`, rendered with
/// `Decision::throttle_reply`, as a function of the time from now to the key's TAT (all
/// a GCRA decision depends on).
struct Core<'a> {
    gcra: &'a Gcra,
    quantity: u64,
}

impl Core<'_> {
    /// The reply when the TAT is `ttl` ns ahead of now (0: at or behind now).
    fn at(&self, ttl: u64) -> [i64; 5] {
        let state = GcraState { tat: Nanos(ttl) };
        self.gcra
            .decide(&state, Nanos::ZERO, self.quantity)
            .0
            .throttle_reply()
    }

    /// The largest time to the TAT that is still admitted (`None`: never admitted).
    fn last_admitted(&self) -> Option<u64> {
        let increment = self
            .quantity
            .checked_mul(self.gcra.emission_interval_nanos())?;
        self.gcra.tolerance_nanos().checked_sub(increment)
    }

    /// The possible times to the TAT for a key whose TAT lies in `b`, at an instant in
    /// `t0..=t1`: smallest and largest.
    fn ttl_range(b: TatBounds, t0: u64, t1: u64) -> (u64, u64) {
        (b.lo.saturating_sub(t1), b.hi.saturating_sub(t0))
    }
}

const SURFACES: [&str; 6] = [
    "redis-cell 0.2.2 vs floodgate in process",
    "floodgate-redis throttle",
    "RESP door, in-process store",
    "RESP door, Redis store",
    "floodgate throttle (the command)",
    "floodgate's Redis module",
];
/// The surfaces of the random sequences: all but the command, whose process start makes
/// each call milliseconds long (it has a few sequences of its own).
const SEQUENCE_SURFACES: [usize; 5] = [0, 1, 2, 3, 5];
/// The module and the command.
const COMMAND_SURFACES: [usize; 2] = [0, 4];

#[derive(Default)]
struct Tally {
    calls: usize,
    exact: usize,
    /// Straddles by what moved between the ends: admission, remaining, a whole second.
    straddle_admission: usize,
    straddle_remaining: usize,
    straddle_second: usize,
    /// The module's answers for a key Redis had already expired, its TAT still ahead.
    expired_early: usize,
    mismatches: Vec<String>,
}

impl Tally {
    /// Calls that agree only up to timing: straddles, and keys expired early.
    fn straddles(&self) -> usize {
        self.straddle_admission
            + self.straddle_remaining
            + self.straddle_second
            + self.expired_early
    }

    fn mismatch(&mut self, text: String) {
        // keep the first few texts; count every one
        self.mismatches.push(if self.mismatches.len() < 20 {
            text
        } else {
            String::new()
        });
    }
}

/// Each integer of `got` lies between those of `a` and `b`.
fn between(got: &[i64], a: [i64; 5], b: [i64; 5]) -> bool {
    got.len() == 5 && (0..5).all(|i| (a[i].min(b[i])..=a[i].max(b[i])).contains(&got[i]))
}

/// How far ahead of now a key of the module's may already be gone. Redis expires keys in
/// whole milliseconds: the module sets a key's expiry to its time to live truncated to
/// milliseconds, counted from the millisecond its command started, so the key can vanish
/// up to about a millisecond before its TAT. The module then answers as for a fresh key,
/// where floodgate (in process, or on Redis with its expiry rounded up) still sees the
/// TAT a fraction of a millisecond ahead.
const MODULE_EXPIRY_SLACK_NS: u64 = 2_000_000;

/// What [`judge`] made of a reply.
#[derive(PartialEq)]
enum Verdict {
    /// floodgate's core answers the same at an instant of the call.
    Agreed,
    /// The module answered for a key Redis had expired just before its TAT.
    ExpiredEarly,
    /// Neither.
    Wrong,
}

/// One call's reply against the core's, for a time to the TAT in `ttl_min..=ttl_max`.
/// Within admitted calls (and within denied ones) every integer is monotonic in that
/// time, so the two ends of each piece bound what the surface may answer. `module`: the
/// reply is the module's, whose key may have expired early ([`MODULE_EXPIRY_SLACK_NS`]).
fn judge(
    t: &mut Tally,
    what: &str,
    got: &[i64],
    core: &Core,
    (ttl_min, ttl_max): (u64, u64),
    module: bool,
) -> Verdict {
    t.calls += 1;
    let (a, b) = (core.at(ttl_max), core.at(ttl_min));
    if a == b && got == a {
        t.exact += 1;
        return Verdict::Agreed;
    }
    if a != b {
        // the piece of the range with the surface's decision
        let last = core.last_admitted();
        let piece = match (got.first(), last) {
            (Some(0), Some(last)) if ttl_min <= last => Some((ttl_min, ttl_max.min(last))),
            (Some(1), None) => Some((ttl_min, ttl_max)),
            (Some(1), Some(last)) if last < ttl_max => Some((ttl_min.max(last + 1), ttl_max)),
            _ => None,
        };
        if piece.is_some_and(|(lo, hi)| between(got, core.at(lo), core.at(hi))) {
            if a[0] != b[0] {
                t.straddle_admission += 1;
            } else if a[2] != b[2] {
                t.straddle_remaining += 1;
            } else {
                t.straddle_second += 1;
            }
            return Verdict::Agreed;
        }
    }
    if module && ttl_min <= MODULE_EXPIRY_SLACK_NS && got == core.at(0) {
        t.expired_early += 1;
        return Verdict::ExpiredEarly;
    }
    t.mismatch(if a == b {
        format!("{what}: got {got:?}, floodgate {a:?}")
    } else {
        format!("{what}: got {got:?}, not floodgate's answer at any instant of the call ({a:?} .. {b:?})")
    });
    Verdict::Wrong
}

/// The module, the four floodgate surfaces, and what the test knows of each key.
struct Rig {
    cell: Resp,
    lib: RedisStore,
    door_mem: Resp,
    door_redis: Resp,
    /// floodgate's module, in a redis-server of its own.
    module: Resp,
    rt: tokio::runtime::Runtime,
    /// The test's redis-server, for the command.
    redis_url: String,
    /// Per surface (in [`SURFACES`] order) and key.
    bounds: Vec<HashMap<String, TatBounds>>,
    tallies: Vec<Tally>,
    /// Calls whose five integers were the same on every surface.
    all_equal: usize,
}

impl Rig {
    /// One `CL.THROTTLE key max_burst count period q` on each of `surfaces`, each judged
    /// against floodgate's core.
    fn call(
        &mut self,
        surfaces: &[usize],
        key: &str,
        [max_burst, count, period, q]: [u64; 4],
        label: &str,
    ) {
        let gcra = Gcra::from_cell(max_burst, count, period).unwrap();
        let words = [max_burst, count, period, q].map(|v| v.to_string());
        let command = [
            "CL.THROTTLE",
            key,
            &words[0],
            &words[1],
            &words[2],
            &words[3],
        ];
        let args = ThrottleArgs::parse(&words[0], &words[1], &words[2], Some(&words[3])).unwrap();
        let core = Core {
            gcra: &gcra,
            quantity: q,
        };
        let increment = q * gcra.emission_interval_nanos();
        let what = format!("{} ({label})", command.join(" "));
        let mut replies: Vec<Vec<i64>> = Vec::with_capacity(surfaces.len());
        for &s in surfaces {
            let surface = SURFACES[s];
            let t0 = now_ns() / 1000 * 1000; // Redis TIME has microseconds
            let got = match s {
                0 => self.cell.call(&command),
                1 => self
                    .rt
                    .block_on(self.lib.throttle(key.as_bytes(), &args))
                    .map(|r| r.to_vec())
                    .map_err(|e| e.to_string()),
                2 => self.door_mem.call(&command),
                3 => self.door_redis.call(&command),
                5 => self.module.call(&command),
                _ => self.command(&command[1..]),
            };
            let t1 = now_ns();
            let got = got.unwrap_or_else(|e| panic!("{surface}: {what}: {e}"));
            let tb = self.bounds[s].entry(key.to_string()).or_default();
            let ttl = Core::ttl_range(*tb, t0, t1);
            let verdict = judge(&mut self.tallies[s], &what, &got, &core, ttl, s == 0);
            if verdict == Verdict::ExpiredEarly {
                // the key was gone: a fresh key's TAT, if this call wrote one
                *tb = TatBounds::default();
            } else if s == 0 && ttl.0 <= MODULE_EXPIRY_SLACK_NS {
                // it may have been gone: a TAT from now on is possible too
                tb.lo = 0;
            }
            if got.first() == Some(&0) && q > 0 {
                *tb = TatBounds {
                    lo: tb.lo.max(t0) + increment,
                    hi: tb.hi.max(t1) + increment,
                };
            }
            replies.push(got);
        }
        self.all_equal += usize::from(replies.iter().all(|r| *r == replies[0]));
    }

    /// `floodgate throttle KEY MAX_BURST COUNT PERIOD QUANTITY --redis URL`: its five
    /// integers, or its error.
    fn command(&self, args: &[&str]) -> Result<Vec<i64>, String> {
        let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("throttle")
            .args(args)
            .args(["--redis", &self.redis_url, "--prefix", "cli:"])
            .args(["--timeout-ms", "2000"])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|w| w.parse().map_err(|_| format!("not an integer: {w:?}")))
            .collect()
    }
}

#[test]
fn cl_throttle_matches_redis_cell_call_by_call() {
    let module = redis_cell_module();
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module), dir.path(), &[]);
    let (_fg_redis, fg_port) = start_redis(Some(&module_support::module_path()), dir.path(), &[]);
    let mut cell = Resp::connect(port);
    let probe = cell.call(&["CL.THROTTLE", "probe", "0", "1", "1", "0"]);
    assert_eq!(probe, Ok(vec![0, 1, 1, -1, 0]), "the module answers");

    let limits = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
    let (_mem_srv, mem_port) = start_server(dir.path(), "memory", limits);
    let (_redis_srv, redis_door_port) = start_server(
        dir.path(),
        "redis",
        &format!(
            "store:\n  type: redis\n  redis: {{url: \"redis://127.0.0.1:{port}\", prefix: \"door:\", timeout: 2s}}\n{limits}"
        ),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let lib = rt
        .block_on(RedisStore::connect(
            &format!("redis://127.0.0.1:{port}"),
            StoreConfig {
                prefix: "lib:".into(),
                timeout: Duration::from_secs(2),
                ..StoreConfig::default()
            },
        ))
        .unwrap();
    let mut rig = Rig {
        cell,
        lib,
        door_mem: Resp::connect(mem_port),
        door_redis: Resp::connect(redis_door_port),
        module: Resp::connect(fg_port),
        rt,
        redis_url: format!("redis://127.0.0.1:{port}"),
        bounds: vec![HashMap::new(); SURFACES.len()],
        tallies: (0..SURFACES.len()).map(|_| Tally::default()).collect(),
        all_equal: 0,
    };

    // First calls on fresh keys answer the same at any instant, so these are exact
    // whatever the timing: the reference's examples, and emission intervals that are not
    // whole microseconds (where redis-cell counts `remaining` from whole microseconds:
    // 500 250 per second is T = 1 999 ns, 1 us; 2 000 000 per second is T = 500 ns, 0 us).
    let mut fresh = 0;
    for (count, period) in [
        (30, 60),
        (1, 1),
        (3, 1),
        (7, 86_400),
        (999, 1),
        (333_333, 1),
        (500_250, 1),
        (1_000_001, 3),
        (2_000_000, 1),
    ] {
        for max_burst in [0, 1, 4, 15, 100, 1000] {
            let tau = Gcra::from_cell(max_burst, count, period)
                .unwrap()
                .tolerance_nanos();
            if tau >= GCRA_TOLERANCE_LIMIT {
                continue; // floodgate-redis refuses it (a typed error, tested elsewhere)
            }
            for q in [0, 1, 2, 6, 16, 101, 1001] {
                fresh += 1;
                let key = format!("fresh{fresh}");
                rig.call(
                    &SEQUENCE_SURFACES,
                    &key,
                    [max_burst, count, period, q],
                    "fresh key",
                );
            }
        }
    }
    let fixed = rig.tallies[0].calls;
    let straddles: usize = rig.tallies.iter().map(Tally::straddles).sum();
    assert_eq!(straddles, 0, "a first call on a fresh key cannot straddle");

    let seed = std::env::var("FLOODGATE_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(now_ns);
    eprintln!("seed {seed} (FLOODGATE_DIFF_SEED={seed} replays the parameters)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut keys: Vec<String> = Vec::new();
    let started = Instant::now();
    let mut sequences = 0;
    while sequences < MAX_SEQUENCES && started.elapsed() < TIME_BUDGET {
        sequences += 1;
        let max_burst = rng.u64(0..=100);
        let count = log_range(&mut rng, 1, 1000);
        let period = log_range(&mut rng, 1, 86_400);
        let key = if keys.is_empty() || rng.bool() {
            keys.push(format!("k{}", keys.len()));
            keys.last().unwrap().clone()
        } else {
            keys[rng.usize(..keys.len())].clone()
        };
        for _ in 0..rng.u32(1..=24) {
            let q = match rng.u32(0..10) {
                0 => 0,
                1..=5 => 1,
                _ => rng.u64(0..=50),
            };
            if rng.u32(0..100) < 3 {
                std::thread::sleep(Duration::from_millis(rng.u64(0..=30)));
            }
            let label = format!("sequence {sequences}");
            rig.call(
                &SEQUENCE_SURFACES,
                &key,
                [max_burst, count, period, q],
                &label,
            );
        }
    }
    let elapsed = started.elapsed();
    // the command: a few short sequences (each call is a process, milliseconds long)
    for (i, (max_burst, count, period)) in [(15, 30, 60), (4, 1, 1), (0, 7, 86_400)]
        .into_iter()
        .enumerate()
    {
        for q in [1, 1, 0, 3, 20, 1] {
            let key = format!("cli{i}");
            let label = "the command";
            rig.call(
                &COMMAND_SURFACES,
                &key,
                [max_burst, count, period, q],
                label,
            );
        }
    }
    eprintln!(
        "{fixed} first calls on fresh keys, {sequences} random sequences in {:.1} s, the command's sequences: {} calls to the module; the same five integers on every surface called: {}",
        elapsed.as_secs_f64(),
        rig.tallies[0].calls,
        rig.all_equal
    );
    let mut failures = Vec::new();
    for (s, (name, t)) in SURFACES.iter().zip(&rig.tallies).enumerate() {
        eprintln!(
            "{name:>40}: {} calls, {} exact, straddles: {} whole second, {} remaining, {} admission; {} key expired before its TAT; {} mismatches",
            t.calls,
            t.exact,
            t.straddle_second,
            t.straddle_remaining,
            t.straddle_admission,
            t.expired_early,
            t.mismatches.len()
        );
        for m in t.mismatches.iter().filter(|m| !m.is_empty()).take(10) {
            eprintln!("    {m}");
        }
        if !t.mismatches.is_empty() {
            failures.push(format!("{name}: {} mismatches", t.mismatches.len()));
        }
        // the command's few calls, each milliseconds long, may straddle more often
        if SEQUENCE_SURFACES.contains(&s) && t.straddles() * 100 >= 3 * t.calls {
            failures.push(format!(
                "{name}: {} of {} calls straddle a boundary (3% or more)",
                t.straddles(),
                t.calls
            ));
        }
    }
    assert!(
        rig.tallies[0].calls >= MIN_CALLS,
        "only {} calls in {elapsed:?}: too few to say anything",
        rig.tallies[0].calls
    );
    assert!(failures.is_empty(), "{failures:?}");
}
