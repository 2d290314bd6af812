//! The commands as Redis sees them: arguments in, keys read and written through the
//! module API, the effect replicated. The decisions are made in [`crate::throttle`].
// redis-module's `redis_module!` expands to the module's FFI entry points here.
#![allow(unsafe_code)]

use std::borrow::Cow;
use std::collections::HashSet;
use std::ffi::{CStr, c_int};
use std::mem::ManuallyDrop;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use floodgate_core::Nanos;

use crate::keys::{Key, reply_array, reply_int, reply_ints};
use crate::leases::{self, LeaseCall};
use crate::zset::Only;
use crate::{decide, fg, limits, settle};
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue, Status, raw};
use smallvec::SmallVec;

/// The primary's clock, read once per command: nanoseconds since the Unix epoch
/// (`CLOCK_REALTIME`, the clock Redis `TIME` reads). Replicas never read it: the module
/// replicates the value it wrote, not the command.
fn now() -> Nanos {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(Nanos::from)
        .unwrap_or(Nanos::ZERO)
}

/// An argument as text, borrowed when it is UTF-8 (a word that is not is refused by the
/// parser that reads it).
fn text(a: &RedisString) -> Cow<'_, str> {
    String::from_utf8_lossy(a.as_slice())
}

/// `CL.THROTTLE key max_burst count period [quantity]`.
fn cl_throttle(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if !(5..=6).contains(&args.len()) {
        return Err(RedisError::String(format!(
            "ERR {}",
            floodgate_core::cell::THROTTLE_USAGE
        )));
    }
    let (burst, count, period) = (text(&args[2]), text(&args[3]), text(&args[4]));
    let quantity = args.get(5).map(text);
    let words: [&str; 4] = [&burst, &count, &period, quantity.as_deref().unwrap_or("")];
    let words = &words[..args.len() - 2];
    let mut key = Key::open(ctx.get_raw(), &args[1])?;
    let (reply, write) =
        crate::throttle::cell_throttle(words, key.value()?, now()).map_err(RedisError::String)?;
    if let Some(w) = write {
        key.store(&w.bytes, w.expire_at_ms)?;
    }
    reply_ints(ctx.get_raw(), &reply);
    Ok(RedisValue::NoReply)
}

/// Decide `policies` on `names` all-or-nothing and store the writes; the outcome.
fn run_policies(
    ctx: &Context,
    names: &[&RedisString],
    policies: &[fg::Policy],
) -> RedisResult<fg::Outcome> {
    let mut keys = names
        .iter()
        .map(|n| Key::open(ctx.get_raw(), n))
        .collect::<Result<Vec<_>, _>>()?;
    let outcome = {
        let stored = keys.iter().map(Key::value).collect::<Result<Vec<_>, _>>()?;
        fg::decide(policies, &stored, now()).map_err(RedisError::String)?
    };
    // every expiry checked before the first write
    for w in &outcome.writes {
        limits::expire_at(w.expire_at_ms, 0).map_err(RedisError::String)?;
    }
    for w in &outcome.writes {
        let key = keys.get_mut(w.policy).ok_or(NO_KEY)?;
        key.store(&w.bytes, w.expire_at_ms)?;
    }
    Ok(outcome)
}

/// A write naming a key the call did not open (never: the writes are the call's).
const NO_KEY: RedisError = RedisError::Str("ERR a write names a key the call did not open");

/// `FG.THROTTLE algorithm key rate [cost]`.
fn fg_throttle(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if !(4..=5).contains(&args.len()) {
        return Err(RedisError::String(format!("ERR {}", fg::FG_THROTTLE_USAGE)));
    }
    let policy = policy_of(&args[1], &args[3], args.get(4)).map_err(RedisError::String)?;
    let mut key = Key::open(ctx.get_raw(), &args[2])?;
    let (reply, write) =
        fg::decide_one(&policy, key.value()?, now()).map_err(RedisError::String)?;
    if let Some(w) = write {
        key.write(&w.value, w.expire_at_ms)?;
    }
    reply_ints(ctx.get_raw(), &reply);
    Ok(RedisValue::NoReply)
}

