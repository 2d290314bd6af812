//! `FG.THROTTLE` and `FG.MULTI`, pure: any of floodgate's algorithms by its config name,
//! the rate in the core's syntax (`100/min`), several policies all-or-nothing. The
//! algorithms are built by [`Spec::build`], decided with
//! [`decide_all`], rendered with
//! [`Decision::throttle_reply`](floodgate_core::Decision::throttle_reply).

use floodgate_core::multi::decide_all;
use floodgate_core::{Algorithm, AnyAlgorithm, AnyState, Kind, Nanos, Rate, Spec};

use crate::value::{decode_any, encode_any, expire_at_ms};

/// `FG.THROTTLE`'s usage line.
pub const FG_THROTTLE_USAGE: &str =
    "Usage: FG.THROTTLE <algorithm> <key> <rate such as 100/min> [<cost>]";
/// `FG.MULTI`'s usage line.
pub const FG_MULTI_USAGE: &str = "Usage: FG.MULTI <n> <algorithm> <key> <rate> <cost> [<algorithm> <key> <rate> <cost> ...] (n groups)";

/// The largest sliding-log limit (its value holds up to that many 16-byte entries).
pub const MAX_LOG: u64 = 10_000;

/// One policy of a call: its algorithm and what the request costs under it.
#[derive(Debug)]
pub struct Policy {
    /// The algorithm, as the core builds it.
    pub algorithm: AnyAlgorithm,
    /// Units this request costs.
    pub cost: u64,
}

/// A value to store: bytes and absolute expiry (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Index of the policy (and key) written.
    pub policy: usize,
    /// The value.
    pub bytes: Vec<u8>,
    /// `PXAT`.
    pub expire_at_ms: u64,
}

/// The outcome of a call: per policy the five integers of `CL.THROTTLE`'s shape, whether
/// all admitted, and the writes (none when one denied).
#[derive(Debug)]
pub struct Outcome {
    /// All policies admitted the request (and all were charged).
    pub allowed: bool,
    /// `[limited, limit, remaining, retry_after_s, reset_after_s]` per policy, and for a
    /// `leaky-queue` a sixth: the delay before forwarding, in ms rounded up.
    pub replies: Vec<Vec<i64>>,
    /// The values to store.
    pub writes: Vec<Write>,
}

/// Parse one policy's words. Errors name the argument.
pub fn parse_policy(algorithm: &str, rate: &str, cost: Option<&str>) -> Result<Policy, String> {
    let kind: Kind = algorithm
        .parse()
        .map_err(|e| format!("ERR algorithm: {e}"))?;
    let rate: Rate = rate.parse().map_err(|e| format!("ERR rate: {e}"))?;
    if kind == Kind::SlidingLog && rate.count() > MAX_LOG {
        return Err(format!(
            "ERR sliding-log keeps an entry per admitted instant: its limit must be at most {MAX_LOG}, got {} (sliding-counter approximates it in 25 bytes)",
            rate.count()
        ));
    }
    let algorithm = Spec::new(kind, rate)
        .build()
        .map_err(|e| format!("ERR {e}"))?;
    let cost = match cost {
        None => 1,
        Some(c) => c
            .parse::<u64>()
            .map_err(|_| format!("ERR cost must be an integer from 0 to 2^64 - 1, got {c:?}"))?,
    };
    Ok(Policy { algorithm, cost })
}

/// Decide `policies` on the keys holding `stored` (same order; `None`: no key) at `now`,
/// all-or-nothing. `Err`: a key holding a value that is not the module's (its index, the
/// error text).
pub fn decide(
    policies: &[Policy],
    stored: &[Option<&[u8]>],
    now: Nanos,
) -> Result<Outcome, String> {
    let mut states: Vec<AnyState> = Vec::with_capacity(stored.len());
    for (i, s) in stored.iter().enumerate() {
        states.push(decode_any(*s).map_err(|e| format!("WRONGTYPE key {}: {e}", i + 1))?);
    }
    let checks: Vec<(&AnyAlgorithm, &AnyState, u64)> = policies
        .iter()
        .zip(&states)
        .map(|(p, s)| (&p.algorithm, s, p.cost))
        .collect();
    let (multi, pendings) = decide_all(&checks, now);
    let mut writes = Vec::new();
    for (i, ((p, mut state), pending)) in policies.iter().zip(states).zip(pendings).enumerate() {
        let Some(pending) = pending else { continue };
        p.algorithm.apply(&mut state, pending);
        if let Some(bytes) = encode_any(&state) {
            let full = p
                .algorithm
                .full_at(&state)
                .max(Nanos(now.0.saturating_add(1)));
            writes.push(Write {
                policy: i,
                bytes,
                expire_at_ms: expire_at_ms(full),
            });
        }
    }
    Ok(Outcome {
        allowed: multi.allowed,
        replies: policies
            .iter()
            .zip(&multi.decisions)
            .map(|(p, d)| reply(p, d))
            .collect(),
        writes,
    })
}

