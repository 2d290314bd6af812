//! Cost settled after the response, for every surface: a request is admitted at an
//! estimate through [`DecisionStore::reserve`](crate::DecisionStore::reserve), which
//! returns a [`Reservation`], and settled with its actual cost through
//! [`DecisionStore::settle`](crate::DecisionStore::settle). The rules (debt, refunds that
//! never mint capacity) are the core's ([`floodgate_core::settle`]).
//!
//! * [`LocalStore`](crate::LocalStore): the core's `reserve_all` and `settle_charge` on
//!   its limiters, all-or-nothing like a check.
//! * `RedisDecisionStore`: one atomic round trip per policy
//!   (floodgate-redis's settle script). Several policies are reserved one after the
//!   other; when one denies, those already reserved are settled at 0 at once, which
//!   refunds their whole estimate (nothing of it has elapsed): all-or-nothing up to the
//!   requests that a concurrent check decides between the two calls.
//! * `HybridStore`: reservations and settles go to the shared
//!   counter in Redis, as with the Redis store, never to the node's lease: a lease is
//!   quota already taken from the counter with no per-request record to settle, so a
//!   refund into it could hand out units twice. A route that settles costs therefore
//!   makes a round trip per request under the hybrid strategy.

use floodgate_core::{Charge, Settlement};
use smallvec::SmallVec;

/// One policy's part of a [`Reservation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The policy's index in the store.
    pub policy: usize,
    /// The policy's name (the Redis stores key on it).
    pub name: String,
    /// The key within the policy.
    pub key: Vec<u8>,
    /// What was charged: the estimate and the instant.
    pub charge: Charge,
}

/// A request admitted at an estimate, to settle once with its actual cost: every policy
/// it was checked against, with what each charged.
///
/// [`DecisionStore::settle`](crate::DecisionStore::settle) takes it by value, so one
/// reservation cannot be settled twice in process. Dropping it keeps the estimates.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation is settled with its actual cost; dropping it keeps the estimate"]
pub struct Reservation {
    parts: SmallVec<[Reserved; 1]>,
}

impl Reservation {
    /// A reservation of these parts (for one that crossed a wire: a forged part refunds
    /// at most its estimate, and only what of it still counts against its key).
    pub fn from_parts(parts: impl IntoIterator<Item = Reserved>) -> Reservation {
        Reservation {
            parts: parts.into_iter().collect(),
        }
    }

    /// The parts, one per policy, in the order of the checks.
    pub fn parts(&self) -> &[Reserved] {
        &self.parts
    }

    /// The parts, consuming the reservation.
    pub fn into_parts(self) -> Vec<Reserved> {
        self.parts.into_vec()
    }
}

/// The outcome of settling a [`Reservation`]: one settlement per part, in order.
pub type Settled = Vec<Settlement>;

/// Where a route's actual cost comes from, and what it reserves first: the one definition
/// the tower layer, the proxy and the server read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleSpec {
    /// The estimate a request is admitted at (the same under every policy of the route).
    pub estimate: u64,
    /// A request header carrying the estimate instead (its absence: `estimate`).
    pub estimate_header: Option<http::HeaderName>,
    /// A response header carrying the actual cost.
    pub cost_header: Option<http::HeaderName>,
    /// A response trailer carrying the actual cost (a streamed body's, sent after it).
    pub cost_trailer: Option<http::HeaderName>,
    /// What a request is charged, in units, when its actual cost never arrives: the
    /// client left and the body could not be read to its cost trailer within the
    /// bounds below, the upstream failed, the header or trailer was missing or
    /// malformed, or the handler dropped its handle unsettled. `None`: the request's
    /// estimate (the reservation keeps what it charged, with no store call).
    pub abort_cost: Option<u64>,
    /// How long, from when the client is found gone, the body of an abandoned response
    /// is read (and discarded) for its cost trailer. Above zero in a configuration file;
    /// zero here reads nothing (the abort cost at once).
    pub abort_drain_timeout: std::time::Duration,
    /// How many body octets of an abandoned response are read (and discarded) for its
    /// cost trailer: reading stops once more than this many have come. At least 1 in a
    /// configuration file; 0 here stops at the first data.
    pub abort_drain_bytes: u64,
}

impl Default for SettleSpec {
    /// An estimate of 1, no header or trailer named, the estimate on abort, and the
    /// default drain bounds.
    fn default() -> SettleSpec {
        SettleSpec {
            estimate: 1,
            estimate_header: None,
            cost_header: None,
            cost_trailer: None,
            abort_cost: None,
            abort_drain_timeout: SettleSpec::DEFAULT_ABORT_DRAIN_TIMEOUT,
            abort_drain_bytes: SettleSpec::DEFAULT_ABORT_DRAIN_BYTES,
        }
    }
}

