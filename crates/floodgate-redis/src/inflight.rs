//! [`RedisInFlight`]: in-flight (concurrency) leases shared by a fleet, with the core's
//! semantics ([`floodgate_core::inflight`]): at most `N` live leases per key, each
//! expiring, renewable, released at most once.
//!
//! # In Redis
//! One key per user key, `PREFIX{TAG}inflight:USER` (the hash-tag rules of
//! [`crate::keys`], so Redis Cluster is safe: every call touches one key): a sorted set
//! of lease ids scored by expiry in microseconds since the epoch, with a TTL
//! (`PEXPIRE`) at its latest lease's expiry plus the store's padding. Acquire, renew
//! and release are one `EVALSHA` each (`lua/inflight.lua`), or, when the store uses the
//! Redis module, one `FG.ACQUIRE`, `FG.RENEW` or `FG.RELEASE` (the same answers on the
//! same sorted set); acquire first drops the expired leases. Time is Redis `TIME` by default (one clock for the fleet), or the
//! caller's ([`TimeSource::Caller`], and the `*_at` methods).
//!
//! Lease ids are 63-bit, drawn by each [`RedisInFlight`] from a random seed through a
//! bijective mix of a counter (shifted right once: one process repeats one only with
//! odds of about 2^-63 per pair, as two processes do); an id that is already held on the
//! key is refused by the script, and the next id is tried.
//!
//! # Faults
//! A call that times out or fails is an [`Error`] whose [`Error::is_fault`] is true; the
//! caller decides (the engine applies its store-failure policy). An acquire that timed
//! out may still have taken its lease in Redis; that lease expires at its TTL, which is
//! what the TTL is for. The circuit breaker of the rate scripts is not consulted.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate_core::inflight::{Lease, LeaseId, LeaseTtl, check_limit};
use floodgate_core::{Clock, Decision, Nanos, WallClock};
use redis::Script;

use crate::error::Error;
use crate::scripts::Now;
use crate::store::{RedisStore, TimeSource};

/// The script (acquire, renew, release).
pub static INFLIGHT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/inflight.lua")));

/// The key kind (`PREFIX{TAG}inflight:USER`).
pub const KIND: &str = "inflight";

/// In-flight limits of `N` per key, with the leases in Redis (see the module docs).
#[derive(Debug)]
pub struct RedisInFlight {
    store: Arc<RedisStore>,
    limit: u64,
    pad_ms: u64,
    seed: u64,
    counter: AtomicU64,
}

/// splitmix64's finaliser: a bijection on u64.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(WallClock.now().0 as u128);
    h.write_u32(std::process::id());
    h.finish()
}

impl RedisInFlight {
    /// At most `limit` leases per key on `store` (a `RedisInFlight` is cheap: one per
    /// limit a caller passes is fine); `limit` 0 or above
    /// [`floodgate_core::inflight::MAX_IN_FLIGHT`] is an error.
    pub fn new(store: Arc<RedisStore>, limit: u64) -> Result<RedisInFlight, Error> {
        let limit = check_limit(limit)?;
        let pad = store.config.expiry_padding;
        let pad_ms = u64::try_from(pad.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX / 2);
        Ok(RedisInFlight {
            store,
            limit,
            pad_ms,
            seed: random_seed(),
            counter: AtomicU64::new(0),
        })
    }

    /// `N`.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The store.
    pub fn store(&self) -> &Arc<RedisStore> {
        &self.store
    }

    /// The Redis key holding `user`'s leases.
    pub fn redis_key(&self, user: &[u8]) -> Result<Vec<u8>, Error> {
        self.store.keys.key(KIND, user)
    }

    fn now(&self) -> Now {
        match self.store.config.time {
            TimeSource::Redis => Now::Redis,
            TimeSource::Caller => Now::Caller(WallClock.now()),
        }
    }

