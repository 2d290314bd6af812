use super::*;
use floodgate_core::{AnyAlgorithm, AnyState, Kind};

use crate::script_values::{decode, encode};
use crate::value::{decode_any, encode_any};
use scan::{summary_with, well_formed};

/// The general path: decoded, decided and applied by the core, encoded whole.
fn general(
    log: &SlidingLog,
    state: AnyState,
    now: Nanos,
    cost: u64,
    enc: impl Fn(&AnyState) -> Bytes,
) -> (Decision, Option<(Bytes, Nanos)>) {
    let alg = AnyAlgorithm::SlidingLog(log.clone());
    let mut state = state;
    let (d, pending) = alg.decide(&state, now, cost);
    let write = match pending {
        Some(p) if d.allowed => {
            alg.apply(&mut state, p);
            Some((enc(&state), alg.full_at(&state)))
        }
        _ => None,
    };
    (d, write)
}

fn random_entries(rng: &mut fastrand::Rng, now: u64, w: u64) -> Vec<(u64, u64)> {
    let n = rng.usize(0..=12);
    let mut t = now.saturating_sub(rng.u64(0..=2 * w));
    let mut v = Vec::new();
    for _ in 0..n {
        // mostly ascending; now and then a step back, an instant ahead of now, a big count
        t = match rng.u8(0..20) {
            0 => t.saturating_sub(rng.u64(0..=w)),
            1 => now + rng.u64(0..=w),
            _ => t + rng.u64(0..=w / 4),
        };
        let c = match rng.u8(0..30) {
            0 => 0,
            _ => rng.u64(1..=5),
        };
        v.push((t, c));
    }
    // a count near 2^64 on a last entry still in the window (the core sums the expired
    // prefix without saturating: a debug build would stop on its overflow)
    if let Some(last) = v.last_mut()
        && last.0 + w > now
        && rng.u8(0..10) == 0
    {
        last.1 = u64::MAX - rng.u64(0..3);
    }
    v
}

fn case(rng: &mut fastrand::Rng) -> (SlidingLog, Vec<(u64, u64)>, Nanos, u64) {
    let w = rng.u64(1..=10_000);
    let log = SlidingLog::new(rng.u64(1..=30), Duration::from_nanos(w)).unwrap();
    let now = 1_700_000_000_000_000_000 + rng.u64(0..=1_000_000);
    let entries = random_entries(rng, now, w);
    let cost = match rng.u8(0..10) {
        0 => 0,
        1 => rng.u64(20..=40),
        _ => rng.u64(1..=4),
    };
    (log, entries, Nanos(now), cost)
}

fn state_of(entries: &[(u64, u64)]) -> AnyState {
    AnyState::SlidingLog(floodgate_core::algorithms::SlidingLogState::from_entries(
        entries.iter().map(|&(t, c)| (Nanos(t), c)),
    ))
}

#[test]
fn binary_logs_decide_and_write_as_the_general_path() {
    let mut rng = fastrand::Rng::with_seed(24);
    for _ in 0..20_000 {
        let (log, entries, now, cost) = case(&mut rng);
        let stored = (!entries.is_empty() || rng.bool())
            .then(|| encode_any(&state_of(&entries)).unwrap().to_vec());
        let state = decode_any(stored.as_deref()).unwrap();
        let want = general(&log, state, now, cost, |s| encode_any(s).unwrap());
        let (d, w) = binary(&log, stored.as_deref(), now, cost).unwrap();
        let old = stored.as_deref().unwrap_or_default();
        let got = (d, w.map(|(s, full)| (s.to_bytes(old), full)));
        assert_eq!(got, want, "{entries:?} now {now:?} cost {cost}");
    }
}

