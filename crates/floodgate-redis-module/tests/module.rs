//! The module loaded into redis-servers of this test's own: `CL.THROTTLE` call by call
//! against floodgate-core's GCRA, replication of the effect to a replica, bad input; the
//! same for `FG.RESERVE` and `FG.SETTLE`.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate_core::algorithms::{Gcra, GcraState};
use floodgate_core::{Algorithm, AnyAlgorithm, AnyState, Kind, Nanos, Rate, Spec};
use redis::{Connection, Value};
use support::{module_path, start_redis};

fn connect(port: u16) -> Connection {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let conn = c.get_connection().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// `CL.THROTTLE key args...`: the five integers, or the error text.
fn throttle(c: &mut Connection, key: &str, args: &[u64]) -> Result<Vec<i64>, String> {
    let mut cmd = redis::cmd("CL.THROTTLE");
    cmd.arg(key);
    for a in args {
        cmd.arg(*a);
    }
    cmd.query::<Vec<i64>>(c).map_err(|e| e.to_string())
}

fn raw(c: &mut Connection, args: &[&str]) -> Result<Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<Value>(c).map_err(|e| e.to_string())
}

fn get(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn pexpiretime(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

fn tat_of(bytes: &Option<Vec<u8>>) -> GcraState {
    match bytes {
        None => GcraState::default(),
        Some(b) => {
            assert_eq!(b.len(), 9, "a 9-byte value: {b:?}");
            assert_eq!(b[0], 1, "tag 1");
            GcraState {
                tat: Nanos(u64::from_le_bytes(b[1..].try_into().unwrap())),
            }
        }
    }
}

/// Wait (20 s at most) until `INFO section` shows `line` as a whole line (`loading:0`
/// is also the end of `async_loading:0`, there while the server is still loading).
fn wait_info(c: &mut Connection, section: &str, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO").arg(section).query(c).unwrap();
        if info.lines().any(|l| l.trim() == line) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {line} in INFO {section}: {info}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Log-uniform in `lo..=hi`.
/// The first instant in `lo..=hi` where `pred` holds (`hi + 1` if none), for a `pred`
/// that, once true, stays true as time passes.
fn first_instant(lo: u64, hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (lo, hi.saturating_add(1));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { hi = mid } else { lo = mid + 1 }
    }
    lo
}

/// Whether an admitted call's five integers `got` are the core's (`at`) at some instant
/// of `t0..=t1`. As time passes a call once admitted stays admitted (the core may deny
/// it at `t0` and admit it at `t1`); admitted with the TAT ahead of the instant, the new
/// TAT is fixed, so `remaining` only grows and `reset_after` only shrinks: the instants
/// matching all three form one span, which starts where the latest of the three starts.
fn admitted_at_some_instant(at: &dyn Fn(u64) -> Vec<i64>, t0: u64, t1: u64, got: &[i64]) -> bool {
    let from_admitted = first_instant(t0, t1, |t| at(t)[0] == 0);
    let from_remaining = first_instant(from_admitted, t1, |t| at(t)[2] >= got[2]);
    let from_reset = first_instant(from_admitted, t1, |t| at(t)[4] <= got[4]);
    let start = from_remaining.max(from_reset);
    start <= t1 && at(start) == got
}

fn log_range(rng: &mut fastrand::Rng, lo: u64, hi: u64) -> u64 {
    let v = ((lo as f64).ln() + rng.f64() * ((hi as f64 + 1.0).ln() - (lo as f64).ln())).exp();
    (v as u64).clamp(lo, hi)
}

#[test]
fn an_answer_between_two_readings_is_found_and_a_wrong_one_is_not() {
    // CL.THROTTLE k 91 875 1 1 with the TAT 50 ms ahead, readings 7.5 ms apart (a loaded
    // machine): the answer in the middle is neither end's, yet the core's at some instant
    let gcra = Gcra::from_cell(91, 875, 1).unwrap();
    let t0 = 1_796_513_901_040_143_999u64;
    let t1 = t0 + 7_492_922;
    let state = GcraState {
        tat: Nanos(t0 + 50_000_000),
    };
    let at = |t: u64| gcra.decide(&state, Nanos(t), 1).0.throttle_reply().to_vec();
    let mid = at(t0 + 3_700_000);
    assert!(mid != at(t0) && mid != at(t1), "{mid:?}");
    assert!(admitted_at_some_instant(&at, t0, t1, &mid));
    let mut wrong = mid.clone();
    wrong[2] += 100;
    assert!(!admitted_at_some_instant(&at, t0, t1, &wrong));
    let mut late = at(t1);
    late[4] -= 1;
    assert!(!admitted_at_some_instant(&at, t0, t1, &late));
    // CL.THROTTLE k 11 518 1 3, readings 0.43 ms apart: denied at the first, admitted at
    // the second (as a CI run saw it); the admitted answer is found, a denial's is not
    let gcra = Gcra::from_cell(11, 518, 1).unwrap();
    let t1 = t0 + 425_516;
    let at_tat = |tat: u64, t: u64| {
        let state = GcraState { tat: Nanos(tat) };
        gcra.decide(&state, Nanos(t), 3).0.throttle_reply().to_vec()
    };
    let tat = (t0..t0 + 100_000_000)
        .step_by(50_000)
        .find(|&tat| at_tat(tat, t0)[0] == 1 && at_tat(tat, t1)[0] == 0)
        .expect("a TAT whose call is admitted between the readings");
    let at = |t: u64| at_tat(tat, t);
    assert!(admitted_at_some_instant(&at, t0, t1, &at(t1)));
    assert!(!admitted_at_some_instant(&at, t0, t1, &at(t0)));
}

#[test]
fn cl_throttle_decides_as_floodgate_core_call_by_call() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    // the reference's examples on fresh keys
    assert_eq!(
        throttle(&mut c, "ex1", &[15, 30, 60]),
        Ok(vec![0, 16, 15, -1, 2])
    );
    assert_eq!(
        throttle(&mut c, "ex1", &[15, 30, 60]).unwrap()[..4],
        [0, 16, 14, -1]
    );
    assert_eq!(
        throttle(&mut c, "ex2", &[15, 30, 60, 0]),
        Ok(vec![0, 16, 16, -1, 0])
    );
    assert_eq!(
        throttle(&mut c, "ex3", &[4, 1, 1, 6]),
        Ok(vec![1, 5, 5, -1, 0])
    );
    assert_eq!(get(&mut c, "ex2"), None, "a peek writes nothing");

    let seed = std::env::var("FLOODGATE_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(now_ns);
    eprintln!("seed {seed} (FLOODGATE_DIFF_SEED={seed} replays the parameters)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let (mut calls, mut exact, mut straddles, mut writes) = (0usize, 0usize, 0usize, 0usize);
    let mut keys = 0;
    while calls < 4_000 && started.elapsed() < Duration::from_secs(15) {
        let (max_burst, count, period) = (
            rng.u64(0..=100),
            log_range(&mut rng, 1, 1000),
            log_range(&mut rng, 1, 86_400),
        );
        let gcra = Gcra::from_cell(max_burst, count, period).unwrap();
        keys += 1;
        let key = format!("k{keys}");
        for _ in 0..rng.u32(1..=24) {
            let q = match rng.u32(0..10) {
                0 => 0,
                1..=5 => 1,
                _ => rng.u64(0..=50),
            };
            if rng.u32(0..100) < 3 {
                std::thread::sleep(Duration::from_millis(rng.u64(0..=20)));
            }
            let before = get(&mut c, &key);
            let state = tat_of(&before);
            let t0 = now_ns();
            let got = throttle(&mut c, &key, &[max_burst, count, period, q]).unwrap();
            let t1 = now_ns();
            calls += 1;
            let at = |t: u64| gcra.decide(&state, Nanos(t), q).0.throttle_reply().to_vec();
            let after = get(&mut c, &key);
            let what = format!("CL.THROTTLE {key} {max_burst} {count} {period} {q}");
            if got[0] == 0 && q > 0 {
                // admitted: the new TAT is max(now, TAT) + q T for the module's now
                writes += 1;
                let new = tat_of(&after).tat.0;
                let inc = q * gcra.emission_interval_nanos();
                let lo = state.tat.0.max(t0) + inc;
                let hi = state.tat.0.max(t1) + inc;
                assert!(
                    (lo..=hi).contains(&new),
                    "{what}: TAT {new} not in {lo}..={hi}"
                );
                if new - inc > state.tat.0 {
                    // the module's instant is known: new - inc
                    assert_eq!(got, at(new - inc), "{what}: at the module's own instant");
                } else {
                    // the module's instant is somewhere in t0..=t1, and with the TAT ahead
                    // of it, remaining and reset_after move with it: the core's answer at
                    // some instant between the two readings
                    assert!(
                        admitted_at_some_instant(&at, t0, t1, &got),
                        "{what}: {got:?} is the core's answer at no instant from {t0} ({:?}) to {t1} ({:?})",
                        at(t0),
                        at(t1)
                    );
                }
                assert_eq!(
                    pexpiretime(&mut c, &key) as u64,
                    new.div_ceil(1_000_000),
                    "{what}: the key expires when it is back at full capacity"
                );
                exact += 1;
                continue;
            }
            // nothing written: the value is the one before (or expired meanwhile)
            assert!(
                after.is_none() || after == before,
                "{what}: wrote on a denial or peek"
            );
            let (a, b) = (at(t0), at(t1));
            if a == b {
                assert_eq!(got, a, "{what}");
                exact += 1;
            } else {
                // each integer is monotonic in time: between the two ends
                let ok = (0..5).all(|i| (a[i].min(b[i])..=a[i].max(b[i])).contains(&got[i]));
                assert!(ok, "{what}: {got:?} not between {a:?} and {b:?}");
                straddles += 1;
            }
        }
    }
    eprintln!(
        "{calls} calls on {keys} keys in {:.1} s: {exact} exact ({writes} writes checked to the nanosecond), {straddles} straddling a boundary",
        started.elapsed().as_secs_f64()
    );
    assert!(
        calls >= 1_000,
        "only {calls} calls: too few to say anything"
    );
    assert!(
        straddles * 100 < calls,
        "{straddles} of {calls} calls straddle"
    );
}

/// A primary with the module and a replica without it (it could not run the module's
/// commands, only what they replicate), linked: the servers, then connections to each.
fn primary_and_replica(dir: &std::path::Path) -> ([support::Proc; 2], Connection, Connection) {
    let (primary, pport) = start_redis(
        Some(&module_path()),
        dir,
        &["--repl-diskless-sync-delay", "0"],
    );
    let replica_of = pport.to_string();
    let (replica, rport) = start_redis(None, dir, &["--replicaof", "127.0.0.1", &replica_of]);
    let p = connect(pport);
    let mut r = connect(rport);
    wait_info(&mut r, "replication", "master_link_status:up");
    ([primary, replica], p, r)
}

/// `FG.DECIDE` of a sliding log (the Redis store's call), 1000 per 200 ms, at the caller's
/// instant `t_ns`, its key padded to live 100 s: the logs' text grows to hundreds of
/// bytes and loses its expired prefix as `t_ns` moves on, and no key expires during a test.
fn decide_log(c: &mut Connection, key: &str, t_ns: u64, cost: u64) {
    let (s, ns) = (
        (t_ns / 1_000_000_000).to_string(),
        (t_ns % 1_000_000_000).to_string(),
    );
    let cost = cost.to_string();
    let args = [
        "FG.DECIDE",
        key,
        "3",
        &cost,
        "100000",
        "1000",
        "200000000",
        "0",
        "0",
        "one",
        &s,
        &ns,
    ];
    raw(c, &args).unwrap();
}

#[test]
fn a_replica_reaches_the_same_bytes_and_expiries() {
    let dir = tempfile::tempdir().unwrap();
    let (_servers, mut p, mut r) = primary_and_replica(dir.path());
    let mut rng = fastrand::Rng::with_seed(7);
    let keys: Vec<String> = (0..100).map(|i| format!("rep{i}")).collect();
    // the Redis store's sliding log: its text value spliced in place
    let logs: Vec<String> = (0..10).map(|i| format!("log{i}")).collect();
    let mut t = now_ns();
    for i in 0..3_000 {
        t += 1_000_000;
        decide_log(&mut p, &logs[rng.usize(..logs.len())], t, rng.u64(0..=2));
        let key = &keys[rng.usize(..keys.len())];
        // per key one limit (periods of 100 s and more: no key expires during the test)
        let k: u64 = key[3..].parse().unwrap();
        if k.is_multiple_of(2) {
            let args = [k % 7, 1 + k % 5, 100 + k * 10, rng.u64(0..=3)];
            throttle(&mut p, key, &args).unwrap();
        } else {
            // the other algorithms, through FG.THROTTLE
            let alg = [
                "fixed-window",
                "sliding-counter",
                "token-bucket",
                "leaky-meter",
                "gcra",
                "sliding-log",
                "leaky-queue",
            ][(k as usize / 2) % 7];
            let rate = format!("{}/{}s", 1 + k % 5, 100 + k * 10);
            let cost = rng.u64(0..=3).to_string();
            raw(&mut p, &["FG.THROTTLE", alg, key, &rate, &cost]).unwrap();
        }
        if i % 500 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
    assert_eq!(acked, 1, "the replica acknowledged the writes");
    let size = |c: &mut Connection| -> i64 { redis::cmd("DBSIZE").query(c).unwrap() };
    assert_eq!(size(&mut p), size(&mut r));
    let mut compared = 0;
    for key in keys.iter().chain(&logs) {
        let (pv, rv) = (get(&mut p, key), get(&mut r, key));
        assert_eq!(pv, rv, "{key}: the same bytes on the replica");
        let (pe, re) = (pexpiretime(&mut p, key), pexpiretime(&mut r, key));
        assert_eq!(pe, re, "{key}: the same absolute expiry on the replica");
        if pv.is_some() {
            assert!(pe > 0, "{key} has an expiry");
            compared += 1;
        }
    }
    assert!(compared >= 100, "only {compared} keys written");
    let lens: Vec<usize> = logs
        .iter()
        .map(|k| get(&mut p, k).map_or(0, |v| v.len()))
        .collect();
    let long = lens.iter().filter(|&&n| n > 128).count();
    assert!(
        long >= 8,
        "logs' values of several 64-byte blocks: {lens:?}"
    );
}

#[test]
fn bad_input_gets_an_error_naming_the_argument_and_no_key_loses_its_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    let err = |c: &mut Connection, args: &[&str]| match raw(c, args) {
        Err(e) => e,
        Ok(v) => panic!("{args:?} answered {v:?}"),
    };
    assert!(err(&mut c, &["CL.THROTTLE", "k", "1", "2"]).contains("Usage: CL.THROTTLE"));
    assert!(
        err(&mut c, &["CL.THROTTLE", "k", "1", "2", "3", "4", "5"]).contains("Usage: CL.THROTTLE")
    );
    // the four words after the key (`_` for an empty word), and what the error says
    for (args, text) in [
        ("x 30 60 1", "max_burst must be an integer, got \"x\""),
        ("1 3.5 60 1", "count must be an integer, got \"3.5\""),
        ("1 30 _ 1", "period must be an integer, got \"\""),
        ("1 30 60 q", "quantity must be an integer, got \"q\""),
        (
            "1 30 60 99999999999999999999",
            "quantity must be an integer",
        ),
        ("1 0 60 1", "zero rates are not supported (count is 0)"),
        ("1 30 0 1", "zero rates are not supported (period is 0)"),
        ("-1 30 60 1", "max_burst must not be negative, got -1"),
        ("1 -30 60 1", "count must not be negative, got -30"),
        ("1 30 60 -1", "quantity must not be negative, got -1"),
        ("9223372036854775807 30 60 1", "max_burst is too large"),
        ("1 30 9223372036854775807 1", "period is too large"),
    ] {
        let mut full = vec!["CL.THROTTLE", "bad"];
        full.extend(args.split(' ').map(|w| if w == "_" { "" } else { w }));
        let e = err(&mut c, &full);
        assert!(e.contains(text), "{full:?}: {e}");
    }
    assert_eq!(get(&mut c, "bad"), None, "bad input writes nothing");
    // keys of the wrong type, and strings that are not the module's
    raw(&mut c, &["LPUSH", "list", "a"]).unwrap();
    assert!(err(&mut c, &["CL.THROTTLE", "list", "1", "1", "1"]).contains("WRONGTYPE"));
    raw(&mut c, &["SET", "text", "1700000000"]).unwrap();
    let e = err(&mut c, &["CL.THROTTLE", "text", "1", "1", "1"]);
    assert!(e.contains("not a floodgate GCRA state"), "{e}");
    assert_eq!(get(&mut c, "text").as_deref(), Some(&b"1700000000"[..]));
    // a key in use keeps its expiry through bad calls, peeks, denials
    throttle(&mut c, "used", &[1, 1, 60, 1]).unwrap();
    let exp = pexpiretime(&mut c, "used");
    assert!(exp > 0);
    err(&mut c, &["CL.THROTTLE", "used", "1", "1", "60", "-5"]);
    throttle(&mut c, "used", &[1, 1, 60, 0]).unwrap();
    throttle(&mut c, "used", &[1, 1, 60, 50]).unwrap();
    assert_eq!(pexpiretime(&mut c, "used"), exp);
    // after random traffic, every key of the module has an expiry
    let mut rng = fastrand::Rng::with_seed(11);
    for _ in 0..500 {
        let key = format!("r{}", rng.u32(0..50));
        let _ = throttle(
            &mut c,
            &key,
            &[rng.u64(0..5), rng.u64(1..5), rng.u64(1..100), rng.u64(0..8)],
        );
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("r*").query(&mut c).unwrap();
    assert!(keys.len() > 10);
    for k in keys {
        assert!(pexpiretime(&mut c, &k) > 0, "{k} has no expiry");
    }
}

/// The five integers of `FG.THROTTLE`/`FG.MULTI` items.
fn five(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => *n,
                other => panic!("not an integer: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// The core's reply matches the module's: the same admission, limit and remaining, and
/// durations within a second (the call's instant lies between two clock readings); a
/// queue's sixth integer, its delay in ms, within 100 ms of the core's.
fn agrees(got: &[i64], want: &floodgate_core::Decision, queue: bool) -> bool {
    let five = want.throttle_reply();
    let delay_ok = match got.get(5) {
        Some(&ms) => queue && (ms - want.delay.as_millis() as i64).abs() <= 100,
        None => !queue,
    };
    got.len() <= 6
        && delay_ok
        && got[..3] == five[..3]
        && (0..2).all(|i| (got[3 + i] - five[3 + i]).abs() <= 1)
}

#[test]
fn fg_throttle_decides_as_the_core_for_every_algorithm_it_stores() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    let mut rng = fastrand::Rng::with_seed(now_ns());
    let mut calls = 0;
    for kind in [
        Kind::FixedWindow,
        Kind::SlidingCounter,
        Kind::TokenBucket,
        Kind::LeakyMeter,
        Kind::Gcra,
        Kind::SlidingLog,
        Kind::LeakyQueue,
    ] {
        for round in 0..20 {
            // slow rates (per hour and more): a few milliseconds of test change nothing
            let rate = format!("{}/{}h", rng.u64(1..=20), rng.u64(1..=24));
            let alg: AnyAlgorithm = Spec::new(kind, rate.parse::<Rate>().unwrap())
                .build()
                .unwrap();
            let key = format!("fg-{kind}-{round}");
            let mut state = AnyState::default();
            for _ in 0..rng.u32(1..=30) {
                let cost = rng.u64(0..=4);
                let t0 = now_ns();
                let got = five(
                    &raw(
                        &mut c,
                        &["FG.THROTTLE", kind.name(), &key, &rate, &cost.to_string()],
                    )
                    .unwrap(),
                );
                let t1 = now_ns();
                calls += 1;
                let (a, pa) = alg.decide(&state, Nanos(t0), cost);
                let b = alg.decide(&state, Nanos(t1), cost).0;
                let queue = kind == Kind::LeakyQueue;
                let ok = agrees(&got, &a, queue) || agrees(&got, &b, queue);
                assert!(
                    ok,
                    "FG.THROTTLE {kind} {key} {rate} {cost}: {got:?}, the core {:?} .. {:?}",
                    a.throttle_reply(),
                    b.throttle_reply()
                );
                if let (0, Some(p)) = (got[0], pa) {
                    alg.apply(&mut state, p);
                }
                let value = get(&mut c, &key);
                if let Some(v) = &value {
                    assert!(pexpiretime(&mut c, &key) > 0, "{key} has an expiry");
                    let log = kind == Kind::SlidingLog && v.len() % 16 == 1;
                    assert!(
                        log || matches!(v.len(), 9 | 17 | 25),
                        "{key}: {} bytes",
                        v.len()
                    );
                }
            }
        }
    }
    assert!(calls > 400, "{calls} calls");
}

#[test]
fn fg_multi_charges_all_policies_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    let multi = |c: &mut Connection, client: &str| {
        let v = raw(
            c,
            &[
                "FG.MULTI",
                "2",
                "gcra",
                client,
                "3/h",
                "1",
                "fixed-window",
                "global",
                "4/h",
                "1",
            ],
        )
        .unwrap();
        let Value::Array(items) = v else {
            panic!("{v:?}")
        };
        let Value::Int(limited) = items[0] else {
            panic!("{items:?}")
        };
        (limited, five(&items[1]), five(&items[2]))
    };
    // the global policy admits 4 an hour, each client 3
    for _ in 0..3 {
        assert_eq!(multi(&mut c, "a").0, 0);
    }
    let (limited, a, g) = multi(&mut c, "a");
    assert_eq!((limited, a[0], g[0]), (1, 1, 0), "a's own policy denies");
    assert_eq!(g[2], 1, "the global policy was not charged: one left");
    let before = get(&mut c, "global");
    assert_eq!(multi(&mut c, "b").0, 0, "b takes the global's last unit");
    let (limited, b, g) = multi(&mut c, "b");
    assert_eq!((limited, b[0], g[0]), (1, 0, 1), "the global policy denies");
    assert_eq!(b[2], 2, "b was not charged: 2 of 3 left");
    assert_ne!(get(&mut c, "global"), before);
    // bad input
    for (args, text) in [
        (
            vec!["FG.MULTI", "2", "gcra", "x", "1/s", "1"],
            "Usage: FG.MULTI",
        ),
        (vec!["FG.MULTI", "0"], "Usage: FG.MULTI"),
        (
            vec!["FG.MULTI", "x", "gcra", "x", "1/s", "1"],
            "Usage: FG.MULTI",
        ),
        (
            vec![
                "FG.MULTI", "2", "gcra", "x", "1/s", "1", "gcra", "x", "1/s", "1",
            ],
            "appears twice",
        ),
        (
            vec!["FG.MULTI", "1", "gcra", "x", "1/s", "-1"],
            "cost must be an integer",
        ),
        (
            vec!["FG.MULTI", "1", "bucket", "x", "1/s", "1"],
            "unknown algorithm",
        ),
        (vec!["FG.THROTTLE", "gcra", "x"], "Usage: FG.THROTTLE"),
        (
            vec!["FG.THROTTLE", "gcra", "x", "ten/s"],
            "rate: invalid rate \"ten/s\"",
        ),
        (
            vec!["FG.THROTTLE", "sliding-log", "x", "10001/s"],
            "must be at most 10000",
        ),
    ] {
        match raw(&mut c, &args) {
            Err(e) => assert!(e.contains(text), "{args:?}: {e}"),
            Ok(v) => panic!("{args:?} answered {v:?}"),
        }
    }
    assert_eq!(get(&mut c, "x"), None, "bad input writes nothing");
}

#[test]
fn an_aof_replay_without_the_module_reaches_the_same_bytes_and_expiries() {
    let dir = tempfile::tempdir().unwrap();
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let keys: Vec<String> = (0..40).map(|i| format!("aof{i}")).collect();
    let mut before = Vec::new();
    {
        let (_primary, port) = start_redis(Some(&module_path()), dir.path(), &aof);
        let mut c = connect(port);
        let mut rng = fastrand::Rng::with_seed(3);
        let mut t = now_ns();
        for _ in 0..600 {
            let k = rng.usize(..keys.len());
            let key = &keys[k];
            match k % 4 {
                0 | 2 => {
                    throttle(&mut c, key, &[3, 2, 600, rng.u64(0..=2)]).unwrap();
                }
                1 => {
                    raw(&mut c, &["FG.THROTTLE", "token-bucket", key, "5/h", "1"]).unwrap();
                }
                _ => {
                    // a sliding log's text, spliced
                    t += 3_000_000;
                    decide_log(&mut c, key, t, rng.u64(1..=2));
                }
            }
        }
        for key in &keys {
            before.push((get(&mut c, key), pexpiretime(&mut c, key)));
        }
    } // the server is killed here; every write was fsynced
    let (_replay, port) = start_redis(None, dir.path(), &aof);
    let mut c = connect(port);
    wait_info(&mut c, "persistence", "loading:0");
    for (key, (value, expiry)) in keys.iter().zip(before) {
        assert!(value.is_some(), "{key} was written");
        assert_eq!(
            get(&mut c, key),
            value,
            "{key}: the same bytes after the replay"
        );
        assert_eq!(pexpiretime(&mut c, key), expiry, "{key}: the same expiry");
    }
}

/// A write acts on the key as `SET` does: a `WATCH` on it is broken and the `set` and
/// `expire` keyspace events are sent; a call that writes nothing (denied) does neither.
#[test]
fn a_write_breaks_a_watch_and_notifies_as_set_and_a_denial_does_neither() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    let mut other = connect(port);
    raw(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEg$"]).unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut sub_conn = client.get_connection().unwrap();
    sub_conn
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sub = sub_conn.as_pubsub();
    sub.psubscribe("__keyevent@0__:*").unwrap();
    // WATCH k, another client's call on k, then EXEC: nil when the call wrote k
    let watched_exec = |c: &mut Connection, other: &mut Connection, call: &[&str]| {
        raw(c, &["WATCH", "k"]).unwrap();
        raw(other, call).unwrap();
        raw(c, &["MULTI"]).unwrap();
        raw(c, &["PING"]).unwrap();
        raw(c, &["EXEC"]).unwrap()
    };
    // limit 1 per hour: the first call admits (writes), the second is denied
    let call = ["FG.THROTTLE", "fixed-window", "k", "1/h"];
    assert_eq!(
        watched_exec(&mut c, &mut other, &call),
        Value::Nil,
        "a write"
    );
    let mut events = Vec::new();
    for _ in 0..2 {
        let m = sub.get_message().unwrap();
        events.push((
            m.get_channel_name().to_string(),
            m.get_payload::<String>().unwrap(),
        ));
    }
    assert_eq!(
        events,
        [
            ("__keyevent@0__:set".to_string(), "k".to_string()),
            ("__keyevent@0__:expire".to_string(), "k".to_string()),
        ]
    );
    assert_ne!(
        watched_exec(&mut c, &mut other, &call),
        Value::Nil,
        "a denial writes nothing"
    );
    // nothing more was notified: the next event is the next write's
    raw(&mut other, &["SET", "marker", "1"]).unwrap();
    let m = sub.get_message().unwrap();
    assert_eq!(m.get_payload::<String>().unwrap(), "marker");
}

// FG.RESERVE and FG.SETTLE (floodgate-redis's reserve and settle): what a replica without
// the module and an AOF replay without it hold after their traffic, and bad input. (Their
// answers against floodgate-core and the settle script: floodgate-redis's
// `tests/differential.rs`.)

fn call(c: &mut Connection, args: &[String]) -> Result<Value, String> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    raw(c, &words)
}

fn words(s: &str) -> Vec<String> {
    s.split(' ').map(str::to_string).collect()
}

/// Per key one algorithm of the store's six (index, parameters): limits of 50 over 100 s
/// and more, so nothing expires during a test.
fn policy(k: usize) -> (usize, &'static str) {
    let alg = k % 6 + 1;
    let params = match alg {
        1 => "2000000000 100000000000 0 0",
        2..=4 => "50 100000000000 0 0",
        5 => "50 1 2000000000 0",
        _ => "50 1 2000000000 -1",
    };
    (alg, params)
}

/// Reservations and settles at the server's clock on `keys`: `n` calls.
fn traffic(c: &mut Connection, keys: &[String], n: usize, seed: u64) -> (usize, usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut open: Vec<(usize, i64, i64, u64)> = Vec::new();
    let (mut reserved, mut settled) = (0, 0);
    for _ in 0..n {
        if !open.is_empty() && rng.u8(0..3) == 0 {
            let (k, s, ns, est) = open.swap_remove(rng.usize(..open.len()));
            let (alg, params) = policy(k);
            let actual = rng.u64(0..=est + 4);
            let cmd = format!(
                "FG.SETTLE {} {alg} {est} 0 {params} {s} {ns} {actual} redis 0",
                keys[k]
            );
            let r = five(&call(c, &words(&cmd)).unwrap());
            assert_eq!(r[0], 0, "{cmd}: {r:?}");
            settled += 1;
        } else {
            let k = rng.usize(..keys.len());
            let (alg, params) = policy(k);
            let est = rng.u64(0..=3);
            let cmd = format!("FG.RESERVE {} {alg} {est} 0 {params} redis 0", keys[k]);
            let r = five(&call(c, &words(&cmd)).unwrap());
            let admitted = if alg == 1 { r[3] >= 0 } else { r[3] == 1 };
            if admitted && r[2] == 0 {
                open.push((k, r[0], r[1], est));
                reserved += 1;
            }
        }
    }
    (reserved, settled)
}

/// In-flight leases at the server's clock on `keys` (at most 3 per key, leases of 1 ms
/// to 100 s, so some expire and are dropped): `n` acquires, renews and releases; how many
/// leases were taken and how many released.
fn lease_traffic(c: &mut Connection, keys: &[String], n: usize, seed: u64) -> (usize, usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut held: Vec<(usize, u64)> = Vec::new();
    let (mut taken, mut released) = (0, 0);
    for _ in 0..n {
        let ttl = if rng.bool() {
            rng.u64(1_000..50_000)
        } else {
            100_000_000
        };
        if !held.is_empty() && rng.u8(0..3) == 0 {
            let (k, id) = held[rng.usize(..held.len())];
            let cmd = if rng.bool() {
                format!("FG.RENEW {} {id} {ttl} 0 redis", keys[k])
            } else {
                format!("FG.RELEASE {} {id} redis", keys[k])
            };
            let r = five(&call(c, &words(&cmd)).unwrap());
            released += (cmd.starts_with("FG.RELEASE") && r == [1]) as usize;
        } else {
            let k = rng.usize(..keys.len());
            let id = rng.u64(..1 << 63);
            let cmd = format!("FG.ACQUIRE {} {id} 3 {ttl} 0 redis", keys[k]);
            let r = five(&call(c, &words(&cmd)).unwrap());
            if r[0] == 1 {
                held.push((k, id));
                taken += 1;
            }
        }
    }
    (taken, released)
}

/// A key's value (a string's bytes, a sorted set's members and scores) and its
/// `PEXPIRETIME`.
fn state(c: &mut Connection, key: &str) -> (Value, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let value = match kind.as_str() {
        "zset" => redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(c)
            .unwrap(),
        _ => redis::cmd("GET").arg(key).query(c).unwrap(),
    };
    (value, pexpiretime(c, key))
}

/// Every key's value and `PEXPIRETIME` on `a` and `b`; how many keys exist.
fn same_keys(a: &mut Connection, b: &mut Connection, keys: &[String]) -> usize {
    let mut written = 0;
    for key in keys {
        let (av, ae) = state(a, key);
        let (bv, be) = state(b, key);
        // a key whose last lease ran out between the two reads is absent from the second
        let read_ms = (now_ns() / 1_000_000) as i64;
        let expired = (&bv, be) == (&Value::Nil, -2) && ae > 0 && ae <= read_ms;
        assert!(
            (&av, ae) == (&bv, be) || expired,
            "{key}: {av:?} {ae} against {bv:?} {be}"
        );
        if av != Value::Nil {
            assert!(ae > 0, "{key} has an expiry");
            written += 1;
        }
    }
    written
}

#[test]
fn a_replica_without_the_module_holds_what_settles_and_leases_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (_servers, mut p, mut r) = primary_and_replica(dir.path());
    let keys: Vec<String> = (0..60).map(|i| format!("set{i}")).collect();
    let (reserved, settled) = traffic(&mut p, &keys, 3_000, 5);
    assert!(reserved > 500 && settled > 300, "{reserved} / {settled}");
    let lease_keys: Vec<String> = (0..40).map(|i| format!("lease{i}")).collect();
    let (taken, released) = lease_traffic(&mut p, &lease_keys, 3_000, 6);
    assert!(taken > 300 && released > 100, "{taken} / {released}");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
    assert_eq!(acked, 1, "the replica acknowledged the writes");
    let written = same_keys(&mut p, &mut r, &keys);
    assert!(written >= 30, "only {written} keys hold a state");
    let written = same_keys(&mut p, &mut r, &lease_keys);
    assert!(written >= 20, "only {written} keys hold leases");
}

#[test]
fn an_aof_replay_without_the_module_holds_what_settles_and_leases_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let keys: Vec<String> = (0..30).map(|i| format!("aofs{i}")).collect();
    let lease_keys: Vec<String> = (0..20).map(|i| format!("aofl{i}")).collect();
    let all: Vec<String> = keys.iter().chain(&lease_keys).cloned().collect();
    let mut before = Vec::new();
    {
        let (_primary, port) = start_redis(Some(&module_path()), dir.path(), &aof);
        let mut c = connect(port);
        traffic(&mut c, &keys, 800, 9);
        lease_traffic(&mut c, &lease_keys, 800, 10);
        for key in &all {
            before.push(state(&mut c, key));
        }
    } // killed; every write was fsynced
    let (_replay, port) = start_redis(None, dir.path(), &aof);
    let mut c = connect(port);
    wait_info(&mut c, "persistence", "loading:0");
    let mut written = 0;
    for (key, was) in all.iter().zip(before) {
        written += (was.0 != Value::Nil) as usize;
        let now = state(&mut c, key);
        // a key whose last lease (1 ms to 100 s) ran out between the kill and this read
        // is gone on the replayed server as it would be on the first: absent, not wrong
        let read_ms = (now_ns() / 1_000_000) as i64;
        let expired = now == (Value::Nil, -2) && was.1 > 0 && was.1 <= read_ms;
        assert!(
            now == was || expired,
            "{key}: the same value and expiry: {now:?} against {was:?}"
        );
    }
    assert!(written >= 25, "only {written} keys hold a state");
}

#[test]
fn leases_answer_bad_input_with_an_error_naming_the_argument() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    for (cmd, text) in [
        ("FG.ACQUIRE", "Usage: FG.ACQUIRE"),
        ("FG.ACQUIRE k 1 3 5000 0", "Usage: FG.ACQUIRE"),
        (
            "FG.ACQUIRE k x 3 5000 0 redis",
            "id must be an integer, got \"x\"",
        ),
        ("FG.ACQUIRE k -1 3 5000 0 redis", "id must be an integer"),
        ("FG.ACQUIRE k 1 0 5000 0 redis", "limit must be at least 1"),
        ("FG.ACQUIRE k 1 q 5000 0 redis", "limit must be an integer"),
        ("FG.ACQUIRE k 1 3 0 0 redis", "ttl_us must be"),
        ("FG.ACQUIRE k 1 3 5.5 0 redis", "ttl_us must be an integer"),
        ("FG.ACQUIRE k 1 3 5000 p redis", "pad_ms must be an integer"),
        ("FG.ACQUIRE k 1 3 5000 0 later", "now_us must be an integer"),
        ("FG.RENEW k 1 5000 0", "Usage: FG.RENEW"),
        ("FG.RENEW k 1 t 0 redis", "ttl_us must be an integer"),
        ("FG.RELEASE k", "Usage: FG.RELEASE"),
        (
            "FG.RELEASE k 1 9007199254740993",
            "now_us 9007199254740993 is out of range",
        ),
    ] {
        match call(&mut c, &words(cmd)) {
            Err(e) => assert!(e.contains(text), "{cmd}: {e}"),
            Ok(v) => panic!("{cmd} answered {v:?}"),
        }
    }
    assert_eq!(state(&mut c, "k").0, Value::Nil, "bad input writes nothing");
    redis::cmd("SET")
        .arg("text")
        .arg("x")
        .query::<()>(&mut c)
        .unwrap();
    for cmd in [
        "FG.ACQUIRE text 1 3 5000 0 redis",
        "FG.RENEW text 1 5000 0 redis",
        "FG.RELEASE text 1 redis",
    ] {
        let e = call(&mut c, &words(cmd)).unwrap_err();
        assert!(e.contains("WRONGTYPE"), "{cmd}: {e}");
    }
    assert_eq!(get(&mut c, "text").as_deref(), Some(&b"x"[..]));
    // the script's answers: an id held already, a release of an unknown lease
    let acquire = "FG.ACQUIRE held 7 3 5000000 0 redis";
    assert_eq!(five(&call(&mut c, &words(acquire)).unwrap())[..2], [1, 1]);
    assert_eq!(five(&call(&mut c, &words(acquire)).unwrap()), [-1]);
    let release = "FG.RELEASE held 8 redis";
    assert_eq!(five(&call(&mut c, &words(release)).unwrap()), [0]);
}

