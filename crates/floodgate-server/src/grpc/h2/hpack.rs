//! HPACK (RFC 7541) for the gRPC door's HTTP/2 connections: a decoder with the dynamic
//! table that the client's encoder keeps in step with, and an encoder that writes every
//! field as a literal without indexing (no dynamic table on the server's side, so the
//! peer's `SETTINGS_HEADER_TABLE_SIZE` never matters and a reply's header block can be
//! made once and reused).
//!
//! Huffman-coded strings are decoded with the code of Appendix B as the
//! `httlib-huffman` crate publishes it (lengths and codes), read eight bits at a time
//! through a table built from it on first use.

use std::collections::VecDeque;
use std::sync::OnceLock;

/// What makes a header block undecodable (a connection error, `COMPRESSION_ERROR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// An integer runs past the block or above 2^28.
    #[error("HPACK integer truncated or too large")]
    Integer,
    /// A string runs past the block.
    #[error("HPACK string truncated")]
    String,
    /// A Huffman string has an EOS symbol, a bad code or bad padding.
    #[error("bad HPACK Huffman string")]
    Huffman,
    /// Index 0, or past the static and dynamic tables.
    #[error("HPACK index {0} out of range")]
    Index(usize),
    /// A dynamic table size update above the size the server allows, or after a field.
    #[error("bad HPACK dynamic table size update")]
    SizeUpdate,
}

/// The static table (RFC 7541 Appendix A), index 1 first.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// One dynamic table entry: name and value in one allocation.
struct Field {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Field {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }
    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }
    /// The size RFC 7541 4.1 counts: name and value octets plus 32.
    fn size(&self) -> usize {
        self.bytes.len() + 32
    }
}

/// The decoding side of one connection.
pub struct Decoder {
    /// Newest first.
    table: VecDeque<Field>,
    /// Sum of the entries' sizes.
    size: usize,
    /// The table's current maximum (set by the encoder's size updates).
    max_size: usize,
    /// The most the encoder may set (the server's `SETTINGS_HEADER_TABLE_SIZE`).
    allowed: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("entries", &self.table.len())
            .field("size", &self.size)
            .field("max_size", &self.max_size)
            .finish()
    }
}

/// Where a decoded string lies: in the block, or in one of the decoder's buffers.
#[derive(Clone, Copy)]
enum Str {
    Block(usize, usize),
    /// The name of the table's entry at this index (checked to exist).
    Indexed(usize),
    Name,
    Value,
}

impl Decoder {
    /// A decoder whose table may grow to `allowed` octets (4,096 unless the server's
    /// SETTINGS said otherwise).
    pub fn new(allowed: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: allowed,
            allowed,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Decode one whole header block (HEADERS and its CONTINUATIONs joined), calling
    /// `field(name, value)` for each field in order. On an error the table may hold part
    /// of the block: the connection must end.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut at = 0;
        let mut fields_seen = false;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                let (index, n) = integer(&block[at..], 7)?;
                at += n;
                let (name, value) = self.get(index)?;
                field(name, value);
                fields_seen = true;
            } else if b & 0xe0 == 0x20 {
                if fields_seen {
                    return Err(HpackError::SizeUpdate);
                }
                let (size, n) = integer(&block[at..], 5)?;
                at += n;
                if size > self.allowed {
                    return Err(HpackError::SizeUpdate);
                }
                self.max_size = size;
                self.evict(0);
            } else {
                // with incremental indexing (01), or without / never indexed (000x)
                let (prefix, indexing) = if b & 0xc0 == 0x40 {
                    (6, true)
                } else {
                    (4, false)
                };
                let (index, n) = integer(&block[at..], prefix)?;
                at += n;
                let name = if index == 0 {
                    let (s, n) = self.string(block, at, Str::Name)?;
                    at += n;
                    s
                } else {
                    self.get(index)?;
                    Str::Indexed(index)
                };
                let (value, n) = self.string(block, at, Str::Value)?;
                at += n;
                let n = self.view(block, name);
                let v = self.view(block, value);
                field(n, v);
                fields_seen = true;
                if indexing {
                    let mut bytes = Vec::with_capacity(n.len() + v.len());
                    bytes.extend_from_slice(n);
                    bytes.extend_from_slice(v);
                    let name_len = n.len();
                    self.insert(Field {
                        bytes: bytes.into_boxed_slice(),
                        name_len,
                    });
                }
            }
        }
        Ok(())
    }

    /// The octets a decoded string names.
    fn view<'a>(&'a self, block: &'a [u8], s: Str) -> &'a [u8] {
        match s {
            Str::Block(a, b) => &block[a..b],
            Str::Indexed(i) => self.get(i).map_or(&[][..], |(name, _)| name),
            Str::Name => &self.name,
            Str::Value => &self.value,
        }
    }

    /// The field at `index` (1-based: the static table, then the dynamic one, newest
    /// first).
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::Index(0)),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self
                .table
                .get(index - 62)
                .map(|f| (f.name(), f.value()))
                .ok_or(HpackError::Index(index)),
        }
    }

    /// Read the string at `block[at..]`; a Huffman string is decoded into the buffer
    /// `into` names. Returns where it lies and the octets read.
    fn string(&mut self, block: &[u8], at: usize, into: Str) -> Result<(Str, usize), HpackError> {
        let rest = block.get(at..).ok_or(HpackError::String)?;
        let first = *rest.first().ok_or(HpackError::String)?;
        let (len, n) = integer(rest, 7)?;
        let end = n.checked_add(len).ok_or(HpackError::String)?;
        let raw = rest.get(n..end).ok_or(HpackError::String)?;
        if first & 0x80 == 0 {
            return Ok((Str::Block(at + n, at + end), end));
        }
        let buf = match into {
            Str::Value => &mut self.value,
            _ => &mut self.name,
        };
        buf.clear();
        huffman_decode(raw, buf)?;
        Ok((into, end))
    }

    fn insert(&mut self, f: Field) {
        let size = f.size();
        self.evict(size);
        if size <= self.max_size {
            self.size += size;
            self.table.push_front(f);
        }
    }

    /// Drop the oldest entries until `room` more octets fit (all of them if it cannot).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            match self.table.pop_back() {
                Some(old) => self.size -= old.size(),
                None => break,
            }
        }
    }
}

