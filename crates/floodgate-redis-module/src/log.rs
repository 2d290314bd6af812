//! The sliding log decided on its stored value as it lies, in both formats: the module's
//! binary entries (`FG.THROTTLE`, [`binary`]) and the scripts' decimal text (`FG.DECIDE`,
//! [`text`]). The log is read once, front to back, without being collected (the text 64
//! bytes at a time: the bytes checked and the spaces found by bit masks, only the counts,
//! the expired prefix's instants and the last instant converted); the new
//! value is described as a [`Splice`] of the old one (the entries still in the window
//! kept as they are, a new head and tail around them), which the command writes in place
//! instead of encoding the whole log again. The decision, the remaining, reset and retry
//! values and the bytes written are those of floodgate-core's
//! [`SlidingLog`] on the decoded state and of the value's encoder: a value this path does
//! not read exactly as the decoder would (another algorithm's, a malformed one, a decimal
//! with a leading zero) is left to the general path (`None`).

use std::ops::Range;
use std::time::Duration;

use floodgate_core::algorithms::SlidingLog;
use floodgate_core::{Algorithm, Decision, Nanos};

use crate::value::Bytes;

mod scan;

/// Up to [`Small::CAP`] bytes in place: a splice's head or tail.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Small {
    b: [u8; Small::CAP],
    len: usize,
}

impl Small {
    /// Bytes held (a decimal total and a space; a space, two decimals and a space).
    pub const CAP: usize = 48;

    const fn new() -> Small {
        Small {
            b: [0; Small::CAP],
            len: 0,
        }
    }

    fn push(&mut self, s: &[u8]) {
        self.b[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }

    fn push_decimal(&mut self, n: u64) {
        let mut b = Bytes::new();
        b.push_decimal(n);
        self.push(&b);
    }
}

impl std::ops::Deref for Small {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.b[..self.len]
    }
}

impl std::fmt::Debug for Small {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// A new value made of the old one: `head`, then the old value's bytes `keep`, then
/// `tail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    /// The new value's first bytes.
    pub head: Small,
    /// The old value's bytes kept, in order.
    pub keep: Range<usize>,
    /// The new value's last bytes.
    pub tail: Small,
}

impl Splice {
    /// Length of the new value.
    pub fn len(&self) -> usize {
        self.head.len() + self.keep.len() + self.tail.len()
    }

    /// Whether the new value is empty (never, for a log written).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The new value, built from `old` (the value the splice was made from; empty for no
    /// key).
    pub fn to_bytes(&self, old: &[u8]) -> Bytes {
        let mut b = Bytes::new();
        b.reserve(self.len());
        b.extend_from_slice(&self.head);
        b.extend_from_slice(old.get(self.keep.clone()).unwrap_or_default());
        b.extend_from_slice(&self.tail);
        b
    }
}

/// A value to write for one key: whole, or spliced from the value read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewValue {
    /// These bytes.
    Whole(Bytes),
    /// The value read, spliced.
    Splice(Splice),
}

impl NewValue {
    /// The bytes written over `old` (the value read; `None`: no key).
    pub fn to_bytes(&self, old: Option<&[u8]>) -> Bytes {
        match self {
            NewValue::Whole(b) => b.clone(),
            NewValue::Splice(s) => s.to_bytes(old.unwrap_or_default()),
        }
    }
}

/// One entry as it lies in the value: instant, units, and where the entry and its count
/// start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The instant, when read (see `t_known`).
    t: u64,
    /// Whether `t` was read (a text log's instants after the expired prefix are only
    /// checked, and read when needed).
    t_known: bool,
    c: u64,
    start: usize,
    count_at: usize,
}

/// What a charge does to the log: keep the entries from byte `live_start`, then either
/// add the cost to the last entry (its count at byte `merge_at`, the new count) or
/// append `(now, cost)`.
#[derive(Debug)]
struct Edit {
    live_start: usize,
    merge: Option<(usize, u64)>,
    /// Units in the log after the charge (saturating).
    total: u64,
    /// When the log is back at full capacity: its newest entry's instant plus the window.
    full_at: Nanos,
}

/// What one pass over a log finds: the sums of its counts, its expired prefix and its
/// last entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Summary {
    /// Units in the log (saturating).
    total: u64,
    /// Units of the expired prefix (wrapping, as the core sums them).
    gone: u64,
    /// Entries in the expired prefix.
    k: usize,
    /// Where the first entry after the expired prefix starts (the value's length: none).
    live_start: usize,
    /// Units after the expired prefix (saturating).
    live_sum: u64,
    /// The last entry.
    last: Option<Entry>,
}

impl Summary {
    /// No entries (`end`: the value's length).
    fn empty(end: usize) -> Summary {
        Summary {
            total: 0,
            gone: 0,
            k: 0,
            live_start: end,
            live_sum: 0,
            last: None,
        }
    }
}

