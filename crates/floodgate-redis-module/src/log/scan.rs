//! The scripts' sliding-log text. A decision reads it as the scripts do
//! ([`trusting_total`]): the stored total, the expired prefix and the last entry, each
//! checked as it is read, the entries between kept as they lie (a denial's retry reads
//! them, [`Entries`]). A value that read refuses goes through the whole text 64 bytes at
//! a time ([`summary`]): one pass checks it is as the encoder writes it
//! (decimals of digits only, no leading zero, separated by single spaces), with bit masks
//! of a block's spaces, digits and zeros; the entries are then found from the spaces'
//! positions, each decimal read only where its value is needed (an expired prefix's
//! instants, the counts, the last instant).

use super::{Entry, Summary, decimal};

/// Bytes per block.
const BLOCK: usize = 64;

/// The block of `v` at `at`: its bytes, zeros past the end of `v`.
fn block(v: &[u8], at: usize) -> [u8; BLOCK] {
    match v.get(at..at + BLOCK) {
        Some(b) => b.try_into().unwrap_or([0; BLOCK]),
        None => {
            let mut b = [0; BLOCK];
            let tail = v.get(at..).unwrap_or_default();
            b[..tail.len()].copy_from_slice(tail);
            b
        }
    }
}

/// Masks of a block: bit `i` set for each byte `i` of `b` that is a space, a digit, a
/// zero. AVX2, 32 bytes at a time, where the processor has it; else SSE2 (every x86-64).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
fn masks(b: &[u8; BLOCK]) -> (u64, u64, u64) {
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2
        unsafe { masks_avx2(b) }
    } else {
        masks_sse2(b)
    }
}

/// [`masks`] with AVX2.
///
/// # Safety
///
/// The processor must have AVX2.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2")]
unsafe fn masks_avx2(b: &[u8; BLOCK]) -> (u64, u64, u64) {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
        _mm256_set1_epi8, _mm256_sub_epi8,
    };
    let (space, zero, nine) = (
        _mm256_set1_epi8(b' ' as i8),
        _mm256_set1_epi8(b'0' as i8),
        _mm256_set1_epi8(9),
    );
    let bits = |x: __m256i| u64::from(_mm256_movemask_epi8(x) as u32);
    let (mut s, mut d, mut z) = (0, 0, 0);
    for (k, half) in b.chunks_exact(32).enumerate() {
        // SAFETY: `half` is 32 readable bytes; the load takes any alignment
        let x = unsafe { _mm256_loadu_si256(half.as_ptr().cast::<__m256i>()) };
        let above = _mm256_sub_epi8(x, zero);
        let digit = _mm256_cmpeq_epi8(_mm256_min_epu8(above, nine), above);
        s |= bits(_mm256_cmpeq_epi8(x, space)) << (32 * k);
        d |= bits(digit) << (32 * k);
        z |= bits(_mm256_cmpeq_epi8(x, zero)) << (32 * k);
    }
    (s, d, z)
}

/// [`masks`] with SSE2, 16 bytes at a time.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
fn masks_sse2(b: &[u8; BLOCK]) -> (u64, u64, u64) {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_set1_epi8,
        _mm_sub_epi8,
    };
    // SAFETY: SSE2 is there (the cfg above); each load reads the 16 bytes of a lane of
    // `b`, at any alignment
    unsafe {
        let (space, zero, nine) = (
            _mm_set1_epi8(b' ' as i8),
            _mm_set1_epi8(b'0' as i8),
            _mm_set1_epi8(9),
        );
        let bits = |x: __m128i| u64::from(_mm_movemask_epi8(x) as u16);
        let (mut s, mut d, mut z) = (0, 0, 0);
        for (k, lane) in b.chunks_exact(16).enumerate() {
            let x = _mm_loadu_si128(lane.as_ptr().cast::<__m128i>());
            // a digit is at most 9 above '0' (wrapping: a byte below '0' is far above)
            let above = _mm_sub_epi8(x, zero);
            let digit = _mm_cmpeq_epi8(_mm_min_epu8(above, nine), above);
            s |= bits(_mm_cmpeq_epi8(x, space)) << (16 * k);
            d |= bits(digit) << (16 * k);
            z |= bits(_mm_cmpeq_epi8(x, zero)) << (16 * k);
        }
        (s, d, z)
    }
}

