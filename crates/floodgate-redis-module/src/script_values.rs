//! The values floodgate-redis's Lua scripts store (see their headers in
//! `crates/floodgate-redis/lua/`), read and written by [`crate::decide`] so that the
//! module and the scripts share keys:
//!
//! * GCRA: 12 bytes, struct `>I5I7` (the writer's seconds, its nanoseconds plus the
//!   TAT's lead), or the older decimal nanoseconds;
//! * fixed window `"window count"`, sliding counter `"window current previous"`, token
//!   bucket `"deficit last"`, leaky bucket `"level last"`, sliding log `"total t1 c1 t2
//!   c2 ..."`: decimal integers separated by one space, instants in ns since the epoch.

use floodgate_core::algorithms::{
    FixedWindowState, LeakyState, SlidingCounterState, SlidingLogState, TokenBucketState,
};
use floodgate_core::{AnyState, Kind, Nanos};

use crate::value::Bytes;

const E9: u64 = 1_000_000_000;

fn bad(v: &[u8], what: &str) -> String {
    format!(
        "WRONGTYPE the key holds {} bytes that are not a floodgate {what} state",
        v.len()
    )
}

/// The decimal integers of a value, separated by single spaces, one by one.
fn numbers<'a>(v: &'a [u8], what: &'a str) -> impl Iterator<Item = Result<u64, String>> + 'a {
    v.split(|&b| b == b' ').map(move |w| {
        // one pass: digits only, at least one, and no overflow of a u64
        if w.is_empty() {
            return Err(bad(v, what));
        }
        w.iter().try_fold(0u64, |n, &b| {
            b.is_ascii_digit()
                .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
                .flatten()
                .ok_or_else(|| bad(v, what))
        })
    })
}

/// Exactly `N` integers.
fn fields<const N: usize>(v: &[u8], what: &str) -> Result<[u64; N], String> {
    let mut out = [0u64; N];
    let mut it = numbers(v, what);
    for slot in &mut out {
        *slot = it.next().ok_or_else(|| bad(v, what))??;
    }
    match it.next() {
        None => Ok(out),
        Some(_) => Err(bad(v, what)),
    }
}

/// The state of algorithm `kind` in `stored` (`None`: a key never seen).
pub fn decode(kind: Kind, stored: Option<&[u8]>) -> Result<AnyState, String> {
    let Some(v) = stored else {
        return Ok(AnyState::Empty);
    };
    let what = kind.name();
    Ok(match kind {
        Kind::FixedWindow => {
            let [window, count] = fields(v, what)?;
            AnyState::FixedWindow(FixedWindowState { window, count })
        }
        Kind::SlidingCounter => {
            let [window, current, previous] = fields(v, what)?;
            AnyState::SlidingCounter(SlidingCounterState {
                window,
                current,
                previous,
            })
        }
        Kind::TokenBucket => {
            let [deficit, last] = fields(v, what)?;
            AnyState::TokenBucket(TokenBucketState {
                deficit,
                last: Nanos(last),
            })
        }
        Kind::LeakyMeter | Kind::LeakyQueue => {
            let [level, last] = fields(v, what)?;
            AnyState::Leaky(LeakyState {
                level,
                last: Nanos(last),
            })
        }
        Kind::SlidingLog => {
            let f = numbers(v, what).collect::<Result<Vec<u64>, String>>()?;
            match f.as_slice() {
                [_total, pairs @ ..] if pairs.len() % 2 == 0 => {
                    AnyState::SlidingLog(SlidingLogState::from_entries(
                        pairs.chunks_exact(2).map(|p| (Nanos(p[0]), p[1])),
                    ))
                }
                _ => return Err(bad(v, what)),
            }
        }
        _ => return Err(bad(v, what)),
    })
}

/// The scripts' text of a state (`AnyState::Empty` and GCRA: none; GCRA's value is
/// [`pack_tat`]).
pub fn encode(state: &AnyState) -> Bytes {
    let mut b = Bytes::new();
    let mut put = |fields: &[u64]| {
        for (i, &f) in fields.iter().enumerate() {
            if i > 0 {
                b.extend_from_slice(b" ");
            }
            b.push_decimal(f);
        }
    };
    match state {
        AnyState::FixedWindow(s) => put(&[s.window, s.count]),
        AnyState::SlidingCounter(s) => put(&[s.window, s.current, s.previous]),
        AnyState::TokenBucket(s) => put(&[s.deficit, s.last.0]),
        AnyState::Leaky(s) => put(&[s.level, s.last.0]),
        AnyState::SlidingLog(s) => {
            // at most 20 digits and a space per number
            b.reserve(21 * (1 + 2 * s.entries().count()));
            b.push_decimal(s.entries().fold(0u64, |t, (_, c)| t.saturating_add(c)));
            for (t, c) in s.entries() {
                b.extend_from_slice(b" ");
                b.push_decimal(t.0);
                b.extend_from_slice(b" ");
                b.push_decimal(c);
            }
        }
        AnyState::Empty | AnyState::Gcra(_) => {}
    }
    b
}

