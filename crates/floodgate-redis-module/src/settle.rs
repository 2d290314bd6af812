//! `FG.RESERVE` and `FG.SETTLE`, pure: floodgate-redis's reserve and settle (cost settled
//! after the response, `lua/settle.lua`) answered by the module. They take what the settle
//! script takes, answer what it answers, and read and write the scripts' values, so a
//! reservation made by the module can be settled by the script and the other way round.
//! The arithmetic is floodgate-core's ([`Settle`]); what is written, and when, is the
//! script's (a refund that finds nothing to refund writes nothing; a state back at full
//! capacity is deleted).
//!
//! ```text
//! FG.RESERVE key alg estimate pad_ms p1 p2 p3 p4 now_s|redis now_ns
//! FG.SETTLE key alg estimate pad_ms p1 p2 p3 p4 at_s at_ns actual now_s|redis now_ns
//! ```
//!
//! `alg`, `pad_ms` and `p1..p4` are `FG.DECIDE`'s ([`crate::decide`]). `FG.RESERVE`
//! replies `now_s now_ns probe` (the instant charged; `probe` 1 when an estimate of 0 was
//! denied and the reply is that of the probe at cost 1), then the check's reply.
//! `FG.SETTLE` settles the charge of `estimate` units at `at_s at_ns` with the `actual`
//! cost and replies `status charged refunded`, then (status 0) the check's reply at cost
//! 0; status 1: the debt would leave the range the scripts hold exactly, nothing changed.

use floodgate_core::algorithms::{GcraState, SlidingLogState};
use floodgate_core::{Algorithm, AnyAlgorithm, AnyState, Charge, Nanos, Settle};

use crate::decide::{self, Alg, Request, WriteOne, int, one, px};
use crate::script_values::{decode, encode, gcra_lead, pack_tat};
use crate::value::Bytes;

const E9: u64 = 1_000_000_000;
/// GCRA: a lead at or above 2^53 - 2^30 ns is beyond what the scripts hold exactly.
const GCRA_OUT: u64 = (1 << 53) - (1 << 30);
/// Token and leaky bucket: a debt ending 2^50 ns or more after now is beyond it.
const CONTINUOUS_OUT: u64 = 1 << 50;

/// `FG.RESERVE`'s usage line.
pub const RESERVE_USAGE: &str = "Usage: FG.RESERVE <key> <alg 1-6> <estimate> <pad_ms> <p1> <p2> <p3> <p4> <now_s|redis> <now_ns>";
/// `FG.SETTLE`'s usage line.
pub const SETTLE_USAGE: &str = "Usage: FG.SETTLE <key> <alg 1-6> <estimate> <pad_ms> <p1> <p2> <p3> <p4> <at_s> <at_ns> <actual> <now_s|redis> <now_ns>";

/// `decide::parse` of one check (`words[..8]`) and the instant (`now`), its errors naming
/// the estimate.
fn parse_check(words: &[&[u8]], now: [&[u8]; 2]) -> Result<Request, String> {
    let mut w: [&[u8]; 11] = [b""; 11];
    w[..8].copy_from_slice(&words[..8]);
    w[8] = b"one";
    w[9..].copy_from_slice(&now);
    decide::parse(&w).map_err(|e| e.replacen("ERR cost ", "ERR estimate ", 1))
}

/// Parse `FG.RESERVE`'s words (after the command's name).
pub fn parse_reserve(words: &[&[u8]]) -> Result<Request, String> {
    if words.len() != 10 {
        return Err(format!("ERR {RESERVE_USAGE}"));
    }
    parse_check(words, [words[8], words[9]])
}

/// A parsed `FG.SETTLE`.
#[derive(Debug)]
pub struct Settling {
    /// The check (its cost is the estimate) and the instant.
    pub req: Request,
    /// The charge's instant.
    pub at: Nanos,
    /// The actual cost.
    pub actual: u64,
}