#[test]
fn text_logs_decide_and_write_as_the_general_path() {
    let mut rng = fastrand::Rng::with_seed(24);
    for _ in 0..20_000 {
        let (log, entries, now, cost) = case(&mut rng);
        let state = state_of(&entries);
        let stored = (!entries.is_empty() || rng.bool()).then(|| encode(&state).to_vec());
        let decoded = decode(Kind::SlidingLog, stored.as_deref()).unwrap();
        let want = general(&log, decoded, now, cost, encode);
        let (d, w) = text(&log, stored.as_deref(), now, cost).unwrap();
        let old = stored.as_deref().unwrap_or_default();
        let got = (d, w.map(|(s, full)| (s.to_bytes(old), full)));
        assert_eq!(got, want, "{entries:?} now {now:?} cost {cost}");
    }
}

#[test]
fn values_read_otherwise_are_left_to_the_general_path() {
    let log = SlidingLog::new(5, Duration::from_secs(1)).unwrap();
    let now = Nanos(1_700_000_000_000_000_000);
    for v in [
        &b""[..],
        b"1 ",
        b" 1",
        b"1  100 1",
        b"01 100 1",
        b"1 0100 1",
        b"1 100 01",
        b"1 100",
        b"1 100 1 ",
        b"1 100 x",
        b"1 18446744073709551616 1",
    ] {
        assert_eq!(text(&log, Some(v), now, 1), None, "{v:?}");
    }
    // read: one entry, its total taken as the scripts take it
    assert!(text(&log, Some(b"9 1700000000000000000 1"), now, 1).is_some());
    assert!(text(&log, Some(b"0"), now, 1).is_some());
    for v in [&b""[..], b"\x06abc", b"\x02abcdefghabcdefgh", &[6; 18]] {
        assert_eq!(binary(&log, Some(v), now, 1), None, "{v:?}");
    }
    assert!(binary(&log, Some(&[6]), now, 1).is_some());
}

/// A text log's stored total is the units it holds, as the scripts' decision takes it
/// (`used = total - expired`), not the sum of its counts: a value whose total disagrees
/// with its entries (written by something else) is decided as the scripts decide it.
#[test]
fn a_text_logs_stored_total_is_what_it_holds_as_in_the_scripts() {
    let log = SlidingLog::new(5, Duration::from_secs(1)).unwrap();
    let n = 1_700_000_000_000_000_000u64;
    let now = Nanos(n);
    let at = |v: &[u8], cost| {
        let (d, w) = text(&log, Some(v), now, cost).unwrap();
        (d, w.map(|(s, full)| (s.to_bytes(v).to_vec(), full)))
    };
    // 4 units, 1 of them expired: 3 used, where the counts say 1
    let v = format!("4 {} 1 {} 1", n - 2_000_000_000, n - 500_000_000);
    let want = format!("4 {} 1 {n} 1", n - 500_000_000);
    assert_eq!(
        at(v.as_bytes(), 1),
        (
            Decision::allow(5, 1, Duration::from_secs(1)),
            Some((want.into_bytes(), Nanos(n + 1_000_000_000)))
        )
    );
    // 9 units in the window of a limit of 5: denied; nothing frees 5 units before the
    // last entry leaves the window
    let v = format!("9 {} 1", n - 500_000_000);
    let half = Duration::from_millis(500);
    assert_eq!(
        at(v.as_bytes(), 1),
        (Decision::deny(5, 0, half, half), None)
    );
    // a total below its expired units: read as the decoder reads it (the counts' sum)
    let v = format!("0 {} 3 {} 1", n - 2_000_000_000, n - 500_000_000);
    let want = format!("2 {} 1 {n} 1", n - 500_000_000);
    assert_eq!(at(v.as_bytes(), 1).1.unwrap().0, want.into_bytes());
}

