//! Limiters for a single key: [`Limiter`] for any algorithm, [`AtomicGcra`] lock-free.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use crate::algorithm::{Algorithm, OneWord};
use crate::algorithms::{Gcra, GcraState};
use crate::decision::Decision;
use crate::keyed::{Padded, ShardLock};
use crate::time::Nanos;

/// One limit, one state, any algorithm; safe to share between threads. The algorithm can
/// be replaced at run time with [`set_algorithm`](Limiter::set_algorithm).
///
/// Two paths, chosen by the algorithm in place:
///
/// * **One word, lock-free.** When [`Algorithm::one_word`] gives a GCRA's parameters (a
///   [`Gcra`], or the GCRA variant of an [`AnyAlgorithm`](crate::AnyAlgorithm)), its
///   theoretical arrival time sits in an `AtomicU64` on its own cache line and a check
///   is a compare-and-swap loop, as in [`AtomicGcra`]. The parameters sit on another line,
///   published by `set_algorithm` as a sequence lock made of atomics: a check reads
///   them with plain loads (no read-modify-write, so the line stays shared between the
///   cores) and retries if a replacement was being written meanwhile, so it never
///   decides with a torn mix of old and new parameters.
/// * **Locked.** Any other algorithm keeps its state behind the same lock as a keyed
///   shard's (spin, then yield): one atomic instruction per uncontended decision, where
///   a parking mutex takes two.
///
/// Either way N threads admit exactly what one thread admits from the same calls. With
/// two threads contending on one key (quiet 2-core VM), the lock's holder and its
/// spinning waiter passed the line back and forth more than one compare-and-swap does:
/// the locked `Limiter<Gcra>` made 0.57x the checks of governor's direct limiter where
/// [`AtomicGcra`]'s loop, the one-word path's, made 1.01x. The one-word path costs a
/// little on one thread: 1.03x governor's CPU per check instead of the lock's 1.23x
/// (loaded VM; docs/bench-core.md has the figures, commands and dates).
///
/// A check concurrent with `set_algorithm` decides with the old parameters or the new;
/// one that starts after `set_algorithm` returned decides with the new. Replacing the
/// parameters of one algorithm keeps the state; switching between the one-word path and
/// the locked one (for `AnyAlgorithm`, between GCRA and another variant) starts the key
/// at full capacity, as a state of another variant is treated as a fresh one.
///
/// ```
/// use floodgate_core::algorithms::SlidingLog;
/// use floodgate_core::{Limiter, Nanos};
/// use std::time::Duration;
///
/// let l = Limiter::new(SlidingLog::new(2, Duration::from_secs(1))?);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(!l.check(Nanos::from_millis(999), 1).allowed);
/// assert!(l.check(Nanos::from_secs(1), 1).allowed);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
pub struct Limiter<A: Algorithm> {
    /// The one-word state (GCRA's theoretical arrival time), written by every admitted
    /// check on the lock-free path.
    word: Padded<AtomicU64>,
    /// The one-word path's parameters, read by every check, written only by
    /// `set_algorithm`.
    params: Padded<WordParams>,
    /// The algorithm in place (whichever path it takes) and the locked path's state.
    /// `set_algorithm` holds this lock while it publishes new parameters.
    inner: ShardLock<(A, A::State)>,
}

/// Parameters of the one-word path behind a sequence lock: `seq` is odd while
/// `set_algorithm` writes them, and its bit 1 says whether the path is in use (when
/// clear, checks take the lock); the GCRA's parameters in four words besides.
struct WordParams {
    seq: AtomicU64,
    words: [AtomicU64; 4],
}

/// Bit 0 of [`WordParams::seq`]: a write is under way.
const WRITING: u64 = 1;
/// Bit 1: the one-word path is in use.
const ONE_WORD: u64 = 2;
/// The generation counter starts above the two flag bits.
const GENERATION: u64 = 4;

impl WordParams {
    fn new(gcra: Option<OneWord>) -> WordParams {
        let p = WordParams {
            seq: AtomicU64::new(0),
            words: Default::default(),
        };
        p.publish(gcra);
        p
    }

