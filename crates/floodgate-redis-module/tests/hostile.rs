//! Hostile calls against the module in a redis-server of the test's own, with a replica
//! without the module (`REPLICAOF` the primary): calls that name one large value many
//! times, carry thousands of keys, pad an expiry past what Redis holds, send megabyte
//! policy words, or ask for a sliding log above its bound. After each group the server
//! answers `PING` from another connection within 100 ms, its `used_memory` is back near
//! where it was, and a call answered with an error has written nothing, on the primary
//! and on the replica.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use support::{Proc, module_path, start_redis};

fn connect(port: u16) -> Connection {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let conn = c.get_connection().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    conn
}

fn call<S: AsRef<[u8]>>(c: &mut Connection, args: &[S]) -> Result<Value, String> {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0].as_ref()).unwrap());
    for a in &args[1..] {
        cmd.arg(a.as_ref());
    }
    cmd.query::<Value>(c).map_err(|e| e.to_string())
}

/// The error a call was answered with; a reply (shortened) is a failure.
fn error_of(r: Result<Value, String>) -> String {
    match r {
        Err(e) => e,
        Ok(v) => {
            let mut shown = format!("{v:?}");
            shown.truncate(200);
            panic!("answered {shown}, not an error")
        }
    }
}

fn err<S: AsRef<[u8]>>(c: &mut Connection, args: &[S]) -> String {
    error_of(call(c, args))
}

/// An array reply's elements.
fn array(r: Result<Value, String>) -> Vec<Value> {
    match r {
        Ok(Value::Array(items)) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// A string reply's bytes.
fn bulk(r: Result<Value, String>) -> Vec<u8> {
    match r {
        Ok(Value::BulkString(b)) => b,
        other => panic!("not a string: {other:?}"),
    }
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Each of `FG.DECIDE`'s algorithms (1 to 6) with parameters it accepts: limit or
/// capacity 5.
const ALGS: [&str; 6] = [
    "1 1000000000 4000000000 0 0",
    "2 5 60000000000 0 0",
    "3 5 60000000000 0 0",
    "4 5 60000000000 0 0",
    "5 5 1 1000000000 0",
    "6 5 1 1000000000 -1",
];

/// `FG.DECIDE` words of one check: `key`, the algorithm's `ALGS` entry with `cost` and
/// `pad` spliced in.
fn group(key: &str, alg: &str, cost: u64, pad: &str) -> String {
    let (index, params) = alg.split_once(' ').unwrap();
    format!("{key} {index} {cost} {pad} {params} ")
}

/// A primary with the module, a replica without it, and connections to each.
struct Servers {
    _procs: [Proc; 2],
    port: u16,
    p: Connection,
    r: Connection,
    marks: u64,
    _dir: tempfile::TempDir,
}

impl Servers {
    fn start() -> Servers {
        let dir = tempfile::tempdir().unwrap();
        let (primary, port) = start_redis(
            Some(&module_path()),
            dir.path(),
            &["--repl-diskless-sync-delay", "0"],
        );
        let of = port.to_string();
        let (replica, rport) = start_redis(None, dir.path(), &["--replicaof", "127.0.0.1", &of]);
        let p = connect(port);
        let mut r = connect(rport);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
            if info.lines().any(|l| l.trim() == "master_link_status:up") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica never linked: {info}"
            );
            thread::sleep(Duration::from_millis(20));
        }
        Servers {
            _procs: [primary, replica],
            port,
            p,
            r,
            marks: 0,
            _dir: dir,
        }
    }

    /// A connection of its own for hostile calls, dropped before memory is measured (so
    /// its buffers are not counted).
    fn hostile(&self) -> Connection {
        connect(self.port)
    }

    fn used_memory(&mut self) -> i64 {
        let info: String = redis::cmd("INFO").arg("memory").query(&mut self.p).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO memory has used_memory")
    }

    /// Allocations of at least `bytes` the server has made since it started (jemalloc's
    /// large size classes, `MEMORY MALLOC-STATS`), or `None` under another allocator.
    fn large_allocations(&mut self, bytes: u64) -> Option<u64> {
        let stats: String = redis::cmd("MEMORY")
            .arg("MALLOC-STATS")
            .query(&mut self.p)
            .unwrap();
        let mut total = None;
        let mut table = false;
        for line in stats.lines() {
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.first() == Some(&"large:") && t.get(1) == Some(&"size") {
                table = true;
                total.get_or_insert(0);
                continue;
            }
            if t.first().is_some_and(|w| w.ends_with(':')) {
                table = false;
            }
            if let (true, [size, _ind, _allocated, nmalloc, ..]) = (table, &t[..])
                && let (Ok(size), Ok(n)) = (size.parse::<u64>(), nmalloc.parse::<u64>())
                && size >= bytes
            {
                *total.get_or_insert(0) += n;
            }
        }
        total
    }

    /// The best of three `PING`s from a connection of their own, right after a group
    /// (one slow scheduling of the test is not the server's).
    fn ping(&self) -> Duration {
        let mut c = connect(self.port);
        (0..3)
            .map(|_| {
                let t = Instant::now();
                let pong: String = redis::cmd("PING").query(&mut c).unwrap();
                assert_eq!(pong, "PONG");
                t.elapsed()
            })
            .min()
            .unwrap()
    }

    /// The server answers `PING` within 100 ms and its memory is at most `slack` bytes
    /// above `before` (below is fine: the replication backlog lets go of older writes as
    /// newer ones come); `what` names the group.
    fn recovered(&mut self, what: &str, before: i64, slack: i64) {
        let ping = self.ping();
        assert!(
            ping < Duration::from_millis(100),
            "{what}: PING took {ping:?}"
        );
        let after = self.used_memory();
        eprintln!(
            "{what}: PING {ping:?} after; used_memory {before} before, {after} after ({:+})",
            after - before
        );
        assert!(
            after - before <= slack,
            "{what}: used_memory {before} before, {after} after (more than {slack} above)"
        );
    }

    /// Wait until the replica has everything the primary replicated so far (a marker
    /// written last has arrived), then check that it holds what the primary holds: the
    /// same keys, values and expiries.
    fn same_on_replica(&mut self) {
        self.marks += 1;
        let mark = self.marks.to_string();
        call(&mut self.p, &["SET", "mark", &mark]).unwrap();
        let _: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut self.p)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while call(&mut self.r, &["GET", "mark"]).unwrap() != Value::BulkString(mark.clone().into())
        {
            assert!(
                Instant::now() < deadline,
                "the replica never got mark {mark}"
            );
            thread::sleep(Duration::from_millis(10));
        }
        let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut self.p).unwrap();
        keys.sort();
        let mut theirs: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut self.r).unwrap();
        theirs.sort();
        assert_eq!(keys.len(), theirs.len(), "the replica holds other keys");
        assert!(keys == theirs, "the replica holds other keys");
        for k in keys {
            assert_eq!(state(&mut self.p, &k), state(&mut self.r, &k));
        }
    }

    fn dbsize(&mut self) -> i64 {
        redis::cmd("DBSIZE").query(&mut self.p).unwrap()
    }
}