/// The decimals as the text's decoder reads them, byte by byte.
fn decimal_by_bytes(v: &[u8], i: &mut usize) -> Option<u64> {
    let from = *i;
    let mut n = 0u64;
    while let Some(&b) = v.get(*i) {
        if b == b' ' {
            break;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        *i += 1;
    }
    let len = *i - from;
    if len == 0 || (len > 1 && v[from] == b'0') {
        return None;
    }
    if *i < v.len() {
        *i += 1;
        if *i == v.len() {
            return None;
        }
    }
    Some(n)
}

#[test]
fn decimals_eight_digits_at_a_time_read_as_byte_by_byte() {
    let mut rng = fastrand::Rng::with_seed(24);
    let alphabet = b"0123456789 /:x\xff";
    for _ in 0..200_000 {
        let len = rng.usize(0..=44);
        let v: Vec<u8> = (0..len)
            .map(|_| match rng.u8(0..10) {
                0 => alphabet[rng.usize(..alphabet.len())],
                _ => b'0' + rng.u8(0..10),
            })
            .collect();
        let from = rng.usize(0..=len);
        let (mut a, mut b) = (from, from);
        let got = decimal(&v, &mut a);
        let want = decimal_by_bytes(&v, &mut b);
        assert_eq!(got, want, "{:?} from {from}", String::from_utf8_lossy(&v));
        if want.is_some() {
            assert_eq!(a, b);
        }
    }
    for s in [
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999",
    ] {
        let (mut a, mut b) = (0, 0);
        assert_eq!(
            decimal(s.as_bytes(), &mut a),
            decimal_by_bytes(s.as_bytes(), &mut b)
        );
    }
    let mut i = 0;
    assert_eq!(
        decimal(b"1700000000123456789 12", &mut i),
        Some(1_700_000_000_123_456_789)
    );
    assert_eq!(decimal(b"1700000000123456789 12", &mut i), Some(12));
}

/// The encoder's form, token by token: decimals separated by single spaces, no leading
/// zero (values that do not fit a `u64` are the readers' to refuse).
fn well_formed_by_tokens(v: &[u8]) -> bool {
    v.split(|&b| b == b' ').all(|w| {
        !w.is_empty() && w.iter().all(u8::is_ascii_digit) && (w.len() == 1 || w[0] != b'0')
    })
}

#[test]
fn well_formed_64_bytes_at_a_time_as_token_by_token() {
    let mut rng = fastrand::Rng::with_seed(24);
    let alphabet = b"0123456789 /:x\xff\x00";
    for round in 0..100_000 {
        // a log as the encoder writes it, long enough to span blocks, then a byte or two
        // changed (at a block boundary now and then), or random bytes
        let mut v: Vec<u8> = if round % 4 == 0 {
            let len = rng.usize(0..=200);
            (0..len)
                .map(|_| match rng.u8(0..8) {
                    0 => b' ',
                    1 => b'0',
                    2 => alphabet[rng.usize(..alphabet.len())],
                    _ => b'1' + rng.u8(0..9),
                })
                .collect()
        } else {
            let n = rng.usize(0..=20);
            let entries: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let top = u64::MAX >> rng.u32(0..64);
                    (rng.u64(0..=top), rng.u64(0..=20))
                })
                .collect();
            encode(&state_of(&entries)).to_vec()
        };
        for _ in 0..rng.usize(0..=2) {
            if v.is_empty() {
                break;
            }
            let at = match rng.u8(0..3) {
                0 => (64 * rng.usize(0..=4) + rng.usize(0..=2)).saturating_sub(1),
                _ => rng.usize(..v.len()),
            }
            .min(v.len() - 1);
            v[at] = match rng.u8(0..4) {
                0 => b' ',
                1 => b'0',
                2 => alphabet[rng.usize(..alphabet.len())],
                _ => b'0' + rng.u8(0..10),
            };
        }
        assert_eq!(
            well_formed(&v),
            well_formed_by_tokens(&v),
            "{:?}",
            String::from_utf8_lossy(&v)
        );
    }
}

/// A window, an instant and a log of up to 300 entries from up to two windows before
/// it, each at most `1 / step` of the window after the one before, with `count`'s
/// counts.
fn long_log(
    rng: &mut fastrand::Rng,
    step: u64,
    mut count: impl FnMut(&mut fastrand::Rng) -> u64,
) -> (u64, u64, Vec<(u64, u64)>) {
    let w = rng.u64(1..=1_000_000_000);
    let now = 1_700_000_000_000_000_000 + rng.u64(0..=1_000_000_000);
    let n = rng.usize(0..=300);
    let mut t = now - rng.u64(0..=2 * w);
    let entries = (0..n)
        .map(|_| {
            t += rng.u64(0..=w / step);
            (t, count(rng))
        })
        .collect();
    (w, now, entries)
}

