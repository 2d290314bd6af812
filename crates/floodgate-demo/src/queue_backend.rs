//! A backend whose latency follows a queue: `workers` requests are served at once, each
//! for a service time drawn from a [`Dist`] (seeded), the rest wait in one FIFO queue.
//! Its capacity is `workers / mean service time` requests per second; below it latency is
//! about the service time, beyond it the queue grows and latency climbs with it, as a
//! real service's does. What `floodgate demo backend` runs, and what the overload
//! benchmark puts behind `floodgate proxy`.
//!
//! Replies: `200 ok` after service; `503` with `Retry-After: 1` and `queue full` when
//! `workers + queue` requests are already in (bounded memory); `503` with `waited over
//! the time limit` when a request waited longer than the time limit for a worker (it is
//! then not served). A client that goes away while waiting gives up its place.
//!
//! Doors: at most `max_connections` connections at once (more are closed at accept), a
//! request head must arrive within 10 s, nothing changes state.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floodgate_load::dist::Dist;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Most workers, queue places and connections accepted (each is memory held).
pub const MAX_WORKERS: usize = 10_000;
/// See [`MAX_WORKERS`].
pub const MAX_QUEUE: usize = 1_000_000;
/// See [`MAX_WORKERS`].
pub const MAX_CONNECTIONS: usize = 100_000;
/// Longest time limit accepted.
pub const MAX_TIME_LIMIT: Duration = Duration::from_secs(600);
/// How long a connection may take to send a request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What the queueing backend does. [`QueueConfig::validate`] names a bad field.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// Where to listen (loopback by default).
    pub listen: SocketAddr,
    /// Requests served at once (1 to [`MAX_WORKERS`]).
    pub workers: usize,
    /// Service time of one request.
    pub service: Dist,
    /// Requests that may wait for a worker at once (0 to [`MAX_QUEUE`]); beyond, `503`.
    pub queue: usize,
    /// Longest wait for a worker; a request that waited longer gets `503` unserved.
    pub time_limit: Duration,
    /// Most connections open at once (1 to [`MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Seed of the service times.
    pub seed: u64,
}

impl Default for QueueConfig {
    /// 8 workers, exponential service of 20 ms mean (400 requests/s), 10,000 queue
    /// places, a 10 s time limit, 20,000 connections, on 127.0.0.1:9000.
    fn default() -> Self {
        QueueConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9000)),
            workers: 8,
            service: Dist::Exp(Duration::from_millis(20)),
            queue: 10_000,
            time_limit: Duration::from_secs(10),
            max_connections: 20_000,
            seed: 1,
        }
    }
}

/// A setting of [`QueueConfig`] out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what}: {reason}")]
pub struct QueueConfigError {
    /// The setting, as the command line names it.
    pub what: &'static str,
    /// What is wrong, with the value.
    pub reason: String,
}

impl QueueConfig {
    /// Requests per second the workers get through on average: `workers / mean service`.
    pub fn capacity_per_s(&self) -> f64 {
        self.workers as f64 / self.service.mean().as_secs_f64()
    }

    /// Check every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), QueueConfigError> {
        let range = |what, n: usize, lo: usize, hi: usize| {
            if (lo..=hi).contains(&n) {
                Ok(())
            } else {
                Err(QueueConfigError {
                    what,
                    reason: format!("{n}; expected {lo} to {hi}"),
                })
            }
        };
        range("workers (--workers)", self.workers, 1, MAX_WORKERS)?;
        range("queue (--queue)", self.queue, 0, MAX_QUEUE)?;
        range(
            "max connections (--max-connections)",
            self.max_connections,
            1,
            MAX_CONNECTIONS,
        )?;
        if self.time_limit < Duration::from_millis(1) || self.time_limit > MAX_TIME_LIMIT {
            return Err(QueueConfigError {
                what: "time limit (--time-limit)",
                reason: format!(
                    "{:?}; expected 1ms to {}s",
                    self.time_limit,
                    MAX_TIME_LIMIT.as_secs()
                ),
            });
        }
        Ok(())
    }
}

/// Why the queueing backend did not start.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// A setting is out of range.
    #[error(transparent)]
    Invalid(#[from] QueueConfigError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// What the backend did so far.
#[derive(Debug, Default)]
struct Counters {
    served: AtomicU64,
    queue_full: AtomicU64,
    over_time_limit: AtomicU64,
}

/// A snapshot of what the backend did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QueueCounts {
    /// Requests served (`200`).
    pub served: u64,
    /// Refused because the queue was full (`503`).
    pub queue_full: u64,
    /// Refused after waiting longer than the time limit (`503`).
    pub over_time_limit: u64,
}

struct State {
    cfg: QueueConfig,
    workers: Semaphore,
    /// Requests in: being served or waiting.
    inside: AtomicUsize,
    rng: Mutex<fastrand::Rng>,
    counters: Counters,
}

/// A running queueing backend; stops when dropped.
pub struct QueueBackend {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl QueueBackend {
    /// Check `cfg`, bind its address and serve until dropped.
    pub async fn start(cfg: QueueConfig) -> Result<QueueBackend, QueueError> {
        cfg.validate()?;
        let bind = |source| QueueError::Bind {
            addr: cfg.listen,
            source,
        };
        let listener = TcpListener::bind(cfg.listen).await.map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let state = Arc::new(State {
            workers: Semaphore::new(cfg.workers),
            inside: AtomicUsize::new(0),
            rng: Mutex::new(fastrand::Rng::with_seed(cfg.seed)),
            counters: Counters::default(),
            cfg,
        });
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        Ok(QueueBackend { addr, state, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it did so far.
    pub fn counts(&self) -> QueueCounts {
        let c = &self.state.counters;
        QueueCounts {
            served: c.served.load(Ordering::Relaxed),
            queue_full: c.queue_full.load(Ordering::Relaxed),
            over_time_limit: c.over_time_limit.load(Ordering::Relaxed),
        }
    }
}

impl Drop for QueueBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let conns = Arc::new(Semaphore::new(state.cfg.max_connections));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // out of descriptors or similar: back off a little rather than spin
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |_req: http::Request<_>| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(serve(&state).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
            drop(permit);
        });
    }
}

/// Gives back a place inside when the request ends, however it ends.
struct Inside<'a>(&'a AtomicUsize);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve(state: &State) -> Response<Full<Bytes>> {
    let cfg = &state.cfg;
    if state.inside.fetch_add(1, Ordering::Relaxed) >= cfg.workers + cfg.queue {
        state.inside.fetch_sub(1, Ordering::Relaxed);
        state.counters.queue_full.fetch_add(1, Ordering::Relaxed);
        return reply(StatusCode::SERVICE_UNAVAILABLE, "queue full\n");
    }
    let _inside = Inside(&state.inside);
    // The semaphore is fair: waiters get a worker in arrival order (FIFO).
    let permit = match tokio::time::timeout(cfg.time_limit, state.workers.acquire()).await {
        Ok(Ok(p)) => p,
        _ => {
            state
                .counters
                .over_time_limit
                .fetch_add(1, Ordering::Relaxed);
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "waited over the time limit\n",
            );
        }
    };
    let service = {
        let mut rng = state.rng.lock().unwrap_or_else(|p| p.into_inner());
        cfg.service.sample(&mut rng)
    };
    tokio::time::sleep(service).await;
    drop(permit);
    state.counters.served.fetch_add(1, Ordering::Relaxed);
    reply(StatusCode::OK, "ok\n")
}

fn reply(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    r
}