/// A key's value (a string's bytes, a sorted set's members and scores) and its expiry.
fn state(c: &mut Connection, key: &[u8]) -> (Value, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let value = match kind.as_str() {
        "zset" => call(c, &[&b"ZRANGE"[..], key, b"0", b"-1", b"WITHSCORES"]).unwrap(),
        _ => call(c, &[&b"GET"[..], key]).unwrap(),
    };
    let exp: i64 = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    (value, exp)
}

/// `f` run while another connection sends `PING` after `PING`: its result and the
/// longest a `PING` waited meanwhile (reported; the pass condition is the `PING` after).
fn while_pinging<T>(port: u16, f: impl FnOnce() -> T) -> (T, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut c = connect(port);
    let flag = stop.clone();
    let pinger = thread::spawn(move || {
        let mut longest = Duration::ZERO;
        while !flag.load(Ordering::Relaxed) {
            let t = Instant::now();
            if redis::cmd("PING").query::<String>(&mut c).is_err() {
                break;
            }
            longest = longest.max(t.elapsed());
        }
        longest
    });
    let out = f();
    stop.store(true, Ordering::Relaxed);
    (out, pinger.join().unwrap())
}

/// Finding 1: an `FG.DECIDE` naming one 1 MiB value 64 times, for each algorithm, is
/// answered `WRONGTYPE` without a copy of the value per check (the server's allocator
/// makes no allocation of 1 MiB or more for it), and the same key named 64 times with a
/// state is written once, as on the replica.
#[test]
fn a_large_value_named_many_times_is_read_in_place() {
    let mut s = Servers::start();
    let big = vec![b'x'; 1 << 20];
    call(&mut s.p, &[&b"SET"[..], b"big", &big]).unwrap();
    s.same_on_replica();
    let before = s.used_memory();
    let allocs = s.large_allocations(1 << 20);
    let mut h = s.hostile();
    let (errors, longest) = while_pinging(s.port, || {
        ALGS.iter()
            .map(|alg| {
                let cmd = format!(
                    "FG.DECIDE {}all redis 0",
                    group("big", alg, 1, "0").repeat(64)
                );
                err(&mut h, &words(&cmd))
            })
            .collect::<Vec<_>>()
    });
    drop(h);
    for (alg, e) in ALGS.iter().zip(&errors) {
        assert!(e.contains("WRONGTYPE"), "alg {alg}: {e}");
    }
    if let (Some(a), Some(b)) = (allocs, s.large_allocations(1 << 20)) {
        eprintln!(
            "allocations of 1 MiB or more during the 6 calls of 64 checks: {}",
            b - a
        );
        assert!(
            b - a < 6,
            "{} allocations of 1 MiB or more for 6 calls naming a 1 MiB value 64 times",
            b - a
        );
    }
    eprintln!("longest PING while the calls ran: {longest:?}");
    s.recovered("a large value named 64 times", before, 1 << 20);
    assert_eq!(
        call(&mut s.p, &["STRLEN", "big"]).unwrap(),
        Value::Int(1 << 20)
    );
    assert_eq!(s.dbsize(), 2, "big and the marker, nothing else");
    // a state named 64 times: each check sees the earlier ones' charge, one write
    let mut c = s.hostile();
    let cmd = format!(
        "FG.DECIDE {}all redis 0",
        group("k", "2 100 60000000000 0 0", 1, "0").repeat(64)
    );
    let ints = array(call(&mut c, &words(&cmd)));
    assert_eq!(ints[0], Value::Int(1), "all 64 admitted");
    // the last check's remaining: 100 - 64
    assert_eq!(ints[1 + 63 * 8 + 3], Value::Int(36));
    let v = bulk(call(&mut s.p, &["GET", "k"]));
    assert!(v.ends_with(b" 64"), "{}", String::from_utf8_lossy(&v));
    s.same_on_replica();
}

