//! The admin API's JSON (the shapes are in the book's `docs/admin.md`).

use floodgate_core::Nanos;
use serde_json::{Value, json};

use super::query::Query;
use super::{Failure, Peek, PeekError};
use crate::insight::{self, Insight, PolicyInsight, TopList, timeline};
use crate::metrics::DecisionOutcome;

/// Default seconds of timeline shown.
const DEFAULT_SECONDS: usize = 60;
/// Default top keys listed.
const DEFAULT_TOP: usize = 10;
/// Most top keys listed.
const MAX_TOP: usize = 100;
/// Most window boundaries listed per policy.
const MAX_BOUNDARIES: u64 = 400;

const NANOS_PER_MS: u64 = 1_000_000;

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

fn list(insight: &Insight, t: &TopList) -> Value {
    json!({
        "total": t.total,
        "bound": t.bound,
        "keys": t.keys.iter().map(|c| json!({
            "key": insight.show_key(&c.key),
            "count": c.count,
            "error": c.error,
        })).collect::<Vec<_>>(),
    })
}

fn top_of(insight: &Insight, p: &PolicyInsight, now: Nanos, n: usize) -> Value {
    let t = p.top(now, n);
    json!({ "denied": list(insight, &t.denied), "admitted": list(insight, &t.admitted) })
}

fn header(insight: &Insight, now: Nanos) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("surface".into(), insight.surface().into());
    m.insert("now_ms".into(), (now.0 / NANOS_PER_MS).into());
    m.insert("key_display".into(), insight.display().name().into());
    m.insert("top_k".into(), insight::TOP_K.into());
    m.insert("shards".into(), insight::SHARDS.into());
    m.insert("minutes".into(), insight::MINUTES.into());
    m
}

/// The policies asked for: `policy=NAME`, or all.
fn selected(insight: &Insight, q: &Query) -> Result<Vec<std::sync::Arc<PolicyInsight>>, String> {
    match q.text("policy")? {
        None => Ok(insight.policies()),
        Some(name) => insight
            .find(name)
            .map(|p| vec![p])
            .ok_or_else(|| unknown(insight, name)),
    }
}

fn unknown(insight: &Insight, name: &str) -> String {
    PeekError::UnknownPolicy {
        policy: name.chars().take(128).collect(),
        known: insight
            .policies()
            .iter()
            .map(|p| p.shape().name)
            .collect::<Vec<_>>()
            .join(", "),
    }
    .to_string()
}

/// Window boundaries within `[from_ms, to_ms]`, Unix milliseconds.
fn boundaries(period_ms: u64, from_ms: u64, to_ms: u64) -> Vec<u64> {
    if period_ms == 0 || (to_ms - from_ms) / period_ms > MAX_BOUNDARIES {
        return Vec::new();
    }
    let first = from_ms.div_ceil(period_ms) * period_ms;
    (0..)
        .map(|i| first + i * period_ms)
        .take_while(|b| *b <= to_ms)
        .collect()
}

fn reloads(insight: &Insight) -> Value {
    insight
        .reloads()
        .iter()
        .map(|r| {
            json!({
                "at_ms": r.at_ms,
                "generation": r.generation,
                "ok": r.ok,
                "message": r.message,
            })
        })
        .collect()
}

/// What a listing endpoint reads: `n`, the policies selected, the time, and the start
/// of its answer.
struct Listing {
    n: usize,
    policies: Vec<std::sync::Arc<PolicyInsight>>,
    now: Nanos,
    out: serde_json::Map<String, Value>,
}

fn listing(insight: &Insight, q: &Query) -> Result<Listing, String> {
    let n = q.number("n", 1..=MAX_TOP, DEFAULT_TOP)?;
    let policies = selected(insight, q)?;
    let now = insight.now();
    Ok(Listing {
        n,
        policies,
        now,
        out: header(insight, now),
    })
}