/// The policies built so far. A static, not a thread local: a thread local with a
/// destructor would keep the library mapped after `MODULE UNLOAD`.
static POLICIES: Mutex<fg::PolicyCache> = Mutex::new(fg::PolicyCache::new());

/// [`fg::parse_policy`] of a call's words through the cache, the algorithm and rate
/// words measured before they are read.
fn policy_of(
    algorithm: &RedisString,
    rate: &RedisString,
    cost: Option<&RedisString>,
) -> Result<fg::Policy, String> {
    limits::word("algorithm", algorithm.as_slice().len())?;
    limits::word("rate", rate.as_slice().len())?;
    let (algorithm, rate, cost) = (text(algorithm), text(rate), cost.map(text));
    let cost = cost.as_deref();
    match POLICIES.lock() {
        Ok(mut cache) => cache.policy(&algorithm, &rate, cost),
        // a panic while the cache was held: build without it
        Err(_) => fg::parse_policy(&algorithm, &rate, cost),
    }
}

/// `FG.MULTI n (algorithm key rate cost) x n`: all-or-nothing. The reply: `limited` (0/1)
/// for the whole request, then each policy's five integers.
fn fg_multi(ctx: &Context, args: &[RedisString]) -> RedisResult {
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
    limits::checks("FG.MULTI", "policies", n).map_err(RedisError::String)?;
    let mut keys: fg::Few<&RedisString> = fg::Few::with_capacity(n);
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(n);
    let mut policies: fg::Few<fg::Policy> = fg::Few::with_capacity(n);
    for g in 0..n {
        let at = 2 + 4 * g;
        let key = &args[at + 1];
        if !seen.insert(key.as_slice()) {
            return Err(RedisError::String(format!(
                "ERR key {} appears twice: give each policy its own key",
                limits::shown(key.as_slice())
            )));
        }
        keys.push(key);
        policies.push(
            policy_of(&args[at], &args[at + 2], Some(&args[at + 3]))
                .map_err(|e| RedisError::String(format!("{e} (policy {})", g + 1)))?,
        );
    }
    let outcome = run_policies(ctx, &keys, &policies)?;
    let raw = ctx.get_raw();
    reply_array(raw, 1 + outcome.replies.len());
    reply_int(raw, i64::from(!outcome.allowed));
    for r in &outcome.replies {
        reply_ints(raw, r);
    }
    Ok(RedisValue::NoReply)
}

/// `FG.DECIDE`: the store's scripts' calls, answered by the module (see [`decide`]).
fn fg_decide(ctx: &Context, args: &[RedisString]) -> RedisResult {
    // one check's words without an allocation
    let req = decide::parse(&words(args)).map_err(RedisError::String)?;
    let clock = now();
    let at = req
        .now
        .unwrap_or((clock.0 / 1_000_000_000, clock.0 % 1_000_000_000));
    // expiries run from the server's clock (the caller's instant may be another)
    let anchor_ms = clock.0 / 1_000_000;
    if req.mode == decide::Mode::One {
        // the store's usual call: one check, one key
        let mut key = Key::open(ctx.get_raw(), &args[1])?;
        let (reply, write) = decide::run_one(&req, key.value()?, at).map_err(RedisError::String)?;
        if let Some(w) = write {
            key.write(&w.value, expire_at(anchor_ms, w.ttl_ms)?)?;
        }
        match reply[..] {
            [one] => reply_int(ctx.get_raw(), one),
            _ => reply_ints(ctx.get_raw(), &reply),
        }
        return Ok(RedisValue::NoReply);
    }
    // each distinct key opened once, at its first check, and read in place
    let names: Vec<&[u8]> = (0..req.checks.len())
        .map(|i| args[1 + i * decide::GROUP].as_slice())
        .collect();
    let (slot, distinct) = decide::slots(&names);
    let mut keys: Vec<Key> = Vec::with_capacity(distinct);
    for (i, &k) in slot.iter().enumerate() {
        if k == keys.len() {
            keys.push(Key::open(ctx.get_raw(), &args[1 + i * decide::GROUP])?);
        }
    }
    let ran = {
        let values = keys.iter().map(Key::value).collect::<Result<Vec<_>, _>>()?;
        decide::run(&req, &slot, &values, at).map_err(RedisError::String)?
    };
    // every expiry computed before the first write: an error writes nothing
    let expiries = ran
        .writes
        .iter()
        .map(|w| expire_at(anchor_ms, w.ttl_ms))
        .collect::<Result<Vec<_>, _>>()?;
    for (w, at) in ran.writes.iter().zip(expiries) {
        keys.get_mut(w.key).ok_or(NO_KEY)?.store(&w.bytes, at)?;
    }
    reply_ints(ctx.get_raw(), &ran.reply);
    Ok(RedisValue::NoReply)
}

