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
pub fn encode_any(state: &AnyState) -> Option<Vec<u8>> {
    let log: Vec<u64>;
    let (tag, fields): (u8, &[u64]) = match state {
        AnyState::Gcra(s) => return Some(encode_gcra(s).to_vec()),
        AnyState::FixedWindow(s) => (FIXED_WINDOW_TAG, &[s.window, s.count]),
        AnyState::SlidingCounter(s) => (SLIDING_COUNTER_TAG, &[s.window, s.current, s.previous]),
        AnyState::TokenBucket(s) => (TOKEN_BUCKET_TAG, &[s.deficit, s.last.0]),
        AnyState::Leaky(s) => (LEAKY_TAG, &[s.level, s.last.0]),
        AnyState::SlidingLog(s) => {
            log = s.entries().flat_map(|(t, c)| [t.0, c]).collect();
            (SLIDING_LOG_TAG, &log)
        }
        AnyState::Empty => return None,
    };
    let mut v = Vec::with_capacity(1 + 8 * fields.len());
    v.push(tag);
    fields
        .iter()
        .for_each(|f| v.extend_from_slice(&f.to_le_bytes()));
    Some(v)
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
    let f: Vec<u64> = rest
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    Ok(match (tag, f.as_slice()) {
        (GCRA_TAG, &[tat]) => AnyState::Gcra(GcraState { tat: Nanos(tat) }),
        (FIXED_WINDOW_TAG, &[window, count]) => {
            AnyState::FixedWindow(FixedWindowState { window, count })
        }
        (SLIDING_COUNTER_TAG, &[window, current, previous]) => {
            AnyState::SlidingCounter(SlidingCounterState {
                window,
                current,
                previous,
            })
        }
        (TOKEN_BUCKET_TAG, &[deficit, last]) => AnyState::TokenBucket(TokenBucketState {
            deficit,
            last: Nanos(last),
        }),
        (LEAKY_TAG, &[level, last]) => AnyState::Leaky(LeakyState {
            level,
            last: Nanos(last),
        }),
        (SLIDING_LOG_TAG, pairs) if pairs.len() % 2 == 0 => AnyState::SlidingLog(
            SlidingLogState::from_entries(pairs.chunks_exact(2).map(|p| (Nanos(p[0]), p[1]))),
        ),
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
        for s in states {
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
