//! `FG.THROTTLE` and `FG.MULTI`, pure: any of floodgate's algorithms by its config name,
//! the rate in the core's syntax (`100/min`), several policies all-or-nothing. The
//! algorithms are built by [`Spec::build`], decided with
//! [`decide_all`], rendered with
//! [`Decision::throttle_reply`](floodgate_core::Decision::throttle_reply).

use floodgate_core::multi::decide_all;
use floodgate_core::{Algorithm, AnyAlgorithm, AnyState, Kind, Nanos, Rate, Spec};
use smallvec::SmallVec;

use crate::limits::{self, log_too_long};
use crate::log::NewValue;
use crate::value::{Bytes, decode_any, encode_any, expire_at_ms};

/// `FG.THROTTLE`'s usage line.
pub const FG_THROTTLE_USAGE: &str =
    "Usage: FG.THROTTLE <algorithm> <key> <rate such as 100/min> [<cost>]";
/// `FG.MULTI`'s usage line.
pub const FG_MULTI_USAGE: &str = "Usage: FG.MULTI <n> <algorithm> <key> <rate> <cost> [<algorithm> <key> <rate> <cost> ...] (n groups)";

/// The largest sliding-log limit (its value holds up to that many 16-byte entries).
pub const MAX_LOG: u64 = crate::limits::MAX_LOG;

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
    pub bytes: Bytes,
    /// `PXAT`.
    pub expire_at_ms: u64,
}

/// One policy's reply: `[limited, limit, remaining, retry_after_s, reset_after_s]`, and
/// for a `leaky-queue` a sixth: the delay before forwarding, in ms rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    ints: [i64; 6],
    len: usize,
}

impl std::ops::Deref for Reply {
    type Target = [i64];

    fn deref(&self) -> &[i64] {
        &self.ints[..self.len]
    }
}

/// One item per policy of a call: up to 4 in place.
pub type Few<T> = SmallVec<[T; 4]>;

/// The outcome of a call: per policy its reply, whether all admitted, and the writes
/// (none when one denied).
#[derive(Debug)]
pub struct Outcome {
    /// All policies admitted the request (and all were charged).
    pub allowed: bool,
    /// Each policy's reply.
    pub replies: Few<Reply>,
    /// The values to store.
    pub writes: Few<Write>,
}

/// The algorithm word's kind (at most [`MAX_WORD`](crate::limits::MAX_WORD) bytes).
fn kind(algorithm: &str) -> Result<Kind, String> {
    limits::word("algorithm", algorithm.len())?;
    algorithm.parse().map_err(|e| format!("ERR algorithm: {e}"))
}

/// The rate word, without surrounding spaces (at most
/// [`MAX_WORD`](crate::limits::MAX_WORD) bytes).
fn rate_word(rate: &str) -> Result<&str, String> {
    limits::word("rate", rate.len())?;
    Ok(rate.trim())
}

/// Build the algorithm `algorithm` (a config name) at `rate` (`100/min`), each word at
/// most [`MAX_WORD`](crate::limits::MAX_WORD) bytes. Errors name the argument.
pub fn build_algorithm(algorithm: &str, rate: &str) -> Result<AnyAlgorithm, String> {
    build(kind(algorithm)?, rate_word(rate)?)
}

fn build(kind: Kind, rate: &str) -> Result<AnyAlgorithm, String> {
    let rate: Rate = rate.parse().map_err(|e| format!("ERR rate: {e}"))?;
    if kind == Kind::SlidingLog && rate.count() > MAX_LOG {
        return Err(log_too_long(rate.count()));
    }
    Spec::new(kind, rate)
        .build()
        .map_err(|e| format!("ERR {e}"))
}

fn parse_cost(cost: Option<&str>) -> Result<u64, String> {
    match cost {
        None => Ok(1),
        Some(c) => c.parse::<u64>().map_err(|_| {
            format!(
                "ERR cost must be an integer from 0 to 2^64 - 1, got {}",
                limits::shown(c.as_bytes())
            )
        }),
    }
}

/// Parse one policy's words. Errors name the argument.
pub fn parse_policy(algorithm: &str, rate: &str, cost: Option<&str>) -> Result<Policy, String> {
    Ok(Policy {
        algorithm: build_algorithm(algorithm, rate)?,
        cost: parse_cost(cost)?,
    })
}