/// The adaptive policies, as `/admin/api/adaptive` and the overview show them.
fn adaptive_list(peek: &dyn Peek) -> Value {
    peek.adaptive()
        .iter()
        .map(|a| {
            json!({
                "name": a.name,
                "algorithm": a.algorithm,
                "limit": a.limit,
                "min_limit": a.min_limit,
                "max_limit": a.max_limit,
                "in_flight": a.in_flight,
                "queued": a.queued,
                "queue": a.queue,
                "samples": a.samples,
                "mean_latency_ms": a.mean_latency.map(|d| d.as_secs_f64() * 1000.0),
                "classes": a.classes.iter().map(|c| json!({
                    "name": c.name,
                    "share": c.share,
                    "in_flight": c.in_flight,
                    "queued": c.queued,
                    "shed": c.shed,
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// `GET /admin/api/adaptive`.
pub(super) fn adaptive(insight: &Insight, peek: &dyn Peek, q: &Query) -> Result<Value, String> {
    q.only(&[])?;
    let mut out = header(insight, insight.now());
    out.insert("adaptive".into(), adaptive_list(peek));
    Ok(out.into())
}

/// `GET /admin/api/overview`.
pub(super) fn overview(insight: &Insight, peek: &dyn Peek, q: &Query) -> Result<Value, String> {
    q.only(&["seconds", "n", "policy"])?;
    let seconds = q.number("seconds", 1..=timeline::SECONDS, DEFAULT_SECONDS)?;
    let Listing {
        n,
        policies,
        now,
        mut out,
    } = listing(insight, q)?;
    let list: Vec<Value> = policies
        .iter()
        .map(|p| {
            let shape = p.shape();
            let tl = p.timeline(now, seconds);
            let start_s = tl.first().map_or(0, |s| s.second);
            let series = |o: DecisionOutcome| {
                tl.iter()
                    .map(|s| s.decisions[o as usize])
                    .collect::<Vec<_>>()
            };
            let end_ms = now.0 / NANOS_PER_MS;
            let marks = if shape.windowed {
                boundaries(shape.period_ms, start_s * 1000, end_ms)
            } else {
                Vec::new()
            };
            json!({
                "name": shape.name,
                "algorithm": shape.algorithm,
                "rate": shape.rate,
                "capacity": shape.capacity,
                "period_ms": shape.period_ms,
                "windowed": shape.windowed,
                "boundaries_ms": marks,
                "timeline": {
                    "start_s": start_s,
                    "seconds": tl.len(),
                    "passed": series(DecisionOutcome::Passed),
                    "delayed": series(DecisionOutcome::Delayed),
                    "rejected": series(DecisionOutcome::Rejected),
                    "delayed_dry_run": series(DecisionOutcome::DelayedDryRun),
                    "rejected_dry_run": series(DecisionOutcome::RejectedDryRun),
                    "admitted_cost": tl.iter().map(|s| s.admitted_cost).collect::<Vec<_>>(),
                },
                "top": top_of(insight, p, now, n),
            })
        })
        .collect();
    out.insert("policies".into(), list.into());
    out.insert("adaptive".into(), adaptive_list(peek));
    out.insert("config".into(), insight.config());
    out.insert("reloads".into(), reloads(insight));
    Ok(out.into())
}

/// `GET /admin/api/top`.
pub(super) fn top(insight: &Insight, q: &Query) -> Result<Value, String> {
    q.only(&["policy", "n"])?;
    let Listing {
        n,
        policies,
        now,
        mut out,
    } = listing(insight, q)?;
    let list: Vec<Value> = policies
        .iter()
        .map(|p| {
            let mut v = top_of(insight, p, now, n);
            v["name"] = p.shape().name.into();
            v
        })
        .collect();
    out.insert("policies".into(), list.into());
    Ok(out.into())
}

/// `GET /admin/api/key`.
pub(super) async fn key(insight: &Insight, peek: &dyn Peek, q: &Query) -> Result<Value, Failure> {
    q.only(&["policy", "key"])?;
    let Some(policy) = q.text("policy")? else {
        return Err("policy is required: /admin/api/key?policy=NAME&key=KEY".into());
    };
    let key = q.key()?;
    let d = peek.peek(policy, key).await?;
    // the state at cost 0; a request of cost 1 is admitted when a unit remains
    let allowed = d.allowed && d.remaining > 0;
    let now = insight.now();
    let recent = insight.find(policy).map(|p| {
        let t = p.top(now, usize::MAX);
        let find = |l: &TopList| {
            let held = &key[..key.len().min(insight::summary::MAX_KEY_BYTES)];
            l.keys.iter().find(|c| c.key == held).map_or(
                Value::Null,
                |c| json!({ "count": c.count, "error": c.error }),
            )
        };
        json!({ "denied": find(&t.denied), "admitted": find(&t.admitted) })
    });
    Ok(json!({
        "policy": policy,
        "key": insight.show_key(key),
        "allowed": allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "reset_after_ms": ms(d.reset_after),
        "retry_after_ms": d.retry_after.filter(|_| !allowed).map(ms),
        "delay_ms": ms(d.delay),
        "recent": recent,
    }))
}

/// `GET /admin/api/config`.
pub(super) fn config(insight: &Insight, q: &Query) -> Result<Value, String> {
    q.only(&[])?;
    let now = insight.now();
    let mut out = header(insight, now);
    let policies: Vec<Value> = insight
        .policies()
        .iter()
        .map(|p| {
            let s = p.shape();
            json!({
                "name": s.name,
                "algorithm": s.algorithm,
                "rate": s.rate,
                "capacity": s.capacity,
                "period_ms": s.period_ms,
            })
        })
        .collect();
    out.insert("policies".into(), policies.into());
    out.insert("config".into(), insight.config());
    out.insert("reloads".into(), reloads(insight));
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn boundaries_are_the_period_multiples_in_range() {
        assert_eq!(
            super::boundaries(60_000, 30_000, 200_000),
            [60_000, 120_000, 180_000]
        );
        assert_eq!(super::boundaries(1_000, 0, 2_000), [0, 1_000, 2_000]);
        assert!(super::boundaries(1, 0, 10_000).is_empty());
        assert!(super::boundaries(0, 0, 10).is_empty());
    }
}
