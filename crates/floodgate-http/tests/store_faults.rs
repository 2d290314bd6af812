//! A store fault through the tower layer: on an enforced policy the fault policy answers
//! (`fail-closed`: 503; `fail-open`: the request passes, counted as
//! `store_error_allowed`); on a dry-run policy the fault admits that policy only, so the
//! request is left to the enforced ones and the fault policy is not applied for it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use floodgate_core::multi::MultiDecision;
use floodgate_core::{Kind, Spec};
use floodgate_engine::store::BoxFuture;
use floodgate_engine::{DecisionStore, StoreCheck, StoreError, StoreErrorKind, StoreFailure};
use floodgate_http::{KeySource, PeerAddr, Policy, RateLimiter};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

/// A store whose every call times out; it counts the calls.
struct TimingOut(AtomicUsize);

impl DecisionStore for TimingOut {
    fn check<'a>(
        &'a self,
        _: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        let e = StoreError {
            store: "timing-out",
            kind: StoreErrorKind::Timeout,
        };
        Box::pin(std::future::ready(Err(e)))
    }
}

fn spec() -> Spec {
    Spec::new(Kind::TokenBucket, "5/m".parse().unwrap())
}

fn limiter(store: Arc<TimingOut>, failure: StoreFailure, dry_run: bool) -> RateLimiter {
    RateLimiter::builder()
        .policy(
            Policy::new("p", spec())
                .key(KeySource::global())
                .dry_run(dry_run),
        )
        .store(store, "timing-out")
        .store_failure(failure)
        .build()
        .unwrap()
}

async fn status(l: &RateLimiter) -> StatusCode {
    let svc = tower::service_fn(|_r: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let mut svc = l.layer().layer(svc);
    let mut r = Request::get("/").body(Full::new(Bytes::new())).unwrap();
    r.extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([192, 0, 2, 1], 5555))));
    svc.ready().await.unwrap().call(r).await.unwrap().status()
}

fn counted(l: &RateLimiter, line: &str) -> bool {
    l.render_metrics().lines().any(|l| l == line)
}

#[tokio::test]
async fn an_enforced_policy_s_fault_is_the_fault_policy_s() {
    for (failure, want, outcome) in [
        (
            StoreFailure::Deny,
            StatusCode::SERVICE_UNAVAILABLE,
            "store_error_denied",
        ),
        (StoreFailure::Allow, StatusCode::OK, "store_error_allowed"),
    ] {
        let store = Arc::new(TimingOut(AtomicUsize::new(0)));
        let l = limiter(store.clone(), failure, false);
        assert_eq!(status(&l).await, want, "{failure:?}");
        assert_eq!(store.0.load(Ordering::Relaxed), 1);
        let m = l.render_metrics();
        assert!(
            counted(
                &l,
                &format!("floodgate_requests_total{{outcome=\"{outcome}\"}} 1")
            ),
            "{m}"
        );
        assert!(m.contains("floodgate_store_errors_total{"), "{m}");
    }
}

#[tokio::test]
async fn a_dry_run_policy_s_fault_admits_it_alone() {
    for failure in [StoreFailure::Deny, StoreFailure::Allow] {
        let store = Arc::new(TimingOut(AtomicUsize::new(0)));
        let l = limiter(store.clone(), failure, true);
        assert_eq!(status(&l).await, StatusCode::OK, "{failure:?}");
        assert_eq!(store.0.load(Ordering::Relaxed), 1);
        let m = l.render_metrics();
        assert!(
            counted(&l, "floodgate_requests_total{outcome=\"passed\"} 1"),
            "{m}"
        );
        assert!(m.contains("floodgate_store_errors_total{"), "{m}");
    }
}
