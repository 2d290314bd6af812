//! The proxy's own request-head parser against hyper's server on fixed heads (the fuzz
//! target `fuzz/fuzz_targets/request_head.rs` does the same on generated ones): a head
//! the proxy's path takes is one hyper's server takes, read the same.

use floodgate_proxy::wire::{RequestHead, hyper_request_head, parse_request_head};

#[tokio::test]
async fn heads_the_proxy_takes_are_hyper_heads() {
    for wire in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"GET /p?q=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\nConnection: close\r\n\r\n",
        b"HEAD http://a/x HTTP/1.0\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
        b"GET / HTTP/1.1\nHost: a\n\n",
        b"DELETE /x HTTP/1.1\r\nHost: a\r\nX: \x80\xff\r\n\r\n",
        b"GET x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"get /%zz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ] {
        let RequestHead::Taken(ours, len) = parse_request_head(wire) else {
            panic!("not taken: {:?}", String::from_utf8_lossy(wire));
        };
        assert_eq!(len, wire.len());
        let theirs = hyper_request_head(wire).await.expect("hyper refused it");
        assert_eq!(ours.method, theirs.method);
        assert_eq!(ours.uri, theirs.uri);
        assert_eq!(ours.version, theirs.version);
        assert_eq!(ours.headers, theirs.headers);
    }
    // left to hyper: bodies, upgrades, CONNECT, malformed heads
    for wire in [
        &b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"[..],
        b"GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
        b"CONNECT a:1 HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nX : y\r\n\r\n",
        // repeated lengths, even equal: hyper's server folds them into one field
        // (found by the fuzz target)
        b"O4TIONS * HTTP/1.1\r\nHoHosr:\nContent-sr: a\r\nHoHosr:\nContent-sr: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
    ] {
        assert!(
            matches!(parse_request_head(wire), RequestHead::Hyper),
            "{wire:?}"
        );
    }
    assert!(matches!(
        parse_request_head(b"GET / HT"),
        RequestHead::Partial
    ));
}