/// An integer with an `n`-bit prefix at the start of `buf`: its value and the octets
/// read. Values above 2^28 are refused (no header block needs one).
pub fn integer(buf: &[u8], n: u32) -> Result<(usize, usize), HpackError> {
    let max = (1usize << n) - 1;
    let first = *buf.first().ok_or(HpackError::Integer)? as usize & max;
    if first < max {
        return Ok((first, 1));
    }
    let mut value = max;
    let mut shift = 0;
    for (i, &b) in buf.iter().enumerate().skip(1) {
        value += ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
        shift += 7;
        if shift > 21 {
            break;
        }
    }
    Err(HpackError::Integer)
}

/// Append `value` with an `n`-bit prefix whose other bits are `flags`.
pub fn put_integer(out: &mut Vec<u8>, value: usize, n: u32, flags: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Append one field as a literal without indexing, with a literal name (or the static
/// table's name index `name_index` when not 0); no Huffman coding.
pub fn put_field(out: &mut Vec<u8>, name_index: usize, name: &[u8], value: &[u8]) {
    if name_index == 0 {
        out.push(0);
        put_integer(out, name.len(), 7, 0);
        out.extend_from_slice(name);
    } else {
        put_integer(out, name_index, 4, 0);
    }
    put_integer(out, value.len(), 7, 0);
    out.extend_from_slice(value);
}

/// The decoding table: for each code (left-aligned in 32 bits, sorted), its length and
/// symbol; and for each first octet, the symbol when a code of at most 8 bits starts
/// there.
struct Huffman {
    codes: Vec<(u32, u8, u16)>,
    short: [(u8, u8); 256],
}

fn huffman() -> &'static Huffman {
    static TABLE: OnceLock<Huffman> = OnceLock::new();
    TABLE.get_or_init(|| {
        let table = &httlib_huffman::encoder::table::ENCODE_TABLE;
        let mut codes: Vec<(u32, u8, u16)> = table
            .iter()
            .enumerate()
            .map(|(sym, &(len, code))| (code << (32 - u32::from(len)), len, sym as u16))
            .collect();
        codes.sort_unstable();
        let mut short = [(0u8, 0u8); 256];
        for &(code, len, sym) in &codes {
            if len <= 8 {
                let first = (code >> 24) as usize;
                for s in short.iter_mut().skip(first).take(1 << (8 - len)) {
                    *s = (len, sym as u8);
                }
            }
        }
        Huffman { codes, short }
    })
}

/// Decode a Huffman string (RFC 7541 5.2) onto `out`: refuses the EOS symbol, a code
/// that is not in the table, and padding longer than 7 bits or not all ones.
pub fn huffman_decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let h = huffman();
    let mut bits: u64 = 0;
    let mut nbits: u32 = 0;
    let mut at = 0;
    loop {
        while nbits <= 56 && at < src.len() {
            bits |= u64::from(src[at]) << (56 - nbits);
            nbits += 8;
            at += 1;
        }
        if nbits == 0 {
            return Ok(());
        }
        let (len, sym) = h.short[(bits >> 56) as usize];
        let (len, sym) = if len != 0 {
            (u32::from(len), u16::from(sym))
        } else {
            let window = (bits >> 32) as u32;
            let i = h.codes.partition_point(|&(code, _, _)| code <= window);
            let (code, len, sym) = h.codes[i.saturating_sub(1)];
            let len = u32::from(len);
            if i == 0 || (window ^ code) >> (32 - len) != 0 {
                return Err(HpackError::Huffman);
            }
            (len, sym)
        };
        if len > nbits {
            // only padding may be left: fewer than 8 bits, all ones
            let mask = if nbits == 0 {
                0
            } else {
                u64::MAX << (64 - nbits)
            };
            return if nbits < 8 && bits & mask == mask {
                Ok(())
            } else {
                Err(HpackError::Huffman)
            };
        }
        if sym == 256 {
            return Err(HpackError::Huffman);
        }
        out.push(sym as u8);
        bits <<= len;
        nbits -= len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut out = Vec::new();
        d.decode(block, |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })?;
        Ok(out)
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn rfc7541_c4_requests_with_huffman_share_the_dynamic_table() {
        let mut d = Decoder::new(4096);
        let first = decode_all(&mut d, &hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff")).unwrap();
        assert_eq!(
            first,
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.size, 57);
        let second = decode_all(&mut d, &hex("8286 84be 5886 a8eb 1064 9cbf")).unwrap();
        assert_eq!(
            second,
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        let third = decode_all(
            &mut d,
            &hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
        )
        .unwrap();
        assert_eq!(
            third,
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.size, 164);
    }

    #[test]
    fn rfc7541_c5_responses_evict_the_oldest_entries() {
        let mut d = Decoder::new(256);
        d.max_size = 256;
        let first = hex(
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
        );
        decode_all(&mut d, &first).unwrap();
        assert_eq!(d.size, 222);
        let second = decode_all(&mut d, &hex("4803 3330 37c1 c0bf")).unwrap();
        assert_eq!(second[0], (":status".into(), "307".into()));
        assert_eq!(
            second[3],
            ("location".into(), "https://www.example.com".into())
        );
        assert_eq!(d.size, 222);
        assert_eq!(d.table.len(), 4);
    }

    #[test]
    fn bad_blocks_are_errors_not_panics() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode_all(&mut d, &[0x80]), Err(HpackError::Index(0)));
        assert_eq!(decode_all(&mut d, &[0xbe]), Err(HpackError::Index(62)));
        assert_eq!(
            decode_all(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Err(HpackError::Integer)
        );
        assert_eq!(
            decode_all(&mut d, &[0x40, 0x05, b'a']),
            Err(HpackError::String)
        );
        assert_eq!(
            decode_all(&mut d, &[0x3f, 0xe2, 0x1f]),
            Err(HpackError::SizeUpdate)
        );
        assert_eq!(decode_all(&mut d, &[0x3f, 0xe1, 0x1f]), Ok(vec![]));
        assert_eq!(
            decode_all(&mut d, &[0x82, 0x20]),
            Err(HpackError::SizeUpdate)
        );
        // a string of EOS-like ones longer than 7 bits of padding
        assert_eq!(
            decode_all(&mut d, &[0x00, 0x81, 0xff, 0x00]),
            Err(HpackError::Huffman)
        );
        // every one-, two- and three-octet block decodes or fails cleanly
        for a in 0..=255u8 {
            let _ = decode_all(&mut Decoder::new(4096), &[a]);
            for b in 0..=255u8 {
                let _ = decode_all(&mut Decoder::new(4096), &[a, b]);
                let _ = decode_all(&mut Decoder::new(4096), &[a, b, 0x81]);
            }
        }
    }

    #[test]
    fn huffman_decodes_what_the_code_encodes() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for len in 0..200usize {
            let src: Vec<u8> = (0..len)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng as u8
                })
                .collect();
            let mut enc = Vec::new();
            httlib_huffman::encode(&src, &mut enc).unwrap();
            let mut dec = Vec::new();
            huffman_decode(&enc, &mut dec).unwrap();
            assert_eq!(dec, src);
        }
        let mut out = Vec::new();
        huffman_decode(&hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff"), &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
    }

    #[test]
    fn the_encoder_writes_what_the_decoder_reads() {
        let mut block = Vec::new();
        put_field(&mut block, 8, b"", b"431");
        put_field(&mut block, 0, b"grpc-status", b"0");
        put_field(&mut block, 0, b"x-long", &[b'v'; 300]);
        let got = decode_all(&mut Decoder::new(4096), &block).unwrap();
        assert_eq!(got[0], (":status".into(), "431".into()));
        assert_eq!(got[1], ("grpc-status".into(), "0".into()));
        assert_eq!(got[2].1.len(), 300);
        for v in [0usize, 14, 15, 16, 127, 128, 300, 1 << 20] {
            let mut out = Vec::new();
            put_integer(&mut out, v, 4, 0);
            assert_eq!(integer(&out, 4).unwrap(), (v, out.len()));
        }
    }
}
