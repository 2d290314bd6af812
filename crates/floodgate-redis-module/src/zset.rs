//! Sorted sets through Redis's key API, for the in-flight leases ([`crate::leases`]):
//! each write is done on the open key and replicated as its effect with explicit values
//! (`ZREMRANGEBYSCORE key -inf now`, `ZADD key NX|XX score id`, `ZREM key id`, `PEXPIREAT
//! key ms`), so a replica or an AOF replay without the module holds the same set and the
//! same absolute expiry. Each write signals the key modified and sends the keyspace event
//! its command sends.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_longlong};
use std::sync::OnceLock;

use redis_module::{RedisError, RedisString, raw};

use crate::keys::{Ctx, EMPTY, Key, Name, OK, RawKey, WRONGTYPE, api};

const ZSET: c_int = raw::REDISMODULE_KEYTYPE_ZSET as c_int;

/// The key API functions for sorted sets (in Redis since 4.0).
pub(crate) struct ZsetApi {
    add: unsafe extern "C" fn(RawKey, f64, Name, *mut c_int) -> c_int,
    score: unsafe extern "C" fn(RawKey, Name, *mut f64) -> c_int,
    rem: unsafe extern "C" fn(RawKey, Name, *mut c_int) -> c_int,
    first_in: unsafe extern "C" fn(RawKey, f64, f64, c_int, c_int) -> c_int,
    last_in: unsafe extern "C" fn(RawKey, f64, f64, c_int, c_int) -> c_int,
    current: unsafe extern "C" fn(RawKey, *mut f64) -> Name,
    next: unsafe extern "C" fn(RawKey) -> c_int,
    end: unsafe extern "C" fn(RawKey) -> c_int,
    stop: unsafe extern "C" fn(RawKey),
    len: unsafe extern "C" fn(RawKey) -> usize,
    free: unsafe extern "C" fn(Ctx, Name),
}

static ZAPI: OnceLock<ZsetApi> = OnceLock::new();

/// Take the sorted-set functions at load; `false` when the server lacks one (the module
/// then refuses to load).
pub fn load_api() -> bool {
    // SAFETY: read at load, after Redis has filled the pointers in; they never change
    let api = unsafe {
        (|| {
            Some(ZsetApi {
                add: raw::RedisModule_ZsetAdd?,
                score: raw::RedisModule_ZsetScore?,
                rem: raw::RedisModule_ZsetRem?,
                first_in: raw::RedisModule_ZsetFirstInScoreRange?,
                last_in: raw::RedisModule_ZsetLastInScoreRange?,
                current: raw::RedisModule_ZsetRangeCurrentElement?,
                next: raw::RedisModule_ZsetRangeNext?,
                end: raw::RedisModule_ZsetRangeEndReached?,
                stop: raw::RedisModule_ZsetRangeStop?,
                len: raw::RedisModule_ValueLength?,
                free: raw::RedisModule_FreeString?,
            })
        })()
    };
    match api {
        Some(api) => {
            // a second load of the module in the same process finds it set
            let _ = ZAPI.set(api);
            true
        }
        None => false,
    }
}

/// `ZADD`'s condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// `NX`: add a new member only.
    New,
    /// `XX`: update an existing member only.
    Existing,
}

fn zapi() -> Result<&'static ZsetApi, RedisError> {
    ZAPI.get().ok_or(RedisError::Str(
        "ERR the server lacks a module API function floodgate needs",
    ))
}

impl Key {
    /// Whether the key holds a sorted set (`false`: no key); `WRONGTYPE` for another type.
    pub fn is_zset(&self) -> Result<bool, RedisError> {
        let api = api()?;
        // SAFETY: `ptr` is an open key
        match unsafe { (api.key_type)(self.ptr) } {
            EMPTY => Ok(false),
            ZSET => Ok(true),
            _ => Err(RedisError::Str(WRONGTYPE)),
        }
    }

    /// The member's score, if it is in the set.
    pub fn zscore(&self, member: &RedisString) -> Result<Option<f64>, RedisError> {
        if !self.is_zset()? {
            return Ok(None);
        }
        let z = zapi()?;
        let mut score = 0f64;
        // SAFETY: `ptr` is an open sorted set, `member` a string of the call
        let found = unsafe { (z.score)(self.ptr, member.inner, &mut score) } == OK;
        Ok(found.then_some(score))
    }

    /// How many members the set holds (0: no key).
    pub fn zcard(&self) -> Result<usize, RedisError> {
        if !self.is_zset()? {
            return Ok(0);
        }
        // SAFETY: `ptr` is an open sorted set
        Ok(unsafe { (zapi()?.len)(self.ptr) })
    }

    /// The lowest (`last` false) or highest score of the set, if any.
    pub fn zedge(&self, last: bool) -> Result<Option<f64>, RedisError> {
        if !self.is_zset()? {
            return Ok(None);
        }
        let z = zapi()?;
        let (lo, hi) = (f64::NEG_INFINITY, f64::INFINITY);
        // SAFETY: `ptr` is an open sorted set; the range is stopped and the element freed
        unsafe {
            let start = if last { z.last_in } else { z.first_in };
            if start(self.ptr, lo, hi, 0, 0) != OK {
                return Ok(None);
            }
            let mut score = 0f64;
            let el = (z.current)(self.ptr, &mut score);
            (z.stop)(self.ptr);
            if el.is_null() {
                return Ok(None);
            }
            (z.free)(self.ctx, el);
            Ok(Some(score))
        }
    }

