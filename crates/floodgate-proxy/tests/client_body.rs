//! A request body that fails on the client's side (malformed chunked framing, or the
//! client hanging up mid-body) is the client's fault: the proxy answers 400 when the
//! client is still there, never 502, and does not count or log it as an upstream error.
//! (Found by the reliability suite's "clients hang up mid-body" case.)

mod common;

use std::time::Duration;

use common::{Backend, RunningProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONFIG: &str = "[[policy]]\nname = \"all\"\nrate = \"1000/s\"\nburst = 1000\nnodelay = true\nkey = \"global\"\n";

fn upstream_errors(p: &RunningProxy) -> String {
    let m = p.limiter.render_metrics();
    m.lines()
        .filter(|l| l.starts_with("floodgate_upstream_errors_total"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn raw(addr: std::net::SocketAddr, bytes: &[u8], read: bool) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    if !read {
        return String::new();
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_chunked_body_is_a_400_not_an_upstream_error() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(CONFIG, backend.addr).await;
    // The backend reads the whole body before it answers (/collect), so the bad chunk is
    // always seen before any response head (with /echo the backend may stream "hello"
    // back first, and then a 200 has already left). hyper's server side sees the bad
    // chunk size too, and now and then closes the connection before the proxy's 400 is
    // written. Either way the client is told nothing false: a 400 or a closed
    // connection, never a 502, and no upstream error counted. Ten tries, most of which
    // must get the 400.
    let mut answered_400 = 0;
    for _ in 0..10 {
        let reply = raw(
            p.addr,
            b"POST /collect HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n5\r\nhello\r\nzz-not-a-size\r\n\r\n",
            true,
        )
        .await;
        let status = reply.lines().next().unwrap_or("");
        assert!(
            status.starts_with("HTTP/1.1 400") || reply.is_empty(),
            "status line {status:?}, reply {reply:?}"
        );
        answered_400 += usize::from(status.starts_with("HTTP/1.1 400"));
    }
    assert!(answered_400 >= 5, "only {answered_400} of 10 got the 400");
    let errors = upstream_errors(&p);
    assert!(
        !errors.is_empty() && errors.lines().all(|l| l.ends_with(" 0")),
        "upstream errors counted for a malformed client body:\n{errors}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_hanging_up_mid_body_is_not_an_upstream_error() {
    let backend = Backend::start().await;
    let p = RunningProxy::start(CONFIG, backend.addr).await;
    for chunked in [false, true] {
        let framing = if chunked {
            "transfer-encoding: chunked\r\n\r\n10000\r\n".to_string()
        } else {
            "content-length: 65536\r\n\r\n".to_string()
        };
        let mut req = format!("POST /echo HTTP/1.1\r\nhost: x\r\n{framing}").into_bytes();
        req.extend(std::iter::repeat_n(b'x', 32_768));
        raw(p.addr, &req, false).await;
    }
    // the proxy has noticed both hang-ups and still serves
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = common::client();
    let got = common::get(&c, p.addr, "/", &[]).await;
    assert_eq!(got.status, 200);
    let errors = upstream_errors(&p);
    assert!(
        !errors.is_empty() && errors.lines().all(|l| l.ends_with(" 0")),
        "upstream errors counted for client hang-ups:\n{errors}"
    );
}
