//! The checks of a [network fault](crate::netfaults) case: every answer classified
//! under the fault policy in force, the fault policy's timing, nothing admitted twice,
//! the [auditor](crate::audit)'s overshoot, and the recovery.

use std::collections::HashMap;
use std::time::Duration;

use crate::audit::{self, Admission, Overshoot};
use crate::load::Sample;
use crate::netclock::STEP;
use crate::netfaults::{Case, NetFault, NetRow, Settings, Timeline};

/// How one answer reads under `policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// A decision (`RateLimit` present): 200 or 429.
    Decided { admitted: bool },
    /// The configured fault policy's answer.
    Policy,
    /// The other policy's answer, or anything else.
    Error,
}

fn answer(x: &Sample, policy: &str) -> Answer {
    match (x.status, x.ratelimit) {
        (Some(200), true) => Answer::Decided { admitted: true },
        (Some(429), true) => Answer::Decided { admitted: false },
        (Some(200), false) if policy == "fail-open" => Answer::Policy,
        (Some(503), false) if policy == "fail-closed" => Answer::Policy,
        _ => Answer::Error,
    }
}

/// The checks and figures of one case (pure: the unit tests feed it synthetic runs).
pub fn analyse(
    case: Case,
    s: &Settings,
    tl: &Timeline,
    samples: &[Sample],
    arrivals: &[crate::net::Arrival],
) -> NetRow {
    let affected = case.fault.affected(s.nodes);
    let by_id: HashMap<u64, &Sample> = samples.iter().map(|x| (x.id, x)).collect();
    let (mut admitted, mut denied, mut errors) = (0u64, 0u64, 0u64);
    let (mut off_policy, mut policy_outside, mut slow) = (0u64, 0u64, 0u64);
    let mut policy_during = 0u64;
    let mut apply: Option<Duration> = None;
    let mut max_took = Duration::ZERO;
    let mut recovered: HashMap<usize, Duration> = HashMap::new();
    // a clock step's effect: admissions during the step, on node 0 and on the others
    let mut in_step = [0u64; 2];
    let clock = case.fault.is_clock();
    // a clock step leaves state written ahead of the true time, which every node reads:
    // recovered once every node admits on a hot key (one far over the limit) again
    let recovering: Vec<usize> = if clock {
        (0..s.nodes).collect()
    } else {
        affected.clone()
    };
    let fault_end = tl.heal;
    // first, when each recovering node answered normally again after the heal
    for x in samples {
        let a = answer(x, case.policy);
        let normal = if clock {
            a == (Answer::Decided { admitted: true }) && x.key.starts_with("hot")
        } else {
            matches!(a, Answer::Decided { .. })
        };
        if recovering.contains(&x.target) && x.sent >= tl.heal && normal {
            let at = (x.sent + x.took).saturating_duration_since(tl.heal);
            recovered
                .entry(x.target)
                .and_modify(|r| *r = (*r).min(at))
                .or_insert(at);
        }
    }
    for x in samples {
        let a = answer(x, case.policy);
        let done = x.sent + x.took;
        let hit = affected.contains(&x.target);
        let during = x.sent >= tl.fault && x.sent < fault_end;
        match a {
            Answer::Decided { admitted: true } => admitted += 1,
            Answer::Decided { admitted: false } => denied += 1,
            Answer::Policy if case.policy == "fail-open" => admitted += 1,
            Answer::Policy => denied += 1,
            Answer::Error => errors += 1,
        }
        let killed = case.fault == NetFault::NodeKill && hit && x.sent >= tl.fault;
        if a == Answer::Error && !killed {
            off_policy += 1;
        }
        if x.status.is_some() {
            max_took = max_took.max(x.took);
            if x.took > s.store_timeout + s.slack {
                slow += 1;
            }
        }
        if a == Answer::Policy {
            // after the fault, a call that was already waiting may still time out
            let late = done > fault_end + s.store_timeout + s.slack;
            // after the heal and before the node's first normal answer, it is recovering
            // (a TCP connection waits out its retransmission backoff; reconnecting SYNs
            // back off too): the recovery bound covers that span, not the budget below
            let recovering_now = hit
                && x.sent >= fault_end
                && recovered
                    .get(&x.target)
                    .is_some_and(|r| done <= fault_end + *r);
            if hit && (during || !late || recovering_now) && done >= tl.fault {
                policy_during += 1;
                let at = done.saturating_duration_since(tl.fault);
                apply = Some(apply.map_or(at, |p: Duration| p.min(at)));
            } else {
                policy_outside += 1;
            }
        }
        if during && a == (Answer::Decided { admitted: true }) {
            in_step[usize::from(x.target != 0)] += 1;
        }
    }
    let recover = if recovering.iter().all(|n| recovered.contains_key(n)) {
        recovered.values().max().copied()
    } else {
        None
    };
    // nothing admitted twice, nothing denied forwarded, every 200 delivered
    let mut seen: HashMap<u64, u32> = HashMap::new();
    for a in arrivals {
        *seen.entry(a.id).or_insert(0) += 1;
    }
    let twice: u64 = seen.values().map(|n| u64::from(n - 1)).sum();
    let forwarded_denied = arrivals
        .iter()
        .filter(|a| by_id.get(&a.id).is_some_and(|x| x.status != Some(200)))
        .count() as u64;
    let undelivered = samples
        .iter()
        .filter(|x| x.status == Some(200) && !seen.contains_key(&x.id))
        .count() as u64;
    // the auditor, over what the backend received
    let admissions: Vec<Admission> = arrivals
        .iter()
        .filter_map(|a| {
            let x = by_id.get(&a.id)?;
            Some(Admission {
                key: a.key.clone(),
                at: a.at,
                lag: a.at.saturating_duration_since(x.sent),
                open: answer(x, case.policy) == Answer::Policy,
            })
        })
        .collect();
    let g = s.guarantee(case.strategy);
    let extra = case
        .fault
        .extra_bound(&s.limit(), case.strategy, s.nodes as u64);
    let o: Overshoot = audit::audit(&admissions, g, &s.limit(), extra);
    // verdicts
    let mut fails = Vec::new();
    if o.worst > 0 {
        fails.push(format!(
            "over the bound by {} on {} ({} spans, for {} ms)",
            o.worst,
            o.worst_key,
            o.spans_over,
            o.lasted.as_millis()
        ));
    }
    if twice + forwarded_denied + undelivered > 0 {
        fails.push(format!(
            "backend saw {twice} twice, {forwarded_denied} denied requests, missed {undelivered} admitted"
        ));
    }
    if off_policy > 0 {
        fails.push(format!(
            "{off_policy} answers neither decided nor {}",
            case.policy
        ));
    }
    let apply_bound = s.store_timeout + s.hot_gap + s.slack;
    if case.fault.must_degrade() {
        match apply {
            None => fails.push("the fault policy never applied".into()),
            Some(a) if a > apply_bound => fails.push(format!(
                "the fault policy applied after {} ms (bound {} ms)",
                a.as_millis(),
                apply_bound.as_millis()
            )),
            Some(_) => {}
        }
    }
    // a slow healthy call on a loaded machine may fail alone: 2% of the answers
    let budget = (samples.len() as u64 / 50).max(5);
    if policy_outside > budget {
        fails.push(format!(
            "{policy_outside} policy answers outside the fault (budget {budget})"
        ));
    }
    if case.fault == NetFault::Latency50 && policy_during > budget {
        fails.push(format!(
            "{policy_during} policy answers under a latency below the timeout (budget {budget})"
        ));
    }
    if slow > 0 && case.fault != NetFault::NodeKill {
        fails.push(format!(
            "{slow} answers slower than the timeout + slack ({} ms; max {} ms)",
            (s.store_timeout + s.slack).as_millis(),
            max_took.as_millis()
        ));
    }
    // after a step back, state written ahead by the step holds every node off that long
    let recover_within = s.recover_within + if clock { STEP } else { Duration::ZERO };
    match recover {
        Some(r) if r <= recover_within => {}
        Some(r) => fails.push(format!("recovered after {} ms", r.as_millis())),
        None => fails.push("an affected node never recovered".into()),
    }
    let pass = fails.is_empty();
    let mut detail = format!(
        "{} req, {policy_during} {} on node{} in fault, {policy_outside} outside, {} admissions audited ({} open), over for {} ms, bound {}, max {} ms",
        samples.len(),
        match case.policy {
            "fail-open" => "open",
            "fail-closed" => "503",
            _ => "policy answers",
        },
        if affected.len() == 1 {
            "0".to_string()
        } else {
            "s".to_string()
        },
        o.admitted,
        o.open,
        o.lasted.as_millis(),
        if extra > 0 {
            format!("{}+{extra}", g.formula())
        } else {
            g.formula()
        },
        max_took.as_millis(),
    );
    if clock {
        detail.push_str(&format!(
            "; admitted during the step: node0 {}, the others {}",
            in_step[0], in_step[1]
        ));
    }
    if !pass {
        detail.push_str("; FAIL: ");
        detail.push_str(&fails.join("; "));
    }
    NetRow {
        fault: case.fault.name(),
        strategy: case.strategy,
        policy: case.policy,
        admitted,
        denied,
        errors,
        overshoot: o.worst,
        worst_count: o.worst_count,
        worst_bound: o.worst_bound,
        bound_formula: if extra > 0 {
            format!("{}+{extra}", g.formula())
        } else {
            g.formula()
        },
        over_for_ms: o.lasted.as_millis() as u64,
        apply_ms: apply.map(|d| d.as_millis() as u64),
        recover_ms: recover.map(|d| d.as_millis() as u64),
        step_admitted: clock.then_some((in_step[0], in_step[1])),
        pass,
        detail,
    }
}

