//! [`StoreSettings`]: `[store]` resolved (defaults applied), and the one way floodgate
//! proxy and floodgate server open their store from it ([`StoreSettings::open`]).

use std::sync::Arc;

use super::{RedisSection, StoreKind, StoreSection};
use crate::decide::FaultPolicy;
use crate::shared_store::{HybridLeases, SharedStore};
use crate::store::{DecisionStore, PolicyInfo};
use crate::{StoreError, StoreFailure};

/// Keys of floodgate server's RESP door (`CL.THROTTLE`) when `store.resp_max_keys` is not
/// given.
pub const DEFAULT_RESP_MAX_KEYS: usize = 1_000_000;

/// Where decisions are made, as `[store]` resolves: every default applied. Two settings
/// are equal exactly when they open the same store (a reload compares them to tell
/// whether the store would have to be opened again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSettings {
    /// In process.
    Memory {
        /// Keys per policy (server: per limit), at least 1.
        max_keys: usize,
        /// Keys of floodgate server's `CL.THROTTLE`, at least 1 (the proxy refuses the
        /// key, so it is the default there).
        resp_max_keys: usize,
    },
    /// On Redis, shared by every process using it.
    Redis {
        /// `[store.redis]`: URL, prefix, timeouts, breaker, deny cache, clock, module and
        /// fault policy.
        redis: RedisSection,
        /// `store.max_keys`: under the fleet's `hybrid` strategy, the most leases held in
        /// process at once.
        max_keys: usize,
    },
}

impl StoreSection {
    /// The section resolved: defaults applied.
    pub fn settings(&self) -> StoreSettings {
        match self.kind {
            StoreKind::Memory => StoreSettings::Memory {
                max_keys: self.max_keys(),
                resp_max_keys: self.resp_max_keys.unwrap_or(DEFAULT_RESP_MAX_KEYS),
            },
            StoreKind::Redis => StoreSettings::Redis {
                redis: self.redis(),
                max_keys: self.max_keys(),
            },
        }
    }
}

impl StoreSettings {
    /// Keys per policy in process (the hybrid strategy: most leases held).
    pub fn max_keys(&self) -> usize {
        match self {
            StoreSettings::Memory { max_keys, .. } | StoreSettings::Redis { max_keys, .. } => {
                *max_keys
            }
        }
    }

    /// What a request gets when the store cannot decide: on Redis, `fault_policy` (a
    /// fail-closed denial retried after the breaker's `breaker_open_for`); in process the
    /// store always decides, and the default (fail open, 1 s) stands.
    pub fn fault_policy(&self) -> FaultPolicy {
        match self {
            StoreSettings::Memory { .. } => FaultPolicy::default(),
            StoreSettings::Redis { redis, .. } => FaultPolicy {
                failure: redis.fault_policy,
                retry: redis.breaker_open_for,
            },
        }
    }

    /// The fault policy's admit-or-deny alone.
    pub fn store_failure(&self) -> StoreFailure {
        self.fault_policy().failure
    }

    /// Open the store. In process nothing is opened: the surface builds its
    /// [`LocalStore`](crate::LocalStore) with [`OpenedStore::max_keys`] keys per policy,
    /// taking over the state of the policies it keeps. On Redis, connect (with the
    /// `hybrid` strategy's leases when `hybrid` is given, at most
    /// [`max_keys`](Self::max_keys) of them held at once). A Redis that does not answer
    /// yet is not an error: it is logged as a warning naming `surface` (`proxy`,
    /// `server`), decisions follow the fault policy until it answers, and the connection
    /// is made in the background. `Err` is a URL or setting that cannot work (it names
    /// the URL without its password).
    pub async fn open(
        &self,
        hybrid: Option<HybridLeases>,
        surface: &str,
    ) -> Result<OpenedStore, floodgate_redis::Error> {
        let (redis, max_keys) = match self {
            StoreSettings::Memory { max_keys, .. } => {
                return Ok(OpenedStore::Memory {
                    max_keys: *max_keys,
                });
            }
            StoreSettings::Redis { redis, max_keys } => (redis, *max_keys),
        };
        let hybrid = hybrid.map(|h| HybridLeases {
            max_leases: max_keys,
            ..h
        });
        let (shared, unreachable) =
            SharedStore::connect_or_retry(&redis.url, redis.store_config(), hybrid).await?;
        if let Some(e) = unreachable {
            tracing::warn!(
                error = %e,
                fault_policy = ?redis.fault_policy,
                "Redis does not answer: starting anyway; decisions follow the fault policy until it does, and the {surface} connects in the background"
            );
        }
        Ok(OpenedStore::Shared {
            store: shared,
            fault: self.fault_policy(),
        })
    }
}

/// A store [`StoreSettings::open`] opened, kept for the life of the process: asked for a
/// [`DecisionStore`] for each list of policies (each generation of a reloaded config).
#[derive(Debug, Clone)]
pub enum OpenedStore {
    /// In process, at most `max_keys` keys per policy.
    Memory {
        /// Keys per policy, at least 1.
        max_keys: usize,
    },
    /// On Redis: every decision shared, or the `hybrid` strategy's leases.
    Shared {
        /// The connection, and how decisions are made on it.
        store: SharedStore,
        /// What a request gets when Redis cannot decide.
        fault: FaultPolicy,
    },
}

impl OpenedStore {
    /// Keys per policy in process.
    pub fn max_keys(&self) -> Option<usize> {
        match self {
            OpenedStore::Memory { max_keys } => Some(*max_keys),
            OpenedStore::Shared { .. } => None,
        }
    }

    /// What a request gets when the store cannot decide
    /// ([`StoreSettings::fault_policy`]).
    pub fn fault_policy(&self) -> FaultPolicy {
        match self {
            OpenedStore::Memory { .. } => FaultPolicy::default(),
            OpenedStore::Shared { fault, .. } => *fault,
        }
    }

    /// The shared store (`None` in process).
    pub fn shared(&self) -> Option<&SharedStore> {
        match self {
            OpenedStore::Memory { .. } => None,
            OpenedStore::Shared { store, .. } => Some(store),
        }
    }

    /// The decision store on Redis for `policies` (in index order) with its name
    /// (`redis` or `hybrid`); `None` in process, where the surface builds its
    /// [`LocalStore`](crate::LocalStore) with its limiters. `Err` names a policy the store
    /// cannot keep (the hybrid store refuses a delaying leaky queue, for one).
    #[allow(clippy::type_complexity)]
    pub fn decision_store(
        &self,
        policies: &[PolicyInfo],
    ) -> Result<Option<(Arc<dyn DecisionStore>, &'static str)>, StoreError> {
        match self {
            OpenedStore::Memory { .. } => Ok(None),
            OpenedStore::Shared { store, .. } => {
                Ok(Some((store.decision_store(policies)?, store.name())))
            }
        }
    }
}