/// The absolute expiry `ttl_ms` after `anchor_ms` ([`limits::expire_at`]).
fn expire_at(anchor_ms: u64, ttl_ms: u64) -> RedisResult<u64> {
    limits::expire_at(anchor_ms, ttl_ms).map_err(RedisError::String)
}

/// The instant a command decides at (the caller's, or the primary's clock) and the
/// millisecond its expiries count from (the primary's clock).
fn instant(caller: Option<(u64, u64)>) -> ((u64, u64), u64) {
    let clock = now();
    let at = caller.unwrap_or((clock.0 / 1_000_000_000, clock.0 % 1_000_000_000));
    (at, clock.0 / 1_000_000)
}

/// `FG.RESERVE`: the settle script's reserve, answered by the module (see [`settle`]).
fn fg_reserve(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let req = settle::parse_reserve(&words(args)).map_err(RedisError::String)?;
    let (at, anchor_ms) = instant(req.now);
    let mut key = Key::open(ctx.get_raw(), &args[1])?;
    let (reply, write) = settle::reserve(&req, key.value()?, at).map_err(RedisError::String)?;
    if let Some(w) = write {
        key.write(&w.value, expire_at(anchor_ms, w.ttl_ms)?)?;
    }
    reply_ints(ctx.get_raw(), &reply);
    Ok(RedisValue::NoReply)
}

/// `FG.SETTLE`: the settle script's settle, answered by the module (see [`settle`]).
fn fg_settle(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let req = settle::parse_settle(&words(args)).map_err(RedisError::String)?;
    let (at, anchor_ms) = instant(req.req.now);
    let mut key = Key::open(ctx.get_raw(), &args[1])?;
    let (reply, effect) = settle::settle(&req, key.value()?, at).map_err(RedisError::String)?;
    match effect {
        settle::Effect::None => {}
        settle::Effect::Delete => key.delete()?,
        settle::Effect::Store(bytes, ttl_ms) => {
            key.store(&bytes, expire_at(anchor_ms, ttl_ms)?)?;
        }
    }
    reply_ints(ctx.get_raw(), &reply);
    Ok(RedisValue::NoReply)
}

/// A lease command's instant in us (the caller's, or the primary's clock, as Redis
/// `TIME` gives it) and the millisecond its expiries count from (the primary's clock).
fn lease_instant(call: &LeaseCall) -> (u64, u64) {
    let clock = now();
    (call.now_us.unwrap_or(clock.0 / 1_000), clock.0 / 1_000_000)
}

/// The words after the command's name.
fn words(args: &[RedisString]) -> SmallVec<[&[u8]; 16]> {
    args[1..].iter().map(RedisString::as_slice).collect()
}

/// The script's `expire_at_latest`: the key expires at its latest lease (rounded up to
/// the ms, plus the padding), or is deleted when that lease is not after now.
fn expire_at_latest(key: &mut Key, now_us: u64, anchor_ms: u64, pad_ms: u64) -> RedisResult<()> {
    match key.zedge(true)? {
        Some(l) if l as u64 > now_us => {
            let at = leases::expire_at(l as u64, now_us, pad_ms, anchor_ms)
                .map_err(RedisError::String)?;
            key.expire_at(at)?;
        }
        Some(_) => key.delete()?,
        None => {}
    }
    Ok(())
}

