//! The queueing backend of `floodgate demo backend` over loopback, with raw HTTP/1.1
//! clients: latency grows once more requests are in than there are workers, a full
//! queue and an over-long wait are answered 503, the connection cap holds, bad settings
//! are refused by name. Directions and counts only, no timing thresholds.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use floodgate_demo::queue_backend::{QueueBackend, QueueConfig, QueueCounts};
use floodgate_load::dist::Dist;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn cfg(workers: usize, service: &str, queue: usize) -> QueueConfig {
    QueueConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        workers,
        service: service.parse().unwrap(),
        queue,
        ..QueueConfig::default()
    }
}

/// One `GET /` on a fresh connection: the status, the body and how long it took.
async fn get(addr: SocketAddr) -> (u16, String, Duration) {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body, t0.elapsed())
}

/// `n` requests at once: their results.
async fn burst(addr: SocketAddr, n: usize) -> Vec<(u16, String, Duration)> {
    let tasks: Vec<_> = (0..n).map(|_| tokio::spawn(get(addr))).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn mean(v: &[(u16, String, Duration)]) -> Duration {
    v.iter().map(|r| r.2).sum::<Duration>() / v.len() as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_climbs_once_requests_outnumber_the_workers() {
    let b = QueueBackend::start(cfg(2, "const:40ms", 100))
        .await
        .unwrap();
    let within = burst(b.addr(), 2).await;
    let beyond = burst(b.addr(), 16).await;
    assert!(
        within
            .iter()
            .chain(&beyond)
            .all(|r| r.0 == 200 && r.1 == "ok\n")
    );
    // 16 on 2 workers wait for up to 7 services before their own; 2 wait for none
    assert!(
        mean(&beyond) > mean(&within),
        "{:?} vs {:?}",
        mean(&beyond),
        mean(&within)
    );
    assert_eq!(
        b.counts(),
        QueueCounts {
            served: 18,
            queue_full: 0,
            over_time_limit: 0
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_answered_503_at_once() {
    // one serving, one waiting; the third finds no place
    let b = QueueBackend::start(cfg(1, "const:1s", 1)).await.unwrap();
    let mut r = burst(b.addr(), 3).await;
    r.sort_by_key(|x| x.0);
    let statuses: Vec<u16> = r.iter().map(|x| x.0).collect();
    assert_eq!(statuses, [200, 200, 503]);
    assert_eq!(r[2].1, "queue full\n");
    assert_eq!(b.counts().queue_full, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_past_the_time_limit_is_not_served() {
    let b = QueueBackend::start(QueueConfig {
        time_limit: Duration::from_millis(50),
        ..cfg(1, "const:1s", 10)
    })
    .await
    .unwrap();
    let mut r = burst(b.addr(), 2).await;
    r.sort_by_key(|x| x.0);
    assert_eq!((r[0].0, r[1].0), (200, 503));
    assert_eq!(r[1].1, "waited over the time limit\n");
    assert_eq!(
        b.counts(),
        QueueCounts {
            served: 1,
            queue_full: 0,
            over_time_limit: 1
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_at_accept() {
    let b = QueueBackend::start(QueueConfig {
        max_connections: 1,
        ..cfg(1, "const:1ms", 10)
    })
    .await
    .unwrap();
    let held = TcpStream::connect(b.addr()).await.unwrap();
    // the second connection is accepted by the kernel and closed by the backend
    let mut second = TcpStream::connect(b.addr()).await.unwrap();
    let _ = second.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), second.read(&mut buf))
        .await
        .expect("the backend closes the second connection")
        .unwrap_or(0);
    assert_eq!(n, 0);
    drop(held);
}

#[tokio::test]
async fn bad_settings_are_refused_by_name() {
    for (c, part) in [
        (cfg(0, "exp:20ms", 10), "workers (--workers): 0"),
        (cfg(100_000, "exp:20ms", 10), "workers (--workers): 100000"),
        (cfg(1, "exp:20ms", 2_000_000), "queue (--queue)"),
        (
            QueueConfig {
                max_connections: 0,
                ..cfg(1, "exp:20ms", 1)
            },
            "max connections",
        ),
        (
            QueueConfig {
                time_limit: Duration::ZERO,
                ..cfg(1, "exp:20ms", 1)
            },
            "time limit (--time-limit)",
        ),
    ] {
        let e = QueueBackend::start(c)
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains(part), "{e}");
    }
    let c = QueueConfig::default();
    assert_eq!(
        (c.capacity_per_s(), c.service),
        (400.0, Dist::Exp(Duration::from_millis(20)))
    );
}
