//! floodgate-load against real HTTP servers on 127.0.0.1: counts, rate, coordinated
//! omission, the boundary verdict, errors.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use floodgate_load::{Bound, LoadConfig, LoadError, Mode, run};

fn url(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_and_status_counts_are_exact() {
    let (addr, arrivals) = mix_server().await;
    let mut cfg = LoadConfig::new(url(addr), Bound::Count(300));
    cfg.concurrency = 7;
    let r = run(&cfg).await.unwrap();
    assert_eq!(r.requests, 300);
    assert_eq!(r.responses, 300);
    assert_eq!(arrivals.count.load(Ordering::SeqCst), 300);
    assert_eq!(r.status(200), 200);
    assert_eq!(r.status(429), 100);
    assert_eq!(r.statuses.len(), 2);
    assert_eq!((r.admitted(), r.denied()), (200, 100));
    assert_eq!(r.latency.all.count, 300);
    assert_eq!(r.latency.status_200.count, 200);
    assert_eq!(r.latency.denied.count, 100);
    assert_eq!(r.latency.other.count, 0);
    let sent: u64 = r.timeline.buckets.iter().map(|b| b.sent).sum();
    let denied: u64 = r.timeline.buckets.iter().map(|b| b.denied).sum();
    assert_eq!((sent, denied), (300, 100));
    // What the server advertised: every response carried RateLimit-Policy and RateLimit,
    // every 429 a Retry-After.
    let adv = |name: &str| r.advertised.iter().find(|h| h.header == name).unwrap();
    assert_eq!(adv("ratelimit-policy").responses, 300);
    assert_eq!(adv("ratelimit-policy").last, "\"mix\";q=2;w=3");
    assert_eq!(adv("ratelimit").responses, 300);
    assert_eq!(adv("retry-after").responses, 100);
    assert_eq!(r.advertised_window_s, Some(3));
    let text = r.render_text();
    assert!(text.contains("[200] 200  [429] 100"), "{text}");
    assert!(text.contains("run again with --window 3s"), "{text}");
    // JSON for machines.
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["statuses"]["429"], 100);
    assert_eq!(json["mode"], "closed-loop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_sends_at_the_asked_rate() {
    let (addr, arrivals) = ok_server().await;
    let mut cfg =
        LoadConfig::new(url(addr), Bound::Duration(Duration::from_secs(2))).open_loop(200.0);
    cfg.concurrency = 4;
    let r = run(&cfg).await.unwrap();
    // 200/s for 2 s: intended times 0, 5 ms, ..., 1995 ms.
    assert_eq!(r.requests, 400);
    assert_eq!(r.status(200), 400);
    let times = arrivals.times.lock().clone();
    assert_eq!(times.len(), 400);
    let span = (*times.last().unwrap() - times[0]).as_secs_f64();
    let rate = (times.len() - 1) as f64 / span;
    assert!(
        (rate - 200.0).abs() < 200.0 * 0.03,
        "server saw {rate:.1}/s"
    );
    let first_second = times
        .iter()
        .filter(|t| **t - times[0] < Duration::from_secs(1))
        .count();
    assert!(
        (194..=206).contains(&first_second),
        "{first_second} in the first second"
    );
    assert!(
        (r.send_rate - 200.0).abs() < 6.0,
        "send rate {}",
        r.send_rate
    );
    let lag = r.send_lag.unwrap();
    assert!(lag.p50_ms < 5.0, "send lag {lag:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_shows_in_corrected_latency_and_closed_loop_hides_it() {
    let stall = Duration::from_secs(1);
    // Open loop, 100/s for 3 s over 2 connections; the server stalls for 1 s at request 50.
    let addr = stall_server(50, stall).await;
    let mut open =
        LoadConfig::new(url(addr), Bound::Duration(Duration::from_secs(3))).open_loop(100.0);
    open.concurrency = 2;
    let o = run(&open).await.unwrap();
    assert_eq!(o.requests, 300);
    assert_eq!(o.latency.measured_from, "intended send time");
    let p = o.latency.all;
    assert!(p.max_ms >= 950.0, "{p:?}");
    // About 100 requests were due during the stall, waiting 1 s down to 0: a third of all.
    assert!(
        p.p90_ms >= 500.0,
        "corrected p90 must show the stall: {p:?}"
    );
    assert!(p.p50_ms < 100.0, "{p:?}");

    // Closed loop, same pacing: only the requests in flight at the stall see it.
    let addr = stall_server(50, stall).await;
    let mut closed = open.clone();
    closed.url = url(addr);
    closed.mode = Mode::ClosedLoop;
    let c = run(&closed).await.unwrap();
    assert_eq!(c.latency.measured_from, "actual send time");
    let q = c.latency.all;
    assert!(q.max_ms >= 950.0, "{q:?}");
    assert!(q.p90_ms < 50.0, "closed loop hides the stall: {q:?}");
    assert!(
        c.requests < 260,
        "closed loop skipped the slots it missed: {}",
        c.requests
    );
}

fn boundary_cfg(addr: std::net::SocketAddr) -> LoadConfig {
    // 50/s against 10 per 1 s: five times over the limit, for 4 s; near = 200 ms.
    let mut cfg =
        LoadConfig::new(url(addr), Bound::Duration(Duration::from_secs(4))).open_loop(50.0);
    cfg.concurrency = 4;
    cfg.window = Some(Duration::from_secs(1));
    cfg.near = Duration::from_millis(200);
    cfg.bucket = Duration::from_millis(250);
    // Start half a window after a whole second: a run that began just before a boundary
    // would find the window fresh there and have its first "just before" requests
    // admitted, which is the limiter being honest, not a flaky verdict.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let start = Duration::from_secs(now.as_secs() + 1) + Duration::from_millis(500);
    cfg.start_at = Some(std::time::UNIX_EPOCH + start);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boundary_verdict_flags_a_fixed_window() {
    let addr = limited_server(fixed_window(10, Duration::from_secs(1)), "\"fw\";q=10;w=1").await;
    let r = run(&boundary_cfg(addr)).await.unwrap();
    assert_eq!(r.requests, 200);
    let v = r.boundary.as_ref().unwrap();
    assert!(v.flagged, "{}", r.render_text());
    assert_eq!(v.verdict, "boundary effect");
    assert!(v.admit_rate_after > 0.9, "{v:?}");
    assert!(v.admit_rate_before < 0.1, "{v:?}");
    assert!((3..=5).contains(&v.boundaries), "{v:?}");
    assert!((v.time_share_near - 0.4).abs() < 0.05, "{v:?}");
    // Boundaries are at whole seconds of the wall clock: every 4th 250 ms bucket.
    let marked: Vec<f64> = r
        .timeline
        .buckets
        .iter()
        .filter(|b| b.boundary_at_start)
        .map(|b| b.start_unix_s)
        .collect();
    assert!(marked.len() >= 3);
    assert!(
        marked.iter().all(|t| (t - t.round()).abs() < 1e-6),
        "{marked:?}"
    );
    assert!(r.timeline.buckets.iter().all(|b| b.boundaries_inside == 0));
    assert_eq!(r.timeline.boundaries_s.len(), marked.len());
    let text = r.render_text();
    assert!(text.contains("verdict: BOUNDARY EFFECT"), "{text}");
    assert!(text.contains("===== boundary at"), "{text}");
    // The plot.
    let dir = std::env::temp_dir().join(format!("floodgate-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("fixed.svg");
    floodgate_load::svg::plot_timeline(&r, "fixed window 10/1s", &svg).unwrap();
    let body = std::fs::read_to_string(&svg).unwrap();
    assert!(
        body.starts_with("<svg") && body.contains("window boundary"),
        "{body}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boundary_verdict_does_not_flag_gcra() {
    let addr = limited_server(gcra(10, 2), "\"gcra\";q=2;w=1").await;
    let r = run(&boundary_cfg(addr)).await.unwrap();
    assert_eq!(r.requests, 200);
    let v = r.boundary.as_ref().unwrap();
    assert!(!v.flagged, "{}", r.render_text());
    assert_eq!(v.verdict, "no boundary effect");
    // GCRA at 10/s admits about 10 of the 50 sent each second, wherever the boundary is.
    let admitted = r.admitted();
    assert!((38..=46).contains(&admitted), "{admitted} admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_refused_connections_are_counted_by_kind() {
    let addr = slow_server(Duration::from_secs(3)).await;
    let mut cfg = LoadConfig::new(url(addr), Bound::Count(4));
    cfg.concurrency = 2;
    cfg.timeout = Duration::from_millis(200);
    let r = run(&cfg).await.unwrap();
    assert_eq!((r.requests, r.responses, r.errors.timeout), (4, 0, 4));
    assert!(r.elapsed_s < 1.5, "{}", r.elapsed_s);

    let (addr, server) = closing_server().await;
    let mut cfg =
        LoadConfig::new(url(addr), Bound::Duration(Duration::from_millis(1500))).open_loop(40.0);
    cfg.concurrency = 1;
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.abort();
    });
    let r = run(&cfg).await.unwrap();
    killer.await.unwrap();
    assert_eq!(r.requests, 60);
    assert!(r.status(200) >= 10, "{}", r.render_text());
    assert!(r.errors.connect_refused >= 10, "{}", r.render_text());
    assert_eq!(
        r.requests,
        r.status(200) + r.errors.connect_refused + r.errors.other
    );
    assert!(
        r.errors.examples.iter().any(|e| e.contains("refused")),
        "{:?}",
        r.errors.examples
    );
}

#[tokio::test]
async fn bad_input_gives_clear_errors() {
    // Unreachable: a port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = LoadConfig::new(format!("http://127.0.0.1:{port}/"), Bound::Count(1));
    let e = run(&cfg).await.unwrap_err();
    assert!(matches!(e, LoadError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(e.to_string().contains("is the server running"), "{e}");

    let expect = |url: &'static str, needle: &'static str| {
        let cfg = LoadConfig::new(url, Bound::Count(1));
        async move {
            let e = run(&cfg).await.unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    };
    expect("127.0.0.1:8080", "invalid URL").await;
    expect("http://", "invalid URL").await;
    expect("not a url", "invalid URL").await;
    expect("https://127.0.0.1/", "unsupported scheme \"https\"").await;
    // Never contacted: a documentation address (TEST-NET-1) is refused before any I/O.
    expect("http://192.0.2.1/", "not a loopback address").await;
    expect("http://192.0.2.1/", "--allow-host 192.0.2.1").await;

    let ok = "http://127.0.0.1:1/";
    let check = |cfg: LoadConfig, needle: &'static str| async move {
        let e = run(&cfg).await.unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    };
    check(
        LoadConfig::new(ok, Bound::Count(1)).open_loop(0.0),
        "invalid rate (-q)",
    )
    .await;
    check(
        LoadConfig::new(ok, Bound::Count(1)).open_loop(f64::NAN),
        "invalid rate (-q)",
    )
    .await;
    check(
        LoadConfig::new(ok, Bound::Count(1)).open_loop(-5.0),
        "invalid rate (-q)",
    )
    .await;
    check(LoadConfig::new(ok, Bound::Count(0)), "invalid count (-n)").await;
    check(LoadConfig::new(ok, Bound::Count(u64::MAX)), "above the cap").await;
    check(
        LoadConfig::new(ok, Bound::Duration(Duration::from_secs(86_400))),
        "invalid duration (-z)",
    )
    .await;
    check(
        LoadConfig::new(ok, Bound::Duration(Duration::ZERO)),
        "invalid duration",
    )
    .await;
    let mut c = LoadConfig::new(ok, Bound::Count(1));
    c.concurrency = 0;
    check(c, "invalid concurrency (-c)").await;
    let mut c = LoadConfig::new(ok, Bound::Count(1));
    c.mode = Mode::OpenLoop;
    check(c, "open loop needs a rate").await;
    let mut c = LoadConfig::new(ok, Bound::Count(1));
    c.window = Some(Duration::from_secs(1));
    c.near = Duration::from_millis(600);
    check(c, "at most half the window").await;
    let mut c = LoadConfig::new(ok, Bound::Count(1));
    c.window_offset = Duration::from_secs(1);
    check(c, "--window-offset needs --window").await;
    let mut c = LoadConfig::new(ok, Bound::Count(1));
    c.timeout = Duration::ZERO;
    check(c, "invalid timeout (-t)").await;
    let mut c = LoadConfig::new(ok, Bound::Count(1));
    c.deny_statuses = vec![1000];
    check(c, "invalid denial status").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_starts_at_its_wall_clock_instant_and_keeps_its_bursts() {
    let (addr, arrivals) = ok_server().await;
    // one request at 0, five at once at 300 ms, one at 500 ms, starting 400 ms from now
    let mut at = vec![Duration::ZERO];
    at.extend([Duration::from_millis(300); 5]);
    at.push(Duration::from_millis(500));
    let mut cfg = LoadConfig::scheduled(url(addr), at);
    cfg.concurrency = 8;
    let asked = std::time::Instant::now();
    cfg.start_at = Some(std::time::SystemTime::now() + Duration::from_millis(400));
    let r = run(&cfg).await.unwrap();
    assert_eq!((r.requests, r.status(200)), (7, 7));
    let times = arrivals.times.lock().clone();
    let rel: Vec<f64> = times
        .iter()
        .map(|t| (*t - asked).as_secs_f64() * 1000.0)
        .collect();
    // nothing before the start (the connect check sends no request)
    assert!(rel[0] >= 395.0, "first request at {rel:?} ms");
    // the burst arrives together, 300 ms after the first, the last 200 ms later
    let burst = &rel[1..6];
    assert!(
        burst.iter().all(|&t| (t - rel[0] - 300.0).abs() < 60.0),
        "{rel:?}"
    );
    assert!((rel[6] - rel[0] - 500.0).abs() < 60.0, "{rel:?}");
    assert!(r.started_unix_s > 0.0);
}

#[tokio::test]
async fn bad_schedules_are_refused() {
    let (addr, _) = ok_server().await;
    let backwards = LoadConfig::scheduled(
        url(addr),
        vec![Duration::from_millis(5), Duration::from_millis(1)],
    );
    let e = run(&backwards).await.unwrap_err().to_string();
    assert!(e.contains("offsets must be non-decreasing"), "{e}");
    let mut late = LoadConfig::scheduled(url(addr), vec![Duration::ZERO]);
    late.start_at = Some(std::time::SystemTime::now() - Duration::from_secs(1));
    let e = run(&late).await.unwrap_err().to_string();
    assert!(
        e.contains("invalid start time") && e.contains("in the past"),
        "{e}"
    );
    let mut wrong_bound = LoadConfig::scheduled(url(addr), vec![Duration::ZERO; 3]);
    wrong_bound.bound = Bound::Count(2);
    let e = run(&wrong_bound).await.unwrap_err().to_string();
    assert!(e.contains("a schedule of 3 requests"), "{e}");
    let empty = LoadConfig::scheduled(url(addr), vec![]);
    assert!(run(&empty).await.is_err());
}
