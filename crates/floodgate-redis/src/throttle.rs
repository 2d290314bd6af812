//! `CL.THROTTLE key max_burst count period [quantity]` without the redis-cell module: the
//! GCRA script answers the same five integers for the same call sequence.

use floodgate_core::{AnyAlgorithm, Nanos};

use crate::error::Error;
use crate::scripts::{Now, ScriptCall};
use crate::store::RedisStore;

/// The arguments live in floodgate-core, so that every `CL.THROTTLE` surface (this store,
/// the RESP door, the Redis module) parses them in one place.
pub use floodgate_core::cell::{ThrottleArgError, ThrottleArgs};

impl RedisStore {
    /// `CL.THROTTLE user max_burst count period quantity`: the five integers redis-cell
    /// replies (`[limited, limit, remaining, retry_after_s, reset_after_s]`), computed by
    /// the GCRA script on Redis `TIME`. No fault policy: errors are returned.
    pub async fn throttle(&self, user: &[u8], args: &ThrottleArgs) -> Result<[i64; 5], Error> {
        self.throttle_with(user, args, Now::Redis).await
    }

    /// [`throttle`](Self::throttle) at the caller's instant (ns since the epoch).
    pub async fn throttle_at(
        &self,
        user: &[u8],
        args: &ThrottleArgs,
        now: Nanos,
    ) -> Result<[i64; 5], Error> {
        self.throttle_with(user, args, Now::Caller(now)).await
    }

    async fn throttle_with(
        &self,
        user: &[u8],
        args: &ThrottleArgs,
        now: Now,
    ) -> Result<[i64; 5], Error> {
        let call = ScriptCall::new(&AnyAlgorithm::Gcra(args.gcra()?))?;
        let key = self.keys.key(call.kind(), user)?;
        let pad = self.config.expiry_padding.as_nanos().div_ceil(1_000_000) as u64;
        let reply = self
            .decide_one(&call, &key, now, args.quantity, pad)
            .await?;
        Ok(call.decision(&reply, args.quantity)?.throttle_reply())
    }
}
