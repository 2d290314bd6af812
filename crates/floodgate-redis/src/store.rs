//! The connection to Redis (single node or cluster), its configuration, the per-call
//! timeout, the circuit breaker and the counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

use crate::breaker::Breaker;
use crate::error::Error;
use crate::keys::KeySpace;
use crate::scripts::{Now, ScriptCall};

/// What a limiter answers when Redis cannot (timeout, error, circuit open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultPolicy {
    /// Admit the request (availability first: a Redis outage must not take the service
    /// down). The decision is marked degraded and counted. The default.
    #[default]
    FailOpen,
    /// Deny the request with `retry_after` = time until Redis is tried again (protection
    /// first: for limits that guard money or abuse).
    FailClosed,
}

/// Where the scripts read `now` (see docs/redis.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// Redis `TIME`, read inside the script: one clock for every client, immune to client
    /// clock skew. The default; use it whenever several hosts share a limit.
    #[default]
    Redis,
    /// The client's wall clock ([`floodgate_core::WallClock`]), passed to the script.
    /// For a single host, tests, replays and simulations (`check_at` always uses it).
    Caller,
}

/// Whether the store sends the Redis module's commands (`floodgate-redis-module`'s
/// `FG.DECIDE`, `FG.RESERVE`, `FG.SETTLE`, `FG.ACQUIRE`, `FG.RENEW` and `FG.RELEASE`)
/// instead of its Lua scripts. The answers are the same either way, on the same keys;
/// the module costs Redis less per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModuleUse {
    /// Use the module when the server has it loaded (found on connect), the scripts
    /// otherwise; a server that later answers "unknown command" to it (unloaded, or a
    /// failover to a server without it) gets the scripts from that call on. The default.
    #[default]
    Auto,
    /// Use the module; connecting fails when the server does not have it.
    Always,
    /// Use the scripts, whatever the server has loaded.
    Never,
}

/// Configuration of a [`RedisStore`]. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Prefix of every key (no `{` or `}`). Default `"floodgate:"`.
    pub prefix: String,
    /// Longest user key accepted, in bytes. Default 1024.
    pub max_key_len: usize,
    /// Per-call timeout: no caller waits longer for Redis. Default 50 ms.
    pub timeout: Duration,
    /// Timeout to establish a connection. Default 1 s.
    pub connect_timeout: Duration,
    /// What to answer when Redis cannot. Default [`FaultPolicy::FailOpen`].
    pub policy: FaultPolicy,
    /// How long the circuit stays open after a failure before one probe. Default 250 ms.
    pub breaker_open_for: Duration,
    /// Where `now` comes from for [`crate::RedisLimiter::check`]. Default Redis `TIME`.
    pub time: TimeSource,
    /// Added to every key's expiry (rounded up to ms). Default 0: a key expires when it is
    /// back at full capacity. Raise it in caller-time mode when client clocks may run
    /// slower than the Redis host's.
    pub expiry_padding: Duration,
    /// Keys each limiter's local cache of denials holds; 0 disables it. Default 100 000.
    pub deny_cache_keys: usize,
    /// The Redis module or the scripts. Default [`ModuleUse::Auto`].
    pub module: ModuleUse,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            prefix: "floodgate:".into(),
            max_key_len: 1024,
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            policy: FaultPolicy::FailOpen,
            breaker_open_for: Duration::from_millis(250),
            time: TimeSource::Redis,
            expiry_padding: Duration::ZERO,
            deny_cache_keys: 100_000,
            module: ModuleUse::Auto,
        }
    }
}

/// Counters of a store, monotonic since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Script calls sent to Redis.
    pub redis_calls: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Calls that failed with an error (connection, server error, bad reply).
    pub errors: u64,
    /// Decisions made under the fault policy (timeout, error or open circuit).
    pub degraded: u64,
    /// Calls not sent because the circuit was open.
    pub circuit_rejected: u64,
    /// Times the circuit opened.
    pub circuit_opened: u64,
    /// Denials answered from the local cache (each a round trip saved).
    pub deny_cache_hits: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) redis_calls: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) degraded: AtomicU64,
    pub(crate) circuit_rejected: AtomicU64,
    pub(crate) deny_cache_hits: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A script's reply: an array of integers, or one integer (the GCRA script's).
struct Ints(Vec<i64>);

