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

use crate::log::{NewValue, Splice};

/// Redis's reply to a key of another type than a string.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

const MODE: c_int = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
pub(crate) const OK: c_int = raw::REDISMODULE_OK as c_int;
pub(crate) const EMPTY: c_int = raw::REDISMODULE_KEYTYPE_EMPTY as c_int;
const STRING: c_int = raw::REDISMODULE_KEYTYPE_STRING as c_int;

pub(crate) type Ctx = *mut raw::RedisModuleCtx;
pub(crate) type Name = *mut raw::RedisModuleString;
pub(crate) type RawKey = *mut raw::RedisModuleKey;

/// The module API functions the commands use, all present since Redis 6.2.2 (taken once
/// at load by [`load_api`]).
pub(crate) struct Api {
    open: unsafe extern "C" fn(Ctx, Name, c_int) -> RawKey,
    close: unsafe extern "C" fn(RawKey),
    pub(crate) key_type: unsafe extern "C" fn(RawKey) -> c_int,
    dma: unsafe extern "C" fn(RawKey, *mut usize, c_int) -> *mut c_char,
    truncate: unsafe extern "C" fn(RawKey, usize) -> c_int,
    pub(crate) set_abs_expire: unsafe extern "C" fn(RawKey, raw::mstime_t) -> c_int,
    delete: unsafe extern "C" fn(RawKey) -> c_int,
    pub(crate) replicate: unsafe extern "C" fn(Ctx, *const c_char, *const c_char, ...) -> c_int,
    signal: unsafe extern "C" fn(Ctx, Name) -> c_int,
    notify: unsafe extern "C" fn(Ctx, c_int, *const c_char, Name) -> c_int,
    reply_array: unsafe extern "C" fn(Ctx, c_long) -> c_int,
    reply_int: unsafe extern "C" fn(Ctx, c_longlong) -> c_int,
    /// The word `PXAT`, made once and kept for the module's life: each replicated `SET`
    /// takes a reference to it instead of a string of its own.
    pxat: Word,
}

/// A string of Redis's, made at load and never freed (so never dangling).
struct Word(Name);

// SAFETY: the string is only read and counted by Redis on its main thread, where every
// command runs; the module never writes it
unsafe impl Send for Word {}
// SAFETY: as above
unsafe impl Sync for Word {}

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
                delete: raw::RedisModule_DeleteKey?,
                replicate: raw::RedisModule_Replicate?,
                signal: raw::RedisModule_SignalModifiedKey?,
                notify: raw::RedisModule_NotifyKeyspaceEvent?,
                reply_array: raw::RedisModule_ReplyWithArray?,
                reply_int: raw::RedisModule_ReplyWithLongLong?,
                pxat: {
                    let create = raw::RedisModule_CreateString?;
                    // no context: a string the module owns, not freed at the command's end
                    let w = create(std::ptr::null_mut(), c"PXAT".as_ptr(), 4);
                    if w.is_null() {
                        return None;
                    }
                    Word(w)
                },
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

pub(crate) fn api() -> Result<&'static Api, RedisError> {
    API.get().ok_or(RedisError::Str(
        "ERR the server lacks a module API function floodgate needs",
    ))
}

/// An open key (read and write mode), closed on drop.
pub struct Key {
    pub(crate) ctx: Ctx,
    pub(crate) name: Name,
    pub(crate) ptr: RawKey,
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
        let at = expiry(expire_at_ms, bytes.len())?;
        // SAFETY: `ptr` is open for writing; DMA is asked for again after the truncation,
        // as the API requires, and written within the length it returns
        unsafe {
            let (mut p, len) = self.dma_write(api);
            if p.is_null() || len != bytes.len() {
                p = self.resize(api, bytes.len())?;
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            self.written(api, p, bytes.len(), at)
        }
    }

    /// Write `splice` over the value in place (its kept bytes moved, its head and tail
    /// written around them), with the absolute expiry `expire_at_ms`, and replicate `SET
    /// key <the new value> PXAT expire_at_ms`. `splice` is of the value [`Key::value`]
    /// returned.
    pub fn splice(&mut self, splice: &Splice, expire_at_ms: u64) -> Result<(), RedisError> {
        let api = api()?;
        let new_len = splice.len();
        let at = expiry(expire_at_ms, new_len)?;
        // SAFETY: `ptr` is open for writing; every copy stays within the value's length
        // (the larger of the old and the new, the key grown first and shrunk last); DMA is
        // asked for again after each truncation
        unsafe {
            let (mut p, old_len) = self.dma_write(api);
            let old_len = if p.is_null() { 0 } else { old_len };
            if splice.keep.end > old_len {
                return Err(RedisError::Str("ERR could not write the key"));
            }
            if new_len > old_len {
                p = self.resize(api, new_len)?;
            }
            let (head, keep) = (splice.head.len(), splice.keep.len());
            std::ptr::copy(p.add(splice.keep.start), p.add(head), keep);
            std::ptr::copy_nonoverlapping(splice.head.as_ptr(), p, head);
            std::ptr::copy_nonoverlapping(
                splice.tail.as_ptr(),
                p.add(head + keep),
                splice.tail.len(),
            );
            if new_len < old_len {
                p = self.resize(api, new_len)?;
            }
            self.written(api, p, new_len, at)
        }
    }

