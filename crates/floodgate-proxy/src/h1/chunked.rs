//! Decoding a `Transfer-Encoding: chunked` response body (RFC 9112 §7.1) from a buffer
//! that fills as the connection is read. Chunk extensions are ignored; trailer fields
//! are read and dropped (nginx drops them too). Lines must end in CRLF: a bare LF, a
//! size that is not hex, or one that overflows 64 bits is an error, never a guess.

use bytes::{Buf, Bytes, BytesMut};

/// Longest chunk-size line accepted (size, extensions and CRLF), in bytes.
pub(crate) const MAX_SIZE_LINE: usize = 4096;
/// Longest trailer section accepted, in bytes.
pub(crate) const MAX_TRAILERS: usize = 16 * 1024;

/// What [`ChunkedDecoder::decode`] found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Body bytes (never empty).
    Data(Bytes),
    /// The buffer holds no complete next item: read more and call again.
    NeedMore,
    /// The last chunk and the trailer section have been consumed: the body is complete.
    Done,
}

/// Why a chunked body is malformed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ChunkedError {
    /// The chunk-size line is not hex digits, optionally followed by `;extensions`.
    #[error("malformed chunk size line")]
    BadSize,
    /// The chunk-size line is longer than [`MAX_SIZE_LINE`].
    #[error("chunk size line longer than {MAX_SIZE_LINE} bytes")]
    SizeLineTooLong,
    /// The chunk size does not fit in 64 bits.
    #[error("chunk size overflows 64 bits")]
    Overflow,
    /// Chunk data is not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    /// The trailer section is longer than [`MAX_TRAILERS`] or holds a bare LF.
    #[error("malformed or oversized trailer section (limit {MAX_TRAILERS} bytes)")]
    BadTrailers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk: this many data bytes still to come.
    Data(u64),
    /// After a chunk's data: expecting CRLF.
    DataEnd,
    /// After the last chunk: trailer lines until an empty line; bytes seen so far.
    Trailers(usize),
    /// Complete.
    Done,
}

/// Incremental chunked decoder. Invariant: bytes it has consumed are removed from the
/// buffer it is given, so what remains after [`Step::Done`] belongs to the next
/// message (or is garbage).
#[derive(Debug)]
pub(crate) struct ChunkedDecoder {
    state: State,
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub(crate) fn new() -> Self {
        ChunkedDecoder { state: State::Size }
    }

    /// Whether the whole body has been decoded.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consume what `buf` holds of the body, up to the next data, the end, or the point
    /// where more bytes are needed.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkedError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(end) = line_end(buf, MAX_SIZE_LINE) else {
                        return if buf.len() >= MAX_SIZE_LINE {
                            Err(ChunkedError::SizeLineTooLong)
                        } else {
                            Ok(Step::NeedMore)
                        };
                    };
                    let size = parse_size(&buf[..end])?;
                    buf.advance(end + 2);
                    self.state = if size == 0 {
                        State::Trailers(0)
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(rem) => {
                    if buf.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    let n = rem.min(buf.len() as u64);
                    let data = buf.split_to(n as usize).freeze();
                    self.state = if n == rem {
                        State::DataEnd
                    } else {
                        State::Data(rem - n)
                    };
                    return Ok(Step::Data(data));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        if buf.first().is_some_and(|&b| b != b'\r') {
                            return Err(ChunkedError::MissingCrlf);
                        }
                        return Ok(Step::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ChunkedError::MissingCrlf);
                    }
                    buf.advance(2);
                    self.state = State::Size;
                }
                State::Trailers(seen) => {
                    let room = MAX_TRAILERS - seen;
                    let Some(end) = line_end(buf, room) else {
                        return if buf.len() >= room {
                            Err(ChunkedError::BadTrailers)
                        } else {
                            Ok(Step::NeedMore)
                        };
                    };
                    if buf[..end].contains(&b'\n') {
                        return Err(ChunkedError::BadTrailers);
                    }
                    buf.advance(end + 2);
                    if end == 0 {
                        self.state = State::Done;
                        return Ok(Step::Done);
                    }
                    self.state = State::Trailers(seen + end + 2);
                }
                State::Done => return Ok(Step::Done),
            }
        }
    }
}

/// The index of the CR of the first CRLF in the first `limit` bytes of `buf`.
fn line_end(buf: &[u8], limit: usize) -> Option<usize> {
    let window = &buf[..buf.len().min(limit)];
    window.windows(2).position(|w| w == b"\r\n")
}