/// A decision's integers: `CL.THROTTLE`'s five, and a queue's delay in ms.
fn reply(p: &Policy, d: &floodgate_core::Decision) -> Vec<i64> {
    let mut r = d.throttle_reply().to_vec();
    if p.algorithm.kind() == Kind::LeakyQueue {
        let ms = d.delay.as_nanos().div_ceil(1_000_000);
        r.push(i64::try_from(ms).unwrap_or(i64::MAX));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Nanos = Nanos(1_700_000_000_000_000_000);

    #[test]
    fn one_policy_per_algorithm_admits_then_denies() {
        for alg in [
            "fixed-window",
            "sliding-counter",
            "token-bucket",
            "leaky-meter",
            "gcra",
            "sliding-log",
            "leaky-queue",
        ] {
            let p = [parse_policy(alg, "2/min", None).unwrap()];
            let mut stored: Option<Vec<u8>> = None;
            let mut admitted = 0;
            for _ in 0..3 {
                let o = decide(&p, &[stored.as_deref()], NOW).unwrap();
                if o.allowed {
                    admitted += 1;
                    let w = o
                        .writes
                        .into_iter()
                        .next()
                        .expect("an admitted request writes");
                    assert!(w.expire_at_ms > NOW.0 / 1_000_000, "{alg}");
                    stored = Some(w.bytes);
                } else {
                    assert!(o.writes.is_empty());
                }
            }
            assert_eq!(admitted, 2, "{alg}");
        }
    }

    #[test]
    fn a_queue_replies_its_delay() {
        // 2 per minute, burst 1 (capacity 2), delay=0: the second waits 30 s
        let p = [parse_policy("leaky-queue", "2/min", None).unwrap()];
        let o = decide(&p, &[None], NOW).unwrap();
        assert_eq!(o.replies[0], [0, 2, 1, -1, 30, 0]);
        let o = decide(&p, &[Some(&o.writes[0].bytes)], NOW).unwrap();
        assert_eq!(o.replies[0], [0, 2, 0, -1, 60, 30_000]);
    }

    #[test]
    fn several_policies_all_or_nothing() {
        let p = [
            parse_policy("gcra", "10/min", Some("1")).unwrap(),
            parse_policy("fixed-window", "1/min", Some("1")).unwrap(),
        ];
        let o = decide(&p, &[None, None], NOW).unwrap();
        assert!(o.allowed);
        assert_eq!(o.writes.len(), 2);
        let stored: Vec<Vec<u8>> = o.writes.into_iter().map(|w| w.bytes).collect();
        let o = decide(&p, &[Some(&stored[0]), Some(&stored[1])], NOW).unwrap();
        assert!(!o.allowed);
        assert!(o.writes.is_empty(), "nothing charged when one denies");
        assert_eq!(o.replies[0][..3], [0, 10, 9], "the gcra's cost-0 view");
        assert_eq!(o.replies[1][0], 1);
    }

    #[test]
    fn bad_policies_name_the_argument() {
        let e = |a, r, c| parse_policy(a, r, c).unwrap_err();
        assert!(e("nope", "1/s", None).starts_with("ERR algorithm: unknown algorithm"));
        assert!(e("sliding-log", "10001/s", None).contains("at most 10000"));
        assert!(e("gcra", "1/q", None).starts_with("ERR rate: "));
        assert!(e("gcra", "0/s", None).starts_with("ERR rate: "));
        assert!(e("gcra", "1/s", Some("-1")).starts_with("ERR cost must be an integer"));
        let p = [parse_policy("gcra", "1/s", None).unwrap()];
        assert!(
            decide(&p, &[Some(b"text")], NOW)
                .unwrap_err()
                .starts_with("WRONGTYPE key 1")
        );
    }
}