/// Check, before a lease ending at `score_us` is written, the expiry the key can then be
/// given: at most that of its latest lease, this one or another.
fn check_expiry(
    key: &Key,
    score_us: u64,
    now_us: u64,
    anchor_ms: u64,
    pad_ms: u64,
) -> RedisResult<()> {
    let latest = key.zedge(true)?.map_or(0, |l| l as u64).max(score_us);
    leases::expire_at(latest, now_us, pad_ms, anchor_ms).map_err(RedisError::String)?;
    Ok(())
}

/// `FG.ACQUIRE key id limit ttl_us pad_ms now_us|redis`: the in-flight script's acquire.
fn fg_acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = leases::parse_acquire(&words(args)).map_err(RedisError::String)?;
    let (now_us, anchor_ms) = lease_instant(&call);
    let mut key = Key::open(ctx.get_raw(), &args[1])?;
    key.is_zset()?;
    // the expiry the new lease would give the key, checked before anything is written
    check_expiry(&key, now_us + call.ttl_us, now_us, anchor_ms, call.pad_ms)?;
    key.zremrange_upto(now_us)?;
    let n = key.zcard()? as u64;
    let since = |score: Option<f64>| score.map_or(0, |s| s as i64 - now_us as i64);
    let reply = if n < call.limit {
        if !key.zadd(now_us + call.ttl_us, &args[2], Only::New)? {
            reply_ints(ctx.get_raw(), &[-1]);
            return Ok(RedisValue::NoReply);
        }
        expire_at_latest(&mut key, now_us, anchor_ms, call.pad_ms)?;
        [1, n as i64 + 1, 0, since(key.zedge(true)?), now_us as i64]
    } else {
        let first = since(key.zedge(false)?);
        [0, n as i64, first, since(key.zedge(true)?), now_us as i64]
    };
    reply_ints(ctx.get_raw(), &reply);
    Ok(RedisValue::NoReply)
}

/// `FG.RENEW key id ttl_us pad_ms now_us|redis`: the in-flight script's renew.
fn fg_renew(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = leases::parse_renew(&words(args)).map_err(RedisError::String)?;
    let (now_us, anchor_ms) = lease_instant(&call);
    let mut key = Key::open(ctx.get_raw(), &args[1])?;
    let live = key.zscore(&args[2])?.is_some_and(|s| s > now_us as f64);
    if live {
        check_expiry(&key, now_us + call.ttl_us, now_us, anchor_ms, call.pad_ms)?;
        key.zadd(now_us + call.ttl_us, &args[2], Only::Existing)?;
        expire_at_latest(&mut key, now_us, anchor_ms, call.pad_ms)?;
    }
    reply_ints(ctx.get_raw(), &[i64::from(live)]);
    Ok(RedisValue::NoReply)
}

/// `FG.RELEASE key id now_us|redis`: the in-flight script's release.
fn fg_release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let call = leases::parse_release(&words(args)).map_err(RedisError::String)?;
    let (now_us, _) = lease_instant(&call);
    let mut key = Key::open(ctx.get_raw(), &args[1])?;
    let Some(score) = key.zscore(&args[2])? else {
        reply_ints(ctx.get_raw(), &[0]);
        return Ok(RedisValue::NoReply);
    };
    key.zrem(&args[2])?;
    reply_ints(ctx.get_raw(), &[i64::from(score > now_us as f64)]);
    Ok(RedisValue::NoReply)
}

/// At load: refuse a server without the key API the commands use, and take over the
/// signalling of modified keys (done when a key is written, not whenever one is opened
/// for writing).
fn init(_ctx: &Context, _args: &[RedisString]) -> Status {
    if !crate::keys::load_api()
        || !crate::zset::load_api()
        || create_commands(_ctx.get_raw()) == Status::Err
    {
        return Status::Err;
    }
    // SAFETY: called once, at load, with the module's context
    unsafe {
        if let Some(set) = redis_module::raw::RedisModule_SetModuleOptions {
            set(
                _ctx.get_raw(),
                redis_module::raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as i32,
            );
        }
    }
    Status::Ok
}

/// A command's handler: the arguments (the command's name first) borrowed.
type Handler = fn(&Context, &[RedisString]) -> RedisResult;