/// Algorithms built from their words, kept for the calls that name them again (an
/// application has a few policies and calls them many times; building one parses the
/// rate and checks the configuration). Holds the last [`PolicyCache::SIZE`] built, each
/// under its algorithm's kind and its rate word without surrounding spaces (at most
/// [`MAX_WORD`](crate::limits::MAX_WORD) bytes): a few kilobytes at most, whatever the
/// calls send. Refusals are not cached.
#[derive(Debug, Default)]
pub struct PolicyCache {
    entries: Vec<(Kind, String, AnyAlgorithm)>,
    next: usize,
}

impl PolicyCache {
    /// Algorithms kept.
    pub const SIZE: usize = 16;

    /// An empty cache.
    pub const fn new() -> PolicyCache {
        PolicyCache {
            entries: Vec::new(),
            next: 0,
        }
    }

    /// [`parse_policy`], the algorithm taken from the cache when built before.
    pub fn policy(
        &mut self,
        algorithm: &str,
        rate: &str,
        cost: Option<&str>,
    ) -> Result<Policy, String> {
        let (kind, rate) = (kind(algorithm)?, rate_word(rate)?);
        let found = self
            .entries
            .iter()
            .find(|(k, r, _)| *k == kind && r == rate)
            .map(|(_, _, alg)| alg.clone());
        let algorithm = match found {
            Some(alg) => alg,
            None => {
                let alg = build(kind, rate)?;
                let entry = (kind, rate.to_string(), alg.clone());
                if self.entries.len() < Self::SIZE {
                    self.entries.push(entry);
                } else {
                    self.entries[self.next] = entry;
                    self.next = (self.next + 1) % Self::SIZE;
                }
                alg
            }
        };
        Ok(Policy {
            algorithm,
            cost: parse_cost(cost)?,
        })
    }
}

/// A value to store on the one key of [`decide_one`]: whole or spliced from the value
/// read, and its absolute expiry (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOne {
    /// The value.
    pub value: NewValue,
    /// `PXAT`.
    pub expire_at_ms: u64,
}

/// One policy on the key holding `stored` (`None`: no key) at `now`: its reply and its
/// write (as [`decide`] with one policy, without allocating; a sliding log's write is a
/// splice of `stored`, see [`crate::log`]). `Err`: a key holding a value that is not the
/// module's.
pub fn decide_one(
    p: &Policy,
    stored: Option<&[u8]>,
    now: Nanos,
) -> Result<(Reply, Option<WriteOne>), String> {
    if let AnyAlgorithm::SlidingLog(log) = &p.algorithm
        && let Some((d, w)) = crate::log::binary(log, stored, now, p.cost)
    {
        let write = w.map(|(splice, full)| WriteOne {
            value: NewValue::Splice(splice),
            expire_at_ms: expire_at_ms(full.max(Nanos(now.0.saturating_add(1)))),
        });
        return Ok((reply(p, &d), write));
    }
    let mut state = decode_any(stored).map_err(|e| format!("WRONGTYPE key 1: {e}"))?;
    let (d, pending) = p.algorithm.decide(&state, now, p.cost);
    let write = match pending {
        Some(pending) if d.allowed => write(0, p, &mut state, pending, now),
        _ => None,
    };
    let write = write.map(|w| WriteOne {
        value: NewValue::Whole(w.bytes),
        expire_at_ms: w.expire_at_ms,
    });
    Ok((reply(p, &d), write))
}

fn write(
    i: usize,
    p: &Policy,
    state: &mut AnyState,
    pending: <AnyAlgorithm as Algorithm>::Pending,
    now: Nanos,
) -> Option<Write> {
    p.algorithm.apply(state, pending);
    let bytes = encode_any(state)?;
    let full = p
        .algorithm
        .full_at(state)
        .max(Nanos(now.0.saturating_add(1)));
    Some(Write {
        policy: i,
        bytes,
        expire_at_ms: expire_at_ms(full),
    })
}

