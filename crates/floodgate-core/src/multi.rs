//! All-or-nothing checks across several limits: a request that one policy denies consumes
//! from none of them (nginx's rule for several `limit_req` on one location).

use std::hash::Hash;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::keyed::KeyedLimiter;
use crate::time::Nanos;

/// One limit to check: which limiter, which key, at what cost.
pub struct Check<'a, K, A: Algorithm> {
    /// The limiter (one per policy, e.g. per-client and global).
    pub limiter: &'a KeyedLimiter<K, A>,
    /// The key in that limiter.
    pub key: &'a K,
    /// Units this request costs under that policy.
    pub cost: u64,
}

/// The outcome of [`check_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiDecision {
    /// True when every policy admitted the request and all were charged.
    pub allowed: bool,
    /// One decision per check, in order. When the request is denied, policies that would
    /// have admitted it were not charged, and their decision is the cost-0 view of their
    /// current state (`allowed` true, `remaining` what is really left).
    pub decisions: Vec<Decision>,
}

impl MultiDecision {
    /// The delay to apply: the largest of all policies (nginx applies the largest).
    pub fn delay(&self) -> std::time::Duration {
        self.decisions
            .iter()
            .map(|d| d.delay)
            .max()
            .unwrap_or_default()
    }

    /// The denial that binds: the denied policy with the longest `retry_after` (`None`
    /// retry, "never", binds over any finite one).
    pub fn binding(&self) -> Option<&Decision> {
        self.decisions
            .iter()
            .filter(|d| !d.allowed)
            .max_by_key(|d| binding_rank(d))
    }
}

/// The order in which denials bind: a denial with a higher rank binds over one with a
/// lower; the longest `retry_after` ranks highest, and `None` ("never") above any finite
/// one.
pub fn binding_rank(d: &Decision) -> (u8, u128) {
    d.retry_after.map_or((1, 0), |r| (0, r.as_nanos()))
}

/// The all-or-nothing rule of [`check_all`] on states the caller holds and stores itself
/// (a Redis module reads and writes its keys): every `(algorithm, state, cost)` is decided
/// at `now`. When all admit, the second value holds each check's write (`None` for a cost
/// of 0), to [`apply`](Algorithm::apply) and store; when one denies, there is no write at
/// all, and the decision of each check that would have admitted is its cost-0 view, as in
/// [`check_all`]. The caller makes sure no state is listed twice.
///
/// ```
/// use floodgate_core::algorithms::FixedWindow;
/// use floodgate_core::multi::decide_all;
/// use floodgate_core::{Algorithm, Nanos};
/// use std::time::Duration;
///
/// let client = FixedWindow::new(100, Duration::from_secs(60))?;
/// let global = FixedWindow::new(1, Duration::from_secs(60))?;
/// let (mut a, mut g) = (Default::default(), Default::default());
/// let now = Nanos::from_secs(1);
/// let (first, writes) = decide_all(&[(&client, &a, 1), (&global, &g, 1)], now);
/// assert!(first.allowed);
/// let mut writes = writes.into_iter();
/// client.apply(&mut a, writes.next().flatten().unwrap());
/// global.apply(&mut g, writes.next().flatten().unwrap());
/// let (second, writes) = decide_all(&[(&client, &a, 1), (&global, &g, 1)], now);
/// assert!(!second.allowed && writes.iter().all(Option::is_none));
/// assert_eq!(second.decisions[0].remaining, 99); // the client was not charged
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
pub fn decide_all<A: Algorithm>(
    checks: &[(&A, &A::State, u64)],
    now: Nanos,
) -> (MultiDecision, Vec<Option<A::Pending>>) {
    let (mut decisions, mut pendings): (Vec<Decision>, Vec<Option<A::Pending>>) = checks
        .iter()
        .map(|(alg, state, cost)| alg.decide(state, now, *cost))
        .unzip();
    let allowed = decisions.iter().all(|d| d.allowed);
    if !allowed {
        pendings.iter_mut().for_each(|p| *p = None);
        for ((alg, state, _), d) in checks.iter().zip(decisions.iter_mut()) {
            if d.allowed {
                *d = alg.decide(state, now, 0).0;
            }
        }
    }
    (MultiDecision { allowed, decisions }, pendings)
}

