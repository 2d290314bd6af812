//! The gRPC door's HTTP/2 header blocks: any bytes, cut into blocks (each block's length
//! is the two octets before it), decoded one after another by one HPACK decoder (its
//! dynamic table carried from block to block, as on a connection), every field checked as
//! a request's, and a request the checks keep turned into the `http::Request` tonic would
//! get. The same bytes through the Huffman decoder alone.
//!
//! Never a panic; a block that decodes yields fields the checks either refuse or keep;
//! a kept request's fields read back as they were written; whatever a Huffman string
//! decodes to encodes back to a string that decodes to it again.
#![no_main]
use floodgate_server::grpc::h2::hpack::{self, Decoder};
use floodgate_server::grpc::h2::request::{Kept, RequestHead};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new(4096);
    let mut rest = data;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let block = &rest[2..2 + len];
        rest = &rest[2 + len..];
        let mut head = RequestHead::with_buffer(Vec::new());
        let mut seen = Vec::new();
        let decoded = decoder.decode(block, |n, v| {
            seen.push((n.to_vec(), v.to_vec()));
            head.field(n, v, 16 * 1024);
        });
        if decoded.is_err() {
            // the connection ends: its table is not used again
            break;
        }
        head.finish();
        if head.refused.is_none() {
            let kept = Kept::of(&head);
            let regular: Vec<_> = seen.iter().filter(|(n, _)| !n.starts_with(b":")).collect();
            let read: Vec<_> = RequestHead::iter_fields(&kept.fields).collect();
            assert_eq!(read.len(), regular.len());
            for ((n, v), (rn, rv)) in regular.iter().zip(&read) {
                assert_eq!((n.as_slice(), v.as_slice()), (*rn, *rv));
            }
            let _ = kept.request(());
        }
    }
    let mut out = Vec::new();
    if hpack::huffman_decode(data, &mut out).is_ok() {
        let mut block = Vec::new();
        hpack::put_field(&mut block, 0, b"x", &out);
        let mut again = Vec::new();
        Decoder::new(4096)
            .decode(&block, |_, v| again = v.to_vec())
            .expect("a literal field written by put_field decodes");
        assert_eq!(again, out);
    }
});
