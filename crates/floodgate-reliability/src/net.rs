//! In-process network pieces the suite controls: the backend behind the proxy (normal,
//! slow, answering garbage, or killed) and a TCP delay line (slow network).

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
    body_errors: AtomicU64,
    connections: AtomicU64,
}

/// The backend: an HTTP/1.1 server on a loopback port that records every request's
/// `x-req-id`.
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
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|source| HarnessError::Io {
                what: "bind the backend".into(),
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

/// A TCP delay line: forwards to `target`, holding every chunk for the current delay in
/// each direction (latency, not a bandwidth limit; order is kept).
#[derive(Debug)]
pub struct DelayLine {
    /// Where to connect instead of the target.
    pub addr: SocketAddr,
    delay_us: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl DelayLine {
    /// Start on a free loopback port, with no delay.
    pub async fn start(target: SocketAddr) -> Result<DelayLine, HarnessError> {
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|source| HarnessError::Io {
                what: "bind the delay line".into(),
                source,
            })?;
        let addr = l.local_addr().map_err(|source| HarnessError::Io {
            what: "delay line address".into(),
            source,
        })?;
        let delay_us = Arc::new(AtomicU64::new(0));
        let d = delay_us.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                while conns.try_join_next().is_some() {}
                let Ok((client, _)) = l.accept().await else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let d = d.clone();
                conns.spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(cr, sw, d.clone());
                    let down = pump(sr, cw, d);
                    // either side closing ends the connection
                    tokio::select! {
                        () = up => {}
                        () = down => {}
                    }
                });
            }
        });
        Ok(DelayLine {
            addr,
            delay_us,
            task,
        })
    }

    /// Set the delay added in each direction.
    pub fn set_delay(&self, d: Duration) {
        self.delay_us.store(
            d.as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    delay_us: Arc<AtomicU64>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Bytes)>();
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if w.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let at = tokio::time::Instant::now()
                        + Duration::from_micros(delay_us.load(Ordering::Relaxed));
                    if tx.send((at, Bytes::copy_from_slice(&buf[..n]))).is_err() {
                        return;
                    }
                }
            }
        }
    };
    // the writer drains what the reader queued, then closes
    tokio::join!(reader, writer);
}