/// GCRA's value: struct `>I5I7` of (`s`, `n`), the TAT being `s x 10^9 + n`.
pub fn pack_tat(s: u64, n: u64) -> Bytes {
    let mut v = Bytes::new();
    v.extend_from_slice(&s.to_be_bytes()[3..]);
    v.extend_from_slice(&n.to_be_bytes()[1..]);
    v
}

/// How far the stored TAT leads the instant `(s, n)`, in ns (0 when behind), as the GCRA
/// script computes it: a TAT written more than 9 x 10^6 s after now counts as 2^53 ahead
/// (beyond any tolerance the store allows).
pub fn gcra_lead(v: &[u8], s: u64, n: u64) -> Result<u64, String> {
    let (ts, tn) = if v.first().is_some_and(|&b| b < b'0') {
        let arr: [u8; 12] = v.try_into().map_err(|_| bad(v, "gcra"))?;
        let mut hi = [0u8; 8];
        hi[3..].copy_from_slice(&arr[..5]);
        let mut lo = [0u8; 8];
        lo[1..].copy_from_slice(&arr[5..]);
        (u64::from_be_bytes(hi), u64::from_be_bytes(lo))
    } else {
        let [d] = fields(v, "gcra")?;
        (d / E9, d % E9)
    };
    let ds = ts as i128 - s as i128;
    Ok(if ds > 9_000_000 {
        1 << 53
    } else if ds >= -9_100_000 {
        let d = ds * E9 as i128 + tn as i128 - n as i128;
        u64::try_from(d.max(0)).unwrap_or(u64::MAX)
    } else {
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_in_the_scripts_text() {
        for (kind, text) in [
            (Kind::FixedWindow, &b"12 3"[..]),
            (Kind::SlidingCounter, b"12 3 4"),
            (Kind::TokenBucket, b"5000000000 1700000000000000001"),
            (Kind::LeakyQueue, b"7 8"),
            (Kind::SlidingLog, b"5 100 2 200 3"),
        ] {
            let s = decode(kind, Some(text)).unwrap();
            assert_eq!(*encode(&s), *text, "{kind}");
        }
        assert_eq!(decode(Kind::Gcra, None), Ok(AnyState::Empty));
        assert_eq!(
            decode(Kind::FixedWindow, Some(b"18446744073709551615 0")),
            Ok(AnyState::FixedWindow(FixedWindowState {
                window: u64::MAX,
                count: 0
            }))
        );
        for junk in [
            &b""[..],
            b"1",
            b"1  2",
            b"-1 2",
            b"1 2 3 4",
            b"a b",
            b"18446744073709551616 0",
            b"1 2\xff",
        ] {
            assert!(decode(Kind::FixedWindow, Some(junk)).is_err(), "{junk:?}");
        }
        assert!(decode(Kind::SlidingLog, Some(b"1 2")).is_err());
    }

    #[test]
    fn gcra_leads_in_both_formats() {
        let v = pack_tat(1_700_000_000, 1_500_000_000);
        assert_eq!(v.len(), 12);
        assert!(v[0] < b'0');
        assert_eq!(gcra_lead(&v, 1_700_000_000, 0), Ok(1_500_000_000));
        assert_eq!(gcra_lead(&v, 1_700_000_002, 0), Ok(0));
        assert_eq!(
            gcra_lead(b"1700000001500000000", 1_700_000_001, 0),
            Ok(500_000_000)
        );
        assert_eq!(gcra_lead(b"15", 0, 10), Ok(5));
        assert_eq!(gcra_lead(&pack_tat(10_000_000, 0), 0, 0), Ok(1 << 53));
        assert!(gcra_lead(b"\x01\x02", 0, 0).is_err());
        assert!(gcra_lead(b"12x", 0, 0).is_err());
    }
}
