//! The values the module stores: compact binary, one tag byte then the state.
//!
//! * `CL.THROTTLE`: tag [`GCRA_TAG`], then the theoretical arrival time (TAT) as a
//!   little-endian `u64` of nanoseconds since the Unix epoch: 9 bytes.
//!
//! Every value is written with an absolute expiry ([`expire_at_ms`]): the millisecond at
//! or after which the key is back at full capacity, so dropping it then loses nothing.

use floodgate_core::Nanos;
use floodgate_core::algorithms::GcraState;

/// The first byte of a `CL.THROTTLE` value (a GCRA TAT follows).
pub const GCRA_TAG: u8 = 1;
/// Length of a `CL.THROTTLE` value in bytes.
pub const GCRA_LEN: usize = 9;

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
}