    /// Delete the key, replicate `DEL key`, signal it modified and notify the `del` event;
    /// nothing when there is no key.
    pub fn delete(&mut self) -> Result<(), RedisError> {
        let api = api()?;
        // SAFETY: `ptr` is open for writing
        unsafe {
            if (api.key_type)(self.ptr) == EMPTY {
                return Ok(());
            }
            if (api.delete)(self.ptr) != OK {
                return Err(RedisError::Str("ERR could not delete the key"));
            }
            (api.replicate)(self.ctx, c"DEL".as_ptr(), c"s".as_ptr(), self.name);
        }
        self.changed(&[(raw::REDISMODULE_NOTIFY_GENERIC, c"del")])
    }

    /// Signal the key modified and notify `events` (kind, name) on it.
    pub(crate) fn changed(&self, events: &[(c_int, &CStr)]) -> Result<(), RedisError> {
        let api = api()?;
        // SAFETY: the command's context and one of its keys
        unsafe {
            (api.signal)(self.ctx, self.name);
            for &(kind, event) in events {
                (api.notify)(self.ctx, kind, event.as_ptr(), self.name);
            }
        }
        Ok(())
    }

    /// Write `value` (whole, or spliced from the value read) with the absolute expiry
    /// `expire_at_ms`.
    pub fn write(&mut self, value: &NewValue, expire_at_ms: u64) -> Result<(), RedisError> {
        match value {
            NewValue::Whole(b) => self.store(b, expire_at_ms),
            NewValue::Splice(s) => self.splice(s, expire_at_ms),
        }
    }

    /// The value for writing in place and its length (null: no string value).
    unsafe fn dma_write(&mut self, api: &Api) -> (*mut u8, usize) {
        let mut len = 0usize;
        // SAFETY: `ptr` is an open key
        unsafe {
            if (api.key_type)(self.ptr) != STRING {
                return (std::ptr::null_mut(), 0);
            }
            let p = (api.dma)(self.ptr, &mut len, raw::REDISMODULE_WRITE as c_int);
            (p.cast::<u8>(), len)
        }
    }

    /// Resize the value to `len` bytes (its first bytes kept) and take it again for
    /// writing.
    unsafe fn resize(&mut self, api: &Api, len: usize) -> Result<*mut u8, RedisError> {
        let failed = || RedisError::Str("ERR could not write the key");
        // SAFETY: `ptr` is open for writing
        unsafe {
            if (api.truncate)(self.ptr, len) != OK {
                return Err(failed());
            }
            let (p, got) = self.dma_write(api);
            if p.is_null() || got != len {
                return Err(failed());
            }
            Ok(p)
        }
    }

    /// The value at `p` (`len` bytes) written: its expiry set, `SET key value PXAT at`
    /// replicated, the key signalled modified and the events notified.
    unsafe fn written(
        &mut self,
        api: &Api,
        p: *const u8,
        len: usize,
        at: raw::mstime_t,
    ) -> Result<(), RedisError> {
        // SAFETY: `ptr` is open for writing, `p` its value of `len` bytes
        unsafe {
            if (api.set_abs_expire)(self.ptr, at) != OK {
                return Err(RedisError::Str("ERR could not write the key"));
            }
            // `PXAT` and the millisecond as bytes: one string made for the millisecond
            // (a number, `l`, takes two), none for `PXAT`
            let mut digits = crate::value::Bytes::new();
            digits.push_decimal(at.unsigned_abs());
            (api.replicate)(
                self.ctx,
                c"SET".as_ptr(),
                c"sbsb".as_ptr(),
                self.name,
                p.cast::<c_char>(),
                len,
                api.pxat.0,
                digits.as_ptr().cast::<c_char>(),
                digits.len(),
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

/// `expire_at_ms` as Redis's time, for a value of `len` bytes (neither may be 0).
fn expiry(expire_at_ms: u64, len: usize) -> Result<raw::mstime_t, RedisError> {
    let at = raw::mstime_t::try_from(expire_at_ms)
        .map_err(|_| RedisError::Str("ERR expiry out of range"))?;
    if len == 0 || at <= 0 {
        return Err(RedisError::Str("ERR nothing to store"));
    }
    Ok(at)
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
