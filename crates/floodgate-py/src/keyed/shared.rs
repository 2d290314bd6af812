//! A `KeyedLimiter` whose keys are kept in Redis (`store=RedisStore(...)`): one policy
//! named `name` on the engine's decision store, decided by the engine's procedure with
//! its fault policy, so that every process (and a `floodgate proxy` with a policy of the
//! same name, algorithm and prefix) shares one count per key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate_core::Decision;
use floodgate_engine::decide::{self, Check, FaultPolicy, Role, Stores};
use floodgate_engine::fault::StoreFailure;
use floodgate_engine::settle::Reservation;
use floodgate_engine::store::{DecisionStore, PolicyInfo, StoreCheck};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::args::ConfigError;
use crate::errors::StoreUnavailable;
use crate::runtime;
use crate::store::PyRedisStore;

/// What a decision is when Redis cannot make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Admit (fail open, the proxy's default).
    Allow,
    /// Deny, retry after 1 s (fail closed).
    Deny,
    /// Raise `StoreUnavailable`.
    Raise,
}

impl OnFailure {
    pub fn parse(s: &str) -> PyResult<OnFailure> {
        match s {
            "allow" | "fail-open" => Ok(OnFailure::Allow),
            "deny" | "fail-closed" => Ok(OnFailure::Deny),
            "raise" => Ok(OnFailure::Raise),
            _ => Err(ConfigError::new_err(format!(
                "on_failure {s:?}: expected allow, deny or raise"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            OnFailure::Allow => "allow",
            OnFailure::Deny => "deny",
            OnFailure::Raise => "raise",
        }
    }
}

/// One policy kept in Redis.
pub struct Shared {
    store: Py<PyRedisStore>,
    info: Arc<PolicyInfo>,
    on_failure: OnFailure,
    /// The decision store of this process (a forked child makes its own).
    decisions: Mutex<Option<(u64, Arc<dyn DecisionStore>)>>,
}

/// Why a decision on Redis failed.
pub enum Failed {
    /// The store could not answer and `on_failure` is `raise`.
    Unavailable(String),
    /// The store refused the check (a key too long, say).
    Refused(String),
}

impl From<Failed> for PyErr {
    fn from(f: Failed) -> PyErr {
        match f {
            Failed::Unavailable(m) => StoreUnavailable::new_err(m),
            Failed::Refused(m) => PyValueError::new_err(m),
        }
    }
}

/// A decision (or a look, `peek`) on `store`.
pub async fn decide(
    store: Arc<dyn DecisionStore>,
    info: Arc<PolicyInfo>,
    on_failure: OnFailure,
    key: Vec<u8>,
    cost: u64,
    peek: bool,
) -> Result<Decision, Failed> {
    if peek {
        return match store.peek_cost(&info, &key, cost).await {
            Ok(d) => Ok(d),
            Err(e) if e.is_transient() && on_failure != OnFailure::Raise => {
                Ok(fault_policy(on_failure).decision(&info))
            }
            Err(e) if e.is_transient() => Err(Failed::Unavailable(e.to_string())),
            Err(e) => Err(Failed::Refused(e.to_string())),
        };
    }
    let checks = [Check {
        policy: &info,
        key: &key,
        cost,
        role: Role::Enforced,
    }];
    let mut fault = None;
    let stores = Stores {
        store: &*store,
        local: None,
    };
    let decided = decide::decide(stores, &fault_policy(on_failure), &checks, &mut |e| {
        fault = Some(e.to_string())
    })
    .await
    .map_err(|e| Failed::Refused(e.to_string()))?;
    if decided.fault.is_some() && on_failure == OnFailure::Raise {
        return Err(Failed::Unavailable(
            fault.unwrap_or_else(|| "the decision store failed".into()),
        ));
    }
    decided
        .decisions
        .first()
        .copied()
        .ok_or_else(|| Failed::Refused("the store returned no decision".into()))
}

/// A reservation of `cost` units on `store` (the engine's reserve: one round trip): the
/// decision and, when admitted by Redis, the reservation to settle. A Redis fault decides
/// by `on_failure` and reserves nothing (`None`), or is `Unavailable` under `raise`.
pub async fn reserve(
    store: Arc<dyn DecisionStore>,
    info: Arc<PolicyInfo>,
    on_failure: OnFailure,
    key: Vec<u8>,
    cost: u64,
) -> Result<(Decision, Option<Reservation>), Failed> {
    let checks = [StoreCheck {
        policy: &info,
        key: &key,
        cost,
    }];
    match store.reserve(&checks).await {
        Ok((multi, reservation)) => {
            let d = multi
                .decisions
                .first()
                .copied()
                .ok_or_else(|| Failed::Refused("the store returned no decision".into()))?;
            Ok((d, reservation))
        }
        Err(e) if e.is_transient() && on_failure != OnFailure::Raise => {
            Ok((fault_policy(on_failure).decision(&info), None))
        }
        Err(e) if e.is_transient() => Err(Failed::Unavailable(e.to_string())),
        Err(e) => Err(Failed::Refused(e.to_string())),
    }
}

fn fault_policy(on_failure: OnFailure) -> FaultPolicy {
    FaultPolicy {
        failure: match on_failure {
            OnFailure::Deny => StoreFailure::Deny,
            OnFailure::Allow | OnFailure::Raise => StoreFailure::Allow,
        },
        retry: Duration::from_secs(1),
    }
}

impl Shared {
    pub fn new(
        store: Py<PyRedisStore>,
        name: &str,
        limiter: &crate::limiter::PyLimiter,
        on_failure: OnFailure,
    ) -> PyResult<Shared> {
        let info = PolicyInfo::new(
            0,
            name.to_string(),
            limiter.spec.clone(),
            limiter.algorithm.clone(),
        );
        let policy = floodgate_http::policy::Policy::new(name, limiter.spec.clone());
        policy
            .validate()
            .map_err(|e| ConfigError::new_err(format!("name: {e}")))?;
        Ok(Shared {
            store,
            info: Arc::new(info),
            on_failure,
            decisions: Mutex::new(None),
        })
    }

    /// This process's decision store (connecting on first use). The lock is not held
    /// while connecting: that releases the GIL, which another thread waiting on the lock
    /// would hold.
    fn decisions(&self, py: Python<'_>) -> PyResult<Arc<dyn DecisionStore>> {
        let process = runtime::process();
        if let Some((p, s)) = self.lock().as_ref()
            && *p == process
        {
            return Ok(s.clone());
        }
        let shared = self.store.get().shared(py)?;
        let store = shared
            .decision_store(std::slice::from_ref(&self.info))
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        let mut g = self.lock();
        match g.as_ref() {
            // another thread connected meanwhile: one store per process
            Some((p, s)) if *p == process => Ok(s.clone()),
            _ => {
                if let Some(stale) = g.replace((process, store.clone())) {
                    // the parent's (inherited through fork): not dropped in this process
                    std::mem::forget(stale);
                }
                Ok(store)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u64, Arc<dyn DecisionStore>)>> {
        self.decisions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The decision's future (nothing borrowed).
    pub fn future(
        &self,
        py: Python<'_>,
        key: Vec<u8>,
        cost: u64,
        peek: bool,
    ) -> PyResult<impl std::future::Future<Output = Result<Decision, Failed>> + Send + 'static>
    {
        let store = self.decisions(py)?;
        Ok(decide(
            store,
            self.info.clone(),
            self.on_failure,
            key,
            cost,
            peek,
        ))
    }

    /// A decision, the GIL released while Redis answers.
    pub fn decide_now(
        &self,
        py: Python<'_>,
        key: Vec<u8>,
        cost: u64,
        peek: bool,
    ) -> PyResult<Decision> {
        let fut = self.future(py, key, cost, peek)?;
        Ok(runtime::block_on(py, fut)??)
    }

    /// Reserve `cost` units of `key` (see [`reserve`]), the GIL released while Redis
    /// answers.
    pub fn reserve_now(
        &self,
        py: Python<'_>,
        key: Vec<u8>,
        cost: u64,
    ) -> PyResult<(Decision, Option<Reservation>)> {
        let store = self.decisions(py)?;
        let fut = reserve(store, self.info.clone(), self.on_failure, key, cost);
        Ok(runtime::block_on(py, fut)??)
    }

    /// Settle `reservation` with `actual` units (one round trip), the GIL released. A
    /// Redis fault is `Unavailable` whatever `on_failure` says (a settle decides nothing;
    /// the estimate stays charged until a settle succeeds), a refusal (a debt that does
    /// not fit) `Refused`; either way the reservation comes back, to settle again.
    pub fn settle_now(
        &self,
        py: Python<'_>,
        reservation: Reservation,
        actual: u64,
    ) -> PyResult<Result<floodgate_core::Settlement, (Reservation, PyErr)>> {
        let store = self.decisions(py)?;
        let again = Reservation::from_parts(reservation.parts().to_vec());
        let out = runtime::block_on(py, async move { store.settle(reservation, actual).await })?;
        Ok(match out {
            Ok(settled) => match settled.into_iter().next() {
                Some(s) => Ok(s),
                None => Err((
                    again,
                    Failed::Refused("the store settled no part".into()).into(),
                )),
            },
            Err(e) if e.is_transient() => Err((again, Failed::Unavailable(e.to_string()).into())),
            Err(e) => Err((again, Failed::Refused(e.to_string()).into())),
        })
    }

    pub fn store(&self, py: Python<'_>) -> Py<PyRedisStore> {
        self.store.clone_ref(py)
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn repr_tail(&self) -> String {
        format!(
            ", store={}, name={:?}, on_failure={:?}",
            self.store.get().repr(),
            self.info.name,
            self.on_failure.name()
        )
    }
}
