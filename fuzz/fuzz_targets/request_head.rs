//! The proxy's own request-head parser against hyper's server: every head the proxy's
//! own HTTP/1 path takes, hyper's server takes too, with the same method, target,
//! version and fields (in order). What the proxy's path does not take goes to hyper's
//! server with the connection, so hyper decides those alone.
#![no_main]
use floodgate_proxy::wire::{RequestHead, hyper_request_head, parse_request_head};
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let RequestHead::Taken(ours, len) = parse_request_head(data) else {
        return;
    };
    assert!(len <= data.len());
    let theirs = common::runtime()
        .block_on(hyper_request_head(&data[..len]))
        .unwrap_or_else(|| {
            panic!(
                "the proxy's path takes a head hyper's server refuses: {:?}",
                String::from_utf8_lossy(&data[..len])
            )
        });
    assert_eq!(ours.method, theirs.method);
    assert_eq!(ours.uri, theirs.uri);
    assert_eq!(ours.version, theirs.version);
    let fields = |h: &http::HeaderMap| -> Vec<(String, Vec<u8>)> {
        h.iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect()
    };
    assert_eq!(fields(&ours.headers), fields(&theirs.headers));
});
