//! `RateLimiter::decide_request`: what the layer decides before it calls its service,
//! for a surface that serves the request itself: the verdict, the decision as recorded,
//! a key the caller provides, and the settle handle of a route with an estimate.

use std::time::Duration;

use floodgate_core::{Kind, Spec};
use floodgate_http::{
    KeySource, Policy, ProvidedKeys, RateLimiter, RecordedOutcome, Route, SettleSpec, Verdict,
};
use http::{HeaderName, Request, StatusCode};

fn limiter() -> RateLimiter {
    let mut spec = Spec::new(Kind::Gcra, "10/min".parse().unwrap());
    spec.capacity = Some(10);
    RateLimiter::builder()
        .policy(Policy::new("tokens", spec).key(KeySource::provided("tokens")))
        .route(
            Route::prefix("/llm")
                .policy("tokens", 1)
                .settle(SettleSpec {
                    estimate: 4,
                    cost_header: Some(HeaderName::from_static("x-cost")),
                    ..SettleSpec::default()
                }),
        )
        .retry_after_jitter(Duration::ZERO)
        .record_decisions(true)
        .build()
        .unwrap()
}

fn req(path: &str, key: Option<&str>) -> Request<()> {
    let mut r = Request::get(path).body(()).unwrap();
    if let Some(k) = key {
        r.extensions_mut().insert(ProvidedKeys {
            any: Some(k.as_bytes().to_vec()),
            by_policy: Vec::new(),
        });
    }
    r
}

#[tokio::test]
async fn admitted_at_the_estimate_settled_then_denied() {
    let lim = limiter();
    let d = lim.decide_request(&req("/llm", Some("alice"))).await;
    assert!(
        matches!(&d.verdict, Verdict::Pass { headers, .. } if headers.contains_key("ratelimit"))
    );
    let recorded = d.recorded.expect("recorded");
    assert_eq!(recorded.outcome, RecordedOutcome::Allowed);
    assert_eq!(recorded.policy.as_deref(), Some("tokens"));
    let handle = d.settle.expect("a reservation to settle");
    assert_eq!(handle.estimate(), 4);
    let settled = handle.settle(9).await.unwrap();
    let fields = handle.settled_header_map(&settled);
    assert_eq!(
        fields["ratelimit-policy"],
        "\"tokens\";q=10;w=60;floodgate-capacity=10"
    );
    // 9 of 10 spent: the next estimate of 4 is denied, with the layer's own 429
    let d = lim.decide_request(&req("/llm", Some("alice"))).await;
    let Verdict::Respond(r) = d.verdict else {
        panic!("admitted past the settled cost")
    };
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    assert!(d.settle.is_none());
    assert_eq!(d.recorded.unwrap().outcome, RecordedOutcome::Limited);
    // another caller's key has its own count
    let d = lim.decide_request(&req("/llm", Some("bob"))).await;
    assert!(matches!(d.verdict, Verdict::Pass { .. }) && d.settle.is_some());
}

#[tokio::test]
async fn no_key_is_the_missing_key_answer_and_no_route_passes_untouched() {
    let lim = limiter();
    let d = lim.decide_request(&req("/llm", None)).await;
    let Verdict::Respond(r) = d.verdict else {
        panic!("admitted without a key")
    };
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let d = lim.decide_request(&req("/other", None)).await;
    assert!(
        matches!(&d.verdict, Verdict::Pass { headers, delay, .. } if headers.is_empty() && delay.is_zero())
    );
    assert!(d.recorded.is_none() && d.settle.is_none());
}

/// The body of the missing-key answer to a request without a peer address (an IP key).
async fn no_peer_body(builder: floodgate_http::RateLimiterBuilder) -> String {
    use http_body_util::BodyExt;
    let spec = Spec::new(Kind::Gcra, "10/min".parse().unwrap());
    let lim = builder.policy(Policy::new("ip", spec)).build().unwrap();
    let d = lim.decide_request(&req("/", None)).await;
    let Verdict::Respond(r) = d.verdict else {
        panic!("admitted without a peer address")
    };
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn no_peer_address_gives_the_rust_advice_or_the_binding_s_own() {
    assert_eq!(
        no_peer_body(RateLimiter::builder()).await,
        "400 Bad Request: no rate-limit key: no peer address on the request (insert \
         floodgate_http::PeerAddr or set a peer extractor)\n"
    );
    assert_eq!(
        no_peer_body(RateLimiter::builder().no_peer_hint("pass client=")).await,
        "400 Bad Request: no rate-limit key: no peer address on the request (pass client=)\n"
    );
}

/// `decide_request_now` decides at once what needs no wait, the same as `decide_request`:
/// a plain pass gives its fields unmapped, a denial its answer; a route that reserves (to
/// settle after the response) is left pending, and finishing it counts the request once.
#[tokio::test]
async fn decide_request_now_decides_what_needs_no_wait_and_leaves_the_rest_pending() {
    use floodgate_http::DecidedRequest;
    let mut spec = Spec::new(Kind::Gcra, "10/min".parse().unwrap());
    spec.capacity = Some(2);
    let lim = RateLimiter::builder()
        .policy(Policy::new("per-key", spec.clone()).key(KeySource::provided("k")))
        .policy(Policy::new("settled", spec).key(KeySource::provided("k")))
        .route(Route::prefix("/plain").policy("per-key", 1))
        .route(
            Route::prefix("/llm")
                .policy("settled", 1)
                .settle(SettleSpec {
                    estimate: 1,
                    cost_header: Some(HeaderName::from_static("x-cost")),
                    ..SettleSpec::default()
                }),
        )
        .retry_after_jitter(Duration::ZERO)
        .record_decisions(true)
        .build()
        .unwrap();
    let now = |path: &str| match lim.decide_request_now(&req(path, Some("a"))) {
        Ok(d) => d,
        Err(_) => panic!("{path} was left pending"),
    };
    let mut remaining = Vec::new();
    for _ in 0..2 {
        let DecidedRequest::Plain { headers, recorded } = now("/plain") else {
            panic!("a plain pass was not plain")
        };
        let names: Vec<_> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ratelimit-policy", "ratelimit"]);
        remaining.push(headers.iter().nth(1).unwrap().1.clone());
        assert_eq!(recorded.unwrap().outcome, RecordedOutcome::Allowed);
    }
    assert_ne!(
        remaining[0], remaining[1],
        "the second pass was not counted"
    );
    let DecidedRequest::Decided(d) = now("/plain") else {
        panic!("a denial was a plain pass")
    };
    assert!(
        matches!(d.verdict, Verdict::Respond(ref r) if r.status() == StatusCode::TOO_MANY_REQUESTS)
    );
    // no route: passes untouched, no fields
    let DecidedRequest::Plain { headers, .. } = now("/other") else {
        panic!("an unrouted request was not plain")
    };
    assert_eq!(headers.iter().len(), 0);
    // a reservation waits: pending, then decided once (1 of 2 taken, then 2 of 2)
    for _ in 0..2 {
        let r = req("/llm", Some("a"));
        let Err(pending) = lim.decide_request_now(&r) else {
            panic!("a reservation was decided at once")
        };
        let d = lim.decide_pending(pending, &r).await.into_decision();
        assert!(matches!(d.verdict, Verdict::Pass { .. }) && d.settle.is_some());
        d.settle.unwrap().settle(1).await.unwrap();
    }
    let d = lim.decide_request(&req("/llm", Some("a"))).await;
    assert!(
        matches!(d.verdict, Verdict::Respond(_)),
        "a pending request was counted twice or not at all"
    );
}