/// Ask the processor for every cache line of `v` at once, before it is read: the value
/// of a key is seldom in the cache when its command comes (a thousand keys of a few KB
/// each), and its lines then arrive together instead of one block's after another's.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(super) fn prefetch(v: &[u8]) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let p = v.as_ptr();
    let mut at = 0;
    while at < v.len() {
        // SAFETY: `p + at` is within `v`; a prefetch reads nothing and cannot fault
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(at).cast::<i8>()) };
        at += BLOCK;
    }
    // the last line, when `v` does not start at a line's start
    if let Some(last) = v.len().checked_sub(1) {
        // SAFETY: as above
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(last).cast::<i8>()) };
    }
}

/// [`prefetch`] elsewhere: nothing.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(super) fn prefetch(_: &[u8]) {}

/// [`masks`] a byte at a time: on other targets, and the reference of its test.
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
fn masks_by_bytes(b: &[u8; BLOCK]) -> (u64, u64, u64) {
    let mut m = (0, 0, 0);
    for (i, &c) in b.iter().enumerate() {
        m.0 |= u64::from(c == b' ') << i;
        m.1 |= u64::from(c.is_ascii_digit()) << i;
        m.2 |= u64::from(c == b'0') << i;
    }
    m
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
use masks_by_bytes as masks;

/// Whether `v` is, byte for byte, decimals as the scripts' encoder writes them: digits
/// and single spaces only (at least one byte), neither first nor last a space, and no
/// decimal of two digits or more starting with 0. (Whether each fits a `u64` is left to
/// its reader.) What [`summary`] checks as it reads; its test's reference.
#[cfg(test)]
pub(super) fn well_formed(v: &[u8]) -> bool {
    let mut spaces = Spaces::new(v);
    while spaces.next().is_some() {}
    spaces.well_formed()
}

/// The positions of the spaces of a value, in order, found a block at a time; each block
/// checked as it is read (see `well_formed`).
#[derive(Clone)]
struct Spaces<'a> {
    v: &'a [u8],
    /// Where the block of `left` starts.
    base: usize,
    /// The block's spaces not taken yet.
    left: u64,
    /// Whether a block read so far is not as the encoder writes.
    bad: bool,
    /// 1 when the last byte of the block before is a space.
    space_before: u64,
    /// 1 when the last byte of the block before is a zero that starts a decimal.
    zero_start_before: u64,
    /// The digits of the block last read (bit `i`: byte `i` of the block).
    digits: u64,
}

impl<'a> Spaces<'a> {
    fn new(v: &'a [u8]) -> Spaces<'a> {
        // the byte before the value counts as a space (a leading space is then two in a
        // row, a leading zero a zero after a space)
        let mut s = Spaces {
            v,
            base: 0,
            left: 0,
            bad: false,
            space_before: 1,
            zero_start_before: 0,
            digits: 0,
        };
        if !v.is_empty() {
            s.left = s.read(0);
        }
        s
    }

    /// The spaces of the block at `at`, the block checked.
    #[inline(never)]
    fn read(&mut self, at: usize) -> u64 {
        self.read_with(at, masks)
    }

    /// [`Spaces::read`] with `masks` (inlined where the caller has its target's features).
    #[inline(always)]
    fn read_with(&mut self, at: usize, masks: impl Fn(&[u8; BLOCK]) -> (u64, u64, u64)) -> u64 {
        let v = self.v;
        let whole = v
            .get(at..at + BLOCK)
            .and_then(|b| <&[u8; BLOCK]>::try_from(b).ok());
        let (s, d, z) = match whole {
            Some(b) => masks(b),
            None => masks(&block(v, at)),
        };
        let after_space = (s << 1) | self.space_before;
        let zero_start = d & z & after_space;
        let len = v.len() - at;
        let in_value = if len >= BLOCK {
            u64::MAX
        } else {
            (1 << len) - 1
        };
        // a byte neither digit nor space, two spaces in a row, a digit after a zero that
        // starts a decimal
        let bad = (in_value & !(s | d))
            | (s & after_space)
            | (d & ((zero_start << 1) | self.zero_start_before));
        self.bad |= bad != 0;
        self.space_before = s >> 63;
        self.zero_start_before = zero_start >> 63;
        self.digits = d;
        s
    }

    /// After the last space: whether the value was `well_formed`.
    fn well_formed(&self) -> bool {
        !self.bad && self.v.last().is_some_and(|&b| b != b' ')
    }
}

impl Iterator for Spaces<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.left == 0 {
            self.base += BLOCK;
            if self.base >= self.v.len() {
                return None;
            }
            self.left = self.read(self.base);
        }
        let at = self.base + self.left.trailing_zeros() as usize;
        self.left &= self.left - 1;
        Some(at)
    }
}