/// Run `handler` on the command's arguments, borrowed from Redis for the call: neither
/// retained and released one by one nor collected into a vector on the heap, as
/// redis-module's own entry points do (up to 16 arguments in place).
fn dispatch(ctx: *mut raw::RedisModuleCtx, argv: *mut Arg, argc: c_int, handler: Handler) -> c_int {
    let context = Context::new(ctx);
    let n = usize::try_from(argc).unwrap_or(0);
    let ptrs: &[Arg] = if argv.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid argument strings at `argv` for the call
        unsafe { std::slice::from_raw_parts(argv, n) }
    };
    let held: SmallVec<[ManuallyDrop<RedisString>; 16]> = ptrs
        .iter()
        .map(|&p| ManuallyDrop::new(RedisString::from_redis_module_string(ctx, p)))
        .collect();
    // SAFETY: `ManuallyDrop<T>` has the layout of `T`; the strings are Redis's, valid for
    // the call, and never freed here (not dropped)
    let args: &[RedisString] =
        unsafe { std::slice::from_raw_parts(held.as_ptr().cast::<RedisString>(), held.len()) };
    context.reply(handler(&context, args)) as c_int
}

type Arg = *mut raw::RedisModuleString;

macro_rules! entry {
    ($($entry:ident => $handler:ident),* $(,)?) => {$(
        extern "C" fn $entry(ctx: *mut raw::RedisModuleCtx, argv: *mut Arg, argc: c_int) -> c_int {
            dispatch(ctx, argv, argc, $handler)
        }
    )*};
}

entry! {
    cl_throttle_entry => cl_throttle,
    fg_throttle_entry => fg_throttle,
    fg_multi_entry => fg_multi,
    fg_decide_entry => fg_decide,
    fg_reserve_entry => fg_reserve,
    fg_settle_entry => fg_settle,
    fg_acquire_entry => fg_acquire,
    fg_renew_entry => fg_renew,
    fg_release_entry => fg_release,
}

type Entry = extern "C" fn(*mut raw::RedisModuleCtx, *mut Arg, c_int) -> c_int;

/// The commands: name, entry point, flags, first key, last key, key step.
const COMMANDS: [(&CStr, Entry, &CStr, c_int, c_int, c_int); 9] = [
    (
        c"cl.throttle",
        cl_throttle_entry,
        c"write deny-oom fast",
        1,
        1,
        1,
    ),
    (
        c"fg.throttle",
        fg_throttle_entry,
        c"write deny-oom fast",
        2,
        2,
        1,
    ),
    // keys at 3, 7, ...: the last is the 3rd word from the end
    (c"fg.multi", fg_multi_entry, c"write deny-oom", 3, -3, 4),
    // keys at 1, 9, ...: groups of 8 words, then mode, now_s and now_ns
    (c"fg.decide", fg_decide_entry, c"write deny-oom", 1, -11, 8),
    (
        c"fg.reserve",
        fg_reserve_entry,
        c"write deny-oom fast",
        1,
        1,
        1,
    ),
    (
        c"fg.settle",
        fg_settle_entry,
        c"write deny-oom fast",
        1,
        1,
        1,
    ),
    (
        c"fg.acquire",
        fg_acquire_entry,
        c"write deny-oom fast",
        1,
        1,
        1,
    ),
    (c"fg.renew", fg_renew_entry, c"write deny-oom fast", 1, 1, 1),
    (c"fg.release", fg_release_entry, c"write fast", 1, 1, 1),
];

/// Register [`COMMANDS`].
fn create_commands(ctx: *mut raw::RedisModuleCtx) -> Status {
    // SAFETY: called at load with the module's context
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return Status::Err;
    };
    for (name, entry, flags, first, last, step) in COMMANDS {
        // SAFETY: the names and flags are C strings that live for the program
        let made = unsafe {
            create(
                ctx,
                name.as_ptr(),
                Some(entry),
                flags.as_ptr(),
                first,
                last,
                step,
            )
        };
        if made != raw::REDISMODULE_OK as c_int {
            return Status::Err;
        }
    }
    Status::Ok
}

redis_module::redis_module! {
    name: "floodgate",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
}
