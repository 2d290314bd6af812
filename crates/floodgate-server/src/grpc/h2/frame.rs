//! HTTP/2 frames (RFC 9113 section 4 and 6): the 9-octet header, the types, flags,
//! error codes and settings the gRPC door's connections read and write.

/// The client's connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Reason {
    NoError = 0x0,
    ProtocolError = 0x1,
    InternalError = 0x2,
    FlowControlError = 0x3,
    StreamClosed = 0x5,
    FrameSizeError = 0x6,
    RefusedStream = 0x7,
    CompressionError = 0x9,
    EnhanceYourCalm = 0xb,
}

/// Settings identifiers.
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// The default and smallest `SETTINGS_MAX_FRAME_SIZE`, in octets.
pub const MIN_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest frame size a peer may announce.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest flow-control window (2^31 - 1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// Every stream's and the connection's window before SETTINGS say otherwise.
pub const DEFAULT_WINDOW: i64 = 65_535;

/// A frame's 9-octet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length in octets.
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl Head {
    /// Read a header from the first 9 octets of `b` (`None` if fewer).
    pub fn read(b: &[u8]) -> Option<Head> {
        let h: &[u8; 9] = b.get(..9)?.try_into().ok()?;
        Some(Head {
            len: (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }
}

/// Append a frame header.
pub fn put_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE as usize);
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Append a whole frame.
pub fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    put_head(out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
}

/// Append a header block as HEADERS and as many CONTINUATIONs as `max_frame` needs.
pub fn put_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let end = if end_stream { flag::END_STREAM } else { 0 };
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let mut kind = kind::HEADERS;
    let mut flags = end;
    if chunks.peek().is_none() {
        put_frame(out, kind, flags | flag::END_HEADERS, stream, &[]);
        return;
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        put_frame(
            out,
            kind,
            flags | if last { flag::END_HEADERS } else { 0 },
            stream,
            chunk,
        );
        kind = kind::CONTINUATION;
        flags = 0;
    }
}

/// Append RST_STREAM.
pub fn put_reset(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    put_frame(
        out,
        kind::RST_STREAM,
        0,
        stream,
        &(reason as u32).to_be_bytes(),
    );
}

/// Append WINDOW_UPDATE.
pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_frame(
        out,
        kind::WINDOW_UPDATE,
        0,
        stream,
        &increment.to_be_bytes(),
    );
}

/// Append GOAWAY naming the last stream processed.
pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason) {
    let mut payload = [0u8; 8];
    payload[..4].copy_from_slice(&last_stream.to_be_bytes());
    payload[4..].copy_from_slice(&(reason as u32).to_be_bytes());
    put_frame(out, kind::GOAWAY, 0, 0, &payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_reads_what_was_written() {
        let mut out = Vec::new();
        put_head(&mut out, 70_000, kind::DATA, flag::END_STREAM, 0x7fff_ffff);
        let h = Head::read(&out).unwrap();
        assert_eq!(
            h,
            Head {
                len: 70_000,
                kind: kind::DATA,
                flags: 1,
                stream: 0x7fff_ffff
            }
        );
        // the reserved bit is ignored on read
        out[5] |= 0x80;
        assert_eq!(Head::read(&out).unwrap().stream, 0x7fff_ffff);
        assert_eq!(Head::read(&out[..8]), None);
    }

    #[test]
    fn a_long_header_block_goes_on_in_continuations() {
        let mut out = Vec::new();
        put_headers(&mut out, 3, &[7u8; 40], true, 16);
        let mut at = 0;
        let mut seen = Vec::new();
        while let Some(h) = Head::read(&out[at..]) {
            seen.push((h.kind, h.flags, h.len));
            at += 9 + h.len;
        }
        assert_eq!(
            seen,
            vec![
                (kind::HEADERS, flag::END_STREAM, 16),
                (kind::CONTINUATION, 0, 16),
                (kind::CONTINUATION, flag::END_HEADERS, 8)
            ]
        );
    }
}