/// The count of an entry: the decimal from byte `at` to `end`.
#[inline]
fn count(v: &[u8], at: usize, end: usize) -> Option<u64> {
    match *v.get(at..end)? {
        [d @ b'0'..=b'9'] => Some(u64::from(d - b'0')),
        _ => decimal(v, &mut at.clone()),
    }
}

/// The [`Summary`] of the text log `v`, its entries from byte `first` (after the total),
/// at `now` with the window `w`: what `super::summarize` finds on [`Entries`], in one
/// pass over the value that also checks it is `well_formed`. `None`: it is not, or an
/// entry is unreadable.
pub(super) fn summary(v: &[u8], first: usize, now: u64, w: u64) -> Option<Summary> {
    summary_with(v, first, now, w, true)
}

/// [`summary`]; `blocks`: the entries after the first one in the window summed a block
/// at a time ([`Rest`]), else entry by entry (what a value with a decimal of 20 digits
/// or more takes, and the reference of the test).
pub(super) fn summary_with(
    v: &[u8],
    first: usize,
    now: u64,
    w: u64,
    blocks: bool,
) -> Option<Summary> {
    let len = v.len();
    let mut spaces = Spaces::new(v);
    // the spaces of the block at `base` not taken yet, in registers
    let (mut base, mut left) = (0, spaces.left);
    macro_rules! next_space {
        () => {
            loop {
                if left != 0 {
                    let at = base + left.trailing_zeros() as usize;
                    left &= left - 1;
                    break Some(at);
                }
                base += BLOCK;
                if base >= len {
                    break None;
                }
                left = spaces.read(base);
            }
        };
    }
    if first < len {
        // the total's
        next_space!()?;
    }
    let (mut total, mut gone, mut k) = (0u64, 0u64, 0usize);
    let (mut live_start, mut live_sum) = (len, 0u64);
    let mut last = None;
    let mut start = first;
    // the expired prefix, and the first entry after it: instants read
    while start < len {
        // the instant ends at a space: a value ending in an instant is unreadable
        let count_at = next_space!()? + 1;
        let t = decimal(v, &mut start.clone())?;
        let end = next_space!().unwrap_or(len);
        let c = count(v, count_at, end)?;
        total = total.saturating_add(c);
        last = Some(Entry {
            t,
            t_known: true,
            c,
            start,
            count_at,
        });
        let at = start;
        start = end + 1;
        if t.saturating_add(w) > now {
            live_start = at;
            live_sum = c;
            break;
        }
        // the core sums the expired prefix with `Sum` (wrapping when built for release)
        gone = gone.wrapping_add(c);
        k += 1;
    }
    // the rest: instants only checked (up to 19 digits always fit a u64, and there is no
    // leading zero), the last entry's place kept
    let (mut last_start, mut last_count_at, mut last_c) = (len, 0, 0);
    if blocks && start < len {
        // the block of `start`: the one read last (its spaces before `start` taken), or,
        // when the last space taken ended it, the next
        let (blk, s, d) = if start < base + BLOCK {
            (base, left, spaces.digits)
        } else {
            (start, spaces.read(start), spaces.digits)
        };
        let part = Part { start, blk, s, d };
        let Some(rest) = Rest::sum(v, &mut spaces, part) else {
            // a decimal of 20 digits or more: read entry by entry
            return summary_with(v, first, now, w, false);
        };
        let rest = rest?;
        total = total.saturating_add(rest.sum);
        live_sum = live_sum.saturating_add(rest.sum);
        (last_start, last_count_at, last_c) = rest.last;
        // every block read
        start = len;
        (base, left) = (len, 0);
    }
    while start < len {
        let count_at = next_space!()? + 1;
        if count_at - 1 - start > 19 {
            decimal(v, &mut start.clone())?;
        }
        let end = next_space!().unwrap_or(len);
        let c = count(v, count_at, end)?;
        total = total.saturating_add(c);
        live_sum = live_sum.saturating_add(c);
        (last_start, last_count_at, last_c) = (start, count_at, c);
        start = end + 1;
    }
    while next_space!().is_some() {}
    if !spaces.well_formed() {
        return None;
    }
    if last_start < len {
        last = Some(Entry {
            t: 0,
            t_known: false,
            c: last_c,
            start: last_start,
            count_at: last_count_at,
        });
    }
    Some(Summary {
        total,
        gone,
        k,
        live_start,
        live_sum,
        last,
    })
}