/// Parse `FG.SETTLE`'s words (after the command's name).
pub fn parse_settle(words: &[&[u8]]) -> Result<Settling, String> {
    if words.len() != 13 {
        return Err(format!("ERR {SETTLE_USAGE}"));
    }
    let at_s: u64 = int(words[8], "at_s")?;
    let at_ns: u64 = int(words[9], "at_ns")?;
    if at_ns >= E9 || at_s >= (1 << 63) / E9 {
        return Err(format!("ERR at {at_s} s {at_ns} ns is out of range"));
    }
    let actual = int(words[10], "actual")?;
    let req = parse_check(words, [words[11], words[12]])?;
    Ok(Settling {
        req,
        at: Nanos(at_s * E9 + at_ns),
        actual,
    })
}

/// `FG.RESERVE` on the value `stored` at `now`: the reply and the write.
pub fn reserve(
    req: &Request,
    stored: Option<&[u8]>,
    now: (u64, u64),
) -> Result<(Vec<i64>, Option<WriteOne>), String> {
    let [c] = &req.checks[..] else {
        return Err(format!("ERR {RESERVE_USAGE}"));
    };
    let mut reply = vec![now.0 as i64, now.1 as i64];
    if c.cost == 0 {
        // admitted only while a unit is left: the probe at cost 1, nothing written
        let (r, ok, _) = one(c, stored, now, 1)?;
        if !ok {
            reply.push(1);
            reply.extend_from_slice(&r);
            return Ok((reply, None));
        }
    }
    let (r, write) = decide::run_one(req, stored, now)?;
    reply.push(0);
    reply.extend_from_slice(&r);
    Ok((reply, write))
}

/// What a settle does to its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Nothing.
    None,
    /// Delete it (back at full capacity).
    Delete,
    /// Store the value with this time to live in ms (padding included).
    Store(Bytes, u64),
}

/// `FG.SETTLE` on the value `stored` at `now`: the reply and the effect.
pub fn settle(
    s: &Settling,
    stored: Option<&[u8]>,
    now: (u64, u64),
) -> Result<(Vec<i64>, Effect), String> {
    let [c] = &s.req.checks[..] else {
        return Err(format!("ERR {SETTLE_USAGE}"));
    };
    let t = Nanos(now.0 * E9 + now.1);
    let charge = Charge {
        cost: c.cost,
        at: s.at,
    };
    let extra = s.actual > c.cost;
    let out = || Ok((vec![1, 0, 0], Effect::None));
    let (effect, charged, refunded) = match &c.alg {
        Alg::Gcra(g) => {
            let lead = stored.map_or(Ok(0), |v| gcra_lead(v, now.0, now.1))?;
            let mut st = GcraState {
                tat: Nanos(t.0.saturating_add(lead)),
            };
            let Ok(r) = g.settle(&mut st, t, charge, s.actual) else {
                return out();
            };
            let new = st.tat.0.saturating_sub(t.0);
            if extra && new >= GCRA_OUT {
                return out();
            }
            let effect = if new == lead {
                Effect::None
            } else if new == 0 {
                Effect::Delete
            } else {
                let ms = (new / 1_000_000 + 1).saturating_add(c.pad_ms);
                Effect::Store(pack_tat(now.0, now.1 + new), ms)
            };
            (effect, r.charged, r.refunded)
        }
        Alg::Other(alg) => {
            let before = decode(alg.kind(), stored)?;
            // a key never seen as a state of the algorithm's own (so that the core
            // settles it as the script does: a refund into the current window of an empty
            // key is written)
            let mut state = match before {
                AnyState::Empty => alg.fresh(),
                ref b => b.clone(),
            };
            let Ok(r) = alg.settle(&mut state, t, charge, s.actual) else {
                return out();
            };
            let Some(effect) = effect(alg, &before, &state, s, t, extra, c.pad_ms) else {
                return out();
            };
            (effect, r.charged, r.refunded)
        }
    };
    let after = match &effect {
        Effect::None => stored,
        Effect::Delete => None,
        Effect::Store(b, _) => Some(&b[..]),
    };
    let (r, _, _) = one(c, after, now, 0)?;
    let mut reply = vec![0, charged as i64, refunded as i64];
    reply.extend_from_slice(&r);
    Ok((reply, effect))
}

