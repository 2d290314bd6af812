//! The values the module stores: compact binary, one tag byte then the state.
//!
//! * GCRA (`CL.THROTTLE`, and `FG.THROTTLE gcra`): tag [`GCRA_TAG`], then the theoretical
//!   arrival time (TAT) as a little-endian `u64` of nanoseconds since the Unix epoch: 9
//!   bytes.
//! * the other algorithms of `FG.THROTTLE` ([`encode_any`]): a tag byte per algorithm,
//!   then the fields of its state in declaration order, each a little-endian `u64`.
//!
//! Every value is written with an absolute expiry ([`expire_at_ms`]): the millisecond at
//! or after which the key is back at full capacity, so dropping it then loses nothing.

use floodgate_core::algorithms::{
    FixedWindowState, GcraState, LeakyState, SlidingCounterState, SlidingLogState, TokenBucketState,
};
use floodgate_core::{AnyState, Nanos};

/// A value to store: up to [`Bytes::INLINE`] bytes in place (every state but a long
/// sliding log's), more on the heap, so that a call writes without allocating.
#[derive(Clone)]
pub struct Bytes {
    inline: [u8; Bytes::INLINE],
    len: usize,
    heap: Vec<u8>,
}

impl Bytes {
    /// Bytes held without allocating.
    pub const INLINE: usize = 64;

    /// No bytes.
    pub const fn new() -> Bytes {
        Bytes {
            inline: [0; Bytes::INLINE],
            len: 0,
            heap: Vec::new(),
        }
    }

    /// Make room for `additional` more bytes at once (a long value is then allocated once,
    /// not grown step by step).
    pub fn reserve(&mut self, additional: usize) {
        let total = self.len() + additional;
        if total > Bytes::INLINE {
            if self.heap.capacity() == 0 {
                let mut heap = Vec::with_capacity(total);
                heap.extend_from_slice(&self.inline[..self.len]);
                self.heap = heap;
            } else {
                self.heap.reserve(additional);
            }
        }
    }

    /// Append `b`.
    pub fn extend_from_slice(&mut self, b: &[u8]) {
        if self.heap.capacity() == 0 && self.len + b.len() <= Bytes::INLINE {
            self.inline[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        } else {
            if self.heap.capacity() == 0 {
                self.heap.extend_from_slice(&self.inline[..self.len]);
            }
            self.heap.extend_from_slice(b);
        }
    }

    /// Append `n` in decimal.
    pub fn push_decimal(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.extend_from_slice(&digits[at..]);
    }
}

impl Default for Bytes {
    fn default() -> Bytes {
        Bytes::new()
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        if self.heap.capacity() == 0 {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        **self == **other
    }
}

impl Eq for Bytes {}

impl PartialEq<[u8]> for Bytes {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Bytes {
    fn eq(&self, other: &&[u8; N]) -> bool {
        **self == other[..]
    }
}

/// The first byte of a `CL.THROTTLE` value (a GCRA TAT follows).
pub const GCRA_TAG: u8 = 1;
/// Length of a `CL.THROTTLE` value in bytes.
pub const GCRA_LEN: usize = 9;

/// Tags of the other algorithms' states.
const FIXED_WINDOW_TAG: u8 = 2;
const SLIDING_COUNTER_TAG: u8 = 3;
const TOKEN_BUCKET_TAG: u8 = 4;
const LEAKY_TAG: u8 = 5;
const SLIDING_LOG_TAG: u8 = 6;

/// A stored value that is not one of the module's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotOurs {
    /// Length of the value found, in bytes.
    pub len: usize,
}

impl std::fmt::Display for NotOurs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the key holds a string of {} bytes that is not a floodgate GCRA state \
             ({GCRA_LEN} bytes, tag {GCRA_TAG}); delete it or use another key",
            self.len
        )
    }
}

/// The GCRA state in `stored` (`None`: no key, a key never seen).
pub fn decode_gcra(stored: Option<&[u8]>) -> Result<GcraState, NotOurs> {
    match stored {
        None => Ok(GcraState::default()),
        Some(b) => match <[u8; GCRA_LEN]>::try_from(b) {
            Ok(v) if v[0] == GCRA_TAG => {
                let mut tat = [0u8; 8];
                tat.copy_from_slice(&v[1..]);
                Ok(GcraState {
                    tat: Nanos(u64::from_le_bytes(tat)),
                })
            }
            _ => Err(NotOurs { len: b.len() }),
        },
    }
}

/// The bytes of a GCRA state.
pub fn encode_gcra(state: &GcraState) -> [u8; GCRA_LEN] {
    let mut v = [0u8; GCRA_LEN];
    v[0] = GCRA_TAG;
    v[1..].copy_from_slice(&state.tat.0.to_le_bytes());
    v
}

/// The bytes of any state the module stores (`None`: a key never seen).
pub fn encode_any(state: &AnyState) -> Option<Bytes> {
    let mut v = Bytes::new();
    let mut put = |tag: u8, fields: &[u64]| {
        v.extend_from_slice(&[tag]);
        fields
            .iter()
            .for_each(|f| v.extend_from_slice(&f.to_le_bytes()));
    };
    match state {
        AnyState::Gcra(s) => v.extend_from_slice(&encode_gcra(s)),
        AnyState::FixedWindow(s) => put(FIXED_WINDOW_TAG, &[s.window, s.count]),
        AnyState::SlidingCounter(s) => put(SLIDING_COUNTER_TAG, &[s.window, s.current, s.previous]),
        AnyState::TokenBucket(s) => put(TOKEN_BUCKET_TAG, &[s.deficit, s.last.0]),
        AnyState::Leaky(s) => put(LEAKY_TAG, &[s.level, s.last.0]),
        AnyState::SlidingLog(s) => {
            v.reserve(1 + 16 * s.entries().count());
            v.extend_from_slice(&[SLIDING_LOG_TAG]);
            s.entries().for_each(|(t, c)| put_pair(&mut v, t.0, c));
        }
        AnyState::Empty => return None,
    }
    Some(v)
}

