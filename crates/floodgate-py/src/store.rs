//! `floodgate.RedisStore`: where decisions are kept when several processes share one
//! limit: the engine's Redis store (the same scripts and key layout as
//! `floodgate proxy` with `[store] type = "redis"`), given to a `RequestLimiter` or a
//! `KeyedLimiter` as `store=`.
//!
//! The connection is opened on first use in each process (a forked child opens its own)
//! and kept; it reconnects on its own. A Redis that does not answer yet is not an error:
//! decisions follow the limiter's fault policy until it does.

use std::sync::Mutex;

use floodgate_engine::SharedStore;
use floodgate_redis::StoreConfig;
use pyo3::prelude::*;

use crate::args::{ConfigError, config_seconds, py_float};
use crate::runtime;

/// Decisions kept in Redis, shared by every process that names the same URL, prefix and
/// policy name (a `floodgate proxy` with the same `[store.redis]` among them).
#[pyclass(name = "RedisStore", module = "floodgate", frozen)]
pub struct PyRedisStore {
    url: String,
    config: StoreConfig,
    shared: Mutex<Option<(u64, SharedStore)>>,
}

impl PyRedisStore {
    /// The connection of this process: opened on first use (again after a fork), the
    /// lock not held meanwhile (connecting releases the GIL). A Redis
    /// that cannot be reached is not an error (it connects in the background); a URL
    /// that cannot work is a `ConfigError`.
    pub(crate) fn shared(&self, py: Python<'_>) -> PyResult<SharedStore> {
        let process = runtime::process();
        if let Some((p, s)) = self.lock().as_ref()
            && *p == process
        {
            return Ok(s.clone());
        }
        let (url, config) = (self.url.clone(), self.config.clone());
        let connected = runtime::block_on(py, async move {
            SharedStore::connect_or_retry(&url, config, None).await
        })?;
        let (store, _unreachable) =
            connected.map_err(|e| ConfigError::new_err(format!("RedisStore url: {e}")))?;
        let mut guard = self.lock();
        match guard.as_ref() {
            // another thread connected meanwhile: one connection per process
            Some((p, s)) if *p == process => Ok(s.clone()),
            _ => {
                if let Some(stale) = guard.replace((process, store.clone())) {
                    // the parent's connection (inherited through fork) lives on the
                    // parent's runtime: dropping it here could wait on threads this
                    // process lacks
                    std::mem::forget(stale);
                }
                Ok(store)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u64, SharedStore)>> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key prefix.
    pub(crate) fn prefix_str(&self) -> &str {
        &self.config.prefix
    }
}

#[pymethods]
impl PyRedisStore {
    /// `url`: `redis://[user:pass@]host:port[/db]` or `rediss://`. `prefix`: put before
    /// every key, without `{` or `}` (the proxy's `store.redis.prefix`, default
    /// `"floodgate:"`). `timeout_s`: the longest a decision waits for Redis (default
    /// 0.05, the proxy's); `connect_timeout_s`: to connect (default 1.0).
    #[new]
    #[pyo3(signature = (url="redis://127.0.0.1:6379", *, prefix="floodgate:", timeout_s=0.05, connect_timeout_s=1.0))]
    fn new(url: &str, prefix: &str, timeout_s: f64, connect_timeout_s: f64) -> PyResult<Self> {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(ConfigError::new_err(
                "url: expected a redis://host:port or rediss://host:port URL",
            ));
        }
        if prefix.contains(['{', '}']) {
            return Err(ConfigError::new_err(format!(
                "prefix {prefix:?} must not contain {{ or }} (they choose a Redis Cluster slot)"
            )));
        }
        let timeout = config_seconds(timeout_s, "timeout_s")?;
        let connect_timeout = config_seconds(connect_timeout_s, "connect_timeout_s")?;
        Ok(PyRedisStore {
            url: url.to_string(),
            config: StoreConfig {
                prefix: prefix.to_string(),
                timeout,
                connect_timeout,
                ..StoreConfig::default()
            },
            shared: Mutex::new(None),
        })
    }

    /// Whether Redis answers now (connecting first, in this process, when not yet).
    fn reachable(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.shared(py)?.reachable())
    }

    /// The key prefix.
    #[getter]
    fn prefix(&self) -> &str {
        self.prefix_str()
    }

    fn __repr__(&self) -> String {
        self.repr()
    }
}

impl PyRedisStore {
    /// `RedisStore(prefix=..., timeout_s=...)`.
    pub(crate) fn repr(&self) -> String {
        format!(
            "RedisStore(prefix={:?}, timeout_s={})",
            self.config.prefix,
            py_float(self.config.timeout.as_secs_f64())
        )
    }
}