/// Check a request against several limits at once, all-or-nothing.
///
/// The shards involved are locked in one global order (limiter address, then shard), so
/// concurrent `check_all` calls cannot deadlock, and the decision is atomic: no other
/// decision on these keys interleaves. A `(limiter, key)` pair listed twice is charged the
/// sum of its costs once.
///
/// ```
/// use floodgate_core::algorithms::FixedWindow;
/// use floodgate_core::multi::{check_all, Check};
/// use floodgate_core::{KeyedLimiter, Nanos};
/// use std::time::Duration;
///
/// let per_client = KeyedLimiter::new(FixedWindow::new(100, Duration::from_secs(60))?, 1000)?;
/// let global = KeyedLimiter::new(FixedWindow::new(1, Duration::from_secs(60))?, 1)?;
/// let all = "*".to_string();
/// let (a, b) = ("a".to_string(), "b".to_string());
/// let now = Nanos::from_secs(1);
/// let first = check_all(&[Check { limiter: &per_client, key: &a, cost: 1 }, Check { limiter: &global, key: &all, cost: 1 }], now);
/// assert!(first.allowed);
/// let second = check_all(&[Check { limiter: &per_client, key: &b, cost: 1 }, Check { limiter: &global, key: &all, cost: 1 }], now);
/// assert!(!second.allowed);
/// // b was not charged by its own policy, since the global one said no
/// assert_eq!(per_client.peek("b", now, 0).remaining, 100);
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
pub fn check_all<K, A>(checks: &[Check<'_, K, A>], now: Nanos) -> MultiDecision
where
    K: Hash + Eq + Clone,
    A: Algorithm,
{
    // One check (the usual request: one policy) is exactly `KeyedLimiter::check`: decide,
    // and charge only when admitted; no lock ordering or cost-0 views to compute.
    if let [c] = checks {
        let d = c.limiter.check(c.key, now, c.cost);
        return MultiDecision {
            allowed: d.allowed,
            decisions: vec![d],
        };
    }
    struct Slot {
        hash: u64,
        lock: usize,
        /// Index of the first check with the same (limiter, key), if this is a duplicate.
        dup_of: Option<usize>,
        cost: u64,
    }
    let mut slots: Vec<Slot> = Vec::with_capacity(checks.len());
    let mut locks: Vec<(usize, usize)> = Vec::with_capacity(checks.len());
    for (i, c) in checks.iter().enumerate() {
        let hash = c.limiter.hash(c.key);
        let lock = (c.limiter as *const _ as usize, c.limiter.shard_index(hash));
        let dup_of = checks[..i]
            .iter()
            .position(|p| std::ptr::eq(p.limiter, c.limiter) && p.key == c.key);
        match dup_of {
            Some(j) => slots[j].cost = slots[j].cost.saturating_add(c.cost),
            None => locks.push(lock),
        }
        slots.push(Slot {
            hash,
            lock: 0,
            dup_of,
            cost: c.cost,
        });
    }
    locks.sort_unstable();
    locks.dedup();
    for (slot, c) in slots.iter_mut().zip(checks) {
        let lock = (
            c.limiter as *const _ as usize,
            c.limiter.shard_index(slot.hash),
        );
        slot.lock = locks.binary_search(&lock).unwrap_or(0);
    }
    // Lock in global order. Each entry's limiter is found from any check that uses it.
    let mut guards: Vec<_> = locks
        .iter()
        .map(|&(addr, shard)| {
            let c = checks
                .iter()
                .find(|c| c.limiter as *const _ as usize == addr)
                .expect("every lock comes from a check");
            c.limiter.shards[shard].0.lock()
        })
        .collect();

    let algs: Vec<_> = checks
        .iter()
        .zip(&slots)
        .map(|(c, slot)| {
            c.limiter
                .own_algorithm(c.key)
                .unwrap_or_else(|| guards[slot.lock].alg.clone())
        })
        .collect();
    let mut decisions = Vec::with_capacity(checks.len());
    let mut pendings = Vec::with_capacity(checks.len());
    for ((c, slot), alg) in checks.iter().zip(&slots).zip(&algs) {
        if let Some(j) = slot.dup_of {
            decisions.push(decisions[j]);
            pendings.push(None);
            continue;
        }
        let table = &guards[slot.lock].table;
        let fresh = A::State::default();
        let state = table
            .find(slot.hash, |(k, _)| k == c.key)
            .map_or(&fresh, |(_, s)| s);
        let (d, p) = alg.decide(state, now, slot.cost);
        decisions.push(d);
        pendings.push(p);
    }
    let allowed = decisions.iter().all(|d| d.allowed);
    if !allowed {
        for (((c, slot), alg), d) in checks
            .iter()
            .zip(&slots)
            .zip(&algs)
            .zip(decisions.iter_mut())
        {
            if d.allowed {
                let fresh = A::State::default();
                let state = guards[slot.lock]
                    .table
                    .find(slot.hash, |(k, _)| k == c.key)
                    .map_or(&fresh, |(_, s)| s);
                *d = alg.decide(state, now, 0).0;
            }
        }
        return MultiDecision { allowed, decisions };
    }
    for (((c, slot), alg), p) in checks.iter().zip(&slots).zip(&algs).zip(pendings) {
        let Some(p) = p else { continue };
        let guard = &mut guards[slot.lock];
        match guard.table.find_mut(slot.hash, |(k, _)| k == c.key) {
            Some((_, s)) => alg.apply(s, p),
            None => {
                let mut s = A::State::default();
                alg.apply(&mut s, p);
                c.limiter.insert(guard, slot.hash, c.key.clone(), s, now);
            }
        }
    }
    MultiDecision { allowed, decisions }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;
    use crate::algorithms::Gcra;

    #[test]
    fn one_check_decides_as_the_general_path_does() {
        // the one-check shortcut against two checks on distinct limiters with one of them
        // unlimited-ish: same decisions for the shared limiter, cost after cost
        let one: KeyedLimiter<u64, _> =
            KeyedLimiter::new(Gcra::new(Rate::per_second(1).unwrap(), 3).unwrap(), 10).unwrap();
        let two: KeyedLimiter<u64, _> =
            KeyedLimiter::new(Gcra::new(Rate::per_second(1).unwrap(), 3).unwrap(), 10).unwrap();
        let wide: KeyedLimiter<u64, _> = KeyedLimiter::new(
            Gcra::new(Rate::per_second(1000).unwrap(), 1000).unwrap(),
            10,
        )
        .unwrap();
        let k = 1;
        for (i, cost) in [1, 5, 2, 1, 1, 0, 3].into_iter().enumerate() {
            let now = Nanos::from_millis(i as u64 * 300);
            let a = check_all(
                &[Check {
                    limiter: &one,
                    key: &k,
                    cost,
                }],
                now,
            );
            let b = check_all(
                &[
                    Check {
                        limiter: &two,
                        key: &k,
                        cost,
                    },
                    Check {
                        limiter: &wide,
                        key: &k,
                        cost: 0,
                    },
                ],
                now,
            );
            assert_eq!(a.allowed, b.allowed, "step {i}");
            assert_eq!(a.decisions[0], b.decisions[0], "step {i}");
            assert_eq!(a.decisions.len(), 1);
        }
        assert_eq!(one.len(), two.len());
    }

    #[test]
    fn duplicates_are_charged_once_with_summed_cost() {
        let l: KeyedLimiter<u64, _> =
            KeyedLimiter::new(Gcra::new(Rate::per_second(1).unwrap(), 3).unwrap(), 10).unwrap();
        let k = 7;
        let r = check_all(
            &[
                Check {
                    limiter: &l,
                    key: &k,
                    cost: 2,
                },
                Check {
                    limiter: &l,
                    key: &k,
                    cost: 2,
                },
            ],
            Nanos::from_secs(1),
        );
        assert!(!r.allowed, "2 + 2 > 3");
        let r = check_all(
            &[
                Check {
                    limiter: &l,
                    key: &k,
                    cost: 1,
                },
                Check {
                    limiter: &l,
                    key: &k,
                    cost: 2,
                },
            ],
            Nanos::from_secs(1),
        );
        assert!(r.allowed);
        assert_eq!(l.peek(&k, Nanos::from_secs(1), 0).remaining, 0);
    }
}