/// The settle script's write of `after` (the core's state after the settle of `before`)
/// at `t`; `None`: a debt beyond the scripts' exact range.
fn effect(
    alg: &AnyAlgorithm,
    before: &AnyState,
    after: &AnyState,
    s: &Settling,
    t: Nanos,
    extra: bool,
    pad_ms: u64,
) -> Option<Effect> {
    let store = |ttl_ns: u64| Effect::Store(encode(after), px(ttl_ns, pad_ms));
    Some(match (alg, after) {
        (AnyAlgorithm::FixedWindow(f), AnyState::FixedWindow(st)) => {
            let w = f.window_nanos();
            // a refund is written only into the window charged, while it is current
            if !extra && s.at.0 / w + 1 != st.window {
                return Some(Effect::None);
            }
            store(st.window.saturating_mul(w).saturating_sub(t.0))
        }
        (AnyAlgorithm::SlidingCounter(f), AnyState::SlidingCounter(st)) => {
            let w = f.window_nanos();
            let charged_in = s.at.0 / w + 1;
            if !extra && charged_in != st.window && charged_in + 1 != st.window {
                return Some(Effect::None);
            }
            let end = st.window.saturating_add(1).saturating_mul(w);
            store(end.saturating_sub(t.0))
        }
        (AnyAlgorithm::SlidingLog(f), AnyState::SlidingLog(st)) => {
            let w = f.window_nanos();
            let live = |x: Nanos| x.0.saturating_add(w) > t.0;
            let old: Vec<(Nanos, u64)> = match before {
                AnyState::SlidingLog(b) => b.entries().filter(|e| live(e.0)).collect(),
                _ => Vec::new(),
            };
            // a refund is written only when it finds the entry charged, in the window
            let found = live(s.at) && old.iter().any(|e| e.0 == s.at);
            if !extra && !found {
                return Some(Effect::None);
            }
            let kept =
                SlidingLogState::from_entries(st.entries().filter(|&(x, c)| live(x) && c > 0));
            if kept.entries().next().is_none() {
                return Some(Effect::Delete);
            }
            // the script's expiry: a window after its log's last entry, zeroed or not
            let last = if extra {
                st.entries().last().map(|e| e.0)
            } else {
                old.last().map(|e| e.0)
            };
            let ttl = last.map_or(0, |x| x.0.saturating_add(w).saturating_sub(t.0));
            Effect::Store(encode(&AnyState::SlidingLog(kept)), px(ttl, pad_ms))
        }
        (_, AnyState::TokenBucket(_) | AnyState::Leaky(_)) => {
            let (value, last) = match after {
                AnyState::TokenBucket(b) => (b.deficit, b.last),
                AnyState::Leaky(b) => (b.level, b.last),
                _ => (0, Nanos::ZERO),
            };
            let ahead = last.0.saturating_sub(t.0);
            if extra && ahead >= CONTINUOUS_OUT {
                return None;
            }
            if value == 0 && ahead == 0 {
                return Some(Effect::Delete);
            }
            let ttl = if value == 0 {
                ahead
            } else {
                alg.full_at(after).0.saturating_sub(t.0)
            };
            store(ttl)
        }
        _ => Effect::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(b: &[u8]) -> Bytes {
        let mut v = Bytes::new();
        v.extend_from_slice(b);
        v
    }

    fn words(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    fn settle_call(s: &str, stored: Option<&[u8]>) -> Result<(Vec<i64>, Effect), String> {
        let w = words(s);
        let refs: Vec<&[u8]> = w.iter().map(Vec::as_slice).collect();
        let st = parse_settle(&refs)?;
        let now = st.req.now.unwrap_or((1_700_000_000, 0));
        settle(&st, stored, now)
    }

    fn reserve_call(
        s: &str,
        stored: Option<&[u8]>,
    ) -> Result<(Vec<i64>, Option<WriteOne>), String> {
        let w = words(s);
        let refs: Vec<&[u8]> = w.iter().map(Vec::as_slice).collect();
        let req = parse_reserve(&refs)?;
        let now = req.now.unwrap_or((1_700_000_000, 0));
        reserve(&req, stored, now)
    }

    #[test]
    fn reserve_and_settle_a_fixed_window() {
        // 2 per second, reserve 2 at t = 100.25 s, settle at 1: one refunded
        let (r, w) = reserve_call("k 2 2 0 2 1000000000 0 0 100 250000000", None).unwrap();
        assert_eq!(r, vec![100, 250_000_000, 0, 1, 2, 0, -1, 750_000_000, 0, 0]);
        let w = w.unwrap();
        let v = w.value.to_bytes(None);
        assert_eq!(&v[..], b"101 2");
        let (r, e) = settle_call(
            "k 2 2 0 2 1000000000 0 0 100 250000000 1 100 500000000",
            Some(&v),
        )
        .unwrap();
        assert_eq!(r[..3], [0, 0, 1]);
        assert_eq!(r[3..6], [1, 2, 1], "one left after the refund");
        assert_eq!(e, Effect::Store(bytes(b"101 1"), 500));
        // in the next window the refund finds nothing, and writes nothing
        let (r, e) =
            settle_call("k 2 2 0 2 1000000000 0 0 100 250000000 1 101 0", Some(&v)).unwrap();
        assert_eq!(r[..3], [0, 0, 0]);
        assert_eq!(e, Effect::None);
        // a debt: 5 more than the estimate
        let (r, _) = settle_call(
            "k 2 2 0 2 1000000000 0 0 100 250000000 7 100 500000000",
            Some(&v),
        )
        .unwrap();
        assert_eq!(r[..3], [0, 5, 0]);
        assert_eq!(r[5], 0, "nothing left");
    }

    #[test]
    fn an_estimate_of_0_is_a_probe() {
        // GCRA 1 per 100 ms, capacity 1: reserved once, then 0 is refused by the probe
        let (r, w) = reserve_call("k 1 1 0 100000000 100000000 0 0 10 0", None).unwrap();
        assert_eq!(r, vec![10, 0, 0, 0]);
        let v = w.unwrap().value.to_bytes(None);
        let (r, w) = reserve_call("k 1 0 0 100000000 100000000 0 0 10 0", Some(&v)).unwrap();
        assert_eq!(r, vec![10, 0, 1, -1 - 100_000_000]);
        assert!(w.is_none());
        // GCRA settle of the whole charge refunded: the key is back at full capacity
        let (r, e) = settle_call("k 1 1 0 100000000 100000000 0 0 10 0 0 10 0", Some(&v)).unwrap();
        assert_eq!(r, vec![0, 0, 1, 0]);
        assert_eq!(e, Effect::Delete);
    }

    #[test]
    fn a_debt_out_of_range_changes_nothing() {
        // GCRA 1 per day, tolerance 100 days: 30 000 days more is beyond 2^53 ns
        let day = 86_400_000_000_000u64;
        let cmd = format!("k 1 1 0 {day} {} 0 0 10 0 30000 10 0", 100 * day);
        assert_eq!(
            settle_call(&cmd, None).unwrap(),
            (vec![1, 0, 0], Effect::None)
        );
    }

    #[test]
    fn bad_input_names_the_argument() {
        let e = |s: &str| settle_call(s, None).unwrap_err();
        assert!(e("k 2 1 0 2 1000 0 0 1 0 1 10").starts_with("ERR Usage: FG.SETTLE"));
        assert!(e("k 2 x 0 2 1000 0 0 1 0 1 10 0").starts_with("ERR estimate must be"));
        assert!(e("k 2 1 0 2 1000 0 0 y 0 1 10 0").starts_with("ERR at_s must be"));
        assert!(e("k 2 1 0 2 1000 0 0 1 1000000000 1 10 0").contains("out of range"));
        assert!(e("k 2 1 0 2 1000 0 0 1 0 -1 10 0").starts_with("ERR actual must be"));
        assert!(e("k 2 1 0 2 1000 0 0 1 0 1 z 0").starts_with("ERR now_s must be"));
        let r = |s: &str| reserve_call(s, None).unwrap_err();
        assert!(r("k 2 1 0 2 1000 0 0 1").starts_with("ERR Usage: FG.RESERVE"));
        assert!(r("k 7 1 0 2 1000 0 0 1 0").contains("index 7"));
        assert!(settle_call("k 2 1 0 2 1000 0 0 1 0 1 10 0", Some(b"junk")).is_err());
    }
}