    /// The parameters when the one-word path is in use. Loads only: the line stays
    /// shared by every core that reads it. (One loop, inlined whole: a slow path out of
    /// line would return the GCRA through memory, and the caller would then compute
    /// every field of the decision, read or not.)
    #[inline(always)]
    fn read(&self) -> Option<Gcra> {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & (WRITING | ONE_WORD) == 0 {
                // the locked path: the lock holder sees the algorithm in place
                return None;
            }
            let words = [0, 1, 2, 3].map(|i| self.words[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if before & WRITING == 0 && self.seq.load(Ordering::Relaxed) == before {
                return Some(Gcra::from_words(OneWord(words)));
            }
            std::hint::spin_loop();
        }
    }

    /// Publish `gcra` (or that the one-word path is not in use). Called with the
    /// limiter's lock held, so there is one writer at a time.
    fn publish(&self, gcra: Option<OneWord>) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq | WRITING, Ordering::Relaxed);
        fence(Ordering::Release);
        let mode = match gcra {
            Some(OneWord(words)) => {
                for (slot, w) in self.words.iter().zip(words) {
                    slot.store(w, Ordering::Relaxed);
                }
                ONE_WORD
            }
            None => 0,
        };
        let next = (seq & !(WRITING | ONE_WORD)).wrapping_add(GENERATION);
        self.seq.store(next | mode, Ordering::Release);
    }
}

/// GCRA's check on a theoretical arrival time held in `tat`: a compare-and-swap loop.
#[inline(always)]
fn check_word(gcra: &Gcra, tat: &AtomicU64, now: Nanos, cost: u64) -> Decision {
    let mut current = tat.load(Ordering::Acquire);
    loop {
        let state = GcraState {
            tat: Nanos(current),
        };
        let (decision, pending) = gcra.decide(&state, now, cost);
        let Some(next) = pending else { return decision };
        match tat.compare_exchange_weak(current, next.0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return decision,
            Err(actual) => current = actual,
        }
    }
}

/// GCRA's peek on a theoretical arrival time held in `tat`.
#[inline]
fn peek_word(gcra: &Gcra, tat: &AtomicU64, now: Nanos, cost: u64) -> Decision {
    let state = GcraState {
        tat: Nanos(tat.load(Ordering::Acquire)),
    };
    gcra.peek(&state, now, cost)
}

impl<A: Algorithm> Limiter<A> {
    /// A limiter at full capacity.
    pub fn new(algorithm: A) -> Self {
        let one_word = if A::ONE_WORD {
            algorithm.one_word()
        } else {
            None
        };
        Limiter {
            word: Padded(AtomicU64::new(0)),
            params: Padded(WordParams::new(one_word)),
            inner: ShardLock::new((algorithm, A::State::default())),
        }
    }

    /// Decide, consuming `cost` when admitted.
    #[inline(always)]
    pub fn check(&self, now: Nanos, cost: u64) -> Decision {
        if A::ONE_WORD
            && let Some(gcra) = self.params.0.read()
        {
            return check_word(&gcra, &self.word.0, now, cost);
        }
        self.check_locked(now, cost)
    }

    /// [`check`](Limiter::check) on the locked path, or on the one-word path when a
    /// `set_algorithm` switched to it since the parameters were read.
    #[inline(always)]
    fn check_locked(&self, now: Nanos, cost: u64) -> Decision {
        let mut guard = self.inner.lock();
        let (alg, state) = &mut *guard;
        if A::ONE_WORD
            && let Some(words) = alg.one_word()
        {
            return check_word(&Gcra::from_words(words), &self.word.0, now, cost);
        }
        alg.check(state, now, cost)
    }

    /// Decide without consuming.
    #[inline]
    pub fn peek(&self, now: Nanos, cost: u64) -> Decision {
        if A::ONE_WORD
            && let Some(gcra) = self.params.0.read()
        {
            return peek_word(&gcra, &self.word.0, now, cost);
        }
        let (alg, state) = &*self.inner.lock();
        match alg.one_word() {
            Some(words) if A::ONE_WORD => {
                peek_word(&Gcra::from_words(words), &self.word.0, now, cost)
            }
            _ => alg.peek(state, now, cost),
        }
    }

    /// Replace the algorithm's parameters at run time; the state is kept (unless the
    /// switch is between the one-word path and the locked one: see [`Limiter`]).
    pub fn set_algorithm(&self, algorithm: A) {
        let mut guard = self.inner.lock();
        if A::ONE_WORD {
            let was_one_word = guard.0.one_word().is_some();
            let one_word = algorithm.one_word();
            if was_one_word != one_word.is_some() {
                // the state of the path left behind is of another algorithm: both start
                // fresh (the word before the parameters that make checks read it)
                self.word.0.store(0, Ordering::Release);
                guard.1 = A::State::default();
            }
            if was_one_word || one_word.is_some() {
                self.params.0.publish(one_word);
            }
        }
        guard.0 = algorithm;
    }
}

/// GCRA on one `AtomicU64` (the theoretical arrival time) with a compare-and-swap loop:
/// lock-free, one cache line, and the same decisions as [`Gcra`].
///
/// ```
/// use floodgate_core::algorithms::Gcra;
/// use floodgate_core::{AtomicGcra, Nanos, Rate};
///
/// let l = AtomicGcra::new(Gcra::new(Rate::per_second(1)?, 2)?);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(l.check(Nanos::ZERO, 1).allowed);
/// assert!(!l.check(Nanos::ZERO, 1).allowed);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct AtomicGcra {
    gcra: Gcra,
    tat: AtomicU64,
}