#[test]
fn long_text_logs_decide_and_write_as_the_general_path() {
    // logs of hundreds of entries (values of several 64-byte blocks), counts of one digit
    // and more, entries expired or not
    let mut rng = fastrand::Rng::with_seed(25);
    for _ in 0..2_000 {
        let (w, now, entries) = long_log(&mut rng, 100, |rng| {
            if rng.u8(0..5) == 0 {
                rng.u64(0..=12_345)
            } else {
                1
            }
        });
        let log = SlidingLog::new(rng.u64(1..=2_000), Duration::from_nanos(w)).unwrap();
        let n = entries.len();
        let cost = match rng.u8(0..10) {
            0 => 0,
            1 => rng.u64(100..=3_000),
            _ => rng.u64(1..=3),
        };
        let stored = encode(&state_of(&entries)).to_vec();
        let decoded = decode(Kind::SlidingLog, Some(&stored)).unwrap();
        let want = general(&log, decoded, Nanos(now), cost, encode);
        let (d, w) = text(&log, Some(&stored), Nanos(now), cost).unwrap();
        let got = (d, w.map(|(s, full)| (s.to_bytes(&stored), full)));
        assert_eq!(got, want, "{n} entries, now {now}, cost {cost}");
    }
}

#[test]
fn text_logs_summed_a_block_at_a_time_as_entry_by_entry() {
    // logs of up to 300 entries, their counts of one digit and more (up to 20 digits),
    // instants of up to 20 digits now and then, a byte or two changed or the end cut off
    // at times; the window's start anywhere in them: the block-at-a-time sums are the
    // entry-by-entry loop's, and the same values are refused
    let mut rng = fastrand::Rng::with_seed(26);
    let mut read = 0;
    for _ in 0..20_000 {
        let (w, now, mut entries) = long_log(&mut rng, 50, |rng| match rng.u8(0..20) {
            0 => 0,
            1 => rng.u64(10..=99_999),
            2 => rng.u64(1_000_000_000_000_000_000..=9_999_999_999_999_999_999),
            3 if rng.u8(0..10) == 0 => u64::MAX - rng.u64(0..3),
            _ => rng.u64(1..=9),
        });
        for e in &mut entries {
            if rng.u16(0..2000) == 0 {
                e.0 = u64::MAX - rng.u64(0..1000);
            }
        }
        let n = entries.len();
        let mut v = encode(&state_of(&entries)).to_vec();
        if n > 0 && rng.u8(0..10) == 0 {
            // an instant of 20 or 21 digits, that may not fit a u64
            let mut words: Vec<Vec<u8>> = v.split(|&b| b == b' ').map(<[u8]>::to_vec).collect();
            let digits = rng.usize(20..=21);
            let long: Vec<u8> = (0..digits)
                .map(|i| b'0' + if i == 0 { rng.u8(1..10) } else { rng.u8(0..10) })
                .collect();
            words[1 + 2 * rng.usize(..n)] = long;
            v = words.join(&b' ');
        }
        match rng.u8(0..8) {
            0 if !v.is_empty() => {
                let at = rng.usize(..v.len());
                v[at] = b"0123456789 x"[rng.usize(..12)];
            }
            1 if !v.is_empty() => v.truncate(rng.usize(..v.len())),
            _ => {}
        }
        let mut first = 0;
        if v.is_empty() || decimal(&v, &mut first).is_none() {
            continue;
        }
        let by_blocks = summary_with(&v, first, now, w, true);
        let by_entries = summary_with(&v, first, now, w, false);
        read += usize::from(by_entries.is_some());
        assert_eq!(
            by_blocks,
            by_entries,
            "{:?} now {now} w {w}",
            String::from_utf8_lossy(&v)
        );
    }
    assert!(read > 10_000, "{read} logs read");
}
