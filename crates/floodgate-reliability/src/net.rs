//! In-process network pieces the suite controls: the backend behind the proxy (normal,
//! slow, answering garbage, or killed). A slow network is a [`crate::relay::Relay`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::procs::HarnessError;

/// How the backend answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `200 ok` at once.
    Normal,
    /// `200 ok` after this long.
    Slow(Duration),
    /// Bytes that are not HTTP, then close.
    Garbage,
}

#[derive(Debug)]
struct State {
    mode: Mutex<Mode>,
    /// Bumped to close every open connection.
    generation: watch::Sender<u64>,
    seen: Mutex<HashMap<u64, u32>>,
    arrivals: Mutex<Vec<Arrival>>,
    body_errors: AtomicU64,
    connections: AtomicU64,
}

/// A request that reached the backend: its `x-req-id`, `x-client` key and arrival time.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// Its `x-req-id`.
    pub id: u64,
    /// Its `x-client` header (empty without one).
    pub key: String,
    /// When its head arrived.
    pub at: Instant,
}

/// The backend: an HTTP/1.1 server on a loopback port that records every request's
/// `x-req-id`, key and arrival time.
#[derive(Debug)]
pub struct Backend {
    /// Its address.
    pub addr: SocketAddr,
    state: Arc<State>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Backend {
    /// Start on a free loopback port, in [`Mode::Normal`].
    pub async fn start() -> Result<Backend, HarnessError> {
        Backend::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Start on `addr` (port 0 picks one), in [`Mode::Normal`].
    pub async fn start_on(addr: SocketAddr) -> Result<Backend, HarnessError> {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|source| HarnessError::Io {
                what: format!("bind the backend on {addr}"),
                source,
            })?;
        let addr = l.local_addr().map_err(|source| HarnessError::Io {
            what: "backend address".into(),
            source,
        })?;
        let state = Arc::new(State {
            mode: Mutex::new(Mode::Normal),
            generation: watch::channel(0).0,
            seen: Mutex::new(HashMap::new()),
            arrivals: Mutex::new(Vec::new()),
            body_errors: AtomicU64::new(0),
            connections: AtomicU64::new(0),
        });
        let task = Some(tokio::spawn(serve(l, state.clone())));
        Ok(Backend { addr, state, task })
    }

    /// Change how it answers. Switching to [`Mode::Garbage`] also closes every open
    /// connection, so that pooled connections meet the garbage too.
    pub fn set_mode(&self, m: Mode) {
        *self.state.mode.lock().unwrap_or_else(|e| e.into_inner()) = m;
        if m == Mode::Garbage {
            self.state.generation.send_modify(|g| *g += 1);
        }
    }

    /// Stop listening and close every connection (as a crashed process would).
    pub fn kill(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.state.generation.send_modify(|g| *g += 1);
    }

    /// Listen again on the same port (after [`kill`](Self::kill)), in [`Mode::Normal`].
    pub async fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        self.set_mode(Mode::Normal);
        let deadline = Instant::now() + Duration::from_secs(5);
        let l = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(source) if Instant::now() > deadline => {
                    return Err(HarnessError::Io {
                        what: format!("bind the backend again on {}", self.addr),
                        source,
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        self.task = Some(tokio::spawn(serve(l, self.state.clone())));
        Ok(())
    }

    /// How many times each `x-req-id` reached it.
    pub fn seen(&self) -> HashMap<u64, u32> {
        self.state
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every request with an `x-req-id` that reached it, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state
            .arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Request bodies that ended early (the client hung up mid-body).
    pub fn body_errors(&self) -> u64 {
        self.state.body_errors.load(Ordering::Relaxed)
    }

    /// Connections accepted.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn serve(l: TcpListener, state: Arc<State>) {
    // the set owns the connection tasks: aborting this task closes them all
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let Ok((s, _)) = l.accept().await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let _ = s.set_nodelay(true);
        state.connections.fetch_add(1, Ordering::Relaxed);
        let state = state.clone();
        conns.spawn(async move {
            let mut gen_rx = state.generation.subscribe();
            let mode = *state.mode.lock().unwrap_or_else(|e| e.into_inner());
            if mode == Mode::Garbage {
                garbage(s).await;
                return;
            }
            let st = state.clone();
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let st = st.clone();
                    async move {
                        let at = Instant::now();
                        if let Some(id) = req
                            .headers()
                            .get("x-req-id")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse::<u64>().ok())
                        {
                            *st.seen
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .entry(id)
                                .or_insert(0) += 1;
                            let key = req
                                .headers()
                                .get("x-client")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_string();
                            st.arrivals
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(Arrival { id, key, at });
                        }
                        if req.into_body().collect().await.is_err() {
                            st.body_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        let mode = *st.mode.lock().unwrap_or_else(|e| e.into_inner());
                        if let Mode::Slow(d) = mode {
                            tokio::time::sleep(d).await;
                        }
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                            b"ok\n",
                        ))))
                    }
                });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(s), svc);
            tokio::select! {
                _ = conn => {}
                _ = gen_rx.changed() => {}
            }
        });
    }
}

async fn garbage(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await;
    let _ = s
        .write_all(b"SSH-2.0-not-http \x00\xff\xfe garbage\r\n\r\n\x01\x02")
        .await;
    let _ = s.shutdown().await;
}