/// `1a;name=value` → 26. Hex digits, then optional whitespace and `;extensions` (no CR
/// or LF in them).
fn parse_size(line: &[u8]) -> Result<u64, ChunkedError> {
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 {
        return Err(ChunkedError::BadSize);
    }
    // optional whitespace is spaces and tabs only (RFC 9112 BWS): `trim_ascii_start`
    // would also take a CR, and `8\r` then read as 8 where hyper refuses the line
    let ws = line[digits..]
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let rest = &line[digits + ws..];
    // a bare CR or LF in the extensions: the line ends there for other readers (hyper
    // reads CR as the line's end and refuses what follows), so it is refused
    if !(rest.is_empty() || rest[0] == b';') || rest.iter().any(|&b| b == b'\n' || b == b'\r') {
        return Err(ChunkedError::BadSize);
    }
    let mut size: u64 = 0;
    for &b in &line[..digits] {
        let d = (b as char).to_digit(16).ok_or(ChunkedError::BadSize)?;
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(d)))
            .ok_or(ChunkedError::Overflow)?;
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decode `wire` fed in pieces of `piece` bytes; the body and what is left over.
    fn decode_in_pieces(wire: &[u8], piece: usize) -> Result<(Vec<u8>, Vec<u8>), ChunkedError> {
        let mut d = ChunkedDecoder::new();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Step::Data(b) => {
                    assert!(!b.is_empty());
                    body.extend_from_slice(&b);
                }
                Step::Done => return Ok((body, [&buf[..], &wire[fed..]].concat())),
                Step::NeedMore => {
                    assert!(fed < wire.len(), "ran out of input: {:?}", d.state);
                    let n = piece.min(wire.len() - fed);
                    buf.extend_from_slice(&wire[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn a_bare_cr_in_the_extensions_is_refused() {
        assert_eq!(parse_size(b"5;ext=1"), Ok(5));
        assert_eq!(parse_size(b"5;ext=\rS"), Err(ChunkedError::BadSize));
        assert_eq!(parse_size(b"5;e\nx"), Err(ChunkedError::BadSize));
        // a bare CR right after the digits (the line `8\r\r\n`) is not whitespace
        assert_eq!(parse_size(b"8\r"), Err(ChunkedError::BadSize));
        assert_eq!(parse_size(b"8 \r"), Err(ChunkedError::BadSize));
        assert_eq!(parse_size(b"8\x0c"), Err(ChunkedError::BadSize));
        assert_eq!(parse_size(b"8 \t;ext"), Ok(8));
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let wire = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE \r\n in\r\n\r\nchunks.\r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
        for piece in 1..wire.len() {
            let (body, rest) = decode_in_pieces(wire, piece).unwrap();
            assert_eq!(body, b"Wikipedia in\r\n\r\nchunks.");
            assert_eq!(rest, b"NEXT");
        }
    }

    #[test]
    fn malformed_framing_is_an_error() {
        let cases: &[(&[u8], ChunkedError)] = &[
            (b"x\r\n", ChunkedError::BadSize),
            (b"\r\n", ChunkedError::BadSize),
            (b"4 x\r\n", ChunkedError::BadSize),
            (b"-1\r\n", ChunkedError::BadSize),
            (b"10000000000000000\r\n", ChunkedError::Overflow),
            (b"2\r\nabXY", ChunkedError::MissingCrlf),
            (b"2\r\nabX", ChunkedError::MissingCrlf),
            (b"0\r\nbad\ntrailer\r\n", ChunkedError::BadTrailers),
        ];
        for (wire, want) in cases {
            assert_eq!(
                decode_in_pieces(wire, wire.len()).unwrap_err(),
                *want,
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
        let long = [b"1;".as_slice(), &[b'x'; MAX_SIZE_LINE]].concat();
        assert_eq!(
            decode_in_pieces(&long, 64).unwrap_err(),
            ChunkedError::SizeLineTooLong
        );
        let trailers = [b"0\r\n".as_slice(), &[b'x'; MAX_TRAILERS]].concat();
        assert_eq!(
            decode_in_pieces(&trailers, 1000).unwrap_err(),
            ChunkedError::BadTrailers
        );
    }

    proptest! {
        /// Any body, cut into any chunks, encoded and fed in any piece size, decodes
        /// to itself and leaves what follows untouched.
        #[test]
        fn round_trips(body in proptest::collection::vec(any::<u8>(), 0..600),
                       cuts in proptest::collection::vec(1usize..90, 1..20),
                       piece in 1usize..40, upper in any::<bool>()) {
            let mut wire = Vec::new();
            let mut at = 0;
            let mut i = 0;
            while at < body.len() {
                let n = cuts[i % cuts.len()].min(body.len() - at);
                let size = if upper { format!("{n:X}") } else { format!("{n:x}") };
                wire.extend_from_slice(size.as_bytes());
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(&body[at..at + n]);
                wire.extend_from_slice(b"\r\n");
                at += n;
                i += 1;
            }
            wire.extend_from_slice(b"0\r\n\r\nGET / HTTP/1.1\r\n");
            let (got, rest) = decode_in_pieces(&wire, piece).unwrap();
            prop_assert_eq!(got, body);
            prop_assert_eq!(rest, b"GET / HTTP/1.1\r\n".to_vec());
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn arbitrary_input_never_panics(wire in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut d = ChunkedDecoder::new();
            let mut buf = BytesMut::from(&wire[..]);
            for _ in 0..400 {
                match d.decode(&mut buf) {
                    Ok(Step::Data(_)) => {}
                    Ok(Step::NeedMore) | Ok(Step::Done) | Err(_) => break,
                }
            }
        }
    }
}
