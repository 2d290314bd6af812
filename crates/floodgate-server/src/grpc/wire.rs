//! `ShouldRateLimit`'s messages on the wire without prost's owned types, for the direct
//! path of [`super::serve`]: the request read in place (its strings borrowed from the
//! received bytes) and the reply written straight from the [`Outcome`].
//!
//! Both are the protobuf encoding prost gives the `envoy-types` messages: the reader
//! takes only what prost decodes the same way (anything else, an override `limit`
//! included, returns `None` and the caller decodes with prost), and the writer's bytes
//! are prost's own for the same reply, field for field (tested below against
//! [`super::response`] encoded by prost).
//!
//! Why: prost's `RateLimitRequest` owns a `String` per domain, key and value and a `Vec`
//! per descriptor and entry list, and the reply's `RateLimitResponse` a `String` per
//! name and header; measured under `examples/rls_load` (docs/bench-server.md), these
//! allocations and copies were a visible share of the direct path.

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::descriptors::{Entry, Outcome};

use super::{StatusView, status_view};

/// One descriptor of a request, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorRef<'a> {
    /// Entries, outermost first.
    pub entries: Vec<Entry<'a>>,
    /// The request carries a limit override (`limit`).
    pub limit: bool,
    /// The descriptor's own `hits_addend`, when present.
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`.
    pub is_negative_hits: bool,
}

/// A `RateLimitRequest`, its strings borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRef<'a> {
    /// `domain`.
    pub domain: &'a str,
    /// The descriptors, in request order.
    pub descriptors: Vec<DescriptorRef<'a>>,
    /// The request's `hits_addend`.
    pub hits_addend: u32,
}

impl<'a> RequestRef<'a> {
    /// The borrowed form of a request prost decoded.
    pub fn of(r: &'a RateLimitRequest) -> RequestRef<'a> {
        RequestRef {
            domain: &r.domain,
            hits_addend: r.hits_addend,
            descriptors: r
                .descriptors
                .iter()
                .map(|d| DescriptorRef {
                    entries: d
                        .entries
                        .iter()
                        .map(|e| Entry {
                            key: &e.key,
                            value: &e.value,
                        })
                        .collect(),
                    limit: d.limit.is_some(),
                    hits_addend: d.hits_addend.map(|h| h.value),
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
        }
    }
}

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// A reader over one message's bytes; every method returns `None` where prost would
/// fail or where this reader does not follow prost.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first()?;
            self.buf = rest;
            if i == 9 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    /// The next field's tag and wire type; `None` at the end too (check `is_empty`).
    fn key(&mut self) -> Option<(u64, u64)> {
        let k = self.varint()?;
        let tag = k >> 3;
        if tag == 0 || tag > u64::from(u32::MAX >> 3) {
            return None;
        }
        Some((tag, k & 7))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        if len > self.buf.len() {
            return None;
        }
        let (b, rest) = self.buf.split_at(len);
        self.buf = rest;
        Some(b)
    }

    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    fn skip(&mut self, wire: u64) -> Option<()> {
        let n = match wire {
            VARINT => return self.varint().map(drop),
            LEN => return self.bytes().map(drop),
            FIXED64 => 8,
            FIXED32 => 4,
            _ => return None, // groups: left to prost
        };
        self.buf = self.buf.get(n..)?;
        Some(())
    }
}

/// Read a `RateLimitRequest`; `None` when prost must (see the module docs).
pub fn read_request(buf: &[u8]) -> Option<RequestRef<'_>> {
    let mut r = Reader { buf };
    let mut req = RequestRef {
        domain: "",
        descriptors: Vec::new(),
        hits_addend: 0,
    };
    while !r.buf.is_empty() {
        match r.key()? {
            (1, LEN) => req.domain = r.str()?,
            (2, LEN) => req.descriptors.push(read_descriptor(r.bytes()?)?),
            (3, VARINT) => req.hits_addend = u32::try_from(r.varint()?).ok()?,
            (1..=3, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(req)
}

fn read_descriptor(buf: &[u8]) -> Option<DescriptorRef<'_>> {
    let mut r = Reader { buf };
    let mut d = DescriptorRef {
        entries: Vec::new(),
        limit: false,
        hits_addend: None,
        is_negative_hits: false,
    };
    while !r.buf.is_empty() {
        match r.key()? {
            (1, LEN) => d.entries.push(read_entry(r.bytes()?)?),
            // an override is refused; prost reads it so that the refusal is tonic's
            (2, _) => return None,
            (3, LEN) => {
                // google.protobuf.UInt64Value, merged as prost merges it
                let mut v = Reader { buf: r.bytes()? };
                let mut value = d.hits_addend.unwrap_or(0);
                while !v.buf.is_empty() {
                    match v.key()? {
                        (1, VARINT) => value = v.varint()?,
                        (1, _) => return None,
                        (_, wire) => v.skip(wire)?,
                    }
                }
                d.hits_addend = Some(value);
            }
            (4, VARINT) => d.is_negative_hits = r.varint()? != 0,
            (1 | 3 | 4, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(d)
}

fn read_entry(buf: &[u8]) -> Option<Entry<'_>> {
    let mut r = Reader { buf };
    let mut e = Entry { key: "", value: "" };
    while !r.buf.is_empty() {
        match r.key()? {
            (1, LEN) => e.key = r.str()?,
            (2, LEN) => e.value = r.str()?,
            (1 | 2, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(e)
}

fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least 1
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// A scalar field's length (absent when 0, as proto3 writes it); tags here are < 16.
fn scalar_len(v: u64) -> usize {
    if v == 0 { 0 } else { 1 + varint_len(v) }
}

fn put_scalar(buf: &mut BytesMut, tag: u64, v: u64) {
    if v != 0 {
        put_varint(buf, tag << 3);
        put_varint(buf, v);
    }
}

/// A length-delimited field's length, `len` being its content's.
fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

fn str_len(s: &str) -> usize {
    if s.is_empty() { 0 } else { field_len(s.len()) }
}

fn put_len(buf: &mut BytesMut, tag: u64, len: usize) {
    put_varint(buf, (tag << 3) | LEN);
    put_varint(buf, len as u64);
}

fn put_str(buf: &mut BytesMut, tag: u64, s: &str) {
    if !s.is_empty() {
        put_len(buf, tag, s.len());
        buf.put_slice(s.as_bytes());
    }
}

/// An enum or `int32` field as prost writes it (sign-extended to 64 bits).
fn i32_wire(v: i32) -> u64 {
    i64::from(v) as u64
}

struct Sizes {
    limit: usize,
    duration: usize,
    status: usize,
}

fn sizes(s: &StatusView<'_>) -> Sizes {
    let (limit, duration) = match &s.limit {
        Some(l) => (
            scalar_len(u64::from(l.requests_per_unit))
                + scalar_len(i32_wire(l.unit))
                + str_len(l.name),
            scalar_len(l.reset.seconds as u64) + scalar_len(i32_wire(l.reset.nanos)),
        ),
        None => (0, 0),
    };
    let status = scalar_len(i32_wire(s.code))
        + match &s.limit {
            Some(l) => field_len(limit) + scalar_len(u64::from(l.remaining)) + field_len(duration),
            None => 0,
        };
    Sizes {
        limit,
        duration,
        status,
    }
}

fn header_len(key: &str, value: &str) -> usize {
    str_len(key) + str_len(value)
}

/// The reply to `outcome` as one gRPC message: the 5-byte prefix, then the
/// `RateLimitResponse` prost would write for [`super::response`]`(outcome)`.
pub fn write_reply(outcome: &Outcome) -> Bytes {
    let code = |over: bool| if over { 2 } else { 1 }; // Code::OverLimit, Code::Ok
    let mut len = scalar_len(code(outcome.over_limit));
    for s in &outcome.statuses {
        len += field_len(sizes(&status_view(s)).status);
    }
    for (k, v) in &outcome.headers {
        len += field_len(header_len(k, v));
    }
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    put_scalar(&mut buf, 1, code(outcome.over_limit));
    for s in &outcome.statuses {
        let s = status_view(s);
        let z = sizes(&s);
        put_len(&mut buf, 2, z.status);
        put_scalar(&mut buf, 1, i32_wire(s.code));
        if let Some(l) = &s.limit {
            put_len(&mut buf, 2, z.limit);
            put_scalar(&mut buf, 1, u64::from(l.requests_per_unit));
            put_scalar(&mut buf, 2, i32_wire(l.unit));
            put_str(&mut buf, 3, l.name);
            put_scalar(&mut buf, 3, u64::from(l.remaining));
            put_len(&mut buf, 4, z.duration);
            put_scalar(&mut buf, 1, l.reset.seconds as u64);
            put_scalar(&mut buf, 2, i32_wire(l.reset.nanos));
        }
    }
    for (k, v) in &outcome.headers {
        put_len(&mut buf, 3, header_len(k, v));
        put_str(&mut buf, 1, k);
        put_str(&mut buf, 2, v);
    }
    buf.freeze()
}

#[cfg(test)]
mod tests;