/// Decide `policies` on the keys holding `stored` (same order; `None`: no key) at `now`,
/// all-or-nothing. `Err`: a key holding a value that is not the module's (its index, the
/// error text).
pub fn decide(
    policies: &[Policy],
    stored: &[Option<&[u8]>],
    now: Nanos,
) -> Result<Outcome, String> {
    let mut states: Few<AnyState> = SmallVec::with_capacity(stored.len());
    for (i, s) in stored.iter().enumerate() {
        states.push(decode_any(*s).map_err(|e| format!("WRONGTYPE key {}: {e}", i + 1))?);
    }
    let checks: Few<(&AnyAlgorithm, &AnyState, u64)> = policies
        .iter()
        .zip(&states)
        .map(|(p, s)| (&p.algorithm, s, p.cost))
        .collect();
    let (multi, pendings) = decide_all(&checks, now);
    drop(checks);
    let mut writes = Few::new();
    for (i, ((p, mut state), pending)) in policies.iter().zip(states).zip(pendings).enumerate() {
        let Some(pending) = pending else { continue };
        writes.extend(write(i, p, &mut state, pending, now));
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
fn reply(p: &Policy, d: &floodgate_core::Decision) -> Reply {
    let mut r = Reply {
        ints: [0; 6],
        len: 5,
    };
    r.ints[..5].copy_from_slice(&d.throttle_reply());
    if p.algorithm.kind() == Kind::LeakyQueue {
        let ms = d.delay.as_nanos().div_ceil(1_000_000);
        r.ints[5] = i64::try_from(ms).unwrap_or(i64::MAX);
        r.len = 6;
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
                // one policy alone: the same reply and write
                let (r, w) = decide_one(&p[0], stored.as_deref(), NOW).unwrap();
                let w = w.map(|w| (w.value.to_bytes(stored.as_deref()), w.expire_at_ms));
                let first = o.writes.first().map(|w| (w.bytes.clone(), w.expire_at_ms));
                assert_eq!((r, w), (o.replies[0], first), "{alg}");
                if o.allowed {
                    admitted += 1;
                    let w = o
                        .writes
                        .into_iter()
                        .next()
                        .expect("an admitted request writes");
                    assert!(w.expire_at_ms > NOW.0 / 1_000_000, "{alg}");
                    stored = Some(w.bytes.to_vec());
                } else {
                    assert!(o.writes.is_empty());
                }
            }
            assert_eq!(admitted, 2, "{alg}");
        }
    }

    #[test]
    fn the_cache_builds_each_policy_once_and_refuses_as_parse_policy() {
        let mut cache = PolicyCache::new();
        for i in 0..40 {
            let rate = format!("{}/min", 1 + i % 20);
            let p = cache.policy("gcra", &rate, Some("2")).unwrap();
            let q = parse_policy("gcra", &rate, Some("2")).unwrap();
            assert_eq!((p.algorithm, p.cost), (q.algorithm, q.cost));
        }
        assert_eq!(cache.entries.len(), PolicyCache::SIZE);
        assert_eq!(
            cache.policy("nope", "1/s", None).unwrap_err(),
            parse_policy("nope", "1/s", None).unwrap_err()
        );
        assert!(cache.policy("gcra", "1/s", Some("x")).is_err());
    }

    #[test]
    fn the_cache_keeps_normalized_bounded_words() {
        let mut cache = PolicyCache::new();
        let p = cache.policy(" GCRA ", "\t10/min ", None).unwrap();
        let q = cache.policy("gcra", "10/min", None).unwrap();
        assert_eq!(p.algorithm, q.algorithm);
        assert_eq!(cache.entries.len(), 1, "one entry for both spellings");
        let long = format!("gcra{}", " ".repeat(MAX_WORD_TEST));
        assert_eq!(
            cache.policy(&long, "10/min", None).unwrap_err(),
            format!("ERR algorithm must be at most 64 bytes, got {}", long.len())
        );
        let long = format!("{}10/min", " ".repeat(MAX_WORD_TEST));
        assert!(
            cache
                .policy("gcra", &long, None)
                .unwrap_err()
                .starts_with("ERR rate must be")
        );
        assert!(parse_policy("gcra", &long, None).is_err());
        assert_eq!(cache.entries.len(), 1, "refusals are not cached");
        let cost = "9".repeat(1000);
        let e = cache.policy("gcra", "10/min", Some(&cost)).unwrap_err();
        assert!(e.len() < 120, "the word is shown shortened: {e}");
    }

    const MAX_WORD_TEST: usize = crate::limits::MAX_WORD;

    #[test]
    fn a_queue_replies_its_delay() {
        // 2 per minute, burst 1 (capacity 2), delay=0: the second waits 30 s
        let p = [parse_policy("leaky-queue", "2/min", None).unwrap()];
        let o = decide(&p, &[None], NOW).unwrap();
        assert_eq!(*o.replies[0], [0, 2, 1, -1, 30, 0]);
        let o = decide(&p, &[Some(&o.writes[0].bytes)], NOW).unwrap();
        assert_eq!(*o.replies[0], [0, 2, 0, -1, 60, 30_000]);
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
        let stored: Vec<Vec<u8>> = o.writes.into_iter().map(|w| w.bytes.to_vec()).collect();
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