impl AtomicGcra {
    /// A limiter at full capacity.
    pub fn new(gcra: Gcra) -> Self {
        AtomicGcra {
            gcra,
            tat: AtomicU64::new(0),
        }
    }

    /// Decide, consuming `cost` when admitted. Inlined into the caller, so that the
    /// fields of the [`Decision`] it does not read cost nothing.
    #[inline(always)]
    pub fn check(&self, now: Nanos, cost: u64) -> Decision {
        check_word(&self.gcra, &self.tat, now, cost)
    }

    /// Decide without consuming.
    #[inline]
    pub fn peek(&self, now: Nanos, cost: u64) -> Decision {
        peek_word(&self.gcra, &self.tat, now, cost)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::AnyAlgorithm;
    use crate::algorithms::SlidingLog;
    use crate::rate::Rate;

    const NOW: Nanos = Nanos(1_000_000_000_000);

    fn gcra(per_second: u64, capacity: u64) -> Gcra {
        Gcra::new(Rate::per_second(per_second).unwrap(), capacity).unwrap()
    }

    fn log(limit: u64) -> SlidingLog {
        SlidingLog::new(limit, Duration::from_secs(1)).unwrap()
    }

    /// Admitted out of `n` checks of cost 1 at `now`.
    fn admits<A: Algorithm>(l: &Limiter<A>, now: Nanos, n: usize) -> usize {
        (0..n).filter(|_| l.check(now, 1).allowed).count()
    }

    #[test]
    fn gcra_decides_as_the_algorithm_on_its_own() {
        let g = gcra(10, 5);
        let l = Limiter::new(g.clone());
        let mut state = GcraState::default();
        for i in 0..200u64 {
            let now = Nanos(NOW.0 + i * 37_000_000);
            let cost = i % 3;
            assert_eq!(l.peek(now, cost), g.peek(&state, now, cost), "peek {i}");
            assert_eq!(
                l.check(now, cost),
                g.check(&mut state, now, cost),
                "check {i}"
            );
        }
    }

    #[test]
    fn replacing_gcra_parameters_keeps_the_state() {
        let l = Limiter::new(gcra(1, 5));
        assert_eq!(admits(&l, NOW, 3), 3);
        // twice the capacity: the 3 units spent still count
        l.set_algorithm(gcra(1, 10));
        assert_eq!(admits(&l, NOW, 20), 7);
        let any = Limiter::new(AnyAlgorithm::Gcra(gcra(1, 5)));
        assert_eq!(admits(&any, NOW, 3), 3);
        any.set_algorithm(AnyAlgorithm::Gcra(gcra(1, 10)));
        assert_eq!(admits(&any, NOW, 20), 7);
        assert!(!any.peek(NOW, 1).allowed);
    }

    #[test]
    fn switching_between_the_paths_starts_fresh_and_keeps_deciding() {
        let l = Limiter::new(AnyAlgorithm::Gcra(gcra(1, 5)));
        assert_eq!(admits(&l, NOW, 10), 5);
        l.set_algorithm(AnyAlgorithm::SlidingLog(log(3)));
        assert_eq!(l.peek(NOW, 1).limit, 3);
        assert_eq!(admits(&l, NOW, 10), 3);
        l.set_algorithm(AnyAlgorithm::SlidingLog(log(4)));
        assert_eq!(admits(&l, NOW, 10), 1, "the log's state is kept");
        l.set_algorithm(AnyAlgorithm::Gcra(gcra(1, 6)));
        assert_eq!(l.peek(NOW, 1).remaining, 5);
        assert_eq!(admits(&l, NOW, 10), 6, "the GCRA starts fresh");
        l.set_algorithm(AnyAlgorithm::SlidingLog(log(2)));
        assert_eq!(admits(&l, NOW, 10), 2, "so does the log");
    }

    #[test]
    fn the_locked_path_sends_a_gcra_published_meanwhile_to_the_word() {
        // a check that read the locked path's parameters, then found a GCRA in place
        // once it held the lock, decides on the word
        let l = Limiter::new(AnyAlgorithm::SlidingLog(log(3)));
        l.set_algorithm(AnyAlgorithm::Gcra(gcra(1, 2)));
        assert!(l.check_locked(NOW, 1).allowed);
        assert_eq!(l.word.0.load(Ordering::Relaxed), NOW.0 + 1_000_000_000);
        assert!(l.check(NOW, 1).allowed);
        assert!(!l.check_locked(NOW, 1).allowed);
        assert!(!l.check(NOW, 1).allowed);
    }
}
