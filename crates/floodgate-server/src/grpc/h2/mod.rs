//! The gRPC door's HTTP/2 server (RFC 9113, HTTP/2 over cleartext with prior knowledge,
//! as tonic's server serves it): `conn` drives one connection (`streams` its requests,
//! `flow` its control frames and windows), `frame` reads and writes frames, [`hpack`]
//! decodes and encodes header blocks, [`request`] checks a request's header block,
//! `handoff` runs what tonic answers. [`hpack`] and [`request`] are public for the fuzz
//! target `fuzz/fuzz_targets/http2_header_block.rs`.

mod conn;
mod flow;
pub(crate) mod frame;
pub(crate) mod handoff;
pub mod hpack;
pub mod request;
mod streams;

pub(crate) use conn::serve_connection;