fn put_pair(v: &mut Bytes, a: u64, b: u64) {
    v.extend_from_slice(&a.to_le_bytes());
    v.extend_from_slice(&b.to_le_bytes());
}

/// The state in `stored`, whatever algorithm wrote it (`None`: no key). A state of another
/// algorithm than the caller's is for the core to judge ([`AnyState`] treats it as a key
/// never seen); a value none of the module's is an error.
pub fn decode_any(stored: Option<&[u8]>) -> Result<AnyState, NotOurs> {
    let Some(b) = stored else {
        return Ok(AnyState::Empty);
    };
    let bad = || NotOurs { len: b.len() };
    let (&tag, rest) = b.split_first().ok_or_else(bad)?;
    if rest.len() % 8 != 0 {
        return Err(bad());
    }
    let mut f = rest
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
    let mut field = || f.next().unwrap_or(0);
    let n = rest.len() / 8;
    Ok(match (tag, n) {
        (GCRA_TAG, 1) => AnyState::Gcra(GcraState {
            tat: Nanos(field()),
        }),
        (FIXED_WINDOW_TAG, 2) => AnyState::FixedWindow(FixedWindowState {
            window: field(),
            count: field(),
        }),
        (SLIDING_COUNTER_TAG, 3) => AnyState::SlidingCounter(SlidingCounterState {
            window: field(),
            current: field(),
            previous: field(),
        }),
        (TOKEN_BUCKET_TAG, 2) => AnyState::TokenBucket(TokenBucketState {
            deficit: field(),
            last: Nanos(field()),
        }),
        (LEAKY_TAG, 2) => AnyState::Leaky(LeakyState {
            level: field(),
            last: Nanos(field()),
        }),
        (SLIDING_LOG_TAG, n) if n % 2 == 0 => AnyState::SlidingLog(SlidingLogState::from_entries(
            rest.chunks_exact(16).map(|p| {
                let at = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().unwrap_or_default());
                (Nanos(at(0)), at(8))
            }),
        )),
        _ => return Err(bad()),
    })
}

/// The absolute expiry, in milliseconds since the epoch, of a key that is back at full
/// capacity at `full_at`: rounded up, so the key never vanishes before then. At least 1
/// (0 would not be an instant Redis accepts).
pub fn expire_at_ms(full_at: Nanos) -> u64 {
    full_at.0.div_ceil(1_000_000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let s = GcraState {
            tat: Nanos(1_700_000_000_123_456_789),
        };
        let b = encode_gcra(&s);
        assert_eq!(decode_gcra(Some(&b)), Ok(s));
        assert_eq!(decode_gcra(None), Ok(GcraState::default()));
        assert_eq!(decode_gcra(Some(b"1700000000")), Err(NotOurs { len: 10 }));
        let mut other = b;
        other[0] = 9;
        assert_eq!(decode_gcra(Some(&other)), Err(NotOurs { len: 9 }));
        assert_eq!(expire_at_ms(Nanos(1_000_000)), 1);
        assert_eq!(expire_at_ms(Nanos(1_000_001)), 2);
        assert_eq!(expire_at_ms(Nanos::ZERO), 1);
    }

    #[test]
    fn bytes_spill_to_the_heap_and_write_decimals() {
        let mut b = Bytes::new();
        b.push_decimal(0);
        b.extend_from_slice(b" ");
        b.push_decimal(u64::MAX);
        assert_eq!(b, b"0 18446744073709551615");
        let long: Vec<u8> = (0..200u8).collect();
        b.extend_from_slice(&long);
        assert_eq!(b.len(), 22 + 200);
        assert_eq!(b[22..], long[..]);
    }

    #[test]
    fn every_stored_state_round_trips() {
        let states = [
            AnyState::Gcra(GcraState { tat: Nanos(7) }),
            AnyState::FixedWindow(FixedWindowState {
                window: 3,
                count: u64::MAX,
            }),
            AnyState::SlidingCounter(SlidingCounterState {
                window: 1,
                current: 2,
                previous: 3,
            }),
            AnyState::TokenBucket(TokenBucketState {
                deficit: 5,
                last: Nanos(6),
            }),
            AnyState::Leaky(LeakyState {
                level: 8,
                last: Nanos(9),
            }),
            AnyState::SlidingLog(SlidingLogState::from_entries([
                (Nanos(10), 2),
                (Nanos(11), 3),
            ])),
        ];
        let long_log = AnyState::SlidingLog(SlidingLogState::from_entries(
            (1..=10).map(|i| (Nanos(i), i)),
        ));
        for s in states.into_iter().chain([long_log]) {
            let b = encode_any(&s).unwrap();
            assert_eq!(decode_any(Some(&b)), Ok(s));
        }
        assert_eq!(encode_any(&AnyState::Empty), None);
        assert_eq!(decode_any(None), Ok(AnyState::Empty));
        for bad in [
            &b""[..],
            b"\x02abc",
            b"\x09abcdefgh",
            b"\x02abcdefgh",
            b"\x06abcdefgh",
        ] {
            assert!(decode_any(Some(bad)).is_err(), "{bad:?}");
        }
    }
}
