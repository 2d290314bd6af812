//! A fault-injecting TCP relay (in the spirit of Toxiproxy) between a node and Redis:
//! it forwards bytes both ways and, while a fault is set, delays or stalls them.
//!
//! * **Latency with jitter**: every chunk read from the node is held `latency ± jitter`
//!   (uniform) before it is written to Redis, so each round trip grows by that much.
//!   Order is kept (a TCP stream cannot reorder): a chunk never overtakes the one before
//!   it, so a short draw after a long one waits for it, as on a real link.
//! * **Loss**: with probability `loss`, a chunk (either direction) stalls for
//!   `stall ± stall/2` before it is delivered, and everything behind it on that
//!   connection waits. That is what a lost segment does to TCP: the sender retransmits
//!   after its retransmission timeout (at least 200 ms on Linux) and the receiver
//!   delivers nothing past the gap meanwhile (head-of-line blocking). Dropping bytes
//!   instead would corrupt the RESP stream, which a real network never does to TCP, and
//!   resetting connections would test reconnecting rather than loss.
//!
//! A partition is not the relay's: the harness takes the node's veth link down.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::procs::HarnessError;

/// What the relay does to the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Toxics {
    /// Added to every chunk toward Redis.
    pub latency: Duration,
    /// `latency` varies uniformly by up to this much either way.
    pub jitter: Duration,
    /// Added to every chunk toward the node (no jitter).
    pub back: Duration,
    /// Probability that a chunk (either direction) stalls as a lost segment would.
    pub loss: f64,
    /// How long a lost segment stalls its connection (`± stall / 2`).
    pub stall: Duration,
}

impl Toxics {
    /// No fault: bytes pass at once.
    pub const NONE: Toxics = Toxics {
        latency: Duration::ZERO,
        jitter: Duration::ZERO,
        back: Duration::ZERO,
        loss: 0.0,
        stall: Duration::ZERO,
    };

    /// `latency ± jitter` toward Redis.
    pub fn latency(latency: Duration, jitter: Duration) -> Toxics {
        Toxics {
            latency,
            jitter,
            ..Toxics::NONE
        }
    }

    /// `d` added each way, no jitter (a slow link).
    pub fn each_way(d: Duration) -> Toxics {
        Toxics {
            latency: d,
            back: d,
            ..Toxics::NONE
        }
    }

    /// Segments lost with probability `loss`, each stalling its connection ~`stall`.
    pub fn loss(loss: f64, stall: Duration) -> Toxics {
        Toxics {
            loss,
            stall,
            ..Toxics::NONE
        }
    }

    /// The hold for one chunk; `toward_redis` says its direction. `r` draws uniform
    /// numbers in [0, 1).
    pub fn hold(&self, toward_redis: bool, mut r: impl FnMut() -> f64) -> Duration {
        let spread = |mid: Duration, half: Duration, u: f64| {
            let lo = mid.saturating_sub(half).as_secs_f64();
            let hi = (mid + half).as_secs_f64();
            Duration::from_secs_f64(lo + (hi - lo) * u)
        };
        let mut d = Duration::ZERO;
        if toward_redis && !self.latency.is_zero() {
            d += spread(self.latency, self.jitter, r());
        }
        if !toward_redis {
            d += self.back;
        }
        if self.loss > 0.0 && r() < self.loss {
            d += spread(self.stall, self.stall / 2, r());
        }
        d
    }
}

/// Counters of a relay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Connections accepted.
    pub connections: u64,
    /// Chunks forwarded.
    pub chunks: u64,
    /// Chunks held by latency or a stall.
    pub held: u64,
    /// Chunks stalled as lost segments.
    pub stalled: u64,
}

#[derive(Debug)]
struct Shared {
    toxics: Toxics,
    stats: RelayStats,
    target: SocketAddr,
}

