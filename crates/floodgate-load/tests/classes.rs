//! Traffic classes, Poisson arrivals and goodput against a real HTTP server on
//! 127.0.0.1 that answers by class: the header reaches the server with the mix's values,
//! and the report's per-class rows agree with what the server counted.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use common::serve;
use floodgate_load::{Arrivals, Bound, ClassMix, LoadConfig, run};
use parking_lot::Mutex;

/// critical and default get 200, sheddable 429, anything else 400; counts per value.
async fn class_server() -> (std::net::SocketAddr, Arc<Mutex<HashMap<String, u64>>>) {
    let seen: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let s = seen.clone();
    let app = Router::new().fallback(move |h: HeaderMap| {
        let s = s.clone();
        async move {
            let class = h
                .get("x-priority")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            *s.lock().entry(class.clone()).or_default() += 1;
            match class.as_str() {
                "critical" | "default" => StatusCode::OK,
                "sheddable" => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::BAD_REQUEST,
            }
        }
    });
    let (addr, _) = serve(app).await;
    (addr, seen)
}

fn config(addr: std::net::SocketAddr, n: u64, arrivals: Arrivals, seed: u64) -> LoadConfig {
    let mut cfg = LoadConfig::new(format!("http://{addr}/"), Bound::Count(n)).open_loop(5000.0);
    cfg.concurrency = 8;
    cfg.arrivals = arrivals;
    cfg.seed = seed;
    cfg.classes =
        Some(ClassMix::parse("x-priority", "critical=0.2,default=0.5,sheddable=0.3").unwrap());
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_class_is_reported_as_the_server_answered_it() {
    let (addr, seen) = class_server().await;
    let r = run(&config(addr, 1000, Arrivals::Uniform, 7))
        .await
        .unwrap();
    let seen = seen.lock().clone();
    assert_eq!(
        seen.get(""),
        None,
        "every request carried a class: {seen:?}"
    );
    let g = &r.goodput;
    assert_eq!(g.class_header.as_deref(), Some("x-priority"));
    let names: Vec<&str> = g.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["critical", "default", "sheddable"]);
    for c in &g.classes {
        assert_eq!(c.requests, seen[&c.name], "{c:?}");
        assert_eq!(c.errors, 0, "{c:?}");
    }
    let (crit, def, shed) = (&g.classes[0], &g.classes[1], &g.classes[2]);
    assert_eq!((crit.success_rate, def.success_rate), (1.0, 1.0));
    assert_eq!(
        (shed.succeeded, shed.denied, shed.success_rate),
        (0, shed.requests, 0.0)
    );
    assert_eq!(shed.success_latency.count, 0);
    // the mix is 20/50/30: each class got some, sheddable's share of 1000 not all
    assert!(crit.requests > 0 && def.requests > crit.requests && shed.requests > 0);
    assert_eq!(g.requests, 1000);
    assert_eq!(g.succeeded, crit.requests + def.requests);
    assert_eq!(
        g.succeeded_in_window, g.succeeded,
        "a count run has no tail"
    );
    assert!((g.success_rate - g.succeeded as f64 / 1000.0).abs() < 1e-12);
    assert_eq!(g.success_latency.count, g.succeeded);
    let text = r.render_text();
    for part in [
        "Goodput",
        "class (x-priority)",
        "critical",
        "sheddable",
        "0.0%",
    ] {
        assert!(text.contains(part), "{part} in\n{text}");
    }
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["goodput"]["classes"][2]["name"], "sheddable");
    assert_eq!(json["arrivals"], "uniform");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisson_arrivals_send_every_request_and_a_seed_repeats_the_mix() {
    let (addr, _) = class_server().await;
    let a = run(&config(addr, 400, Arrivals::Poisson, 3)).await.unwrap();
    let b = run(&config(addr, 400, Arrivals::Poisson, 3)).await.unwrap();
    let c = run(&config(addr, 400, Arrivals::Poisson, 4)).await.unwrap();
    assert_eq!((a.requests, a.responses), (400, 400));
    assert_eq!(a.arrivals, "poisson");
    assert!(a.render_text().contains("Poisson arrivals at 5000 req/s"));
    let counts = |r: &floodgate_load::Report| -> Vec<u64> {
        r.goodput.classes.iter().map(|c| c.requests).collect()
    };
    assert_eq!(counts(&a), counts(&b));
    assert_ne!(counts(&a), counts(&c));
}

#[test]
fn poisson_needs_open_loop_at_a_rate() {
    let mut cfg = LoadConfig::new("http://127.0.0.1:1/", Bound::Count(10));
    cfg.arrivals = Arrivals::Poisson;
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("Poisson arrivals are open loop"), "{e}");
    let sched = LoadConfig::scheduled("http://127.0.0.1:1/", vec![std::time::Duration::ZERO]);
    let e = LoadConfig {
        arrivals: Arrivals::Poisson,
        ..sched
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("not with --closed-loop or a schedule"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_from_the_intended_time_fails_what_a_late_generator_would_have_passed() {
    // one connection, 50 ms per response, a request due every 10 ms: each request waits
    // for the ones before it, so the generator falls further behind with every request
    let addr = common::slow_server(std::time::Duration::from_millis(50)).await;
    let cfg = |from_intended: bool| {
        let mut c = LoadConfig::new(format!("http://{addr}/"), Bound::Count(20)).open_loop(100.0);
        c.concurrency = 1;
        c.timeout = std::time::Duration::from_millis(150);
        c.timeout_from_intended = from_intended;
        c
    };
    let from_send = run(&cfg(false)).await.unwrap();
    assert_eq!(
        (from_send.goodput.succeeded, from_send.errors.timeout),
        (20, 0)
    );
    let from_intended = run(&cfg(true)).await.unwrap();
    assert!(
        from_intended.errors.timeout > 0,
        "{:?}",
        from_intended.errors
    );
    assert!(from_intended.goodput.succeeded < 20);
    assert_eq!(from_intended.goodput.requests, 20);
}

#[test]
fn a_timeout_from_the_intended_time_is_open_loop_and_naive() {
    let mut cfg = LoadConfig::new("http://127.0.0.1:1/", Bound::Count(10));
    cfg.timeout_from_intended = true;
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("open loop and naive"), "{e}");
    let polite = LoadConfig {
        timeout_from_intended: true,
        ..LoadConfig::new("http://127.0.0.1:1/", Bound::Count(10)).open_loop(10.0)
    }
    .polite(floodgate_load::PoliteConfig::default());
    assert!(polite.validate().is_err());
}
