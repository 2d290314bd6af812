//! The commands as Redis sees them: arguments in, keys read and written through the
//! module API, the effect replicated. The decisions are made in [`crate::throttle`].
// redis-module's `redis_module!` expands to the module's FFI entry points here.
#![allow(unsafe_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use floodgate_core::Nanos;

use crate::{decide, fg};
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
    let words = words(&args[2..]);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let stored = read_string(ctx, &args[1])?;
    let (reply, write) = crate::throttle::cell_throttle(&words, stored.as_deref(), now())
        .map_err(RedisError::String)?;
    if let Some(w) = write {
        store(ctx, &args[1], &w.bytes, w.expire_at_ms)?;
    }
    Ok(ints(reply))
}

/// The arguments as text (lossy: a non-UTF-8 word is refused by the parser that reads it).
fn words(args: &[RedisString]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a.as_slice()).into_owned())
        .collect()
}

/// Decide `policies` on `keys` all-or-nothing and store the writes; the outcome.
fn run_policies(
    ctx: &Context,
    keys: &[&RedisString],
    policies: &[fg::Policy],
) -> RedisResult<fg::Outcome> {
    let stored = keys
        .iter()
        .map(|k| read_string(ctx, k))
        .collect::<Result<Vec<_>, _>>()?;
    let stored: Vec<Option<&[u8]>> = stored.iter().map(Option::as_deref).collect();
    let outcome = fg::decide(policies, &stored, now()).map_err(RedisError::String)?;
    for w in &outcome.writes {
        store(ctx, keys[w.policy], &w.bytes, w.expire_at_ms)?;
    }
    Ok(outcome)
}

fn ints(reply: impl IntoIterator<Item = i64>) -> RedisValue {
    RedisValue::Array(reply.into_iter().map(RedisValue::Integer).collect())
}

/// `FG.THROTTLE algorithm key rate [cost]`.
fn fg_throttle(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if !(4..=5).contains(&args.len()) {
        return Err(RedisError::String(format!("ERR {}", fg::FG_THROTTLE_USAGE)));
    }
    let w = words(&args);
    let policy =
        fg::parse_policy(&w[1], &w[3], w.get(4).map(String::as_str)).map_err(RedisError::String)?;
    let mut outcome = run_policies(ctx, &[&args[2]], &[policy])?;
    Ok(ints(outcome.replies.swap_remove(0)))
}

/// `FG.MULTI n (algorithm key rate cost) x n`: all-or-nothing. The reply: `limited` (0/1)
/// for the whole request, then each policy's five integers.
fn fg_multi(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let usage = || RedisError::String(format!("ERR {}", fg::FG_MULTI_USAGE));
    let n: usize = args
        .get(1)
        .and_then(|a| std::str::from_utf8(a.as_slice()).ok())
        .and_then(|s| s.parse().ok())
        .filter(|&n| n >= 1)
        .ok_or_else(usage)?;
    if args.len()
        != n.checked_mul(4)
            .and_then(|g| g.checked_add(2))
            .ok_or_else(usage)?
    {
        return Err(usage());
    }
    let w = words(&args);
    let mut keys: Vec<&RedisString> = Vec::with_capacity(n);
    let mut policies = Vec::with_capacity(n);
    for g in 0..n {
        let at = 2 + 4 * g;
        let key = &args[at + 1];
        if keys.iter().any(|k| k.as_slice() == key.as_slice()) {
            return Err(RedisError::String(format!(
                "ERR key {:?} appears twice: give each policy its own key",
                w[at + 1]
            )));
        }
        keys.push(key);
        policies.push(
            fg::parse_policy(&w[at], &w[at + 2], Some(&w[at + 3]))
                .map_err(|e| RedisError::String(format!("{e} (policy {})", g + 1)))?,
        );
    }
    let outcome = run_policies(ctx, &keys, &policies)?;
    let mut reply = vec![RedisValue::Integer(i64::from(!outcome.allowed))];
    reply.extend(outcome.replies.into_iter().map(ints));
    Ok(RedisValue::Array(reply))
}

/// `FG.DECIDE`: the store's scripts' calls, answered by the module (see [`decide`]).
fn fg_decide(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let words: Vec<&[u8]> = args[1..].iter().map(RedisString::as_slice).collect();
    let req = decide::parse(&words).map_err(RedisError::String)?;
    let clock = now();
    let at = req
        .now
        .unwrap_or((clock.0 / 1_000_000_000, clock.0 % 1_000_000_000));
    let keys: Vec<&RedisString> = (0..req.checks.len())
        .map(|i| &args[1 + i * decide::GROUP])
        .collect();
    let stored = keys
        .iter()
        .map(|k| read_string(ctx, k))
        .collect::<Result<Vec<_>, _>>()?;
    let stored: Vec<Option<&[u8]>> = stored.iter().map(Option::as_deref).collect();
    let key_bytes: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let ran = decide::run(&req, &key_bytes, &stored, at).map_err(RedisError::String)?;
    // expiries run from the server's clock (the caller's instant may be another)
    let anchor_ms = clock.0 / 1_000_000;
    for w in &ran.writes {
        store(
            ctx,
            keys[w.check],
            &w.bytes,
            anchor_ms.saturating_add(w.ttl_ms),
        )?;
    }
    Ok(match ran.reply[..] {
        [one] if req.mode == decide::Mode::One => RedisValue::Integer(one),
        _ => RedisValue::Array(ran.reply.into_iter().map(RedisValue::Integer).collect()),
    })
}

redis_module::redis_module! {
    name: "floodgate",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    commands: [
        ["cl.throttle", cl_throttle, "write deny-oom fast", 1, 1, 1, ""],
        ["fg.throttle", fg_throttle, "write deny-oom fast", 2, 2, 1, ""],
        // keys at 3, 7, ...: the last is the 3rd word from the end
        ["fg.multi", fg_multi, "write deny-oom", 3, -3, 4, ""],
        // keys at 1, 9, ...: groups of 8 words, then mode, now_s and now_ns
        ["fg.decide", fg_decide, "write deny-oom", 1, -11, 8, ""],
    ],
}