impl redis::FromRedisValue for Ints {
    fn from_redis_value(v: redis::Value) -> Result<Ints, redis::ParsingError> {
        match v {
            redis::Value::Int(i) => Ok(Ints(vec![i])),
            other => Ok(Ints(Vec::<i64>::from_redis_value(other)?)),
        }
    }
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A connection to Redis (or a Redis Cluster) shared by any number of limiters and tasks.
/// Cheap to share behind an `Arc`; every call multiplexes on one connection per node,
/// which reconnects by itself after a failure.
pub struct RedisStore {
    conn: Conn,
    pub(crate) config: StoreConfig,
    pub(crate) keys: KeySpace,
    pub(crate) breaker: Breaker,
    pub(crate) counters: Counters,
    target: String,
    /// The module's commands are sent instead of the scripts.
    module: std::sync::atomic::AtomicBool,
    /// Redis has answered (see [`RedisStore::reachable`]).
    reached: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .field("config", &self.config)
            .finish()
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The redacted URL, the key space and the client of `url` (nothing connected yet).
fn open(url: &str, config: &StoreConfig) -> Result<(String, KeySpace, redis::Client), Error> {
    let target = redact(url);
    let keys = KeySpace::new(&config.prefix, config.max_key_len)?;
    let client = redis::Client::open(url).map_err(|source| Error::Url {
        url: target.clone(),
        source,
    })?;
    Ok((target, keys, client))
}

/// The connection manager's settings: `connect_timeout` per try, one retry after a
/// lost connection, 10 to 100 ms apart; no response timeout (the store times each call).
fn manager_config(config: &StoreConfig) -> redis::aio::ConnectionManagerConfig {
    redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(None)
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(100))
}

fn classify(target: &str, e: redis::RedisError) -> Error {
    use redis::ErrorKind;
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Error::NotRedis {
            target: target.to_string(),
            detail: e.to_string(),
        },
        _ => Error::Connect {
            target: target.to_string(),
            source: e,
        },
    }
}

impl RedisStore {
    /// Connect to one Redis: `redis://[user:password@]host:port[/db]`, or `rediss://` for
    /// TLS, or `redis+unix:///path`. Checks that the peer answers `PING` as Redis does.
    pub async fn connect(url: &str, config: StoreConfig) -> Result<RedisStore, Error> {
        let (target, keys, client) = open(url, &config)?;
        let conn = match tokio::time::timeout(
            config.connect_timeout,
            ConnectionManager::new_with_config(client, manager_config(&config)),
        )
        .await
        {
            Err(_) => {
                return Err(Error::NotRedis {
                    target,
                    detail: format!("no Redis handshake within {:?}", config.connect_timeout),
                });
            }
            Ok(Err(e)) => return Err(classify(&target, e)),
            Ok(Ok(c)) => c,
        };
        let mut store = RedisStore::with_conn(Conn::Single(conn), config, keys, target);
        store.check_ping().await?;
        store.module = store.choose_module().await?.into();
        Ok(store)
    }

