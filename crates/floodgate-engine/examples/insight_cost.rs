//! What recording a decision in [`floodgate_engine::insight`] costs on the hot path.
//!
//! `cargo run --release -p floodgate-engine --example insight_cost -- [N] [record|baseline] [KEYS]`
//! records N decisions (default 1,000,000) over KEYS keys (default 10,000: nearly every
//! admitted key misses the summaries, the worst case; 8: every key is held), one
//! decision in ten for a flooding key, denied, and prints the wall time per decision;
//! `baseline` runs the same loop without recording. Under `valgrind --tool=callgrind` the two runs' instruction counts, divided
//! by N, give the instructions one `record` adds per decision, repeatable whatever else
//! the machine is doing.

use std::hint::black_box;
use std::time::Instant;

use floodgate_core::{Kind, Rate, Spec};
use floodgate_engine::PolicyInfo;
use floodgate_engine::insight::{Insight, KeyDisplay};
use floodgate_engine::metrics::DecisionOutcome;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let record = args.next().as_deref() != Some("baseline");
    let distinct: u32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000)
        .max(1);
    let spec = Spec::new(Kind::FixedWindow, Rate::per_second(100).expect("a rate"));
    let alg = spec.build().expect("a policy");
    let insight = Insight::new("bench", KeyDisplay::Plain);
    let p = insight.policy(&PolicyInfo::new(0, "api".into(), spec, alg));
    let keys: Vec<Vec<u8>> = (0..distinct)
        .map(|i| format!("10.0.{}.{}", i / 256, i % 256).into_bytes())
        .collect();
    let start = Instant::now();
    for i in 0..n {
        let (key, outcome) = if i % 10 == 0 {
            (&b"10.9.9.9"[..], DecisionOutcome::Rejected)
        } else {
            (
                &keys[(i as usize * 7919) % keys.len()][..],
                DecisionOutcome::Passed,
            )
        };
        if record {
            p.record(black_box(key), outcome, 1);
        } else {
            black_box((key, outcome));
        }
    }
    let el = start.elapsed();
    println!(
        "{} {n} decisions: {:.1} ns each",
        if record { "record" } else { "baseline" },
        el.as_nanos() as f64 / n as f64
    );
}
