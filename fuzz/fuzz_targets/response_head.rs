//! The upstream response-head parser: never a panic; a head it reads is no longer than
//! its input, its framing follows its fields as RFC 9112 §6.3 says, and a head read
//! whole is read the same when it arrives in two parts.
#![no_main]
use floodgate_proxy::wire::{BodyFraming, ResponseParse, parse_response_head};
use http::Method;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, u16, &[u8])| {
    let (head_request, split, data) = input;
    let method = if head_request {
        Method::HEAD
    } else {
        Method::GET
    };
    let Ok(parsed) = parse_response_head(data, &method) else {
        return;
    };
    match &parsed {
        ResponseParse::Partial => {}
        ResponseParse::Interim(len) => assert!(*len <= data.len()),
        ResponseParse::Final(h) => {
            assert!(h.len <= data.len());
            let status = h.response.status();
            assert!(!status.is_informational());
            let headers = h.response.headers();
            let te = headers.contains_key(http::header::TRANSFER_ENCODING);
            let bodyless = head_request || status == 204 || status == 304;
            match h.framing {
                BodyFraming::None => assert!(bodyless || !te),
                BodyFraming::Length(n) => {
                    assert!(!bodyless && !te && n > 0);
                    let cl = headers[http::header::CONTENT_LENGTH].to_str().unwrap();
                    let first = cl.split(',').next().unwrap().trim();
                    assert_eq!(first.parse::<u64>().unwrap(), n);
                }
                BodyFraming::Chunked => assert!(!bodyless && te),
                BodyFraming::UntilClose => assert!(!bodyless && !h.keep_alive),
            }
        }
    }
    // the same head in two parts: the first part alone is partial, or read the same
    let cut = usize::from(split) % (data.len() + 1);
    if let Ok(ResponseParse::Final(a)) = parse_response_head(&data[..cut], &method)
        && let ResponseParse::Final(b) = &parsed
    {
        assert_eq!(a.len, b.len);
        assert_eq!(a.framing, b.framing);
    }
});