/// [`Summary`] of `entries`, an entry expired when its instant plus the window `w` is at
/// or before `now`; `t_of` gives an entry's instant. `None`: an entry is unreadable.
fn summarize<I>(
    entries: I,
    t_of: impl Fn(&Entry) -> u64,
    w: u64,
    now: u64,
    end: usize,
) -> Option<Summary>
where
    I: Iterator<Item = Option<Entry>>,
{
    let mut s = Summary::empty(end);
    let mut in_prefix = true;
    for e in entries {
        let e = e?;
        s.total = s.total.saturating_add(e.c);
        if in_prefix && t_of(&e).saturating_add(w) <= now {
            // the core sums the expired prefix with `Sum` (wrapping when built for release)
            s.gone = s.gone.wrapping_add(e.c);
            s.k += 1;
        } else {
            if in_prefix {
                in_prefix = false;
                s.live_start = e.start;
            }
            s.live_sum = s.live_sum.saturating_add(e.c);
        }
        s.last = Some(e);
    }
    Some(s)
}

/// The core's decision on a log summed up in `summary` (its entries `entries`, read
/// again for a denial's retry; `None` when one is unreadable; `end`: the value's
/// length), and the edit of a charge.
fn plan<I>(
    log: &SlidingLog,
    summary: Summary,
    entries: I,
    t_at: impl Fn(usize) -> u64,
    end: usize,
    now: Nanos,
    cost: u64,
) -> Option<(Decision, Option<Edit>)>
where
    I: Iterator<Item = Option<Entry>>,
{
    let w = log.window_nanos();
    let until = |t: u64| Duration::from_nanos(t.saturating_add(w).saturating_sub(now.0));
    let t_of = |e: &Entry| if e.t_known { e.t } else { t_at(e.start) };
    let Summary {
        total,
        gone,
        k,
        live_start,
        live_sum,
        last,
    } = summary;
    let limit = log.limit();
    let used = total.saturating_sub(gone);
    let remaining = limit.saturating_sub(used);
    let last_t = last.as_ref().map(t_of);
    let reset = last_t.map_or(Duration::ZERO, until);
    if cost > limit {
        return Some((Decision::never(limit, cost, remaining, reset), None));
    }
    if cost > remaining {
        let need = used as u128 + cost as u128 - limit as u128;
        let mut freed = 0u128;
        let mut retry = reset;
        for e in entries.skip(k) {
            let e = e?;
            freed += e.c as u128;
            if freed >= need {
                retry = until(t_of(&e));
                break;
            }
        }
        return Some((Decision::deny(limit, remaining, retry, reset), None));
    }
    let at = last_t.map_or(now.0, |t| now.0.max(t));
    let reset = if cost > 0 { until(at) } else { reset };
    let decision = Decision::allow(limit, remaining - cost, reset);
    if cost == 0 {
        return Some((decision, None));
    }
    // the core's `apply`: the expired prefix dropped, the cost added to a last entry at
    // or after now (time stepped back), else a new entry at now
    let live_last = last.zip(last_t).filter(|_| live_start < end);
    let (merge, newest) = match live_last {
        Some((e, t)) if t >= now.0 => (Some((e.count_at, e.c.saturating_add(cost))), t),
        _ => (None, now.0),
    };
    let edit = Edit {
        live_start,
        merge,
        total: live_sum.saturating_add(cost),
        full_at: Nanos(newest.saturating_add(w)),
    };
    Some((decision, Some(edit)))
}

/// A decision of the sliding log, and its write: the splice and the instant the log is
/// back at full capacity.
pub type Logged = (Decision, Option<(Splice, Nanos)>);

/// Tag of the module's sliding-log value (see [`crate::value`]).
const TAG: u8 = 6;

/// `FG.THROTTLE`'s sliding log on the module's binary value `stored` (`None`: no key):
/// tag 6, then per entry its instant and units, little-endian `u64`s. `None`: a value
/// that is not a binary log.
pub fn binary(log: &SlidingLog, stored: Option<&[u8]>, now: Nanos, cost: u64) -> Option<Logged> {
    let v = stored.unwrap_or_default();
    let body = match stored {
        None => 0,
        Some(v) if v.first() == Some(&TAG) && (v.len() - 1) % 16 == 0 => (v.len() - 1) / 16,
        Some(_) => return None,
    };
    let at = |i: usize| u64::from_le_bytes(v[i..i + 8].try_into().unwrap_or_default());
    let entries = (0..body).map(|i| {
        let start = 1 + 16 * i;
        Some(Entry {
            t: at(start),
            t_known: true,
            c: at(start + 8),
            start,
            count_at: start + 8,
        })
    });
    let summary = summarize(entries.clone(), |e| e.t, log.window_nanos(), now.0, v.len())?;
    let (d, edit) = plan(log, summary, entries, at, v.len(), now, cost)?;
    let write = edit.map(|e| {
        let mut head = Small::new();
        head.push(&[TAG]);
        let mut tail = Small::new();
        let keep = match e.merge {
            Some((count_at, c)) => {
                tail.push(&c.to_le_bytes());
                e.live_start..count_at
            }
            None => {
                tail.push(&now.0.to_le_bytes());
                tail.push(&cost.to_le_bytes());
                e.live_start..v.len()
            }
        };
        (Splice { head, keep, tail }, e.full_at)
    });
    Some((d, write))
}

