//! floodgate around a plain hyper service: the layer wraps a `tower::service_fn`, and
//! each connection inserts its peer address as [`floodgate_http::PeerAddr`].
//!
//! `cargo run -p floodgate-http --example hyper`, then `curl -i localhost:3001/`.

use std::convert::Infallible;

use bytes::Bytes;
use floodgate_core::algorithms::DelayMode;
use floodgate_core::{Kind, Spec};
use floodgate_http::{PeerAddr, Policy, RateLimiter};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Layer, Service};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // nginx: limit_req rate=10r/s burst=20 delay=8
    let mut spec = Spec::new(Kind::LeakyQueue, "10/s".parse()?);
    spec.capacity = Some(21);
    spec.delay = DelayMode::After(8);
    let limiter = RateLimiter::builder()
        .policy(Policy::new("default", spec))
        .build()?;
    let app = tower::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello\n"))))
    });
    let svc = limiter.layer().layer(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3001").await?;
    loop {
        let (stream, peer) = listener.accept().await?;
        let svc = svc.clone();
        let per_conn = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
            svc.clone().call(req)
        });
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), per_conn)
                .await;
        });
    }
}
