//! The upstream side's response framing and chunked decoder against hyper's client:
//! the bytes an upstream answers a GET or a HEAD with (then closing the connection) are
//! read by the proxy's upstream side (status line and fields, the body framed by
//! `Content-Length`, chunks or the close, chunks decoded) and by hyper's HTTP/1 client.
//! Both take the response or both refuse it, and a response both take has the same
//! status and the same body octets (`floodgate_proxy::wire::responses_agree`, which
//! names the few ways the two read an answer apart by design or knowingly): a framing
//! bug on a pooled upstream connection would hand one client the next client's response.
#![no_main]
use floodgate_proxy::wire::{hyper_upstream_response, read_upstream_response, responses_agree};
use http::Method;
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|input: (bool, &[u8])| {
    let (head_request, wire) = input;
    let method = if head_request {
        Method::HEAD
    } else {
        Method::GET
    };
    let rt = common::runtime();
    let ours = rt.block_on(read_upstream_response(wire, &method));
    let theirs = rt.block_on(hyper_upstream_response(wire, &method));
    if let Err(e) = responses_agree(&method, &ours, &theirs) {
        panic!("{e}\n  answer: {:?}", String::from_utf8_lossy(wire));
    }
});
