//! The gRPC door's HTTP/2 server (RFC 9113, HTTP/2 over cleartext with prior knowledge,
//! as tonic's server serves it): [`conn`] drives one connection, [`frame`] reads and
//! writes frames, [`hpack`] decodes and encodes header blocks, [`request`] checks a
//! request's header block.

mod conn;
pub mod frame;
pub mod hpack;
pub mod request;

pub use conn::serve_connection;