/// Finding 2: thousands of keys in one call are refused at once with an error naming the
/// cap (`FG.DECIDE` and `FG.MULTI`), writing nothing; a key repeated among a thousand is
/// found; a call at the cap with every key named twice writes each key once.
#[test]
fn thousands_of_keys_are_refused_and_the_cap_is_served() {
    let mut s = Servers::start();
    s.same_on_replica();
    let before = s.used_memory();
    let mut h = s.hostile();
    let fw = "2 5 60000000000 0 0";
    let ((decide, multi, twice), longest) = while_pinging(s.port, || {
        let many: String = (0..4000)
            .map(|i| group(&format!("k{i}"), fw, 1, "0"))
            .collect();
        let decide = call(&mut h, &words(&format!("FG.DECIDE {many}all redis 0")));
        let many: String = (0..4000).map(|i| format!("gcra m{i} 10/min 1 ")).collect();
        let multi = call(&mut h, &words(&format!("FG.MULTI 4000 {many}")));
        let mut few: String = (0..1000).map(|i| format!("gcra m{i} 10/min 1 ")).collect();
        few.push_str("gcra m500 10/min 1");
        let twice = call(&mut h, &words(&format!("FG.MULTI 1001 {few}")));
        (decide, multi, twice)
    });
    drop(h);
    eprintln!("longest PING while the calls ran: {longest:?}");
    assert_eq!(s.dbsize(), 1, "nothing written, only the marker");
    s.same_on_replica();
    s.recovered("thousands of keys", before, 1 << 20);
    let (decide, multi, twice) = (error_of(decide), error_of(multi), error_of(twice));
    assert!(
        decide.contains("FG.DECIDE takes at most 1024 checks per call, got 4000"),
        "{decide}"
    );
    assert!(
        multi.contains("FG.MULTI takes at most 1024 policies per call, got 4000"),
        "{multi}"
    );
    assert!(twice.contains("key \"m500\" appears twice"), "{twice}");
    // at the cap: 512 keys, each named twice (limit 5: both admitted), each written once
    let mut c = s.hostile();
    let at_cap: String = (0..1024)
        .map(|i| group(&format!("c{}", i % 512), fw, 1, "0"))
        .collect();
    let ints = array(call(
        &mut c,
        &words(&format!("FG.DECIDE {at_cap}all redis 0")),
    ));
    assert_eq!(ints[0], Value::Int(1));
    assert_eq!(s.dbsize(), 1 + 512);
    let v = bulk(call(&mut s.p, &["GET", "c7"]));
    assert!(v.ends_with(b" 2"), "{}", String::from_utf8_lossy(&v));
    s.same_on_replica();
}

