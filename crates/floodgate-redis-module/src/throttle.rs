//! `CL.THROTTLE`'s decision, pure: stored bytes and an instant in, the five integers and
//! the write out. The GCRA is floodgate-core's ([`Gcra::from_cell`]), the arguments are
//! parsed by [`ThrottleArgs::parse`], the reply rendered by
//! [`Decision::throttle_reply`](floodgate_core::Decision::throttle_reply).

use floodgate_core::algorithms::Gcra;
use floodgate_core::cell::ThrottleArgs;
use floodgate_core::{Algorithm, Nanos};

use crate::value::{GCRA_LEN, decode_gcra, encode_gcra, expire_at_ms};

/// A value to store: its bytes and its absolute expiry (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The value.
    pub bytes: [u8; GCRA_LEN],
    /// `PXAT`: the key is back at full capacity by then.
    pub expire_at_ms: u64,
}

/// One `CL.THROTTLE` on a key holding `stored` (`None`: no key) at `now` (ns since the
/// epoch). `args`: the words after the key. `Err` is the error text (with its code).
pub fn cell_throttle(
    args: &[&str],
    stored: Option<&[u8]>,
    now: Nanos,
) -> Result<([i64; 5], Option<Write>), String> {
    let parsed = match args {
        [b, c, p] => ThrottleArgs::parse(b, c, p, None),
        [b, c, p, q] => ThrottleArgs::parse(b, c, p, Some(q)),
        _ => return Err(format!("ERR {}", floodgate_core::cell::THROTTLE_USAGE)),
    }
    .map_err(|e| format!("ERR {e}"))?;
    let gcra: Gcra = parsed.gcra().map_err(|e| format!("ERR {e}"))?;
    let mut state = decode_gcra(stored).map_err(|e| format!("WRONGTYPE {e}"))?;
    let (decision, pending) = gcra.decide(&state, now, parsed.quantity);
    let write = pending.map(|p| {
        gcra.apply(&mut state, p);
        Write {
            bytes: encode_gcra(&state),
            expire_at_ms: expire_at_ms(gcra.full_at(&state)),
        }
    });
    Ok((decision.throttle_reply(), write))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Nanos = Nanos(1_700_000_000_000_000_000);

    #[test]
    fn redis_cell_examples_and_writes() {
        let (r, w) = cell_throttle(&["15", "30", "60"], None, NOW).unwrap();
        assert_eq!(r, [0, 16, 15, -1, 2]);
        let w = w.unwrap();
        assert_eq!(w.expire_at_ms, NOW.0 / 1_000_000 + 2_000);
        let (r, w2) = cell_throttle(&["15", "30", "60"], Some(&w.bytes), NOW).unwrap();
        assert_eq!(r, [0, 16, 14, -1, 4]);
        assert_eq!(w2.unwrap().expire_at_ms, NOW.0 / 1_000_000 + 4_000);
        // a peek writes nothing; a cost above the limit neither
        let (r, w) = cell_throttle(&["15", "30", "60", "0"], None, NOW).unwrap();
        assert_eq!((r, w), ([0, 16, 16, -1, 0], None));
        let (r, w) = cell_throttle(&["4", "1", "1", "6"], None, NOW).unwrap();
        assert_eq!((r, w), ([1, 5, 5, -1, 0], None));
    }

    #[test]
    fn bad_input_names_the_argument() {
        let err = |a: &[&str]| cell_throttle(a, None, NOW).unwrap_err();
        assert!(err(&["15", "30"]).starts_with("ERR Usage: CL.THROTTLE"));
        assert_eq!(
            err(&["x", "30", "60"]),
            "ERR max_burst must be an integer, got \"x\""
        );
        assert_eq!(
            err(&["1", "0", "60"]),
            "ERR zero rates are not supported (count is 0)"
        );
        assert_eq!(
            err(&["1", "30", "-60"]),
            "ERR period must not be negative, got -60"
        );
        assert_eq!(
            err(&["1", "30", "60", "-1"]),
            "ERR quantity must not be negative, got -1"
        );
        let e = cell_throttle(&["1", "30", "60"], Some(b"12"), NOW).unwrap_err();
        assert!(
            e.starts_with("WRONGTYPE the key holds a string of 2 bytes"),
            "{e}"
        );
    }
}