/// The decimal at `v[*i..]` up to the next space or the end, `*i` moved past it (and
/// its space): `None` unless it is as the scripts' text writes it (digits, no leading
/// zero, fits a `u64`). Eight digits at a time while eight bytes remain.
fn decimal(v: &[u8], i: &mut usize) -> Option<u64> {
    let from = *i;
    // one digit then a space: most counts
    if let Some(&[d @ b'0'..=b'9', b' ', _]) = v.get(from..from + 3) {
        *i += 2;
        return Some(u64::from(d - b'0'));
    }
    let mut n = 0u64;
    while let Some(chunk) = v.get(*i..*i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let k = leading_digits(x);
        if k > 0 {
            let value = eight_digits(x << (8 * (8 - k)));
            n = n.checked_mul(POW10[k])?.checked_add(value)?;
            *i += k;
        }
        if k < 8 {
            break;
        }
    }
    while let Some(&b) = v.get(*i) {
        if !b.is_ascii_digit() {
            break;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        *i += 1;
    }
    let len = *i - from;
    if len == 0 || (len > 1 && v[from] == b'0') {
        return None;
    }
    match v.get(*i) {
        None => Some(n),
        // a space, not the last byte
        Some(b' ') if *i + 1 < v.len() => {
            *i += 1;
            Some(n)
        }
        Some(_) => None,
    }
}

/// 10^k for k up to 8.
const POW10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// How many of the eight bytes of `x` (the first in the low byte) are ASCII digits
/// before the first that is not.
fn leading_digits(x: u64) -> usize {
    const HI: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const DIGITS: u64 = 0x3030_3030_3030_3030;
    // a digit's high nibble is 3, and stays 3 plus 6 (a carry out of a byte at or above
    // 0xFA, itself no digit, only disturbs the bytes after it)
    let not_digit = ((x & HI) ^ DIGITS) | ((x.wrapping_add(0x0606_0606_0606_0606) & HI) ^ DIGITS);
    (not_digit.trailing_zeros() / 8) as usize
}

/// The number written by the eight ASCII digits of `x` (the first in the low byte; zero
/// bytes count as leading zeros).
fn eight_digits(x: u64) -> u64 {
    let x = (x & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561) >> 8;
    let x = (x & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601) >> 16;
    (x & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001) >> 32
}

/// `FG.DECIDE`'s sliding log on the scripts' text `stored` (`None`: no key): `"total t1
/// c1 t2 c2 ..."`, its stored total the units it holds as in the scripts' decision
/// (`scan::trusting_total`; the counts' sum where the total is below the expired
/// prefix's units or an entry read is not as the encoder writes it). `None`: a value that
/// read refuses (the general path decodes it whole, and refuses or rewrites it).
pub fn text(log: &SlidingLog, stored: Option<&[u8]>, now: Nanos, cost: u64) -> Option<Logged> {
    let v = stored.unwrap_or_default();
    scan::prefetch(v);
    let w = log.window_nanos();
    let mut first = 0;
    let summary = match stored {
        None => Summary::empty(0),
        Some(v) => {
            let total = decimal(v, &mut first)?;
            match scan::trusting_total(v, first, total, now.0, w) {
                Some(s) => s,
                None => scan::summary(v, first, now.0, w)?,
            }
        }
    };
    let entries = scan::Entries::new(v, first, (now.0, w));
    // an instant not read while reading the entries was checked then
    let t_at = |start: usize| decimal(v, &mut start.clone()).unwrap_or(0);
    let (d, edit) = plan(log, summary, entries, t_at, v.len(), now, cost)?;
    let write = edit.map(|e| {
        let mut head = Small::new();
        head.push_decimal(e.total);
        head.push(b" ");
        let mut tail = Small::new();
        let keep = match e.merge {
            Some((count_at, c)) => {
                tail.push_decimal(c);
                e.live_start..count_at
            }
            None => {
                if e.live_start < v.len() {
                    tail.push(b" ");
                }
                tail.push_decimal(now.0);
                tail.push(b" ");
                tail.push_decimal(cost);
                e.live_start..v.len()
            }
        };
        (Splice { head, keep, tail }, e.full_at)
    });
    Some((d, write))
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
