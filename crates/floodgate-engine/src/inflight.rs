//! In-flight (concurrency) limits for every surface: the policy ([`LeasePolicy`], its
//! [`InFlightSpec`]) and the in-process store's lease tables ([`LocalLeases`]).
//! [`crate::leases`] takes leases through any store (waiting in a bounded queue) and gives
//! them back; `redis_leases` (feature `redis`) keeps them in Redis.
//!
//! A `max_in_flight = N` policy admits at most `N` requests of one key at once: a request
//! takes a lease before it is forwarded and gives it back when its response body ends,
//! fails or is dropped (the client went away, a timeout). Each lease expires after the
//! policy's TTL, so a node that dies holding leases frees them within the TTL.
//!
//! # With rate policies: all-or-nothing
//! The leases of a request are acquired **first**, then the rate policies are checked; a
//! request the rate policies deny gives its leases back at once. So a request denied
//! for concurrency is never charged a rate token, and a request denied by a rate holds
//! no lease. The cost of this order: between the acquire and the release of a
//! rate-denied request (one rate check: microseconds in process, one round trip on
//! Redis) its lease counts, so another request may find the key full and be denied (or
//! queued) when it would have been admitted a moment later. It errs on the safe side:
//! never more than `N` in flight.
//!
//! The order is [`crate::leases::leases_then_rates`]: every surface (the tower layer, the
//! server's HTTP door) runs it over its own [`crate::leases::LeasesAndRates`].
//!
//! # The queue
//! With `queue = M`, up to `M` requests per policy on this node wait for a place instead
//! of being answered 429 at once, each at most `queue_timeout` (HAProxy's `maxconn`
//! queue). A waiter retries when a lease of the policy is released on this node, and at
//! the earliest lease's expiry, and at least every [`QUEUE_POLL`] (a release on another
//! node of a fleet is not signalled). Past the timeout: 429 with `Retry-After`; a full
//! queue: 429 at once. The queue is per node, not fleet-wide: no order holds across
//! nodes.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use floodgate_core::inflight::{KeyedInFlight, Lease, LeaseId, LeaseTtl, check_limit};
use floodgate_core::{Clock, ConfigError, Decision};
use prometheus_client::metrics::gauge::Gauge;
use std::sync::RwLock;

use crate::fault::StoreError;

/// The longest a queued request waits between two tries.
pub const QUEUE_POLL: Duration = Duration::from_millis(5);

/// The lease TTL of a `max_in_flight` limit that names none (the proxy's policies, the
/// server's rules and adaptive policies): a lease not released frees its place after it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The longest queue timeout accepted.
pub const MAX_QUEUE_TIMEOUT: Duration = Duration::from_secs(3600);

/// What a `max_in_flight` policy says: `N`, the lease TTL, the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightSpec {
    /// `N`: the most requests of one key in flight at once.
    pub limit: u64,
    /// How long a lease lives unless renewed or released.
    pub ttl: LeaseTtl,
    /// Requests that may wait for a place on this node (0: none wait; denied at once).
    pub queue: usize,
    /// The longest a request waits in the queue.
    pub queue_timeout: Duration,
}

impl InFlightSpec {
    /// `limit` in flight, leases of `ttl`, no queue. `limit` 0, `ttl` 0 or above a day
    /// are errors naming the value.
    pub fn new(limit: u64, ttl: Duration) -> Result<InFlightSpec, ConfigError> {
        Ok(InFlightSpec {
            limit: check_limit(limit)?,
            ttl: LeaseTtl::new(ttl)?,
            queue: 0,
            queue_timeout: Duration::ZERO,
        })
    }