    /// As [`connect`](Self::connect), except that a Redis that cannot be reached (the
    /// connection refused or not made within `connect_timeout`: [`Error::Connect`], or
    /// no handshake in time) is not an error: the store is returned at once with that
    /// error beside it. Until Redis answers every call is a fault (a [`Error::Connect`]
    /// or a [`Error::Timeout`], to which the caller's fault policy applies, the circuit
    /// breaker spacing the tries); each call the breaker lets through tries to connect.
    /// A background task (on the current tokio runtime) pings Redis every
    /// `breaker_open_for` (at least 100 ms) until it answers, then closes the circuit
    /// breaker, chooses between the module and the scripts as [`connect`](Self::connect)
    /// does, and marks the store [reachable](Self::reachable). Errors that retrying cannot mend (a bad URL or
    /// prefix, a peer that is not Redis, a missing module under [`ModuleUse::Always`])
    /// are still errors.
    pub async fn connect_or_retry(
        url: &str,
        config: StoreConfig,
    ) -> Result<(Arc<RedisStore>, Option<Error>), Error> {
        let e = match RedisStore::connect(url, config.clone()).await {
            Ok(s) => return Ok((Arc::new(s), None)),
            Err(e @ Error::Connect { .. }) => e,
            Err(e @ Error::NotRedis { .. }) if e.to_string().contains("within") => e,
            Err(e) => return Err(e),
        };
        let (target, keys, client) = open(url, &config)?;
        let conn = ConnectionManager::new_lazy_with_config(client, manager_config(&config))
            .map_err(|e| classify(&target, e))?;
        let mut store = RedisStore::with_conn(Conn::Single(conn), config, keys, target);
        store.reached = false.into();
        store.module = (store.config.module == ModuleUse::Always).into();
        let store = Arc::new(store);
        let weak = Arc::downgrade(&store);
        let every = store
            .config
            .breaker_open_for
            .max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(store) = weak.upgrade() else { return };
                if store.check_ping().await.is_err() {
                    continue;
                }
                // Redis answers: calls go to it from now on
                store.breaker.success();
                if let Ok(found) = store.choose_module().await {
                    store.module.store(found, Ordering::Relaxed);
                }
                store.reached.store(true, Ordering::Relaxed);
                return;
            }
        });
        Ok((store, Some(e)))
    }

    /// Whether Redis has answered since the store was made ([`connect`](Self::connect)
    /// or, with [`connect_or_retry`](Self::connect_or_retry), once it answered) and the
    /// circuit breaker is closed: false while decisions are the fault policy's.
    pub fn reachable(&self) -> bool {
        self.reached.load(Ordering::Relaxed) && self.breaker.is_closed()
    }

    /// Connect to a Redis Cluster through any of its nodes (`redis://host:port` each).
    pub async fn connect_cluster(nodes: &[&str], config: StoreConfig) -> Result<RedisStore, Error> {
        let target = nodes
            .iter()
            .map(|n| redact(n))
            .collect::<Vec<_>>()
            .join(",");
        let keys = KeySpace::new(&config.prefix, config.max_key_len)?;
        let client = redis::cluster::ClusterClient::builder(nodes.iter().copied())
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.timeout.max(Duration::from_millis(500)))
            .retries(1)
            .build()
            .map_err(|source| Error::Url {
                url: target.clone(),
                source,
            })?;
        let conn = match tokio::time::timeout(config.connect_timeout, client.get_async_connection())
            .await
        {
            Err(_) => {
                return Err(Error::NotRedis {
                    target,
                    detail: format!("no cluster handshake within {:?}", config.connect_timeout),
                });
            }
            Ok(Err(e)) => return Err(classify(&target, e)),
            Ok(Ok(c)) => c,
        };
        let mut store = RedisStore::with_conn(Conn::Cluster(conn), config, keys, target);
        store.module = store.choose_module().await?.into();
        Ok(store)
    }

    /// Whether to send the module's commands: as configured, and for
    /// [`ModuleUse::Auto`] whether the server has `FG.DECIDE` and `FG.ACQUIRE` (`COMMAND
    /// INFO`; where `COMMAND` is refused, an `FG.ACQUIRE` without arguments, which the
    /// module answers with its usage line and a server without it with "unknown
    /// command"). A module without `FG.ACQUIRE` (a version before reserve, settle and
    /// in-flight leases) counts as none: every call goes to the scripts.
    async fn choose_module(&self) -> Result<bool, Error> {
        if self.config.module == ModuleUse::Never {
            return Ok(false);
        }
        let info = self
            .command::<redis::Value>(
                redis::cmd("COMMAND")
                    .arg("INFO")
                    .arg("fg.decide")
                    .arg("fg.acquire"),
            )
            .await;
        let found = match info {
            Ok(redis::Value::Array(v)) => v.len() == 2 && v.iter().all(|c| *c != redis::Value::Nil),
            // refused (an ACL without COMMAND): ask the command itself
            Err(Error::Redis(_)) => {
                match self
                    .command::<redis::Value>(&redis::cmd("FG.ACQUIRE"))
                    .await
                {
                    Err(Error::Redis(e)) => e.to_string().contains("Usage: FG.ACQUIRE"),
                    _ => false,
                }
            }
            // no answer in time, or an answer of another shape: the scripts
            _ => false,
        };
        if !found && self.config.module == ModuleUse::Always {
            return Err(Error::ModuleMissing {
                target: self.target.clone(),
            });
        }
        Ok(found)
    }

    /// Whether decisions are sent to the Redis module (`FG.DECIDE`) rather than to the
    /// Lua scripts (see [`ModuleUse`]).
    pub fn uses_module(&self) -> bool {
        self.module.load(Ordering::Relaxed)
    }

    /// With [`ModuleUse::Auto`], an "unknown command" answer to the module's command
    /// means the server no longer has it (unloaded, or a failover to a server without
    /// it): from now on the scripts are sent, and the caller sends this call's script.
    pub(crate) fn module_vanished(&self, e: &Error) -> bool {
        let gone = self.config.module == ModuleUse::Auto
            && matches!(e, Error::Redis(r) if r.to_string().contains("unknown command"));
        if gone {
            self.module.store(false, Ordering::Relaxed);
        }
        gone
    }

    fn with_conn(conn: Conn, config: StoreConfig, keys: KeySpace, target: String) -> RedisStore {
        RedisStore {
            conn,
            breaker: Breaker::new(config.breaker_open_for, config.timeout),
            config,
            keys,
            counters: Counters::default(),
            target,
            module: false.into(),
            reached: true.into(),
        }
    }

    async fn check_ping(&self) -> Result<(), Error> {
        let mut c = self.conn.clone();
        let fut = async {
            match &mut c {
                Conn::Single(c) => redis::cmd("PING").query_async::<redis::Value>(c).await,
                Conn::Cluster(c) => redis::cmd("PING").query_async::<redis::Value>(c).await,
            }
        };
        let reply = tokio::time::timeout(self.config.connect_timeout, fut)
            .await
            .map_err(|_| Error::NotRedis {
                target: self.target.clone(),
                detail: format!("no reply to PING within {:?}", self.config.connect_timeout),
            })?
            .map_err(|e| classify(&self.target, e))?;
        match reply {
            redis::Value::SimpleString(s) if s == "PONG" => Ok(()),
            other => Err(Error::NotRedis {
                target: self.target.clone(),
                detail: format!("PING answered {other:?}"),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The key names of this store.
    pub fn key_space(&self) -> &KeySpace {
        &self.keys
    }

    /// Counters since creation.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            redis_calls: l(&c.redis_calls),
            timeouts: l(&c.timeouts),
            errors: l(&c.errors),
            degraded: l(&c.degraded),
            circuit_rejected: l(&c.circuit_rejected),
            circuit_opened: self.breaker.opened.load(Ordering::Relaxed),
            deny_cache_hits: l(&c.deny_cache_hits),
        }
    }

    /// Whether the circuit breaker is closed (Redis considered healthy).
    pub fn circuit_closed(&self) -> bool {
        self.breaker.is_closed()
    }

    /// Run a script invocation with the per-call timeout. One round trip (`EVALSHA`); after
    /// `SCRIPT FLUSH` or a restart, `NOSCRIPT` makes it load the script and retry once.
    /// The reply is the script's integers: an array, or one integer as a one-element vector.
    pub async fn eval(&self, inv: &redis::ScriptInvocation<'_>) -> Result<Vec<i64>, Error> {
        let mut conn = self.conn.clone();
        self.counted(async {
            match &mut conn {
                Conn::Single(c) => inv.invoke_async::<Ints>(c).await,
                Conn::Cluster(c) => inv.invoke_async::<Ints>(c).await,
            }
        })
        .await
    }

    /// Send a module command (`FG.DECIDE`) as [`eval`](Self::eval) sends a script: the
    /// per-call timeout, the counters, its integers.
    pub async fn module_call(&self, cmd: &redis::Cmd) -> Result<Vec<i64>, Error> {
        let mut conn = self.conn.clone();
        self.counted(async {
            match &mut conn {
                Conn::Single(c) => cmd.query_async::<Ints>(c).await,
                Conn::Cluster(c) => cmd.query_async::<Ints>(c).await,
            }
        })
        .await
    }

    async fn counted(
        &self,
        fut: impl std::future::Future<Output = Result<Ints, redis::RedisError>>,
    ) -> Result<Vec<i64>, Error> {
        bump(&self.counters.redis_calls);
        match tokio::time::timeout(self.config.timeout, fut).await {
            Err(_) => {
                bump(&self.counters.timeouts);
                Err(Error::Timeout {
                    after: self.config.timeout,
                })
            }
            Ok(Err(e)) => {
                bump(&self.counters.errors);
                Err(Error::Redis(e))
            }
            Ok(Ok(v)) => Ok(v.0),
        }
    }

    /// One check of `call` on `key`: `FG.DECIDE` when the module is used, else the
    /// call's script. The reply is the script's either way.
    pub(crate) async fn decide_one(
        &self,
        call: &ScriptCall,
        key: &[u8],
        now: Now,
        cost: u64,
        pad_ms: u64,
    ) -> Result<Vec<i64>, Error> {
        if self.uses_module() {
            let mut cmd = redis::cmd("FG.DECIDE");
            call.push_module(&mut cmd, key, cost, pad_ms);
            ScriptCall::push_module_now(&mut cmd, "one", now)?;
            match self.module_call(&cmd).await {
                Err(e) if self.module_vanished(&e) => {}
                other => return other,
            }
        }
        self.eval(&call.invocation(key, now, cost, pad_ms)?).await
    }

    /// Whether this is a connection to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Run an arbitrary command (for tests and tools), with the per-call timeout.
    pub async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        let fut = async {
            match &mut conn {
                Conn::Single(c) => cmd.query_async::<T>(c).await,
                Conn::Cluster(c) => cmd.query_async::<T>(c).await,
            }
        };
        tokio::time::timeout(self.config.timeout.max(Duration::from_secs(1)), fut)
            .await
            .map_err(|_| Error::Timeout {
                after: self.config.timeout.max(Duration::from_secs(1)),
            })?
            .map_err(Error::Redis)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact("redis://user:secret@h:1/0"),
            "redis://user:***@h:1/0"
        );
        assert_eq!(super::redact("redis://h:1"), "redis://h:1");
    }
}