    /// Remove the members scored at most `max` (`ZREMRANGEBYSCORE key -inf max`,
    /// replicated when it removed any); how many.
    pub fn zremrange_upto(&mut self, max: u64) -> Result<usize, RedisError> {
        if !self.is_zset()? {
            return Ok(0);
        }
        let z = zapi()?;
        let mut gone: smallvec::SmallVec<[Name; 8]> = smallvec::SmallVec::new();
        // SAFETY: `ptr` is an open sorted set; the members are collected, the range
        // stopped, then removed one by one and freed
        unsafe {
            if (z.first_in)(self.ptr, f64::NEG_INFINITY, max as f64, 0, 0) == OK {
                while (z.end)(self.ptr) == 0 {
                    let el = (z.current)(self.ptr, std::ptr::null_mut());
                    if !el.is_null() {
                        gone.push(el);
                    }
                    if (z.next)(self.ptr) == 0 {
                        break;
                    }
                }
                (z.stop)(self.ptr);
            }
            for &el in &gone {
                (z.rem)(self.ptr, el, std::ptr::null_mut());
                (z.free)(self.ctx, el);
            }
        }
        if !gone.is_empty() {
            self.zwritten(
                c"ZREMRANGEBYSCORE",
                c"zremrangebyscore",
                |ctx, cmd, name| {
                    // SAFETY: the command's context and key name
                    unsafe {
                        (api()?.replicate)(
                            ctx,
                            cmd,
                            c"scl".as_ptr(),
                            name,
                            c"-inf".as_ptr(),
                            max as c_longlong,
                        );
                    }
                    Ok(())
                },
            )?;
        }
        Ok(gone.len())
    }

    /// `ZADD key NX|XX score member`; whether it added (`NX`) or updated (`XX`) it.
    pub fn zadd(
        &mut self,
        score: u64,
        member: &RedisString,
        only: Only,
    ) -> Result<bool, RedisError> {
        let z = zapi()?;
        let (flag, word) = match only {
            Only::New => (raw::REDISMODULE_ZADD_NX, c"NX"),
            Only::Existing => (raw::REDISMODULE_ZADD_XX, c"XX"),
        };
        let mut flags = flag as c_int;
        // SAFETY: `ptr` is open for writing (an empty key becomes a sorted set)
        let ok = unsafe { (z.add)(self.ptr, score as f64, member.inner, &mut flags) } == OK;
        let done = ok
            && flags & (raw::REDISMODULE_ZADD_ADDED | raw::REDISMODULE_ZADD_UPDATED) as c_int != 0;
        if !ok {
            return Err(RedisError::Str(WRONGTYPE));
        }
        if done {
            self.zwritten(c"ZADD", c"zadd", |ctx, cmd, name| {
                // SAFETY: the command's context, key name and argument
                unsafe {
                    (api()?.replicate)(
                        ctx,
                        cmd,
                        c"scls".as_ptr(),
                        name,
                        word.as_ptr(),
                        score as c_longlong,
                        member.inner,
                    );
                }
                Ok(())
            })?;
        }
        Ok(done)
    }

    /// `ZREM key member`; whether it was there.
    pub fn zrem(&mut self, member: &RedisString) -> Result<bool, RedisError> {
        if !self.is_zset()? {
            return Ok(false);
        }
        let z = zapi()?;
        let mut deleted: c_int = 0;
        // SAFETY: `ptr` is an open sorted set
        unsafe { (z.rem)(self.ptr, member.inner, &mut deleted) };
        if deleted != 0 {
            self.zwritten(c"ZREM", c"zrem", |ctx, cmd, name| {
                // SAFETY: the command's context, key name and argument
                unsafe {
                    (api()?.replicate)(ctx, cmd, c"ss".as_ptr(), name, member.inner);
                }
                Ok(())
            })?;
        }
        Ok(deleted != 0)
    }

    /// Expire the key at `at_ms` (ms since the epoch), replicated as `PEXPIREAT key
    /// at_ms`.
    pub fn expire_at(&mut self, at_ms: u64) -> Result<(), RedisError> {
        let api = api()?;
        let at = raw::mstime_t::try_from(at_ms)
            .map_err(|_| RedisError::Str("ERR expiry out of range"))?;
        // SAFETY: `ptr` is open for writing and holds a value
        unsafe {
            if (api.set_abs_expire)(self.ptr, at) != OK {
                return Err(RedisError::Str("ERR could not set the key's expiry"));
            }
            (api.replicate)(
                self.ctx,
                c"PEXPIREAT".as_ptr(),
                c"sl".as_ptr(),
                self.name,
                at as c_longlong,
            );
        }
        self.changed(&[(raw::REDISMODULE_NOTIFY_GENERIC, c"expire")])
    }

    /// After a write of the sorted set: replicate it (`replicate` gets the context, the
    /// command's name and the key's), signal the key modified, notify `event` (and `del`
    /// when the set is empty now, so deleted).
    fn zwritten(
        &mut self,
        cmd: &CStr,
        event: &CStr,
        replicate: impl FnOnce(Ctx, *const c_char, Name) -> Result<(), RedisError>,
    ) -> Result<(), RedisError> {
        replicate(self.ctx, cmd.as_ptr(), self.name)?;
        let zset = (raw::REDISMODULE_NOTIFY_ZSET, event);
        // SAFETY: `ptr` is an open key
        if unsafe { (api()?.key_type)(self.ptr) } == EMPTY {
            self.changed(&[zset, (raw::REDISMODULE_NOTIFY_GENERIC, c"del")])
        } else {
            self.changed(&[zset])
        }
    }
}