    /// Let up to `queue` requests wait up to `timeout` each for a place. A queue with a
    /// zero timeout, or a timeout above [`MAX_QUEUE_TIMEOUT`], is an error.
    pub fn with_queue(mut self, queue: usize, timeout: Duration) -> Result<Self, ConfigError> {
        if queue > 0 && timeout.is_zero() {
            return Err(ConfigError::Zero {
                what: "queue_timeout (with a queue)",
            });
        }
        if timeout > MAX_QUEUE_TIMEOUT {
            return Err(ConfigError::Overflow {
                what: "queue_timeout",
                detail: format!("{timeout:?} is above the maximum of {MAX_QUEUE_TIMEOUT:?}"),
            });
        }
        self.queue = queue;
        self.queue_timeout = timeout;
        Ok(self)
    }
}

/// A `max_in_flight` policy as the stores and the guards know it. Shared (`Arc`) by the
/// limiter and every lease it holds.
#[derive(Debug)]
pub struct LeasePolicy {
    /// The policy's index among the limiter's policies.
    pub index: usize,
    /// Its name (also part of the Redis key).
    pub name: String,
    /// `N`, TTL, queue.
    pub spec: InFlightSpec,
    /// Requests waiting in this policy's queue on this node.
    pub(crate) waiting: AtomicUsize,
    /// Woken when a lease of this policy is released on this node.
    pub(crate) released: tokio::sync::Notify,
    /// Leases held through this node (`floodgate_inflight_leases{policy}`), once the
    /// metrics are attached.
    gauge: OnceLock<Gauge>,
    /// Requests held now on this node (`floodgate_waiting_requests`, shared with the
    /// leaky queues' delays), once the metrics are attached.
    waiting_gauge: OnceLock<Gauge>,
    /// Leases held through this node.
    held: AtomicI64,
}

impl LeasePolicy {
    /// The policy at `index` named `name`.
    pub fn new(index: usize, name: String, spec: InFlightSpec) -> LeasePolicy {
        LeasePolicy {
            index,
            name,
            spec,
            waiting: AtomicUsize::new(0),
            released: tokio::sync::Notify::new(),
            gauge: OnceLock::new(),
            waiting_gauge: OnceLock::new(),
            held: AtomicI64::new(0),
        }
    }

    /// Count the requests waiting in this policy's queue in `gauge` too (the metrics'
    /// `floodgate_waiting_requests`); the first gauge attached stays.
    pub fn attach_waiting_gauge(&self, gauge: Gauge) {
        if self.waiting_gauge.set(gauge.clone()).is_ok() {
            gauge.inc_by(self.waiting() as i64);
        }
    }

    /// Enter the queue: `false` (and nothing counted) when `spec.queue` requests already
    /// wait on this node. Every `true` is followed by one [`leave_queue`](Self::leave_queue).
    pub(crate) fn enter_queue(&self) -> bool {
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.spec.queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        if let Some(g) = self.waiting_gauge.get() {
            g.inc();
        }
        true
    }

    /// Leave the queue entered by [`enter_queue`](Self::enter_queue).
    pub(crate) fn leave_queue(&self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        if let Some(g) = self.waiting_gauge.get() {
            g.dec();
        }
    }

    /// Count this policy's leases in `gauge` too (the metrics' per-policy gauge); the
    /// first gauge attached stays.
    pub fn attach_gauge(&self, gauge: Gauge) {
        gauge.set(self.held());
        let _ = self.gauge.set(gauge);
    }

    /// Leases held through this node now.
    pub fn held(&self) -> i64 {
        self.held.load(Ordering::Relaxed)
    }

    pub(crate) fn count(&self, delta: i64) {
        self.held.fetch_add(delta, Ordering::Relaxed);
        if let Some(g) = self.gauge.get() {
            g.inc_by(delta);
        }
    }

    /// Requests waiting in the queue on this node now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The user key under which a store keeps `key`'s leases: name, 0x1f, key (the rate
    /// policies' form).
    pub fn user_key(&self, key: &[u8]) -> Vec<u8> {
        let mut user = Vec::with_capacity(self.name.len() + 1 + key.len());
        user.extend_from_slice(self.name.as_bytes());
        user.push(0x1f);
        user.extend_from_slice(key);
        user
    }
}