/// The [`Summary`] of the text log `v` as the scripts' decision reads it: its stored
/// total `total` (the decimal before byte `first`) taken as the units it holds, so that
/// only the expired prefix, the first entry after it and the last entry are read (each
/// checked as it is read). The entries between are kept as they lie, as the scripts keep
/// them, and checked when a decision reads them: as they expire, or when a denial looks
/// for its retry. `None`: an entry read is not as the encoder writes it, or the expired
/// prefix holds more units than the total; [`summary`] reads the value then.
pub(super) fn trusting_total(
    v: &[u8],
    first: usize,
    total: u64,
    now: u64,
    w: u64,
) -> Option<Summary> {
    let len = v.len();
    let (mut gone, mut k) = (0u64, 0usize);
    let (mut start, mut live_start, mut last) = (first, len, None);
    // the expired prefix, and the first entry after it
    while start < len {
        let mut i = start;
        let t = decimal(v, &mut i)?;
        let count_at = i;
        // an instant without its count
        if count_at >= len {
            return None;
        }
        let c = decimal(v, &mut i)?;
        last = Some(Entry {
            t,
            t_known: true,
            c,
            start,
            count_at,
        });
        let at = start;
        start = i;
        if t.saturating_add(w) > now {
            live_start = at;
            break;
        }
        // the core sums the expired prefix with `Sum` (wrapping when built for release)
        gone = gone.wrapping_add(c);
        k += 1;
    }
    if start < len {
        // the last entry: the value's last two decimals, after the entry just read
        let count_at = v.iter().rposition(|&b| b == b' ')? + 1;
        let t_start = v[..count_at - 1]
            .iter()
            .rposition(|&b| b == b' ')
            .map_or(0, |i| i + 1);
        if t_start < start {
            return None;
        }
        let mut i = t_start;
        let t = decimal(v, &mut i)?;
        if i != count_at {
            return None;
        }
        let c = decimal(v, &mut i)?;
        last = Some(Entry {
            t,
            t_known: true,
            c,
            start: t_start,
            count_at,
        });
    }
    Some(Summary {
        total,
        gone,
        k,
        live_start,
        live_sum: total.checked_sub(gone)?,
        last,
    })
}

/// What the entries of a text log from an instant's first byte to the end add up to,
/// read a block at a time from the masks of its spaces and digits: the counts are the
/// decimals after an odd number of the part's spaces (a prefix XOR of the spaces gives
/// each byte's parity), a count of one digit is its byte, a longer one read as a
/// decimal; the instants are only measured. What the entry-by-entry loop of
/// [`summary_with`] finds, without two steps per entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rest {
    /// The counts' sum (saturating).
    sum: u64,
    /// The last entry: where it and its count start, and its count.
    last: (usize, usize, u64),
}

