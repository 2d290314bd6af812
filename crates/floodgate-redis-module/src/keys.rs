//! Keys read and written through Redis's key API, not through `RedisModule_Call`: a key is
//! opened once, its value read in place, written in place, given its absolute expiry with
//! `RedisModule_SetAbsExpire` (Redis 6.2.2 and later: the key's expiry is that
//! millisecond, no clock read by Redis in between), and the effect replicated as `SET key
//! value PXAT ms` with the same value and millisecond, so replicas and the AOF hold
//! exactly what the primary holds. What a `SET` does besides is done here too: the key is
//! signalled modified (`WATCH`, client tracking) and the `set` and `expire` keyspace
//! events are notified, only when the key is written.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_long, c_longlong};
use std::sync::OnceLock;

use redis_module::raw;
use redis_module::{RedisError, RedisString};

/// Redis's reply to a key of another type than a string.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

const MODE: c_int = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
const OK: c_int = raw::REDISMODULE_OK as c_int;
const EMPTY: c_int = raw::REDISMODULE_KEYTYPE_EMPTY as c_int;
const STRING: c_int = raw::REDISMODULE_KEYTYPE_STRING as c_int;

type Ctx = *mut raw::RedisModuleCtx;
type Name = *mut raw::RedisModuleString;
type RawKey = *mut raw::RedisModuleKey;

/// The module API functions the commands use, all present since Redis 6.2.2 (taken once
/// at load by [`load_api`]).
struct Api {
    open: unsafe extern "C" fn(Ctx, Name, c_int) -> RawKey,
    close: unsafe extern "C" fn(RawKey),
    key_type: unsafe extern "C" fn(RawKey) -> c_int,
    dma: unsafe extern "C" fn(RawKey, *mut usize, c_int) -> *mut c_char,
    truncate: unsafe extern "C" fn(RawKey, usize) -> c_int,
    set_abs_expire: unsafe extern "C" fn(RawKey, raw::mstime_t) -> c_int,
    replicate: unsafe extern "C" fn(Ctx, *const c_char, *const c_char, ...) -> c_int,
    signal: unsafe extern "C" fn(Ctx, Name) -> c_int,
    notify: unsafe extern "C" fn(Ctx, c_int, *const c_char, Name) -> c_int,
    reply_array: unsafe extern "C" fn(Ctx, c_long) -> c_int,
    reply_int: unsafe extern "C" fn(Ctx, c_longlong) -> c_int,
}

static API: OnceLock<Api> = OnceLock::new();

/// Take the module API functions the commands call; `false` when the server lacks one
/// (the module then refuses to load).
pub fn load_api() -> bool {
    // SAFETY: read at load, after Redis has filled the pointers in; they never change
    let api = unsafe {
        (|| {
            Some(Api {
                open: raw::RedisModule_OpenKey?,
                close: raw::RedisModule_CloseKey?,
                key_type: raw::RedisModule_KeyType?,
                dma: raw::RedisModule_StringDMA?,
                truncate: raw::RedisModule_StringTruncate?,
                set_abs_expire: raw::RedisModule_SetAbsExpire?,
                replicate: raw::RedisModule_Replicate?,
                signal: raw::RedisModule_SignalModifiedKey?,
                notify: raw::RedisModule_NotifyKeyspaceEvent?,
                reply_array: raw::RedisModule_ReplyWithArray?,
                reply_int: raw::RedisModule_ReplyWithLongLong?,
            })
        })()
    };
    match api {
        Some(api) => {
            // a second load of the module in the same process finds it set
            let _ = API.set(api);
            true
        }
        None => false,
    }
}

fn api() -> Result<&'static Api, RedisError> {
    API.get().ok_or(RedisError::Str(
        "ERR the server lacks a module API function floodgate needs",
    ))
}

/// An open key (read and write mode), closed on drop.
pub struct Key {
    ctx: Ctx,
    name: Name,
    ptr: RawKey,
    close: unsafe extern "C" fn(RawKey),
}

