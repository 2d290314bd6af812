//! The commands as Redis sees them: arguments in, keys read and written through the
//! module API, the effect replicated. The decisions are made in [`crate::throttle`].
// redis-module's `redis_module!` expands to the module's FFI entry points here.
#![allow(unsafe_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use floodgate_core::Nanos;
use redis_module::{Context, KeyType, RedisError, RedisResult, RedisString, RedisValue};

/// The primary's clock, read once per command: nanoseconds since the Unix epoch
/// (`CLOCK_REALTIME`, the clock Redis `TIME` reads). Replicas never read it: the module
/// replicates the value it wrote, not the command.
fn now() -> Nanos {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(Nanos::from)
        .unwrap_or(Nanos::ZERO)
}

/// The string value at `key` (`None`: no key); an error for a key of another type.
fn read_string(ctx: &Context, key: &RedisString) -> Result<Option<Vec<u8>>, RedisError> {
    let k = ctx.open_key(key);
    match k.key_type() {
        KeyType::Empty => Ok(None),
        KeyType::String => Ok(k.read()?.map(<[u8]>::to_vec)),
        _ => Err(RedisError::Str(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        )),
    }
}

/// `SET key bytes PXAT ms` here, and the same command (the effect, with its absolute
/// expiry) to replicas and the AOF.
fn store(ctx: &Context, key: &RedisString, bytes: &[u8], expire_at_ms: u64) -> RedisResult<()> {
    let at = expire_at_ms.to_string();
    let args: [&[u8]; 4] = [key.as_slice(), bytes, b"PXAT", at.as_bytes()];
    ctx.call("SET", &args[..])?;
    ctx.replicate("SET", &args[..]);
    Ok(())
}

/// `CL.THROTTLE key max_burst count period [quantity]`.
fn cl_throttle(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if !(5..=6).contains(&args.len()) {
        return Err(RedisError::String(format!(
            "ERR {}",
            floodgate_core::cell::THROTTLE_USAGE
        )));
    }
    let words: Vec<String> = args[2..]
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_slice()).into_owned())
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let stored = read_string(ctx, &args[1])?;
    let (reply, write) = crate::throttle::cell_throttle(&words, stored.as_deref(), now())
        .map_err(RedisError::String)?;
    if let Some(w) = write {
        store(ctx, &args[1], &w.bytes, w.expire_at_ms)?;
    }
    Ok(RedisValue::Array(
        reply.into_iter().map(RedisValue::Integer).collect(),
    ))
}

redis_module::redis_module! {
    name: "floodgate",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    commands: [
        ["cl.throttle", cl_throttle, "write deny-oom fast", 1, 1, 1, ""],
    ],
}