/// Where the entries to sum start: byte `start` (an instant's first byte, after a
/// space) of the block at `blk`, read already: `s` its spaces from `start` on, `d` its
/// digits.
#[derive(Debug, Clone, Copy)]
struct Part {
    start: usize,
    blk: usize,
    s: u64,
    d: u64,
}

impl Rest {
    /// The entries of `v` from `part` to the end, `spaces` reading the blocks after the
    /// first (checking them). `None`: a run of 20 digits or more (an instant that may not fit a `u64`,
    /// left to the entry-by-entry loop); `Some(None)`: unreadable (a count that is not a
    /// decimal as the encoder writes it, or the text ends in an instant).
    fn sum(v: &[u8], spaces: &mut Spaces<'_>, part: Part) -> Option<Option<Rest>> {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2
            return unsafe { Rest::sum_avx2(v, spaces, part) };
        }
        Rest::sum_with(v, spaces, part, masks)
    }

    /// [`Rest::sum`] compiled for AVX2, its blocks' masks inlined.
    ///
    /// # Safety
    ///
    /// The processor must have AVX2.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2")]
    unsafe fn sum_avx2(v: &[u8], spaces: &mut Spaces<'_>, part: Part) -> Option<Option<Rest>> {
        // SAFETY: the caller's processor has AVX2
        Rest::sum_with(v, spaces, part, |b| unsafe { masks_avx2(b) })
    }

    /// [`Rest::sum`], each block after the first read with `masks`.
    #[inline(always)]
    fn sum_with(
        v: &[u8],
        spaces: &mut Spaces<'_>,
        part: Part,
        masks: impl Fn(&[u8; BLOCK]) -> (u64, u64, u64) + Copy,
    ) -> Option<Option<Rest>> {
        let Part {
            start,
            mut blk,
            mut s,
            mut d,
        } = part;
        let from = start - blk;
        let mut lo = u64::MAX << from;
        // the byte before `start` is a space
        let mut space_before = 1u64 << from;
        // all ones after an odd number of the part's spaces
        let mut odd = 0u64;
        // the digits of the block before (the runs of 20 are looked for across two)
        let mut digits_before = 0u64;
        // the counts of one digit, apart (no sum of them overflows), and the others'
        // (saturating)
        let (mut ones, mut sum, mut last_count_at) = (0u64, 0u64, None);
        loop {
            let (s_r, d_r) = (s & lo, d & lo);
            if ends_a_run_of_20(digits_before, d_r) {
                return None;
            }
            let parity = prefix_xor(s_r) ^ odd;
            let starts = d_r & ((s_r << 1) | space_before);
            let counts = starts & parity;
            // one digit: the next byte is no digit (a space, or past the end: zeros); a
            // count starting at the block's last byte is read as a decimal
            let single = counts & !(d_r >> 1) & (u64::MAX >> 1);
            let mut m = single;
            while m != 0 {
                ones += u64::from(v[blk + m.trailing_zeros() as usize] - b'0');
                m &= m - 1;
            }
            let mut m = counts & !single;
            while m != 0 {
                let Some(c) = super::decimal(v, &mut (blk + m.trailing_zeros() as usize)) else {
                    return Some(None);
                };
                sum = sum.saturating_add(c);
                m &= m - 1;
            }
            if counts != 0 {
                last_count_at = Some(blk + 63 - counts.leading_zeros() as usize);
            }
            odd = 0u64.wrapping_sub(parity >> 63);
            space_before = s_r >> 63;
            digits_before = d_r;
            lo = u64::MAX;
            blk += BLOCK;
            if blk >= v.len() {
                break;
            }
            s = spaces.read_with(blk, masks);
            d = spaces.digits;
        }
        // the text ends in a count: an odd number of spaces in the part
        let (Some(count_at), true) = (last_count_at, odd != 0) else {
            return Some(None);
        };
        let Some(c) = super::decimal(v, &mut count_at.clone()) else {
            return Some(None);
        };
        // the instant before it: at most 19 digits
        let t_start = v[..count_at - 1]
            .iter()
            .rposition(|&b| b == b' ')
            .map_or(0, |i| i + 1);
        Some(Some(Rest {
            sum: sum.saturating_add(ones),
            last: (t_start, count_at, c),
        }))
    }
}

