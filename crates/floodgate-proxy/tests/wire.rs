//! The proxy's own request-head parser against hyper's server on fixed heads (the fuzz
//! target `fuzz/fuzz_targets/request_head.rs` does the same on generated ones): a head
//! the proxy's path takes is one hyper's server takes, read the same. And the upstream
//! side's whole response against hyper's client on fixed answers (generated ones:
//! `fuzz/fuzz_targets/response_framing.rs`): both take it, with the same status and
//! body octets, or both refuse it.

use floodgate_proxy::wire::{
    Known, RequestHead, hyper_request_head, hyper_upstream_response, parse_request_head,
    read_upstream_response, responses_agree,
};

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

#[tokio::test]
async fn responses_the_upstream_side_reads_are_the_ones_hyper_reads() {
    use http::Method;
    let taken: &[(&[u8], Method, u16, &[u8])] = &[
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", Method::GET, 200, b"hello"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
            Method::GET,
            200,
            b"hello world",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nuntil the close",
            Method::GET,
            200,
            b"until the close",
        ),
        (b"HTTP/1.0 200 OK\r\n\r\nold", Method::GET, 200, b"old"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Method::HEAD, 200, b""),
        (
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
            Method::GET,
            204,
            b"",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\n\r\nxyz",
            Method::GET,
            200,
            b"abc",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            Method::GET,
            200,
            b"abc",
        ),
    ];
    for (wire, method, status, body) in taken {
        let text = String::from_utf8_lossy(wire);
        let ours = read_upstream_response(wire, method).await;
        let theirs = hyper_upstream_response(wire, method).await;
        for r in [&ours, &theirs] {
            assert!(r.is_whole(), "{text:?}: {r:?}");
            assert_eq!(r.head.as_ref().unwrap().status(), *status, "{text:?}");
            assert_eq!(&r.body[..], *body, "{text:?}");
        }
        assert_eq!(
            responses_agree(method, &ours, &theirs),
            Ok(None),
            "{text:?}"
        );
    }
    for wire in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        // a bare CR after a chunk's size is not whitespace: both refuse the body
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n8\r\r\nX-T.ello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
        b"SMTP ready\r\n\r\n",
        b"",
    ] {
        let text = String::from_utf8_lossy(wire);
        let ours = read_upstream_response(wire, &Method::GET).await;
        let theirs = hyper_upstream_response(wire, &Method::GET).await;
        assert!(!ours.is_whole() && !theirs.is_whole(), "{text:?}");
        assert_eq!(responses_agree(&Method::GET, &ours, &theirs), Ok(None));
    }
    // read apart, and known
    let known: &[(&[u8], Method, Known)] = &[
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", Method::GET, Known::SwitchingProtocols),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
            Method::HEAD,
            Known::UnreadLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 4b\r\n\r\nabc",
            Method::GET,
            Known::UnreadLength,
        ),
        (
            b"HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n",
            Method::GET,
            Known::UnreadLength,
        ),
        (
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            Method::GET,
            Known::Http10TransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nnot a field\r\n\r\n",
            Method::GET,
            Known::Trailers,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \xff, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            Method::GET,
            Known::NonAsciiTransferEncoding,
        ),
    ];
    for (wire, method, want) in known {
        let ours = read_upstream_response(wire, method).await;
        let theirs = hyper_upstream_response(wire, method).await;
        assert_eq!(
            responses_agree(method, &ours, &theirs),
            Ok(Some(*want)),
            "{:?}",
            String::from_utf8_lossy(wire)
        );
    }
}
