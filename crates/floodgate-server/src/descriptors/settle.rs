//! Reserve and settle over the wire: the HTTP API's `/v1/reserve` and `/v1/settle`, and
//! the RESP door's `FG.RESERVE` and `FG.SETTLE`, on one policy and key (the key form of
//! `/v1/check`). A reservation is held here under a random 63-bit id until it is settled
//! once, or until [`RESERVATION_TTL`] has passed (then it keeps its estimate, as if its
//! holder had crashed); at most [`MAX_RESERVATIONS`] are held, the oldest given up first.
//! Settling an id that is unknown, expired or settled already is an error that changes
//! nothing. The rules of debt and refunds are the core's ([`floodgate_core::settle`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floodgate_engine::{Reservation, Settled, StoreCheck};

use super::decide::Item;
use super::error::CheckError;
use super::generation::Generation;
use super::{Engine, Matched, Outcome, Status};
use crate::headers;

/// How long an unsettled reservation is held.
pub const RESERVATION_TTL: Duration = Duration::from_secs(600);
/// The most reservations held at once.
pub const MAX_RESERVATIONS: usize = 100_000;

struct Held {
    reservation: Reservation,
    /// The generation that reserved it (its store, whose policy indices it names).
    generation: Arc<Generation>,
    at: Instant,
}

/// Reservations not settled yet, by id.
#[derive(Default)]
pub struct Reservations {
    inner: Mutex<(HashMap<u64, Held>, VecDeque<u64>)>,
}

impl std::fmt::Debug for Reservations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservations").finish_non_exhaustive()
    }
}

impl Reservations {
    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<u64, Held>, VecDeque<u64>)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hold(&self, held: Held) -> u64 {
        let mut g = self.lock();
        let (map, order) = &mut *g;
        while map.len() >= MAX_RESERVATIONS
            || order
                .front()
                .is_some_and(|id| map.get(id).is_none_or(|h| h.at.elapsed() > RESERVATION_TTL))
        {
            let Some(old) = order.pop_front() else { break };
            map.remove(&old);
        }
        let mut id = fastrand::u64(1..i64::MAX as u64);
        while map.contains_key(&id) {
            id = fastrand::u64(1..i64::MAX as u64);
        }
        map.insert(id, held);
        order.push_back(id);
        id
    }

    fn take(&self, id: u64) -> Option<Held> {
        let held = self.lock().0.remove(&id)?;
        (held.at.elapsed() <= RESERVATION_TTL).then_some(held)
    }
}

/// Why a settle over the wire did nothing.
#[derive(Debug, thiserror::Error)]
pub enum SettleCallError {
    /// No reservation has this id: never made, settled already, or expired.
    #[error(
        "unknown reservation {id}: never made, settled already, or held longer than {ttl} s",
        ttl = RESERVATION_TTL.as_secs()
    )]
    Unknown {
        /// The id given.
        id: u64,
    },
    /// The store refused or failed the settle.
    #[error("store: {0}")]
    Store(floodgate_engine::StoreError),
}

impl Engine {
    /// Admit `key` under the named policy at an `estimate`: the outcome, and when it was
    /// admitted with a reservation, its id (none when the store failed and the fault
    /// policy let the request through, or for a blocking limit).
    pub async fn reserve_policy(
        &self,
        policy: &str,
        key: &str,
        estimate: u64,
    ) -> Result<(Outcome, Option<u64>), CheckError> {
        let generation = self.current();
        let limit = match generation.policies.get(policy) {
            Some(l) if !l.blocks() => l.clone(),
            _ => return Ok((self.check_policy(policy, key, estimate).await?, None)),
        };
        if key.len() > generation.rules.caps.max_value_bytes {
            return Ok((self.check_policy(policy, key, estimate).await?, None));
        }
        let k = limit.key(generation.shared_keyspace, |k| {
            k.extend_from_slice(key.as_bytes())
        });
        let check = [StoreCheck {
            policy: &limit.policy,
            key: &k,
            cost: estimate,
        }];
        let (decision, reservation, fault) = match generation.store.reserve(&check).await {
            Ok((d, r)) => (d.decisions[0], r, None),
            // the fault policy decides; nothing is reserved, so nothing can be settled
            Err(e) => {
                let failure = super::decide::fault(e, &self.fault, &self.metrics)?;
                (self.fault.decision(&limit.policy), None, Some(failure))
            }
        };
        let counters = &generation.policy_counters[policy];
        if decision.allowed {
            counters.passed.inc();
        } else {
            counters.rejected.inc();
        }
        let mut item = Item::new(0, limit.clone(), k, estimate, false);
        item.decision = decision;
        super::count_decisions(std::slice::from_ref(&item), decision.allowed);
        let over_limit = !decision.allowed;
        let outcome = Outcome {
            over_limit,
            statuses: vec![Status {
                over_limit,
                matched: Matched::Limited,
                shadow: false,
                limits: vec![(limit.clone(), decision)],
            }],
            headers: headers::render(
                &generation.rules.headers,
                &[(&limit.policy, decision)],
                over_limit,
            ),
            delay: std::time::Duration::ZERO,
            fault,
        };
        let id = reservation.map(|reservation| {
            self.reservations.hold(Held {
                reservation,
                generation: generation.clone(),
                at: Instant::now(),
            })
        });
        Ok((outcome, id))
    }

    /// Settle reservation `id` with its `actual` cost: one settlement per policy reserved.
    pub async fn settle_reservation(
        &self,
        id: u64,
        actual: u64,
    ) -> Result<Settled, SettleCallError> {
        let held = self
            .reservations
            .take(id)
            .ok_or(SettleCallError::Unknown { id })?;
        held.generation
            .store
            .settle(held.reservation, actual)
            .await
            .map_err(SettleCallError::Store)
    }
}
