//! Reserve and settle on a [`KeyedLimiter`], and on several at once.

use std::borrow::Borrow;
use std::hash::Hash;

use super::{Charge, Settle, SettleError, Settlement, settled};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::keyed::KeyedLimiter;
use crate::multi::{Check, MultiDecision, check_all};
use crate::time::Nanos;

/// An admitted request whose cost is not known yet: the key and what was charged.
///
/// Settle it once with [`KeyedLimiter::settle`], which takes it by value, so one
/// reservation cannot be settled twice. Dropping it unsettled keeps the estimate charged.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation is settled with its actual cost; dropping it keeps the estimate"]
pub struct Reservation<K> {
    key: K,
    charge: Charge,
}

impl<K> Reservation<K> {
    /// A reservation of `charge` on `key`, for a charge that crossed a wire (a server
    /// settling on behalf of a client). A forged charge can refund at most its `cost`,
    /// and only what of it is still counted against the key.
    pub fn from_parts(key: K, charge: Charge) -> Reservation<K> {
        Reservation { key, charge }
    }

    /// The key charged.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// What was charged.
    pub fn charge(&self) -> Charge {
        self.charge
    }

    /// The key and the charge.
    pub fn into_parts(self) -> (K, Charge) {
        (self.key, self.charge)
    }
}

impl<K, A> KeyedLimiter<K, A>
where
    K: Hash + Eq + Clone,
    A: Settle,
{
    /// [`check`](Self::check) at an `estimate`, returning the reservation to settle when
    /// admitted. An estimate of 0 charges nothing now (all at settle) and is admitted only
    /// while at least one unit is left ([`Settle::reserve`]).
    ///
    /// ```
    /// use floodgate_core::algorithms::TokenBucket;
    /// use floodgate_core::{KeyedLimiter, Nanos, Rate};
    ///
    /// // 1,000 tokens a minute; a request is estimated at 1 and used 300
    /// let budget = KeyedLimiter::new(TokenBucket::new(1_000, "1000/min".parse::<Rate>()?)?, 1_000)?;
    /// let now = Nanos::from_secs(1);
    /// let (decision, reservation) = budget.reserve("alice".to_string(), now, 1);
    /// assert!(decision.allowed);
    /// let settled = budget.settle(reservation.unwrap(), now, 300).unwrap();
    /// assert_eq!((settled.charged, settled.decision.remaining), (299, 700));
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn reserve(&self, key: K, now: Nanos, estimate: u64) -> (Decision, Option<Reservation<K>>) {
        if estimate == 0 {
            let probe = self.peek(&key, now, 1);
            if !probe.allowed {
                return (probe, None);
            }
        }
        let decision = self.check(&key, now, estimate);
        let reservation = decision.allowed.then_some(Reservation {
            key,
            charge: Charge {
                cost: estimate,
                at: now,
            },
        });
        (decision, reservation)
    }

    /// Settle `reservation` with its `actual` cost at `now` (see [`Settle`]).
    pub fn settle(
        &self,
        reservation: Reservation<K>,
        now: Nanos,
        actual: u64,
    ) -> Result<Settlement, SettleError> {
        self.settle_charge(&reservation.key, reservation.charge, now, actual)
    }

    /// Settle a charge on `key` given as its parts: for a charge that crossed a wire.
    /// A key no longer held (back at full capacity, or evicted) refunds nothing and
    /// takes a debt as a fresh key.
    pub fn settle_charge<Q>(
        &self,
        key: &Q,
        charge: Charge,
        now: Nanos,
        actual: u64,
    ) -> Result<Settlement, SettleError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hash(key);
        let own = self.own_algorithm(key);
        let mut guard = self.shards[self.shard_index(hash)].0.lock();
        let shard = &mut *guard;
        let alg: &A = own.as_deref().unwrap_or(&shard.alg);
        if let Some((_, state)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            return alg.settle(state, now, charge, actual);
        }
        let mut state = A::State::default();
        if actual <= charge.cost {
            return Ok(settled(alg, &state, now, 0, 0));
        }
        let alg = own.clone().unwrap_or_else(|| shard.alg.clone());
        let settlement = alg.settle(&mut state, now, charge, actual)?;
        self.insert(shard, hash, key.to_owned(), state, now);
        Ok(settlement)
    }
}

/// [`check_all`] at estimated costs, returning one reservation per check when admitted
/// (in the order of `checks`); settle each on its own limiter. A check at an estimate of
/// 0 is admitted only while its key has at least one unit left, as in
/// [`KeyedLimiter::reserve`].
pub fn reserve_all<K, A>(
    checks: &[Check<'_, K, A>],
    now: Nanos,
) -> (MultiDecision, Vec<Reservation<K>>)
where
    K: Hash + Eq + Clone,
    A: Algorithm,
{
    for c in checks.iter().filter(|c| c.cost == 0) {
        let probe = c.limiter.peek(c.key, now, 1);
        if !probe.allowed {
            let decisions = checks
                .iter()
                .map(|o| {
                    if std::ptr::eq(o, c) {
                        probe
                    } else {
                        o.limiter.peek(o.key, now, 0)
                    }
                })
                .collect();
            return (
                MultiDecision {
                    allowed: false,
                    decisions,
                },
                Vec::new(),
            );
        }
    }
    let decision = check_all(checks, now);
    let reservations = if decision.allowed {
        checks
            .iter()
            .map(|c| Reservation {
                key: c.key.clone(),
                charge: Charge {
                    cost: c.cost,
                    at: now,
                },
            })
            .collect()
    } else {
        Vec::new()
    };
    (decision, reservations)
}
