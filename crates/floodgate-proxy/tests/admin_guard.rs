//! The admin listener against DNS rebinding: `/admin` answers only loopback `Host`
//! names and addresses and the configured `admin_allowed_hosts` (421 for any other),
//! with `nosniff` and a Content-Security-Policy; `/metrics` and `/healthz` answer any.

mod common;

use common::RunningProxy;
use common::recorder::{Recorder, exchange};

const CFG: &str = r#"
admin_allowed_hosts = ["admin.example", "10.0.0.5"]

[[policy]]
name = "api"
rate = "10/s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_answers_loopback_and_configured_hosts_only() {
    let backend = Recorder::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let port = p.admin.port();
    let get = |path: &str, host: Option<String>| {
        let host = host.map_or_else(String::new, |h| format!("Host: {h}\r\n"));
        format!("GET {path} HTTP/1.1\r\n{host}Connection: close\r\n\r\n")
    };
    let answered = [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "localhost".to_string(),
        format!("[::1]:{port}"),
        "127.1.2.3".to_string(),
        "admin.example:443".to_string(),
        "ADMIN.example".to_string(),
        "10.0.0.5:9090".to_string(),
    ];
    for host in answered {
        for path in ["/admin", "/admin/api/config", "/admin/api/overview"] {
            let got = exchange(p.admin, get(path, Some(host.clone())).as_bytes(), 1).await;
            assert_eq!(got[0].status, 200, "{host} {path}: {}", got[0].head);
            let head = got[0].head.to_ascii_lowercase();
            assert!(head.contains("x-content-type-options: nosniff"), "{head}");
            assert!(
                head.contains("content-security-policy: default-src 'none'; script-src 'sha256-"),
                "{head}"
            );
        }
    }
    let refused = [
        Some(format!("evil.example:{port}")),
        Some("evil.example".to_string()),
        Some(format!("127.0.0.1.evil.example:{port}")),
        Some("localhost.evil.example".to_string()),
        Some("10.0.0.6".to_string()),
        Some("admin.example.evil".to_string()),
        None,
    ];
    for host in refused {
        for path in ["/admin", "/admin/", "/admin/api/config", "/admin/api/top"] {
            let got = exchange(p.admin, get(path, host.clone()).as_bytes(), 1).await;
            let status = got.first().map(|a| a.status);
            // no Host at all on HTTP/1.1 is refused by hyper's parser, or by the guard
            if host.is_none() {
                assert!(
                    matches!(status, Some(400 | 421) | None),
                    "{path}: {status:?}"
                );
                continue;
            }
            assert_eq!(status, Some(421), "{host:?} {path}");
            assert!(got[0].head.to_ascii_lowercase().contains("nosniff"));
        }
    }
    // the operations endpoints answer any Host (a scraper may use any name)
    for path in ["/metrics", "/healthz"] {
        let got = exchange(
            p.admin,
            get(path, Some("evil.example".into())).as_bytes(),
            1,
        )
        .await;
        assert_eq!(got[0].status, 200, "{path}");
    }
    // HTTP/1.0 without Host: refused on /admin
    let got = exchange(p.admin, b"GET /admin/api/config HTTP/1.0\r\n\r\n", 1).await;
    assert_eq!(got[0].status, 421);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_over_http2_reads_the_authority() {
    let backend = Recorder::start().await;
    let p = RunningProxy::start(CFG, backend.addr).await;
    let s = tokio::net::TcpStream::connect(p.admin).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(s),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for (uri, want) in [
        (
            format!("http://127.0.0.1:{}/admin/api/config", p.admin.port()),
            200,
        ),
        ("http://evil.example/admin/api/config".to_string(), 421),
    ] {
        let req = http::Request::get(uri.as_str())
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), want, "{uri}");
    }
}
