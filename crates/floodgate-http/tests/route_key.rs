//! A policy keyed on the route counts a path's spellings as one: `;` parameters and
//! trailing slashes do not make a new bucket.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use floodgate_core::{Kind, Spec};
use floodgate_http::{KeySource, PeerAddr, Policy, RateLimiter};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, ServiceExt};

async fn status(l: &RateLimiter, path: &str) -> StatusCode {
    let svc = tower::service_fn(|_r: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let svc = l.layer().layer(svc);
    let mut r = Request::get(path).body(Full::new(Bytes::new())).unwrap();
    r.extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 1))));
    svc.oneshot(r).await.unwrap().status()
}

#[tokio::test]
async fn params_and_trailing_slashes_share_the_paths_bucket() {
    let l = RateLimiter::builder()
        .policy(
            Policy::new("r", Spec::new(Kind::SlidingLog, "2/m".parse().unwrap()))
                .key(KeySource::route()),
        )
        .build()
        .unwrap();
    assert_eq!(status(&l, "/r/item").await, StatusCode::OK);
    assert_eq!(status(&l, "/r/item?q=1").await, StatusCode::OK);
    for spelling in [
        "/r/item",
        "/r/item;x=1",
        "/r/item;x=2",
        "/r/item/",
        "/r/item//",
        "/r/item;x=3/",
        "/r;v=1/item",
    ] {
        assert_eq!(
            status(&l, spelling).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{spelling}"
        );
    }
    // another resource, and another case, are other keys
    assert_eq!(status(&l, "/r/other").await, StatusCode::OK);
    assert_eq!(status(&l, "/R/item").await, StatusCode::OK);
    // the root keeps its slash and is one key
    assert_eq!(status(&l, "/").await, StatusCode::OK);
    assert_eq!(status(&l, "/;x").await, StatusCode::OK);
    assert_eq!(status(&l, "//").await, StatusCode::TOO_MANY_REQUESTS);
}
