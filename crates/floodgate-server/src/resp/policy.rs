//! What the RESP door lets a caller choose: the key's size (at most
//! `limits.max_value_bytes`, as descriptor entries on the other doors), and, with
//! `resp.policies_only`, nothing but a configured policy's name: `CL.THROTTLE` and
//! `FG.ACQUIRE` (whose rate or limit the caller passes) are refused with
//! [`POLICIES_ONLY`], and `FG.THROTTLE <policy> <key> [<quantity>]` decides on the
//! config's policy, answering as `CL.THROTTLE` does.

use floodgate_engine::metrics::RequestOutcome;

use super::{Reply, RespService};
use crate::config::Caps;

/// `FG.THROTTLE`'s usage error.
pub const FG_THROTTLE_USAGE: &str = "Usage: FG.THROTTLE <policy> <key> [<quantity>]";

/// The refusal of `CL.THROTTLE` and `FG.ACQUIRE` under `resp.policies_only`; `{}` is the
/// command's name.
pub fn policies_only_error(command: &str) -> String {
    format!(
        "ERR {command} is disabled: this server decides on its configured policies only (resp.policies_only); use FG.THROTTLE <policy> <key> [<quantity>]"
    )
}

/// [`policies_only_error`]'s text for `CL.THROTTLE`, for the docs and tests.
pub const POLICIES_ONLY: &str = "ERR CL.THROTTLE is disabled: this server decides on its configured policies only (resp.policies_only); use FG.THROTTLE <policy> <key> [<quantity>]";

/// The position of the key in a command's arguments, for the commands that take one.
fn key_position(name: &str) -> Option<usize> {
    match name {
        "CL.THROTTLE" | "FG.ACQUIRE" | "FG.RENEW" | "FG.RELEASE" => Some(1),
        "FG.THROTTLE" | "FG.RESERVE" => Some(2),
        _ => None,
    }
}

impl RespService {
    /// The longest key callers may name, in bytes (the config's `limits.max_value_bytes`,
    /// reloaded with the rules).
    pub(super) fn max_key_bytes(&self) -> usize {
        self.engine.as_ref().map_or_else(
            || Caps::default().max_value_bytes,
            |e| e.current().rules.caps.max_value_bytes,
        )
    }

    /// The refusal of command `name` with `args`, when the key is too long or the caller
    /// chooses the rate where only policies may decide (counted as invalid requests);
    /// `None` to run it.
    pub(super) fn refusal(&self, name: &str, args: &[Vec<u8>]) -> Option<Reply> {
        let reply = if self.policies_only && matches!(name, "CL.THROTTLE" | "FG.ACQUIRE") {
            Reply::Error(policies_only_error(name))
        } else {
            let key = args.get(key_position(name)?)?;
            let max = self.max_key_bytes();
            if key.len() <= max {
                return None;
            }
            Reply::Error(format!(
                "ERR the key is {} bytes, more than the maximum of {max} (limits.max_value_bytes)",
                key.len()
            ))
        };
        self.metrics
            .request("resp", RequestOutcome::Invalid, std::time::Duration::ZERO);
        Some(reply)
    }

    /// `FG.THROTTLE <policy> <key> [<quantity>]`: `CL.THROTTLE`'s five integers (limited,
    /// limit, remaining, retry after s or -1, reset after s), decided on the policy.
    pub(super) async fn policy_throttle(&self, args: &[Vec<u8>]) -> Reply {
        let Some(engine) = &self.engine else {
            return Reply::Error("ERR FG.THROTTLE needs the server's policies".into());
        };
        if !(3..=4).contains(&args.len()) {
            return Reply::Error(format!("ERR {FG_THROTTLE_USAGE}"));
        }
        let quantity = match args.get(3) {
            None => 1,
            Some(q) => match std::str::from_utf8(q).ok().and_then(|s| s.parse().ok()) {
                Some(q) => q,
                None => {
                    return Reply::Error(format!(
                        "ERR quantity must be a non-negative integer, got {:?}",
                        String::from_utf8_lossy(&q[..q.len().min(64)])
                    ));
                }
            },
        };
        let policy = String::from_utf8_lossy(&args[1]);
        let key = String::from_utf8_lossy(&args[2]);
        let start = std::time::Instant::now();
        let (reply, outcome) = match engine.check_policy(&policy, &key, quantity).await {
            Ok(o) => match o.statuses.first().and_then(|s| s.limits.first()) {
                Some((_, d)) => {
                    let mut v = d.throttle_reply().to_vec();
                    v[0] = i64::from(o.over_limit);
                    let outcome = if o.over_limit {
                        RequestOutcome::Rejected
                    } else {
                        RequestOutcome::Passed
                    };
                    (Reply::Ints(v), outcome)
                }
                None => (
                    Reply::Error("ERR no decision".into()),
                    RequestOutcome::Error,
                ),
            },
            Err(e) => {
                let outcome = e.request_outcome();
                (Reply::Error(format!("ERR {e}")), outcome)
            }
        };
        self.metrics.request("resp", outcome, start.elapsed());
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_refusal_is_the_one_sent() {
        assert_eq!(policies_only_error("CL.THROTTLE"), POLICIES_ONLY);
        assert_eq!(key_position("FG.THROTTLE"), Some(2));
        assert_eq!(key_position("PING"), None);
    }
}
