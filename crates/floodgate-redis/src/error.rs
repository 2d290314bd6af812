//! Typed errors of the Redis store. Every variant names what was wrong.

use std::time::Duration;

use floodgate_core::ConfigError;
use thiserror::Error;

/// Everything that can go wrong talking to Redis or preparing a call.
#[derive(Debug, Error)]
pub enum Error {
    /// The limiter's parameters are invalid for the core itself.
    #[error("invalid limit: {0}")]
    Config(#[from] ConfigError),
    /// The parameters are valid for the core but outside what the Lua scripts compute
    /// exactly (see the crate docs: durations and nano-unit amounts below 2^50, GCRA's
    /// burst tolerance below 2^53 - 2^30 ns).
    #[error("{what} is outside what the Redis scripts compute exactly: {detail}")]
    Domain {
        /// The parameter.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// A user key longer than the configured maximum.
    #[error(
        "key of {len} bytes is longer than the maximum of {max} bytes (StoreConfig::max_key_len)"
    )]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A key prefix that would break the hash tag.
    #[error(
        "invalid key prefix {prefix:?}: it must not contain '{{' or '}}' (they would move the hash tag)"
    )]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A caller-supplied time at or beyond 2^63 ns (year 2262).
    #[error("time {now_ns} ns is out of range: caller times must be below 2^63 ns")]
    TimeOutOfRange {
        /// The time given.
        now_ns: u64,
    },
    /// The Redis URL does not parse.
    #[error("invalid Redis URL {url:?}: {source}")]
    Url {
        /// The URL given (password removed).
        url: String,
        /// The parser's reason.
        source: redis::RedisError,
    },
    /// Could not connect (refused, unreachable, TLS or auth failure).
    #[error("cannot connect to Redis at {target}: {source}")]
    Connect {
        /// Where.
        target: String,
        /// Why.
        source: redis::RedisError,
    },
    /// The peer answered, but not as Redis does (e.g. another protocol on that port).
    #[error("the server at {target} does not speak Redis: {detail}")]
    NotRedis {
        /// Where.
        target: String,
        /// What it answered or which error parsing it gave.
        detail: String,
    },
    /// `ModuleUse::Always`, and the server does not have the Redis module loaded (or has
    /// a version without reserve, settle and in-flight leases).
    #[error(
        "the Redis at {target} does not have floodgate's module loaded (FG.DECIDE is unknown, or FG.ACQUIRE: a module too old), and the store is configured to use it always"
    )]
    ModuleMissing {
        /// Where.
        target: String,
    },
    /// No answer within the per-call timeout.
    #[error("Redis did not answer within {after:?}")]
    Timeout {
        /// The timeout that expired.
        after: Duration,
    },
    /// Redis answered with an error, or the connection failed mid-call.
    #[error("Redis error: {0}")]
    Redis(#[from] redis::RedisError),
    /// An all-or-nothing check over limiters on different stores.
    #[error(
        "an all-or-nothing check needs every limiter on one store; check {index} is on another"
    )]
    MixedStores {
        /// The first check on another store than check 0's.
        index: usize,
    },
    /// A settle that cannot be applied: a charge no reservation of this limiter made, or
    /// a debt beyond what the scripts hold exactly. Nothing was changed.
    #[error("cannot settle: {0}")]
    Settle(String),
    /// A script answered something other than what it returns.
    #[error("unexpected reply from the {script} script: {detail}")]
    BadReply {
        /// The script.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl Error {
    /// Whether this error is about Redis being unreachable, slow or failing (as opposed to
    /// bad input from the caller): the fault policy applies to these.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::NotRedis { .. }
                | Error::Timeout { .. }
                | Error::Redis(_)
                | Error::BadReply { .. }
        )
    }
}
