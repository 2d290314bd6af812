//! `floodgate.throttle`: redis-cell's `CL.THROTTLE` on any Redis (no module), through
//! [`floodgate_redis::RedisStore::throttle`]: one atomic GCRA script per call on Redis
//! `TIME`, the same five integers as redis-cell.
//!
//! The process's runtime ([`crate::runtime`]) drives the connections; a connection per
//! `(url, prefix)` is opened on first use and kept (it reconnects on its own). Each call
//! has its own timeout, applied here around the store's call. A forked child (gunicorn,
//! multiprocessing) opens its own connections: the parent's cannot be used across a fork.
//! The GIL is released for the whole call (connect and round trip), so other Python threads
//! run while one waits for Redis.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate_redis::{Error as StoreError, RedisStore, StoreConfig, ThrottleArgs};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::args::{ConfigError, Quantity, key_bytes, seconds, uint};
use crate::runtime;

pyo3::create_exception!(
    floodgate,
    RedisError,
    PyConnectionError,
    "Redis could not answer: unreachable, not Redis, an error reply, or a broken connection \
     (a subclass of ConnectionError)."
);
pyo3::create_exception!(
    floodgate,
    RedisTimeoutError,
    RedisError,
    "Redis did not answer within the call's timeout (a subclass of RedisError)."
);

/// Where a connection goes: the cache key of [`Process::stores`].
#[derive(Clone, PartialEq, Eq, Hash)]
struct Target {
    url: String,
    prefix: String,
}

/// The store's own per-call timeout: never the one that fires, since every call is
/// wrapped in the caller's `timeout_s` (so one connection serves every timeout).
const STORE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The connections opened in one process, by target.
type Stores = HashMap<Target, Arc<RedisStore>>;

/// The connections of one process (the `runtime::process` they were opened in).
static STORES: Mutex<Option<(u64, Stores)>> = Mutex::new(None);

/// The cached store for `target`, if this process opened one.
fn lookup(target: &Target) -> Option<Arc<RedisStore>> {
    let guard = STORES.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some((p, stores)) if *p == runtime::process() => stores.get(target).cloned(),
        _ => None,
    }
}

fn remember(target: Target, store: Arc<RedisStore>) -> Arc<RedisStore> {
    let mut guard = STORES.lock().unwrap_or_else(|e| e.into_inner());
    let process = runtime::process();
    if guard.as_ref().is_none_or(|(p, _)| *p != process) {
        // another process's connections (inherited through fork) are not used: dropping
        // them would need the parent's runtime
        if let Some(stale) = guard.replace((process, HashMap::new())) {
            std::mem::forget(stale);
        }
    }
    let (_, stores) = guard.as_mut().expect("set above");
    stores.entry(target).or_insert(store).clone()
}

enum Failure {
    Store(StoreError),
    Runtime(String),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::Store(e)
    }
}

fn to_py(f: Failure) -> PyErr {
    match f {
        Failure::Runtime(msg) => PyRuntimeError::new_err(msg),
        Failure::Store(e) => match e {
            StoreError::Timeout { .. } => RedisTimeoutError::new_err(e.to_string()),
            StoreError::Config(_) => ConfigError::new_err(e.to_string()),
            e if e.is_fault() => RedisError::new_err(e.to_string()),
            e => PyValueError::new_err(e.to_string()),
        },
    }
}

fn call(
    target: Target,
    timeout: Duration,
    key: &[u8],
    args: &ThrottleArgs,
) -> Result<[i64; 5], Failure> {
    let handle = runtime::handle().map_err(|e| Failure::Runtime(e.to_string()))?;
    let store = match lookup(&target) {
        Some(s) => s,
        None => {
            let config = StoreConfig {
                prefix: target.prefix.clone(),
                timeout: STORE_TIMEOUT,
                ..StoreConfig::default()
            };
            let s = handle.block_on(RedisStore::connect(&target.url, config))?;
            remember(target, Arc::new(s))
        }
    };
    // The round trip, bounded by this call's timeout.
    handle.block_on(async {
        match tokio::time::timeout(timeout, store.throttle(key, args)).await {
            Ok(reply) => Ok(reply?),
            Err(_) => Err(StoreError::Timeout { after: timeout }.into()),
        }
    })
}

/// `CL.THROTTLE key max_burst count period [quantity]` on the Redis at `url`, without the
/// redis-cell module: returns redis-cell's five integers
/// `(limited, limit, remaining, retry_after_s, reset_after_s)`: `limited` is 0 or 1,
/// `limit` is `max_burst + 1`, `retry_after_s` is -1 when allowed, durations are whole
/// seconds truncated as the module truncates them (3.9 s is 3). `count` requests per
/// `period` seconds; `quantity` 0 only looks.
///
/// The Redis key is `prefix + "{tag}gcra:" + key` and expires when the key is back at full
/// capacity. Time is Redis `TIME`, so every client agrees. Raises `ValueError` for bad
/// arguments (as redis-cell refuses them: `count` or `period` 0, negatives), `TypeError`
/// for a key that is not str/bytes, `floodgate.RedisTimeoutError` when Redis does not
/// answer within `timeout_s` (the connection, opened on first use, has its own 1 s
/// limit), `floodgate.RedisError` when it cannot be reached.
#[pyfunction]
#[pyo3(signature = (key, max_burst, count, period, quantity=Quantity(1), url="redis://127.0.0.1:6379", *, prefix="floodgate:", timeout_s=0.25))]
#[allow(clippy::too_many_arguments)]
pub fn throttle(
    py: Python<'_>,
    key: &Bound<'_, PyAny>,
    max_burst: &Bound<'_, PyAny>,
    count: &Bound<'_, PyAny>,
    period: &Bound<'_, PyAny>,
    quantity: Quantity,
    url: &str,
    prefix: &str,
    timeout_s: f64,
) -> PyResult<(i64, i64, i64, i64, i64)> {
    let key = key_bytes(key)?;
    let max_burst = uint(max_burst, "max_burst", 0)?;
    let count = uint(count, "count", 1)?;
    let period = uint(period, "period", 1)?;
    // redis-cell's own argument rules (64-bit signed integers, no zero rate), and its
    // messages, from the same parser the `floodgate throttle` command uses.
    let args = ThrottleArgs::parse(
        &max_burst.to_string(),
        &count.to_string(),
        &period.to_string(),
        Some(&quantity.0.to_string()),
    )
    .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let timeout = seconds(timeout_s, "timeout_s")?;
    let target = Target {
        url: url.to_string(),
        prefix: prefix.to_string(),
    };
    let [a, b, c, d, e] = py
        .detach(|| call(target, timeout, key, &args))
        .map_err(to_py)?;
    Ok((a, b, c, d, e))
}
