//! `floodgate throttle` as a user runs it, against the shared Redis on 127.0.0.1:6379.

use std::process::Command;

fn throttle(prefix: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("throttle")
        .args(args)
        .args(["--prefix", prefix])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

fn prefix(name: &str) -> String {
    format!("fgtest:cli:{name}:{}:", std::process::id())
}

/// Every key under `prefix` has a TTL; then delete them.
fn cleanup(prefix: &str) {
    let keys = Command::new("redis-cli")
        .args(["--scan", "--pattern", &format!("{prefix}*")])
        .output()
        .unwrap();
    for k in String::from_utf8_lossy(&keys.stdout).lines() {
        let pttl = Command::new("redis-cli")
            .args(["pttl", k])
            .output()
            .unwrap();
        let pttl: i64 = String::from_utf8_lossy(&pttl.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(pttl > 0, "{k} has no TTL ({pttl})");
        Command::new("redis-cli").args(["del", k]).output().unwrap();
    }
}

#[test]
fn prints_redis_cells_five_integers() {
    let p = prefix("five");
    assert_eq!(
        throttle(&p, &["user123", "15", "30", "60"]).1,
        "0 16 15 -1 2"
    );
    assert_eq!(
        throttle(&p, &["user123", "15", "30", "60"]).1,
        "0 16 14 -1 3" // 3.99... s to full capacity, truncated as redis-cell truncates
    );
    assert_eq!(
        throttle(&p, &["fresh", "15", "30", "60", "0"]).1,
        "0 16 16 -1 0"
    );
    assert_eq!(throttle(&p, &["k", "4", "1", "1", "6"]).1, "1 5 5 -1 0");
    cleanup(&p);
}

#[test]
fn bad_arguments_are_named() {
    let p = prefix("bad");
    for (args, needle) in [
        (
            vec!["k", "15", "3o", "60"],
            "count must be an integer, got \"3o\"",
        ),
        (
            vec!["k", "x", "30", "60"],
            "max_burst must be an integer, got \"x\"",
        ),
        (
            vec!["k", "15", "30", "60", "1.5"],
            "quantity must be an integer, got \"1.5\"",
        ),
        (
            vec!["k", "15", "30", "99999999999999999999"],
            "period must be an integer",
        ),
        (
            vec!["k", "15", "0", "60"],
            "zero rates are not supported (count is 0)",
        ),
        (
            vec!["k", "15", "30", "0"],
            "zero rates are not supported (period is 0)",
        ),
        (
            vec!["k", "15", "30", "60", "-1"],
            "quantity must not be negative, got -1",
        ),
        (
            vec!["k", "-2", "30", "60"],
            "max_burst must not be negative",
        ),
    ] {
        let (code, out, err) = throttle(&p, &args);
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let (code, _, err) = throttle(&p, &["k", "1", "1", "1", "--redis", "redis://127.0.0.1:1"]);
    assert_eq!(code, 1, "a runtime failure: {err}");
    assert!(
        err.contains("cannot connect to Redis at redis://127.0.0.1:1"),
        "{err}"
    );
    cleanup(&p);
}

/// 24 processes at once on one key (limit 10, one per hour) admit exactly 10.
#[test]
fn processes_share_one_limit_exactly() {
    let p = prefix("procs");
    let handles: Vec<_> = (0..24)
        .map(|_| {
            let p = p.clone();
            std::thread::spawn(move || throttle(&p, &["shared", "9", "1", "3600"]))
        })
        .collect();
    let replies: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(replies.iter().all(|r| r.0 == 0), "{replies:?}");
    let admitted = replies.iter().filter(|r| r.1.starts_with("0 ")).count();
    assert_eq!(admitted, 10, "{replies:?}");
    cleanup(&p);
}