/// Finding 3: an `FG.DECIDE ... all` whose later check pads its expiry past the bound is
/// refused before anything is written, for each algorithm (earlier keys keep their value
/// and expiry, on the replica too); `FG.RESERVE` and `FG.SETTLE` likewise; the bound
/// itself is served, with an expiry Redis and the replica hold.
#[test]
fn an_expiry_out_of_range_writes_nothing() {
    let mut s = Servers::start();
    let mut c = s.hostile();
    // a key in use before the hostile calls, for each algorithm
    for (i, alg) in ALGS.iter().enumerate() {
        let cmd = format!(
            "FG.DECIDE {}one redis 0",
            group(&format!("a{i}"), alg, 1, "1000")
        );
        call(&mut c, &words(&cmd)).unwrap();
    }
    s.same_on_replica();
    let held: Vec<_> = (0..6)
        .map(|i| state(&mut s.p, format!("a{i}").as_bytes()))
        .collect();
    let keys = s.dbsize();
    let before = s.used_memory();
    let mut answers = Vec::new();
    for pad in ["18446744073709551615", "315360000001"] {
        for (i, alg) in ALGS.iter().enumerate() {
            let all = format!(
                "FG.DECIDE {}{}all redis 0",
                group(&format!("a{i}"), alg, 1, "0"),
                group(&format!("b{i}"), alg, 1, pad)
            );
            let reserve = format!("FG.RESERVE {}redis 0", group(&format!("a{i}"), alg, 1, pad));
            let settle = format!(
                "FG.SETTLE {}1700000000 0 2 redis 0",
                group(&format!("a{i}"), alg, 1, pad)
            );
            for cmd in [all, reserve, settle] {
                let answer = call(&mut c, &words(&cmd));
                answers.push((cmd, answer));
            }
        }
    }
    drop(c);
    for (i, h) in held.iter().enumerate() {
        let now = state(&mut s.p, format!("a{i}").as_bytes());
        assert_eq!(&now, h, "a{i} unchanged");
    }
    assert_eq!(s.dbsize(), keys, "no key written");
    s.same_on_replica();
    s.recovered("expiries out of range", before, 1 << 20);
    for (cmd, answer) in answers {
        let e = error_of(answer);
        assert!(
            e.contains("pad_ms must be at most 315360000000 (ten years)"),
            "{cmd}: {e}"
        );
        if cmd.starts_with("FG.DECIDE") {
            assert!(e.contains("(check 2)"), "{cmd}: {e}");
        }
    }
    // the bound itself: a key living ten years more, as on the replica
    let mut c = s.hostile();
    let cmd = format!(
        "FG.DECIDE {}all redis 0",
        group("far", ALGS[1], 1, "315360000000")
    );
    call(&mut c, &words(&cmd)).unwrap();
    let (_, exp) = state(&mut s.p, b"far");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(exp > now_ms + 315_360_000_000, "{exp}");
    s.same_on_replica();
}

/// Finding 4: `FG.ACQUIRE` and `FG.RENEW` padding the key's expiry past the bound are
/// refused before the lease is written: no key without an expiry, a set in use unchanged,
/// on the replica too.
#[test]
fn a_lease_padded_out_of_range_is_not_kept() {
    let mut s = Servers::start();
    s.same_on_replica();
    let before = s.used_memory();
    let mut c = s.hostile();
    for pad in ["18446744073709551615", "315360000001"] {
        let cmd = format!("FG.ACQUIRE l 7 3 60000000 {pad} redis");
        let answer = call(&mut c, &words(&cmd));
        let kept = state(&mut s.p, b"l");
        assert_eq!(s.dbsize(), 1, "{cmd}: no lease kept, found {kept:?}");
        let e = error_of(answer);
        assert!(e.contains("pad_ms must be at most 315360000000"), "{e}");
    }
    // a set in use: a lease, then hostile renewals and acquisitions
    call(&mut c, &words("FG.ACQUIRE l 7 3 60000000 0 redis")).unwrap();
    let held = state(&mut s.p, b"l");
    assert!(held.1 > 0, "the set has an expiry");
    for pad in ["18446744073709551615", "315360000001"] {
        for cmd in [
            format!("FG.RENEW l 7 90000000 {pad} redis"),
            format!("FG.ACQUIRE l 8 3 60000000 {pad} redis"),
        ] {
            let answer = call(&mut c, &words(&cmd));
            let now = state(&mut s.p, b"l");
            assert_eq!(now, held, "{cmd}: the set and its expiry unchanged");
            let e = error_of(answer);
            assert!(e.contains("pad_ms must be at most"), "{cmd}: {e}");
        }
    }
    drop(c);
    s.same_on_replica();
    s.recovered("leases padded out of range", before, 1 << 20);
}