#[cfg(test)]
mod tests {
    //! The checks themselves: a clean synthetic run passes, each broken guarantee fails.
    use std::time::Instant;

    use super::*;
    use crate::net::Arrival;

    const CASE: Case = Case {
        fault: NetFault::Partition,
        strategy: "shared",
        policy: "fail-closed",
    };

    /// Node 0 partitioned from 1 s to 3 s, one key, a request every 25 ms per node: node 0
    /// answers 503 during the fault; at most 20 per second admitted in all.
    fn run() -> (Settings, Timeline, Vec<Sample>, Vec<Arrival>) {
        let s = Settings::fast("/nonexistent".into());
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let tl = Timeline {
            fault: t0 + ms(1000),
            heal: t0 + ms(3000),
        };
        let (mut samples, mut arrivals) = (Vec::new(), Vec::new());
        let mut id = 0;
        for i in 0..200u64 {
            for node in 0..3 {
                id += 1;
                let sent = t0 + ms(i * 25 + node as u64 * 3);
                let degraded = node == 0 && sent >= tl.fault && sent < tl.heal;
                // one admission per 50 ms: 20/s, under C + r x W = 40 in any second
                let admit = !degraded && node == 1 && i % 2 == 0;
                let status = if degraded {
                    503
                } else if admit {
                    200
                } else {
                    429
                };
                samples.push(Sample {
                    target: node,
                    key: "hot".into(),
                    id,
                    sent,
                    took: ms(if degraded { 200 } else { 2 }),
                    status: Some(status),
                    ratelimit: !degraded,
                    remaining: None,
                    delayed: false,
                    error: None,
                });
                if admit {
                    arrivals.push(Arrival {
                        id,
                        key: "hot".into(),
                        at: sent + ms(1),
                    });
                }
            }
        }
        (s, tl, samples, arrivals)
    }