/// A running relay: listens on `addr`, forwards to the target.
#[derive(Debug)]
pub struct Relay {
    /// Where nodes connect.
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    /// Bumped to close every connection (the target moved).
    generation: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Listen on `listen` (a port of 0 picks one) and forward to `target`.
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> Result<Relay, HarnessError> {
        let l = TcpListener::bind(listen)
            .await
            .map_err(|source| HarnessError::Io {
                what: format!("bind the relay on {listen}"),
                source,
            })?;
        let addr = l.local_addr().map_err(|source| HarnessError::Io {
            what: "relay address".into(),
            source,
        })?;
        let shared = Arc::new(Mutex::new(Shared {
            toxics: Toxics::NONE,
            stats: RelayStats::default(),
            target,
        }));
        let sh = shared.clone();
        let generation = tokio::sync::watch::channel(0u64).0;
        let gen_tx = generation.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                while conns.try_join_next().is_some() {}
                let Ok((node, _)) = l.accept().await else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let target = {
                    let mut s = lock(&sh);
                    s.stats.connections += 1;
                    s.target
                };
                let sh = sh.clone();
                let mut gen_rx = gen_tx.subscribe();
                conns.spawn(async move {
                    let Ok(Ok(redis)) =
                        tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(target))
                            .await
                    else {
                        return;
                    };
                    let _ = node.set_nodelay(true);
                    let _ = redis.set_nodelay(true);
                    let (nr, nw) = node.into_split();
                    let (rr, rw) = redis.into_split();
                    tokio::select! {
                        () = pump(nr, rw, sh.clone(), true) => {}
                        () = pump(rr, nw, sh, false) => {}
                        _ = gen_rx.changed() => {}
                    }
                });
            }
        });
        Ok(Relay {
            addr,
            shared,
            generation,
            task,
        })
    }

    /// Forward new connections to `target` and close every open one (as a proxy in
    /// front of Redis does when Sentinel names a new primary).
    pub fn retarget(&self, target: SocketAddr) {
        lock(&self.shared).target = target;
        self.generation.send_modify(|g| *g += 1);
    }

    /// Set the faults (takes effect for the next chunk read).
    pub fn set(&self, t: Toxics) {
        lock(&self.shared).toxics = t;
    }

    /// Its counters.
    pub fn stats(&self) -> RelayStats {
        lock(&self.shared).stats
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Mutex<Shared>>,
    toward_redis: bool,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Bytes)>();
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
        // never before the chunk ahead of it: order is kept
        let mut last = Instant::now();
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let hold = {
                        let mut s = lock(&shared);
                        let t = s.toxics;
                        let mut stalled = false;
                        let hold = t.hold(toward_redis, || {
                            let u = fastrand::f64();
                            stalled |= t.loss > 0.0 && u < t.loss;
                            u
                        });
                        s.stats.chunks += 1;
                        if !hold.is_zero() {
                            s.stats.held += 1;
                        }
                        if stalled && !hold.is_zero() {
                            s.stats.stalled += 1;
                        }
                        hold
                    };
                    last = last.max(Instant::now() + hold);
                    if tx.send((last, Bytes::copy_from_slice(&buf[..n]))).is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_follow_the_toxics() {
        let lat = Toxics::latency(Duration::from_millis(50), Duration::from_millis(10));
        assert_eq!(lat.hold(true, || 0.0), Duration::from_millis(40));
        assert_eq!(lat.hold(true, || 0.999_999).as_millis(), 59);
        assert_eq!(lat.hold(false, || 0.5), Duration::ZERO, "only toward Redis");
        let loss = Toxics::loss(0.05, Duration::from_millis(200));
        // the first draw decides the loss, the second the stall's length
        let mut draws = [0.01, 0.5].into_iter();
        assert_eq!(
            loss.hold(false, || draws.next().unwrap()),
            Duration::from_millis(200)
        );
        assert_eq!(loss.hold(true, || 0.06), Duration::ZERO, "not lost");
        assert_eq!(Toxics::NONE.hold(true, || 0.0), Duration::ZERO);
        let slow = Toxics::each_way(Duration::from_millis(80));
        assert_eq!(slow.hold(false, || 0.3), Duration::from_millis(80));
        assert_eq!(slow.hold(true, || 0.3), Duration::from_millis(80));
    }

    #[tokio::test]
    async fn forwards_and_delays_in_order() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 64];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let relay = Relay::start("127.0.0.1:0".parse().unwrap(), target)
            .await
            .unwrap();
        let mut c = TcpStream::connect(relay.addr).await.unwrap();
        let mut buf = [0u8; 5];
        c.write_all(b"hello").await.unwrap();
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        relay.set(Toxics::latency(
            Duration::from_millis(60),
            Duration::from_millis(20),
        ));
        let t = std::time::Instant::now();
        for w in [b"abcde", b"fghij"] {
            c.write_all(w).await.unwrap();
            c.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, w);
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(80), "{took:?}");
        let s = relay.stats();
        assert_eq!(s.connections, 1);
        assert!(s.held >= 2, "{s:?}");
    }
}