/// Finding 5: algorithm and rate words of a megabyte are refused before they are read
/// (`FG.THROTTLE`, `FG.MULTI`), so the policy cache keeps nothing of them: after 16 such
/// calls and a `FLUSHALL` the server's memory is where it was. Words with spaces around
/// them within the bound are served.
#[test]
fn megabyte_policy_words_are_refused_and_not_kept() {
    let mut s = Servers::start();
    let mut c = s.hostile();
    call(&mut c, &["FG.THROTTLE", " gcra ", "k", " 10/min\t"]).unwrap();
    call(&mut c, &["FG.THROTTLE", "gcra", "k", "10/min"]).unwrap();
    drop(c);
    call(&mut s.p, &["FLUSHALL"]).unwrap();
    s.same_on_replica();
    let before = s.used_memory();
    let mut h = s.hostile();
    let (answers, longest) = while_pinging(s.port, || {
        let mut answers = Vec::new();
        for i in 0..16 {
            let alg = format!("gcra{}", " ".repeat((1 << 20) + i));
            let rate = format!("{}10/min", " ".repeat((1 << 20) + i));
            let said = format!("algorithm must be at most 64 bytes, got {}", alg.len());
            answers.push((call(&mut h, &["FG.THROTTLE", &alg, "k", &rate]), said));
            let said = "rate must be at most 64 bytes".to_string();
            answers.push((call(&mut h, &["FG.THROTTLE", "gcra", "k", &rate]), said));
            let said = "must be at most 64 bytes".to_string();
            let multi = call(&mut h, &["FG.MULTI", "1", &alg, "k", &rate, "1"]);
            answers.push((multi, said));
        }
        answers
    });
    drop(h);
    eprintln!("longest PING while the calls ran: {longest:?}");
    call(&mut s.p, &["FLUSHALL"]).unwrap();
    s.recovered("megabyte policy words", before, 2 << 20);
    s.same_on_replica();
    assert_eq!(s.dbsize(), 1, "only the marker");
    for (answer, said) in answers {
        let e = error_of(answer);
        assert!(e.contains(&said), "{e}");
    }
}

/// Finding 6: `FG.DECIDE`'s sliding log takes a limit of at most 10 000, as
/// `FG.THROTTLE`'s; above it the call is refused and writes nothing.
#[test]
fn a_sliding_log_above_its_bound_is_refused() {
    let mut s = Servers::start();
    s.same_on_replica();
    let before = s.used_memory();
    let mut c = s.hostile();
    let mut answers = Vec::new();
    for limit in ["10001", "9223372036854775807"] {
        let alg = format!("3 {limit} 60000000000 0 0");
        for cmd in [
            format!("FG.DECIDE {}one redis 0", group("log", &alg, 1, "0")),
            format!(
                "FG.DECIDE {}{}all redis 0",
                group("ok", ALGS[2], 1, "0"),
                group("log", &alg, 1, "0")
            ),
            format!("FG.RESERVE {}redis 0", group("log", &alg, 1, "0")),
        ] {
            let answer = call(&mut c, &words(&cmd));
            answers.push((cmd, answer));
        }
    }
    let e = err(&mut c, &["FG.THROTTLE", "sliding-log", "log", "10001/min"]);
    assert!(e.contains("its limit must be at most 10000"), "{e}");
    drop(c);
    assert_eq!(s.dbsize(), 1, "nothing written, only the marker");
    s.same_on_replica();
    s.recovered("sliding logs above the bound", before, 1 << 20);
    for (cmd, answer) in answers {
        let e = error_of(answer);
        assert!(e.contains("its limit must be at most 10000"), "{cmd}: {e}");
    }
    // the bound itself is served
    let mut c = s.hostile();
    let cmd = format!(
        "FG.DECIDE {}one redis 0",
        group("log", "3 10000 60000000000 0 0", 1, "0")
    );
    call(&mut c, &words(&cmd)).unwrap();
    assert_eq!(s.dbsize(), 2);
    s.same_on_replica();
}
