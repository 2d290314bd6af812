//! The layer in-process, on tokio's paused clock: exact nginx timings, headers, jitter,
//! allowlist, dry-run, multi-policy, keys and bad input. The limiters come from the
//! proxy's TOML configuration (`floodgate_proxy::config`), hence this crate.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use floodgate_engine::metrics::RequestOutcome;
use floodgate_http::{KeyError, KeySource, PeerAddr, Policy, RateLimiter, RequestInfo};
use floodgate_proxy::config::Config;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::{Service, ServiceExt};

type Arrivals = Arc<Mutex<Vec<Instant>>>;

fn backend(
    arrivals: Arrivals,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_req: Request<Full<Bytes>>| {
        let arrivals = arrivals.clone();
        async move {
            arrivals.lock().unwrap().push(Instant::now());
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }
    })
}

fn limiter(toml: &str) -> RateLimiter {
    Config::parse(toml, Path::new("t.toml"))
        .unwrap()
        .limiter_builder()
        .build()
        .unwrap()
}

fn req(ip: &str, path: &str, headers: &[(&str, &[u8])]) -> Request<Full<Bytes>> {
    let mut b = Request::get(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut r = b.body(Full::new(Bytes::new())).unwrap();
    let addr = SocketAddr::new(ip.parse().unwrap(), 5555);
    r.extensions_mut().insert(PeerAddr(addr));
    r
}

struct Out {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Fire `n` requests at the same instant; returns the responses in order.
async fn burst(
    l: &RateLimiter,
    arrivals: &Arrivals,
    n: usize,
    mk: impl Fn(usize) -> Request<Full<Bytes>>,
) -> Vec<Out> {
    let svc = l.layer().layer_service(backend(arrivals.clone()));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let svc = svc.clone();
            let r = mk(i);
            tokio::spawn(async move {
                let resp = svc.oneshot(r).await.unwrap();
                let (p, b) = resp.into_parts();
                Out {
                    status: p.status,
                    headers: p.headers,
                    body: b.collect().await.unwrap().to_bytes(),
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

trait LayerExt {
    fn layer_service<S>(&self, s: S) -> floodgate_http::RateLimitService<S>;
}
impl LayerExt for floodgate_http::RateLimitLayer {
    fn layer_service<S>(&self, s: S) -> floodgate_http::RateLimitService<S> {
        tower::Layer::layer(self, s)
    }
}

/// The number between `prefix` and `suffix` in a header value; 1..=60 (seconds left in a
/// minute window).
fn window_t(v: &http::HeaderValue, prefix: &str, suffix: &str) -> u64 {
    let v = v.to_str().unwrap();
    let t: u64 = v
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(suffix))
        .unwrap_or_else(|| panic!("{v:?} is not {prefix}T{suffix}"))
        .parse()
        .unwrap();
    assert!((1..=60).contains(&t), "{v}");
    t
}

const NGINX: &str = r#"
[deny]
retry_after_jitter = "0s"
[[policy]]
name = "default"
rate = "10/s"
burst = 20
"#;

#[tokio::test(start_paused = true)]
async fn nginx_nodelay_30_at_once_21_pass_9_rejected() {
    let l = limiter(&format!("{NGINX}nodelay = true\n"));
    let arr = Arrivals::default();
    let t0 = Instant::now();
    let out = burst(&l, &arr, 30, |_| req("192.0.2.1", "/", &[])).await;
    assert_eq!(out.iter().filter(|o| o.status == 200).count(), 21);
    assert_eq!(out.iter().filter(|o| o.status == 429).count(), 9);
    assert!(
        arr.lock().unwrap().iter().all(|t| *t == t0),
        "nodelay: no waiting"
    );
    let denied = out.iter().find(|o| o.status == 429).unwrap();
    assert_eq!(denied.headers["retry-after"], "1"); // 100 ms rounded up, no jitter
    assert_eq!(l.metrics().request_count(RequestOutcome::Rejected), 9);
}

#[tokio::test(start_paused = true)]
async fn nginx_without_nodelay_spaces_the_20_excess_at_100ms() {
    let l = limiter(NGINX);
    let arr = Arrivals::default();
    let t0 = Instant::now();
    let out = burst(&l, &arr, 30, |_| req("192.0.2.1", "/", &[])).await;
    assert_eq!(out.iter().filter(|o| o.status == 200).count(), 21);
    let mut at: Vec<Duration> = arr.lock().unwrap().iter().map(|t| *t - t0).collect();
    at.sort();
    let want: Vec<Duration> = (0..21).map(|i| Duration::from_millis(100 * i)).collect();
    assert_eq!(at, want);
    let delays: Vec<_> = out
        .iter()
        .filter_map(|o| o.headers.get("x-ratelimit-delay-ms"))
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap())
        .collect();
    assert_eq!(delays.len(), 20);
    assert_eq!(delays.iter().max(), Some(&2000));
    assert_eq!(l.metrics().request_count(RequestOutcome::Delayed), 20);
    assert_eq!(l.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn nginx_delay_8_first_9_at_once_next_12_spaced() {
    let l = limiter(&format!("{NGINX}delay = 8\n"));
    let arr = Arrivals::default();
    let t0 = Instant::now();
    let out = burst(&l, &arr, 30, |_| req("192.0.2.1", "/", &[])).await;
    assert_eq!(out.iter().filter(|o| o.status == 200).count(), 21);
    assert_eq!(out.iter().filter(|o| o.status == 429).count(), 9);
    let mut at: Vec<Duration> = arr.lock().unwrap().iter().map(|t| *t - t0).collect();
    at.sort();
    assert!(at[..9].iter().all(|d| d.is_zero()), "{at:?}");
    let spaced: Vec<Duration> = (1..=12).map(|i| Duration::from_millis(100 * i)).collect();
    assert_eq!(&at[9..], &spaced[..]);
}

#[tokio::test(start_paused = true)]
async fn nginx_reference_5rps_burst12_delay8() {
    let l = limiter("[[policy]]\nname = \"d\"\nrate = \"5/s\"\nburst = 12\ndelay = 8\n");
    let arr = Arrivals::default();
    let t0 = Instant::now();
    let out = burst(&l, &arr, 14, |_| req("192.0.2.1", "/", &[])).await;
    assert_eq!(out.iter().filter(|o| o.status == 200).count(), 13);
    let mut at: Vec<u128> = arr
        .lock()
        .unwrap()
        .iter()
        .map(|t| (*t - t0).as_millis())
        .collect();
    at.sort();
    assert_eq!(at, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 200, 400, 600, 800]);
}

#[tokio::test(start_paused = true)]
async fn waiting_queue_is_bounded() {
    let l = limiter(&format!("{NGINX}\n[delay]\nmax_waiting = 5\n"));
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 21, |_| req("192.0.2.1", "/", &[])).await;
    // 1 immediate, 5 held, the other 15 that should wait are turned away
    assert_eq!(out.iter().filter(|o| o.status == 200).count(), 6);
    assert_eq!(l.metrics().request_count(RequestOutcome::QueueFull), 15);
    assert_eq!(l.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn thousand_denials_at_one_instant_get_spread_retry_after() {
    let l = limiter(
        "[deny]\nretry_after_jitter = \"10s\"\n[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"1/min\"\n",
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 1001, |_| req("192.0.2.1", "/", &[])).await;
    let secs: Vec<u64> = out
        .iter()
        .filter(|o| o.status == 429)
        .map(|o| o.headers["retry-after"].to_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(secs.len(), 1000);
    // the true retry is 60 s: none earlier, spread over 60..=70
    assert!(secs.iter().all(|&s| (60..=70).contains(&s)), "{secs:?}");
    let mut hist = [0usize; 11];
    for s in &secs {
        hist[(*s - 60) as usize] += 1;
    }
    assert!(hist[1..].iter().all(|&c| c > 30), "spread: {hist:?}");
    assert!(hist[0] < 100, "few at the true value: {hist:?}");
}

#[tokio::test(start_paused = true)]
async fn header_syntax_on_allowed_and_denied() {
    let l = limiter(
        r#"
[headers]
legacy = "delta"
[[policy]]
name = "per-ip"
algorithm = "fixed-window"
rate = "3/min"
[[policy]]
name = "global"
algorithm = "gcra"
rate = "100/min"
capacity = 100
key = "global"
"#,
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 4, |_| req("192.0.2.1", "/", &[])).await;
    let first = &out[0];
    assert_eq!(first.status, 200);
    // the sustained rates; the bucket's capacity as an extension parameter
    assert_eq!(
        first.headers["ratelimit-policy"],
        r#""per-ip";q=3;w=60, "global";q=100;w=60;floodgate-capacity=100"#
    );
    // over the next minute, at those rates: 3 and 100 (a first request is never ahead)
    assert_eq!(
        first.headers["ratelimit"],
        r#""per-ip";r=3;t=60, "global";r=100;t=60"#
    );
    // the legacy trio: what is left right now, and the rest of this wall-clock minute
    // (fixed windows align to it)
    let t = window_t(&first.headers["x-ratelimit-reset"], "", "");
    assert_eq!(first.headers["x-ratelimit-limit"], "3");
    assert_eq!(first.headers["x-ratelimit-remaining"], "2");
    let denied = &out[3];
    assert_eq!(denied.status, 429);
    // per-ip: nothing until its window ends (the rest of the minute); global: the three
    // admitted at once put it 2 ahead of a steady client (a denied request is not charged)
    assert_eq!(
        denied.headers["ratelimit"],
        format!(r#""per-ip";r=0;t={t}, "global";r=98;t=60"#).as_str()
    );
    assert_eq!(denied.headers["content-type"], "text/plain; charset=utf-8");
    let ra: u64 = denied.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((t..=t + 1).contains(&ra), "{ra} {t}");
    assert!(
        std::str::from_utf8(&denied.body)
            .unwrap()
            .starts_with("429 Too Many Requests")
    );
}

#[tokio::test(start_paused = true)]
async fn problem_json_when_asked_and_status_configurable() {
    let l = limiter(
        "[deny]\nstatus = 503\n[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"1/min\"\n",
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 2, |_| {
        req("192.0.2.1", "/", &[("accept", b"application/problem+json")])
    })
    .await;
    assert_eq!(out[1].status, 503);
    assert_eq!(out[1].headers["content-type"], "application/problem+json");
    let v: serde_json::Value = serde_json::from_slice(&out[1].body).unwrap();
    assert_eq!(v["status"], 503);
    assert_eq!(v["policy"], "p");
    assert!(v["retry_after"].as_u64().unwrap() >= 60);
}

#[tokio::test(start_paused = true)]
async fn multi_policy_all_or_nothing_and_route_costs() {
    let l = limiter(
        r#"
[[policy]]
name = "per-key"
algorithm = "gcra"
rate = "100/min"
capacity = 100
key = "header:x-api-key"
[[policy]]
name = "global"
algorithm = "fixed-window"
rate = "3/min"
key = "global"
[[route]]
prefix = "/search"
policies = ["per-key", "global"]
costs = { per-key = 10 }
[[route]]
prefix = "/"
policies = ["per-key", "global"]
"#,
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 4, |i| {
        let path = if i == 0 { "/search" } else { "/" };
        req(
            "192.0.2.1",
            path,
            &[("x-api-key", format!("k{}", i % 2).as_bytes())],
        )
    })
    .await;
    let st: Vec<u16> = out.iter().map(|o| o.status.as_u16()).collect();
    assert_eq!(st, vec![200, 200, 200, 429]);
    // /search cost 10 under per-key: 9 units beyond the one a steady client would have
    // sent, so 91 over the next minute bring the key back in line
    assert_eq!(
        out[0].headers["ratelimit"],
        r#""per-key";r=91;t=60, "global";r=3;t=60"#
    );
    // the denied request (key k1) was not charged by per-key: k1 holds only its first
    // unit, so a look at it finds the key in line (charged, it would be one ahead: 99)
    let out = burst(&l, &arr, 1, |_| {
        req("192.0.2.1", "/", &[("x-api-key", b"k1")])
    })
    .await;
    assert_eq!(out[0].status, 429);
    assert!(
        out[0].headers["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with(r#""per-key";r=100;t=60, "global";"#),
        "{:?}",
        out[0].headers["ratelimit"]
    );
}

const RATE_HEADERS: [&str; 5] = [
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

#[tokio::test(start_paused = true)]
async fn dry_run_never_rejects_and_is_not_advertised() {
    let l = limiter(
        "[headers]\nlegacy = \"delta\"\n[[policy]]\nname = \"shadow\"\nalgorithm = \"gcra\"\nrate = \"2/min\"\nburst = 1\ndry_run = true\n",
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 10, |_| req("192.0.2.1", "/", &[])).await;
    assert!(out.iter().all(|o| o.status == 200));
    assert_eq!(arr.lock().unwrap().len(), 10);
    // a polite client sees no limit to slow down for
    for o in &out {
        for h in RATE_HEADERS {
            assert!(!o.headers.contains_key(h), "{h}: {:?}", o.headers);
        }
    }
    let m = l.render_metrics();
    assert!(
        m.contains(r#"floodgate_decisions_total{policy="shadow",outcome="rejected_dry_run"} 8"#),
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn dry_run_with_advertise_shows_headers_beside_the_enforced_ones() {
    let l = limiter(
        r#"
[headers]
legacy = "delta"
[[policy]]
name = "shadow"
algorithm = "gcra"
rate = "2/min"
burst = 1
dry_run = true
advertise = true
[[policy]]
name = "quiet"
algorithm = "gcra"
rate = "1/min"
dry_run = true
[[policy]]
name = "enforced"
algorithm = "gcra"
rate = "100/min"
burst = 99
"#,
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 10, |_| req("192.0.2.1", "/", &[])).await;
    assert!(out.iter().all(|o| o.status == 200));
    // both units taken at once: nothing before the next comes back, in 30 s; the
    // dry-run policy without advertise is left out
    assert_eq!(
        out[9].headers["ratelimit"],
        r#""enforced";r=91;t=60, "shadow";r=0;t=30"#
    );
    let policy = out[9].headers["ratelimit-policy"].to_str().unwrap();
    assert!(!policy.contains("quiet"), "{policy}");
    // the legacy trio is the most restrictive advertised policy's
    assert_eq!(out[9].headers["x-ratelimit-remaining"], "0");
    assert_eq!(out[9].headers["x-ratelimit-limit"], "2");
}

#[test]
fn advertise_applies_to_a_dry_run_policy() {
    let e = Config::parse(
        "[[policy]]\nname = \"p\"\nrate = \"1/s\"\nadvertise = true\n",
        Path::new("f.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("f.toml:1:1: ") && e.contains("advertise applies to a dry_run policy"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn allowlist_ips_and_keys_bypass_and_are_counted() {
    let l = limiter(
        r#"
[allowlist]
ips = ["198.51.100.0/24", "2001:db8::1"]
keys = ["deploy-token"]
[[policy]]
name = "p"
algorithm = "gcra"
rate = "1/min"
key = ["ip", "header:x-api-key"]
"#,
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 5, |_| {
        req("198.51.100.7", "/", &[("x-api-key", b"a")])
    })
    .await;
    assert!(
        out.iter()
            .all(|o| o.status == 200 && !o.headers.contains_key("ratelimit"))
    );
    let out = burst(&l, &arr, 5, |_| {
        req("2001:db8::1", "/", &[("x-api-key", b"a")])
    })
    .await;
    assert!(out.iter().all(|o| o.status == 200));
    // a plain client is limited (composite key ip + header)
    let out = burst(&l, &arr, 2, |_| {
        req("192.0.2.9", "/", &[("x-api-key", b"a")])
    })
    .await;
    assert_eq!(out[1].status, 429);
    assert_eq!(l.metrics().request_count(RequestOutcome::Allowlisted), 10);
    // keys are matched against header-derived keys only as a whole key
    let l = limiter(
        "[allowlist]\nkeys = [\"deploy-token\"]\n[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"1/min\"\nkey = \"header:x-api-key\"\n",
    );
    let out = burst(&l, &arr, 5, |_| {
        req("192.0.2.9", "/", &[("x-api-key", b"deploy-token")])
    })
    .await;
    assert!(out.iter().all(|o| o.status == 200));
    assert_eq!(l.metrics().request_count(RequestOutcome::Allowlisted), 5);
}

#[tokio::test(start_paused = true)]
async fn missing_keys_have_configured_outcomes_never_500() {
    let base = "[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"1/min\"\nkey = \"header:x-api-key\"\n";
    let arr = Arrivals::default();
    // default: deny with 400
    let l = limiter(base);
    let out = burst(&l, &arr, 1, |_| req("192.0.2.1", "/", &[])).await;
    assert_eq!(out[0].status, 400);
    assert!(String::from_utf8_lossy(&out[0].body).contains("missing header x-api-key"));
    // allow
    let l = limiter(&format!("[deny]\nmissing_key = \"allow\"\n{base}"));
    let out = burst(&l, &arr, 3, |_| req("192.0.2.1", "/", &[])).await;
    assert!(out.iter().all(|o| o.status == 200));
    // fallback: all keyless clients share one bucket
    let l = limiter(&format!(
        "[deny]\nmissing_key = \"fallback\"\nfallback_key = \"anon\"\nmissing_key_status = 401\n{base}"
    ));
    let out = burst(&l, &arr, 2, |_| req("192.0.2.1", "/", &[])).await;
    assert_eq!((out[0].status.as_u16(), out[1].status.as_u16()), (200, 429));
    // no peer address at all, IP key: 400, not a panic or a 500
    let l = limiter("[[policy]]\nname = \"p\"\nrate = \"1/s\"\n");
    let svc = tower::Layer::layer(&l.layer(), backend(arr.clone()));
    let r = svc
        .oneshot(Request::get("/").body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test(start_paused = true)]
async fn invalid_utf8_and_giant_keys() {
    let l = limiter(
        "[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"1/min\"\nkey = \"header:x-api-key\"\n",
    );
    let arr = Arrivals::default();
    // obs-text bytes (invalid UTF-8) are a key like any other
    let out = burst(&l, &arr, 2, |_| {
        req("192.0.2.1", "/", &[("x-api-key", b"\xff\xfe key")])
    })
    .await;
    assert_eq!((out[0].status.as_u16(), out[1].status.as_u16()), (200, 429));
    let out = burst(&l, &arr, 1, |_| {
        req("192.0.2.1", "/", &[("x-api-key", b"\xff\xfd key")])
    })
    .await;
    assert_eq!(
        out[0].status, 200,
        "a different invalid-UTF-8 key has its own bucket"
    );
    // a 100 kB key is refused as a key (400), never stored
    let big = vec![b'a'; 100_000];
    let out = burst(&l, &arr, 1, |_| {
        req("192.0.2.1", "/", &[("x-api-key", &big)])
    })
    .await;
    assert_eq!(out[0].status, 400);
    assert!(String::from_utf8_lossy(&out[0].body).contains("longer than the maximum of 256"));
}

#[tokio::test(start_paused = true)]
async fn cost_above_limit_is_denied_without_retry_after() {
    let l = limiter(
        "[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"5/min\"\n[[route]]\npolicies = [\"p\"]\ncost = 6\n",
    );
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 1, |_| req("192.0.2.1", "/", &[])).await;
    assert_eq!(out[0].status, 429);
    assert!(!out[0].headers.contains_key("retry-after"));
    assert!(String::from_utf8_lossy(&out[0].body).contains("can never be admitted"));
}

#[tokio::test(start_paused = true)]
async fn custom_extractor_and_ipv6_prefix() {
    let spec = floodgate_core::Spec::new(floodgate_core::Kind::Gcra, "1/min".parse().unwrap());
    let l = RateLimiter::builder()
        .policy(Policy::new("tenant", spec.clone()).key(KeySource::custom(
            |r: &RequestInfo<'_>| -> Result<Vec<u8>, KeyError> {
                r.uri
                    .path()
                    .split('/')
                    .nth(2)
                    .filter(|s| !s.is_empty())
                    .map(|s| s.as_bytes().to_vec())
                    .ok_or_else(|| KeyError::Custom("no tenant in path".into()))
            },
        )))
        .route(floodgate_http::Route::prefix("/t/").policy("tenant", 1))
        .build()
        .unwrap();
    let arr = Arrivals::default();
    let out = burst(&l, &arr, 3, |i| {
        req("192.0.2.1", ["/t/a/x", "/t/b/y", "/t/a/z"][i], &[])
    })
    .await;
    let st: Vec<u16> = out.iter().map(|o| o.status.as_u16()).collect();
    assert_eq!(st, vec![200, 200, 429]);
    let out = burst(&l, &arr, 1, |_| req("192.0.2.1", "/t/", &[])).await;
    assert_eq!(out[0].status, 400);
    // routes not matched are not limited and get no headers
    let out = burst(&l, &arr, 3, |_| req("192.0.2.1", "/other", &[])).await;
    assert!(out.iter().all(|o| o.status == 200 && o.headers.is_empty()));
    // IPv6: one /64 is one client
    let l = RateLimiter::builder()
        .policy(Policy::new("ip", spec))
        .build()
        .unwrap();
    let out = burst(&l, &arr, 2, |i| {
        req(["2001:db8:0:1::1", "2001:db8:0:1:ffff::2"][i], "/", &[])
    })
    .await;
    assert_eq!(out[1].status, 429);
}

#[tokio::test]
async fn works_in_axum_with_connect_info() {
    use axum::extract::ConnectInfo;
    use axum::routing::get;
    let spec = floodgate_core::Spec::new(floodgate_core::Kind::Gcra, "2/min".parse().unwrap());
    let l = RateLimiter::builder()
        .policy(Policy::new("per-ip", spec))
        .peer(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
        .build()
        .unwrap();
    let app = axum::Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(l.layer());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    let c = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut st = Vec::new();
    for _ in 0..3 {
        let r = c
            .get(format!("http://{addr}/").parse().unwrap())
            .await
            .unwrap();
        assert!(r.headers().contains_key("ratelimit"));
        st.push(r.status().as_u16());
    }
    assert_eq!(st, vec![200, 200, 429]);
}
