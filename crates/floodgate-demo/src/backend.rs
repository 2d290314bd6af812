//! The demo's backend: an HTTP/1.1 server on loopback that answers `200 ok` to everything
//! and records, per request path, the wall-clock instant each request arrived (ns since
//! the Unix epoch). Every proxy of the demo forwards to it under its own path, so the
//! arrivals per algorithm are what that algorithm let through, as the backend saw it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use floodgate_core::{Clock, WallClock};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

type Arrivals = Arc<Mutex<HashMap<String, Vec<u64>>>>;

/// A running recording backend; stops when dropped.
pub struct Backend {
    addr: SocketAddr,
    arrivals: Arrivals,
    task: JoinHandle<()>,
}

impl Backend {
    /// Listen on `127.0.0.1` (a free port) and serve until dropped.
    pub async fn start() -> std::io::Result<Backend> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let arrivals: Arrivals = Arc::default();
        let rec = arrivals.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let rec = rec.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                        let now = WallClock.now().as_u64();
                        if let Ok(mut map) = rec.lock() {
                            map.entry(req.uri().path().to_string())
                                .or_default()
                                .push(now);
                        }
                        async {
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                                b"ok\n",
                            ))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Backend {
            addr,
            arrivals,
            task,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The arrival instants (ns since the Unix epoch, sorted) recorded under `path`.
    pub fn arrivals(&self, path: &str) -> Vec<u64> {
        let mut v = self
            .arrivals
            .lock()
            .map(|m| m.get(path).cloned().unwrap_or_default())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}