impl Key {
    /// Open `name` for reading and writing (a key that does not exist yet is opened too).
    pub fn open(ctx: Ctx, name: &RedisString) -> Result<Key, RedisError> {
        let api = api()?;
        // SAFETY: `ctx` is the command's context, `name` one of its arguments
        let ptr = unsafe { (api.open)(ctx, name.inner, MODE) };
        if ptr.is_null() {
            return Err(RedisError::Str("ERR could not open the key"));
        }
        Ok(Key {
            ctx,
            name: name.inner,
            ptr,
            close: api.close,
        })
    }

    /// The key's string value, in place (`None`: no key); `WRONGTYPE` for another type.
    pub fn value(&self) -> Result<Option<&[u8]>, RedisError> {
        let api = api()?;
        // SAFETY: `ptr` is an open key; the pointer DMA returns stays valid until the key
        // is written or closed, which takes `&mut self`
        unsafe {
            match (api.key_type)(self.ptr) {
                EMPTY => Ok(None),
                STRING => {
                    let mut len = 0usize;
                    let p = (api.dma)(self.ptr, &mut len, raw::REDISMODULE_READ as c_int);
                    if p.is_null() {
                        return Err(RedisError::Str(WRONGTYPE));
                    }
                    Ok(Some(std::slice::from_raw_parts(p.cast::<u8>(), len)))
                }
                _ => Err(RedisError::Str(WRONGTYPE)),
            }
        }
    }

    /// Store `bytes` with the absolute expiry `expire_at_ms` (ms since the epoch), and
    /// replicate `SET key bytes PXAT expire_at_ms`.
    pub fn store(&mut self, bytes: &[u8], expire_at_ms: u64) -> Result<(), RedisError> {
        let api = api()?;
        let at = raw::mstime_t::try_from(expire_at_ms)
            .map_err(|_| RedisError::Str("ERR expiry out of range"))?;
        if bytes.is_empty() || at <= 0 {
            return Err(RedisError::Str("ERR nothing to store"));
        }
        let failed = || RedisError::Str("ERR could not write the key");
        // SAFETY: `ptr` is open for writing; DMA is asked for again after the truncation,
        // as the API requires, and written within the length it returns
        unsafe {
            let mut len = 0usize;
            let mut p = std::ptr::null_mut();
            if (api.key_type)(self.ptr) == STRING {
                p = (api.dma)(self.ptr, &mut len, raw::REDISMODULE_WRITE as c_int);
            }
            if p.is_null() || len != bytes.len() {
                if (api.truncate)(self.ptr, bytes.len()) != OK {
                    return Err(failed());
                }
                p = (api.dma)(self.ptr, &mut len, raw::REDISMODULE_WRITE as c_int);
            }
            if p.is_null() || len != bytes.len() {
                return Err(failed());
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), len);
            if (api.set_abs_expire)(self.ptr, at) != OK {
                return Err(failed());
            }
            (api.replicate)(
                self.ctx,
                c"SET".as_ptr(),
                c"sbcl".as_ptr(),
                self.name,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
                c"PXAT".as_ptr(),
                at,
            );
            (api.signal)(self.ctx, self.name);
            let events: [(c_int, &CStr); 2] = [
                (raw::REDISMODULE_NOTIFY_STRING, c"set"),
                (raw::REDISMODULE_NOTIFY_GENERIC, c"expire"),
            ];
            for (kind, event) in events {
                (api.notify)(self.ctx, kind, event.as_ptr(), self.name);
            }
        }
        Ok(())
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: opened by `open`, closed once
        unsafe { (self.close)(self.ptr) }
    }
}

/// Reply with an array of integers (no allocation).
pub fn reply_ints(ctx: Ctx, ints: &[i64]) {
    reply_array(ctx, ints.len());
    for &i in ints {
        reply_int(ctx, i);
    }
}

/// Reply with the header of an array of `len` elements (the elements follow).
pub fn reply_array(ctx: Ctx, len: usize) {
    if let Ok(api) = api() {
        // SAFETY: `ctx` is the command's context
        unsafe { (api.reply_array)(ctx, c_long::try_from(len).unwrap_or(0)) };
    }
}

/// Reply with one integer.
pub fn reply_int(ctx: Ctx, i: i64) {
    if let Ok(api) = api() {
        // SAFETY: `ctx` is the command's context
        unsafe { (api.reply_int)(ctx, i) };
    }
}