/// What a store answers to an acquire: the lease, or the denial.
pub type Acquired = Result<Lease, Decision>;

/// A lease operation of [`DecisionStore::lease`](crate::store::DecisionStore::lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    /// Take a lease for the policy's TTL.
    Acquire,
    /// Extend a live lease by the policy's TTL from now.
    Renew(LeaseId),
    /// Give a lease back.
    Release(LeaseId),
}

/// A store's answer to a [`LeaseOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// To [`LeaseOp::Acquire`].
    Acquired(Acquired),
    /// To renew and release: whether the lease was live (and is now renewed or freed).
    Done(bool),
}

impl LeaseAnswer {
    /// The acquire's answer; a store answering an acquire with [`LeaseAnswer::Done`]
    /// (a bug) is a refusal.
    pub fn acquired(self, store: &'static str) -> Result<Acquired, StoreError> {
        match self {
            LeaseAnswer::Acquired(a) => Ok(a),
            LeaseAnswer::Done(_) => {
                Err(StoreError::refused(store, "acquire answered as a release"))
            }
        }
    }

    /// The renew's or release's answer (an acquire's: whether it was granted).
    pub fn done(self) -> bool {
        match self {
            LeaseAnswer::Acquired(a) => a.is_ok(),
            LeaseAnswer::Done(b) => b,
        }
    }
}

/// One table per policy index, each made on its first use.
#[derive(Debug)]
pub(crate) struct Tables<T>(RwLock<Vec<Option<Arc<T>>>>);

impl<T> Default for Tables<T> {
    fn default() -> Self {
        Tables(RwLock::new(Vec::new()))
    }
}

impl<T> Tables<T> {
    /// The table of policy `index`, made by `make` if there is none yet.
    pub(crate) fn get(
        &self,
        index: usize,
        make: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<Arc<T>, StoreError> {
        let read = self.0.read().unwrap_or_else(|p| p.into_inner());
        if let Some(Some(t)) = read.get(index) {
            return Ok(t.clone());
        }
        drop(read);
        let mut write = self.0.write().unwrap_or_else(|p| p.into_inner());
        if write.len() <= index {
            write.resize(index + 1, None);
        }
        if let Some(t) = &write[index] {
            return Ok(t.clone());
        }
        let t = Arc::new(make()?);
        write[index] = Some(t.clone());
        Ok(t)
    }
}

/// The in-process store's lease tables: one [`KeyedInFlight`] per policy, made on its
/// first acquire.
#[derive(Debug, Default)]
pub struct LocalLeases {
    tables: Tables<KeyedInFlight<Vec<u8>>>,
    max_keys: usize,
}

impl LocalLeases {
    /// Tables holding at most `max_keys` keys each.
    pub fn new(max_keys: usize) -> LocalLeases {
        LocalLeases {
            tables: Tables::default(),
            max_keys: max_keys.max(1),
        }
    }

    fn table(&self, policy: &LeasePolicy) -> Result<Arc<KeyedInFlight<Vec<u8>>>, StoreError> {
        self.tables.get(policy.index, || {
            KeyedInFlight::new(policy.spec.limit, self.max_keys).map_err(|e| {
                StoreError::refused("memory", format!("policy {:?}: {e}", policy.name))
            })
        })
    }

    /// Run `op` at `clock`'s now.
    pub fn lease(
        &self,
        policy: &LeasePolicy,
        key: &[u8],
        op: LeaseOp,
        clock: &dyn Clock,
    ) -> Result<LeaseAnswer, StoreError> {
        let t = self.table(policy)?;
        let (now, ttl) = (clock.now(), policy.spec.ttl);
        Ok(match op {
            LeaseOp::Acquire => LeaseAnswer::Acquired(t.acquire(key, now, ttl)),
            LeaseOp::Renew(id) => LeaseAnswer::Done(t.renew(key, id, now, ttl)),
            LeaseOp::Release(id) => LeaseAnswer::Done(t.release(key, id, now)),
        })
    }
}