    fn next_id(&self) -> LeaseId {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        // 63 bits: a lease id is a non-negative RESP integer and a signed 64-bit one in
        // every client (floodgate server's doors refuse ids from 2^63 up)
        LeaseId(
            mix(self
                .seed
                .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                >> 1,
        )
    }

    async fn call(
        &self,
        op: &str,
        user: &[u8],
        now: Now,
        id: LeaseId,
        ttl: Option<LeaseTtl>,
    ) -> Result<Vec<i64>, Error> {
        let key = self.redis_key(user)?;
        let now_arg = match now {
            Now::Redis => "redis".to_string(),
            Now::Caller(t) if t.0 >= 1 << 63 => {
                return Err(Error::TimeOutOfRange { now_ns: t.0 });
            }
            Now::Caller(t) => (t.0 / 1_000).to_string(),
        };
        let ttl_us = ttl.map_or(0, LeaseTtl::as_micros);
        if self.store.uses_module() {
            // the module's command of the op: the same words, the script's reply
            let mut cmd = redis::cmd(match op {
                "acquire" => "FG.ACQUIRE",
                "renew" => "FG.RENEW",
                _ => "FG.RELEASE",
            });
            cmd.arg(&key).arg(id.0);
            match op {
                "acquire" => {
                    cmd.arg(self.limit).arg(ttl_us).arg(self.pad_ms);
                }
                "renew" => {
                    cmd.arg(ttl_us).arg(self.pad_ms);
                }
                _ => {}
            }
            cmd.arg(&now_arg);
            match self.store.module_call(&cmd).await {
                Err(e) if self.store.module_vanished(&e) => {}
                other => return other,
            }
        }
        let mut inv = INFLIGHT.key(key);
        inv.arg(op)
            .arg(now_arg)
            .arg(id.0.to_string())
            .arg(self.limit)
            .arg(ttl_us)
            .arg(self.pad_ms);
        self.store.eval(&inv).await
    }

    /// Take a lease on `user` for `ttl`; `Ok(Err(denial))` when `N` live leases are held.
    pub async fn acquire(
        &self,
        user: &[u8],
        ttl: LeaseTtl,
    ) -> Result<Result<Lease, Decision>, Error> {
        self.acquire_now(user, self.now(), ttl).await
    }

    /// [`acquire`](Self::acquire) at the caller's instant (ns since the epoch; Redis
    /// keeps microseconds: the sub-microsecond part is dropped).
    pub async fn acquire_at(
        &self,
        user: &[u8],
        now: Nanos,
        ttl: LeaseTtl,
    ) -> Result<Result<Lease, Decision>, Error> {
        self.acquire_now(user, Now::Caller(now), ttl).await
    }

    async fn acquire_now(
        &self,
        user: &[u8],
        now: Now,
        ttl: LeaseTtl,
    ) -> Result<Result<Lease, Decision>, Error> {
        let bad = |detail: String| Error::BadReply {
            script: "inflight",
            detail,
        };
        for _ in 0..3 {
            let id = self.next_id();
            let r = self.call("acquire", user, now, id, Some(ttl)).await?;
            match r[..] {
                [-1] => continue,
                [ok, n, earliest, latest, now_us] if n >= 0 && earliest >= 0 && latest >= 0 => {
                    let us = |v: i64| Duration::from_micros(v as u64);
                    let remaining = self.limit.saturating_sub(n as u64);
                    if ok == 1 {
                        let now = Nanos((now_us as u64).saturating_mul(1_000));
                        return Ok(Ok(Lease {
                            id,
                            expires: now.saturating_add(ttl.get()),
                            decision: Decision::allow(self.limit, remaining, us(latest)),
                        }));
                    }
                    return Ok(Err(Decision::deny(
                        self.limit,
                        remaining,
                        us(earliest),
                        us(latest),
                    )));
                }
                _ => return Err(bad(format!("acquire answered {r:?}"))),
            }
        }
        Err(bad("three lease ids in a row were already held".into()))
    }

    /// Extend a live lease to `now + ttl`; `false` when it is unknown, released or expired.
    pub async fn renew(&self, user: &[u8], id: LeaseId, ttl: LeaseTtl) -> Result<bool, Error> {
        self.flag("renew", user, self.now(), id, Some(ttl)).await
    }

    /// [`renew`](Self::renew) at the caller's instant.
    pub async fn renew_at(
        &self,
        user: &[u8],
        id: LeaseId,
        now: Nanos,
        ttl: LeaseTtl,
    ) -> Result<bool, Error> {
        self.flag("renew", user, Now::Caller(now), id, Some(ttl))
            .await
    }

    /// Give a lease back: `true` when it was live and its place is free now; `false`
    /// (nothing freed) when it was released before, expired or never issued.
    pub async fn release(&self, user: &[u8], id: LeaseId) -> Result<bool, Error> {
        self.flag("release", user, self.now(), id, None).await
    }

    /// [`release`](Self::release) at the caller's instant.
    pub async fn release_at(&self, user: &[u8], id: LeaseId, now: Nanos) -> Result<bool, Error> {
        self.flag("release", user, Now::Caller(now), id, None).await
    }

    async fn flag(
        &self,
        op: &'static str,
        user: &[u8],
        now: Now,
        id: LeaseId,
        ttl: Option<LeaseTtl>,
    ) -> Result<bool, Error> {
        match self.call(op, user, now, id, ttl).await?[..] {
            [0] => Ok(false),
            [1] => Ok(true),
            ref r => Err(Error::BadReply {
                script: "inflight",
                detail: format!("{op} answered {r:?}"),
            }),
        }
    }
}
