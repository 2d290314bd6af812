//! The benchmark's backend: a minimal hyper server answering `ok` (HTTP/1.1 and h2c).
//! `bench_backend [ADDR] [THREADS]`, default 127.0.0.1:19000 on one thread.
//! Used by `scripts/bench-proxy.sh`; not part of the tests.

use std::convert::Infallible;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:19000".into());
    let threads: usize = args.next().map_or(Ok(1), |t| t.parse())?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            eprintln!("bench backend on {addr}");
            loop {
                let (stream, _) = listener.accept().await?;
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|_req| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        })
}
