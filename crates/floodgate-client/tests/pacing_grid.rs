//! Pacing on the RateLimit fields alone reaches the sustained rate, for every algorithm.
//!
//! A grid of all seven algorithms x rates (1/s, 10/s, 100/s, 1000/s, 30/min) x bursts
//! (0, 5, 100), each cell behind its own floodgate proxy (crate floodgate-proxy) on
//! loopback, in tokio's virtual time (the proxy's in-process store reads tokio's clock, so
//! a 10-minute run at 30/min takes milliseconds). Two clients per cell, each on its own
//! proxy:
//!
//! * a plain pacer written here that reads only `q`, `w` (RateLimit-Policy) and `r`, `t`
//!   (RateLimit): one request at a time, the next planned `max(w / q, t / r)` after the
//!   previous one, or `t` after a response with `r = 0`;
//! * the polite client of floodgate-client (its tower layer over hyper, eight workers
//!   sharing one engine).
//!
//! Each must admit at least 90 % of the sustained rate the algorithm allows (the rate's
//! count per period; a sliding counter sustains one less per window, see
//! [`sustained_per_period`]), with at most 1 % of its attempts answered 429, and must never
//! get more than the sustained quota (+1) into any rolling period: no boundary burst.
//!
//! The same grid on the real clock is the example `pacing_grid`
//! (`cargo run --release -p floodgate-client --example pacing_grid`).

mod common;

use std::time::Duration;

use floodgate_core::{Kind, Rate, Spec};
use grid::{Cell, Timer, cells, run_cell, sustained_per_period};

#[path = "common/grid.rs"]
mod grid;

/// How long a cell runs (virtual time): at least two periods of the rate (two window
/// boundaries crossed) and 300 sustained intervals, so the first request and a startup
/// window weigh under 1 %.
fn run_length(spec: &Spec) -> Duration {
    let (count, period) = sustained_per_period(spec);
    let per_interval = period / u32::try_from(count).expect("small count");
    (period * 2).max(per_interval * 300)
}

#[test]
fn every_algorithm_rate_and_burst_paces_to_the_sustained_rate() {
    let all = cells();
    let halves: Vec<Vec<Cell>> = vec![
        all.iter().step_by(2).cloned().collect(),
        all.iter().skip(1).step_by(2).cloned().collect(),
    ];
    let threads: Vec<_> = halves
        .into_iter()
        .map(|cells| {
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .start_paused(true)
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    let tasks: Vec<_> = cells
                        .into_iter()
                        .map(|c| {
                            (
                                c,
                                tokio::spawn(run_cell(c, run_length(&c.spec()), Timer::Virtual)),
                            )
                        })
                        .collect();
                    let mut lines = String::new();
                    for (c, t) in tasks {
                        let (plain, polite) = t.await.expect("cell");
                        lines.push_str(&plain.line(&c, "plain"));
                        lines.push_str(&polite.line(&c, "polite"));
                    }
                    lines
                })
            })
        })
        .collect();
    let mut report = String::new();
    for t in threads {
        report.push_str(&t.join().expect("grid thread"));
    }
    println!("{report}");
    let failures: Vec<&str> = report.lines().filter(|l| l.contains("FAIL")).collect();
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        report.lines().count(),
        failures.join("\n")
    );
}

#[test]
fn the_sustained_rate_is_what_the_algorithm_admits_to_a_steady_stream() {
    // A steady stream at the claimed sustained rate is admitted in full; one a tenth faster
    // is not (checked on the core algorithms directly, no HTTP).
    use floodgate_core::{Algorithm, Nanos};
    for kind in Kind::ALL {
        for rate in ["1/s", "10/s", "30/min"] {
            for burst in [0, 5] {
                let cell = Cell {
                    kind,
                    rate: rate.parse::<Rate>().expect("rate"),
                    burst,
                };
                let spec = cell.spec();
                let alg = spec.build().expect("algorithm");
                let (count, period) = sustained_per_period(&spec);
                let admitted = |n: u64, over: Duration| {
                    let mut s = Default::default();
                    let gap = over.as_nanos() as u64 / n;
                    (0..n * 20)
                        .filter(|i| alg.check(&mut s, Nanos(1_000_000_000 + i * gap), 1).allowed)
                        .count() as u64
                };
                assert_eq!(admitted(count, period), count * 20, "{cell}");
                let faster = count + count.div_ceil(10);
                assert!(admitted(faster, period) < faster * 20, "{cell}");
            }
        }
    }
}