#[test]
fn reserve_and_settle_answer_bad_input_with_an_error_naming_the_argument() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(Some(&module_path()), dir.path(), &[]);
    let mut c = connect(port);
    let ok = "2 1 0 5 100000000000 0 0";
    for (cmd, text) in [
        ("FG.RESERVE", "Usage: FG.RESERVE"),
        ("FG.RESERVE k 2 1 0 5 1000 0 0 redis", "Usage: FG.RESERVE"),
        (
            "FG.RESERVE k 2 x 0 5 1000 0 0 redis 0",
            "estimate must be an integer, got \"x\"",
        ),
        ("FG.RESERVE k 2 -1 0 5 1000 0 0 redis 0", "estimate must be"),
        ("FG.RESERVE k 9 1 0 5 1000 0 0 redis 0", "index 9"),
        ("FG.RESERVE k 2 1 p 5 1000 0 0 redis 0", "pad_ms must be"),
        ("FG.RESERVE k 2 1 0 5 1000 0 0 soon 0", "now_s must be"),
        (
            "FG.SETTLE k 2 1 0 5 1000 0 0 1 0 1 redis",
            "Usage: FG.SETTLE",
        ),
        (
            &format!("FG.SETTLE k {ok} x 0 1 redis 0"),
            "at_s must be an integer, got \"x\"",
        ),
        (&format!("FG.SETTLE k {ok} 1 y 1 redis 0"), "at_ns must be"),
        (
            &format!("FG.SETTLE k {ok} 1 1000000000 1 redis 0"),
            "out of range",
        ),
        (
            &format!("FG.SETTLE k {ok} 1 0 -2 redis 0"),
            "actual must be",
        ),
        (
            &format!("FG.SETTLE k {ok} 1 0 1.5 redis 0"),
            "actual must be",
        ),
        (&format!("FG.SETTLE k {ok} 1 0 1 10 x"), "now_ns must be"),
    ] {
        match call(&mut c, &words(cmd)) {
            Err(e) => assert!(e.contains(text), "{cmd}: {e}"),
            Ok(v) => panic!("{cmd} answered {v:?}"),
        }
    }
    assert_eq!(get(&mut c, "k"), None, "bad input writes nothing");
    // keys of another type, and strings that are not the algorithm's state
    redis::cmd("LPUSH")
        .arg("list")
        .arg("a")
        .query::<i64>(&mut c)
        .unwrap();
    redis::cmd("SET")
        .arg("text")
        .arg("junk")
        .query::<()>(&mut c)
        .unwrap();
    for key in ["list", "text"] {
        for cmd in [
            format!("FG.RESERVE {key} {ok} redis 0"),
            format!("FG.SETTLE {key} {ok} 1 0 0 redis 0"),
        ] {
            let e = call(&mut c, &words(&cmd)).unwrap_err();
            assert!(e.contains("WRONGTYPE"), "{cmd}: {e}");
        }
    }
    assert_eq!(get(&mut c, "text").as_deref(), Some(&b"junk"[..]));
}
