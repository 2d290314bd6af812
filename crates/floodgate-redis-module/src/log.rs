//! The sliding log decided on its stored value as it lies, in both formats: the module's
//! binary entries (`FG.THROTTLE`, [`binary`]) and the scripts' decimal text (`FG.DECIDE`,
//! [`text`]). The log is read once, front to back, without being collected; the new
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
#[derive(Debug, Clone, Copy)]
struct Entry {
    t: u64,
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

/// The core's decision on the entries `entries` (`None` when one is unreadable; `end`:
/// the value's length), and the edit of a charge.
fn plan<I>(
    log: &SlidingLog,
    entries: I,
    end: usize,
    now: Nanos,
    cost: u64,
) -> Option<(Decision, Option<Edit>)>
where
    I: Iterator<Item = Option<Entry>> + Clone,
{
    let w = log.window_nanos();
    let expired = |t: u64| t.saturating_add(w) <= now.0;
    let until = |t: u64| Duration::from_nanos(t.saturating_add(w).saturating_sub(now.0));
    let (mut total, mut gone, mut live_sum, mut k) = (0u64, 0u64, 0u64, 0usize);
    let mut live_start = end;
    let mut in_prefix = true;
    let mut last: Option<Entry> = None;
    for e in entries.clone() {
        let e = e?;
        total = total.saturating_add(e.c);
        if in_prefix && expired(e.t) {
            // the core sums the expired prefix with `Sum` (wrapping when built for release)
            gone = gone.wrapping_add(e.c);
            k += 1;
        } else {
            if in_prefix {
                in_prefix = false;
                live_start = e.start;
            }
            live_sum = live_sum.saturating_add(e.c);
        }
        last = Some(e);
    }
    let limit = log.limit();
    let used = total.saturating_sub(gone);
    let remaining = limit.saturating_sub(used);
    let reset = last.map_or(Duration::ZERO, |e| until(e.t));
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
                retry = until(e.t);
                break;
            }
        }
        return Some((Decision::deny(limit, remaining, retry, reset), None));
    }
    let at = last.map_or(now.0, |e| now.0.max(e.t));
    let reset = if cost > 0 { until(at) } else { reset };
    let decision = Decision::allow(limit, remaining - cost, reset);
    if cost == 0 {
        return Some((decision, None));
    }
    // the core's `apply`: the expired prefix dropped, the cost added to a last entry at
    // or after now (time stepped back), else a new entry at now
    let live_last = last.filter(|_| live_start < end);
    let (merge, newest) = match live_last {
        Some(e) if e.t >= now.0 => (Some((e.count_at, e.c.saturating_add(cost))), e.t),
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
            c: at(start + 8),
            start,
            count_at: start + 8,
        })
    });
    let (d, edit) = plan(log, entries, v.len(), now, cost)?;
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
/// zero, fits a `u64`).
fn decimal(v: &[u8], i: &mut usize) -> Option<u64> {
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
            // a trailing space
            return None;
        }
    }
    Some(n)
}

/// `FG.DECIDE`'s sliding log on the scripts' text `stored` (`None`: no key): `"total t1
/// c1 t2 c2 ..."`. `None`: a value the decoder would refuse or write otherwise.
pub fn text(log: &SlidingLog, stored: Option<&[u8]>, now: Nanos, cost: u64) -> Option<Logged> {
    let v = stored.unwrap_or_default();
    let mut first = 0;
    if stored.is_some() {
        decimal(v, &mut first)?;
    }
    let entries = TextEntries { v, i: first };
    let (d, edit) = plan(log, entries, v.len(), now, cost)?;
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

/// The entries of a text log, from byte `i` (after the total).
#[derive(Clone)]
struct TextEntries<'a> {
    v: &'a [u8],
    i: usize,
}

impl Iterator for TextEntries<'_> {
    type Item = Option<Entry>;

    fn next(&mut self) -> Option<Option<Entry>> {
        if self.i >= self.v.len() {
            return None;
        }
        let start = self.i;
        let entry = (|| {
            let t = decimal(self.v, &mut self.i)?;
            let count_at = self.i;
            if count_at >= self.v.len() {
                return None;
            }
            let c = decimal(self.v, &mut self.i)?;
            Some(Entry {
                t,
                c,
                start,
                count_at,
            })
        })();
        if entry.is_none() {
            // unreadable: end here
            self.i = self.v.len();
        }
        Some(entry)
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