impl SettleSpec {
    /// [`abort_drain_timeout`](Self::abort_drain_timeout) unless configured: 60 s.
    pub const DEFAULT_ABORT_DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
    /// [`abort_drain_bytes`](Self::abort_drain_bytes) unless configured: 16 MiB.
    pub const DEFAULT_ABORT_DRAIN_BYTES: u64 = 16 << 20;

    /// What a request admitted at `estimate` is charged when its actual cost never
    /// arrives: [`abort_cost`](Self::abort_cost), else `estimate`.
    pub fn abort_cost_for(&self, estimate: u64) -> u64 {
        self.abort_cost.unwrap_or(estimate)
    }

    /// A request's estimate: the estimate header's value when the request has one, else
    /// the fixed estimate. A value that is not a cost ([`parse_cost`]) is an error naming
    /// the header.
    pub fn estimate_of(&self, headers: &http::HeaderMap) -> Result<u64, CostError> {
        match self
            .estimate_header
            .as_ref()
            .and_then(|h| Some((h, headers.get(h)?)))
        {
            Some((name, v)) => parse_cost(v.as_bytes()).map_err(|e| e.named(name.as_str())),
            None => Ok(self.estimate),
        }
    }

    /// The actual cost in `fields` (response headers or trailers) under `name`: `None`
    /// when absent, an error naming the field when it is not a cost or is repeated.
    pub fn cost_in(
        name: &http::HeaderName,
        fields: &http::HeaderMap,
    ) -> Option<Result<u64, CostError>> {
        let mut all = fields.get_all(name).iter();
        let first = all.next()?;
        if all.next().is_some() {
            return Some(Err(CostError {
                field: name.as_str().to_string(),
                value: String::new(),
                why: "it is repeated",
            }));
        }
        Some(parse_cost(first.as_bytes()).map_err(|e| e.named(name.as_str())))
    }
}

/// A cost field that is not a cost: what it was, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field}: {value:?} is not a cost: {why} (expected a whole number of units, 0 to 18446744073709551615)"
)]
pub struct CostError {
    /// The header or trailer (empty when parsed without one).
    pub field: String,
    /// The value, lossily as text.
    pub value: String,
    /// Why it was refused.
    pub why: &'static str,
}

impl CostError {
    fn named(mut self, field: &str) -> CostError {
        self.field = field.to_string();
        self
    }
}

/// A cost as sent in a header, a trailer or a JSON string: ASCII digits, optionally
/// surrounded by spaces or tabs. Refused: empty, a sign (`-5`, `+5`), a fraction or
/// exponent (`1.5`, `1e3`), `NaN`, `inf`, anything above `u64::MAX`.
pub fn parse_cost(raw: &[u8]) -> Result<u64, CostError> {
    let refuse = |why| CostError {
        field: String::new(),
        value: String::from_utf8_lossy(raw).chars().take(64).collect(),
        why,
    };
    let v = raw.trim_ascii();
    if v.is_empty() {
        return Err(refuse("it is empty"));
    }
    if v[0] == b'-' {
        return Err(refuse("it is negative"));
    }
    if !v.iter().all(u8::is_ascii_digit) {
        return Err(refuse("it is not a whole number of units"));
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| refuse("it is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_parse_and_bad_ones_say_why() {
        assert_eq!(parse_cost(b" 300 "), Ok(300));
        assert_eq!(parse_cost(b"0"), Ok(0));
        assert_eq!(parse_cost(b"18446744073709551615"), Ok(u64::MAX));
        for (raw, why) in [
            (&b""[..], "it is empty"),
            (b"-5", "it is negative"),
            (b"NaN", "it is not a whole number of units"),
            (b"1.5", "it is not a whole number of units"),
            (b"+5", "it is not a whole number of units"),
            (b"1e3", "it is not a whole number of units"),
            (b"18446744073709551616", "it is too large"),
        ] {
            assert_eq!(parse_cost(raw).unwrap_err().why, why, "{raw:?}");
        }
        let name = http::HeaderName::from_static("x-cost");
        let mut h = http::HeaderMap::new();
        assert_eq!(SettleSpec::cost_in(&name, &h), None);
        h.append(&name, http::HeaderValue::from_static("7"));
        assert_eq!(SettleSpec::cost_in(&name, &h), Some(Ok(7)));
        h.append(&name, http::HeaderValue::from_static("8"));
        let e = SettleSpec::cost_in(&name, &h).unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "x-cost: \"\" is not a cost: it is repeated (expected a whole number of units, 0 to 18446744073709551615)"
        );
    }
}
