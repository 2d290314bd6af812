//! `FG.RESERVE policy key estimate` and `FG.SETTLE reservation actual`: reserve and settle
//! over RESP, on the policies of the server's config (see [`crate::descriptors::settle`]).
//!
//! * `FG.RESERVE` answers five integers as `CL.THROTTLE` lays them out (limited 0/1,
//!   limit, remaining, retry after s or -1, reset after s), then the reservation id (0
//!   when nothing was reserved: denied, or admitted by the fault policy).
//! * `FG.SETTLE` answers units charged, units refunded, remaining, reset after s; an id
//!   unknown, settled already or expired is an error, as is an `actual` that is not a
//!   whole number of units.

use floodgate_core::decision::trunc_secs;
use floodgate_engine::settle::parse_cost;

use super::{Reply, RespService};
use crate::descriptors::settle::SettleCallError;

/// `FG.RESERVE`'s usage error.
pub const RESERVE_USAGE: &str = "Usage: FG.RESERVE <policy> <key> <estimate>";
/// `FG.SETTLE`'s usage error.
pub const SETTLE_USAGE: &str = "Usage: FG.SETTLE <reservation> <actual>";

fn secs(d: std::time::Duration) -> i64 {
    i64::try_from(trunc_secs(d)).unwrap_or(i64::MAX)
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl RespService {
    pub(super) async fn reserve(&self, args: &[Vec<u8>]) -> Reply {
        let Some(engine) = &self.engine else {
            return Reply::Error("ERR FG.RESERVE needs the server's policies".into());
        };
        if args.len() != 4 {
            return Reply::Error(format!("ERR {RESERVE_USAGE}"));
        }
        let estimate = match parse_cost(&args[3]) {
            Ok(e) => e,
            Err(e) => return Reply::Error(format!("ERR estimate {e}")),
        };
        let policy = String::from_utf8_lossy(&args[1]);
        let key = String::from_utf8_lossy(&args[2]);
        match engine.reserve_policy(&policy, &key, estimate).await {
            Ok((outcome, id)) => {
                let d = outcome
                    .statuses
                    .first()
                    .and_then(|s| s.limits.first())
                    .map(|(_, d)| *d);
                let Some(d) = d else {
                    return Reply::Error("ERR no decision".into());
                };
                let mut v = d.throttle_reply().to_vec();
                v[0] = i64::from(outcome.over_limit);
                v.push(id.map_or(0, int));
                Reply::Ints(v)
            }
            Err(e) => Reply::Error(format!("ERR {e}")),
        }
    }

    pub(super) async fn settle(&self, args: &[Vec<u8>]) -> Reply {
        let Some(engine) = &self.engine else {
            return Reply::Error("ERR FG.SETTLE needs the server's policies".into());
        };
        if args.len() != 3 {
            return Reply::Error(format!("ERR {SETTLE_USAGE}"));
        }
        let id = match parse_cost(&args[1]) {
            Ok(id) => id,
            Err(e) => return Reply::Error(format!("ERR reservation {e}")),
        };
        let actual = match parse_cost(&args[2]) {
            Ok(a) => a,
            Err(e) => return Reply::Error(format!("ERR actual {e}")),
        };
        match engine.settle_reservation(id, actual).await {
            Ok(settled) => match settled.first() {
                Some(s) => Reply::Ints(vec![
                    int(s.charged),
                    int(s.refunded),
                    int(s.decision.remaining),
                    secs(s.decision.reset_after),
                ]),
                None => Reply::Error("ERR nothing was settled".into()),
            },
            Err(e @ SettleCallError::Unknown { .. }) => Reply::Error(format!("ERR {e}")),
            Err(e) => Reply::Error(format!("ERR store {e}")),
        }
    }
}
