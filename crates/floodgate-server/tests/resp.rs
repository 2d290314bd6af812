//! CL.THROTTLE over the Redis protocol, with the `redis` crate as an independent client
//! and raw TCP for malformed frames.

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn throttle(
    c: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("CL.THROTTLE");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query_async(c).await
}

#[tokio::test]
async fn redis_client_gets_redis_cells_answers() {
    let srv = start("").await;
    let mut c = resp_client(&srv).await;
    assert_eq!(
        throttle(&mut c, &["k", "15", "30", "60"]).await.unwrap(),
        [0, 16, 15, -1, 2]
    );
    // microseconds later: 3.99... s to full capacity, truncated as redis-cell truncates
    assert_eq!(
        throttle(&mut c, &["k", "15", "30", "60"]).await.unwrap(),
        [0, 16, 14, -1, 3]
    );
    assert_eq!(
        throttle(&mut c, &["fresh", "15", "30", "60", "0"])
            .await
            .unwrap(),
        [0, 16, 16, -1, 0]
    );
    assert_eq!(
        throttle(&mut c, &["big", "4", "1", "1", "6"])
            .await
            .unwrap(),
        [1, 5, 5, -1, 0]
    );
    // a burst of 16 then limited with a retry of one emission interval (2 s) less the time
    // since the burst began, truncated: 1 s (and 31 s to full capacity)
    for i in 0..16 {
        let r = throttle(&mut c, &["burst", "15", "30", "60"])
            .await
            .unwrap();
        assert_eq!(r[..3], [0, 16, 15 - i]);
    }
    assert_eq!(
        throttle(&mut c, &["burst", "15", "30", "60"])
            .await
            .unwrap(),
        [1, 16, 0, 1, 31]
    );
    let pong: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    assert_eq!(pong, "PONG");
    srv.stop().await;
}

#[tokio::test]
async fn argument_errors_are_redis_cells() {
    let srv = start("").await;
    let mut c = resp_client(&srv).await;
    let err = |r: redis::RedisResult<Vec<i64>>| r.unwrap_err().to_string();
    let e = err(throttle(&mut c, &["k", "15", "30"]).await);
    assert!(
        e.contains("Usage: CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]"),
        "{e}"
    );
    let e = err(throttle(&mut c, &["k", "15", "30", "60", "1", "extra"]).await);
    assert!(e.contains("Usage: CL.THROTTLE"), "{e}");
    let e = err(throttle(&mut c, &["k", "15", "3o", "60"]).await);
    assert!(e.contains("count must be an integer, got \"3o\""), "{e}");
    let e = err(throttle(&mut c, &["k", "15", "0", "60"]).await);
    assert!(e.contains("zero rates are not supported"), "{e}");
    let e = err(throttle(&mut c, &["k", "15", "30", "60", "-1"]).await);
    assert!(e.contains("quantity must not be negative"), "{e}");
    let e = redis::cmd("GET")
        .arg("x")
        .query_async::<String>(&mut c)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown command 'GET'"), "{e}");
    // the connection is still usable after errors
    assert_eq!(
        throttle(&mut c, &["k", "15", "30", "60"]).await.unwrap()[0],
        0
    );
    srv.stop().await;
}

async fn raw(srv: &Srv, bytes: &[u8]) -> (String, bool) {
    let mut s = TcpStream::connect(srv.running.resp.unwrap()).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        s.read_to_end(&mut out),
    )
    .await
    .is_ok();
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

#[tokio::test]
async fn malformed_frames_get_an_error_and_a_close_and_the_server_stays_up() {
    let srv = start("").await;
    let cases: [(&[u8], &str); 5] = [
        (
            b"*1\r\n$99999999\r\n",
            "-ERR Protocol error: bulk of 99999999 bytes is more than the maximum of 65536\r\n",
        ),
        (
            b"*abc\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*2\r\n:1\r\n",
            "-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            b"*100000\r\n",
            "-ERR Protocol error: 100000 arguments is more than the maximum of 64\r\n",
        ),
        (
            b"*1\r\n$4\r\nPINGxx",
            "-ERR Protocol error: bulk string not terminated by CRLF\r\n",
        ),
    ];
    for (input, want) in cases {
        let (got, closed) = raw(&srv, input).await;
        assert_eq!(got, want);
        assert!(closed, "the server closes after a protocol error");
    }
    let (got, _) = raw(&srv, &vec![b'x'; 100_000]).await;
    assert_eq!(got, "-ERR Protocol error: too big inline request\r\n");
    // Pipelined commands, inline commands and QUIT on one connection.
    let (got, closed) = raw(
        &srv,
        b"*1\r\n$4\r\nPING\r\nPING hello\r\nCL.THROTTLE p 15 30 60\r\nCOMMAND DOCS\r\nQUIT\r\nPING\r\n",
    )
    .await;
    assert_eq!(
        got,
        "+PONG\r\n$5\r\nhello\r\n*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n*0\r\n+OK\r\n"
    );
    assert!(closed);
    // A command split across writes is answered once complete.
    let mut s = TcpStream::connect(srv.running.resp.unwrap()).await.unwrap();
    for part in [&b"*2\r\n$4\r\nEC"[..], b"HO\r\n$2", b"\r\nhi\r\n"] {
        s.write_all(part).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut buf = [0u8; 8];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"$2\r\nhi\r\n");
    let mut c = resp_client(&srv).await;
    assert_eq!(
        throttle(&mut c, &["after", "1", "1", "1"]).await.unwrap()[0],
        0
    );
    let m = srv.running.engine.metrics().render();
    assert!(
        m.contains("floodgate_requests_total{outcome=\"invalid\"} 6"),
        "{m}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn concurrent_clients_on_one_key_admit_exactly_the_burst() {
    let srv = start("").await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut c = resp_client(&srv).await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..40 {
                let r = throttle(&mut c, &["shared", "99", "1", "3600"])
                    .await
                    .unwrap();
                admitted += i64::from(r[0] == 0);
            }
            admitted
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 100, "max_burst 99 admits exactly 100 of 320");
    srv.stop().await;
}