/// Whether a run of 20 digits or more ends in the block of digits `d`, the block before
/// it holding the digits `before` (bit `i`: byte `i`).
#[inline(always)]
fn ends_a_run_of_20(before: u64, d: u64) -> bool {
    let x = (u128::from(d) << 64) | u128::from(before);
    let r2 = x & (x << 1);
    let r4 = r2 & (r2 << 2);
    let r8 = r4 & (r4 << 4);
    let r16 = r8 & (r8 << 8);
    (r16 & (r4 << 16)) >> 64 != 0
}

/// Bit `i` of the result: the parity of the bits of `x` from 0 to `i`.
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// The entries of a text log that is `well_formed`, from byte `i` (after the total),
/// found by the spaces: each an instant, a space and a count; an entry without its count,
/// or a decimal that does not fit a `u64`, is unreadable.
#[derive(Clone)]
pub(super) struct Entries<'a> {
    v: &'a [u8],
    i: usize,
    spaces: Spaces<'a>,
    /// `(now, window)` while the entries read are expired: their instants are read;
    /// `None` after, the instants only checked.
    expiring: Option<(u64, u64)>,
}

impl<'a> Entries<'a> {
    /// The entries of `v` from byte `i`, the instants read while `expiring` (`(now,
    /// window)`) says they are expired.
    pub(super) fn new(v: &'a [u8], i: usize, expiring: (u64, u64)) -> Entries<'a> {
        Entries {
            v,
            i,
            spaces: {
                let mut spaces = Spaces::new(v);
                if i < v.len() {
                    // the total's
                    spaces.next();
                }
                spaces
            },
            expiring: Some(expiring),
        }
    }

    fn entry(&mut self) -> Option<Entry> {
        let (v, start) = (self.v, self.i);
        // the instant ends at a space: a value ending in an instant is unreadable
        let count_at = self.spaces.next()? + 1;
        let t = match self.expiring {
            Some((now, w)) => {
                let t = decimal(v, &mut start.clone())?;
                if t.saturating_add(w) > now {
                    self.expiring = None;
                }
                Some(t)
            }
            // up to 19 digits always fit a u64 (and there is no leading zero)
            None if count_at - 1 - start <= 19 => None,
            None => {
                decimal(v, &mut start.clone())?;
                None
            }
        };
        let end = self.spaces.next().unwrap_or(v.len());
        let c = count(v, count_at, end)?;
        self.i = end + 1;
        Some(Entry {
            t: t.unwrap_or(0),
            t_known: t.is_some(),
            c,
            start,
            count_at,
        })
    }
}

impl Iterator for Entries<'_> {
    type Item = Option<Entry>;

    fn next(&mut self) -> Option<Option<Entry>> {
        if self.i >= self.v.len() {
            return None;
        }
        let entry = self.entry();
        if entry.is_none() {
            // unreadable: end here
            self.i = self.v.len();
        }
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_as_byte_by_byte() {
        let mut rng = fastrand::Rng::with_seed(24);
        for _ in 0..20_000 {
            let mut b = [0u8; BLOCK];
            for c in &mut b {
                *c = match rng.u8(0..4) {
                    0 => rng.u8(..),
                    1 => b' ',
                    _ => rng.u8(b'0' - 2..=b'9' + 2),
                };
            }
            assert_eq!(masks(&b), masks_by_bytes(&b), "{b:?}");
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            assert_eq!(masks_sse2(&b), masks_by_bytes(&b), "{b:?}");
        }
    }
}