    #[test]
    fn a_clean_partition_passes() {
        let (s, tl, samples, arrivals) = run();
        let r = analyse(CASE, &s, &tl, &samples, &arrivals);
        assert!(r.pass, "{}", r.detail);
        assert_eq!(r.apply_ms, Some(200));
        assert_eq!(r.recover_ms, Some(2));
        assert!(r.overshoot <= 0);
    }

    #[test]
    fn an_admission_over_the_bound_fails() {
        let (s, tl, mut samples, mut arrivals) = run();
        // node 2 admits 25 more inside one second
        for x in samples
            .iter_mut()
            .filter(|x| x.target == 2 && x.sent > tl.heal)
            .take(25)
        {
            x.status = Some(200);
            arrivals.push(Arrival {
                id: x.id,
                key: "hot".into(),
                at: x.sent + Duration::from_millis(1),
            });
        }
        let r = analyse(CASE, &s, &tl, &samples, &arrivals);
        assert!(!r.pass && r.overshoot > 0, "{}", r.detail);
        assert!(r.detail.contains("over the bound"), "{}", r.detail);
    }

    #[test]
    fn twice_admitted_wrong_policy_and_no_recovery_fail() {
        let (s, tl, samples, mut arrivals) = run();
        arrivals.push(arrivals[3].clone());
        let r = analyse(CASE, &s, &tl, &samples, &arrivals);
        assert!(r.detail.contains("1 twice"), "{}", r.detail);
        let (s, tl, samples, arrivals) = run();
        let open = Case {
            policy: "fail-open",
            ..CASE
        };
        let r = analyse(open, &s, &tl, &samples, &arrivals);
        assert!(
            r.detail.contains("neither decided nor fail-open"),
            "{}",
            r.detail
        );
        let (s, tl, mut samples, arrivals) = run();
        for x in samples
            .iter_mut()
            .filter(|x| x.target == 0 && x.sent >= tl.heal)
        {
            x.status = Some(503);
            x.ratelimit = false;
        }
        let r = analyse(CASE, &s, &tl, &samples, &arrivals);
        assert!(r.detail.contains("never recovered"), "{}", r.detail);
    }
    #[test]
    fn policy_answers_before_recovery_are_recovery_and_after_it_outside() {
        // node 0 answers 503 for 1.7 s after the heal (its connection waits out TCP's
        // retransmission backoff), then decides: within the 3 s recovery bound, passes
        let (s, tl, mut samples, arrivals) = run();
        let until = tl.heal + Duration::from_millis(1700);
        for x in samples
            .iter_mut()
            .filter(|x| x.target == 0 && x.sent >= tl.heal && x.sent < until)
        {
            x.status = Some(503);
            x.ratelimit = false;
        }
        let r = analyse(CASE, &s, &tl, &samples, &arrivals);
        assert!(r.pass, "{}", r.detail);
        assert!(r.recover_ms.unwrap() >= 1700, "{}", r.detail);
        // the same answers on node 1, which the fault never touched, are outside it
        let (s, tl, mut samples, arrivals) = run();
        for x in samples.iter_mut().filter(|x| {
            x.target == 1 && x.sent >= tl.heal && x.sent < until && x.status == Some(429)
        }) {
            x.status = Some(503);
            x.ratelimit = false;
        }
        let r = analyse(CASE, &s, &tl, &samples, &arrivals);
        assert!(
            r.detail.contains("policy answers outside the fault"),
            "{}",
            r.detail
        );
    }
}
