//! A few cells of the pacing grid on the real clock: the proxy on loopback, tokio's
//! timer, both clients of the grid (`common/grid.rs`: the plain pacer that reads only
//! `q`, `w`, `r`, `t`, and the polite client), the same bar as the virtual-time grid
//! (at least 90 % of the sustained rate, at most 1 % 429s, never more than the sustained
//! count + 1 admitted in a rolling period, plus what the rate fits in a 50 ms stall of the
//! machine: `grid::STALL`). The cells: a fixed window and a bucket at 100/s, a sliding
//! counter (which sustains one less than its limit) and a bucket at 10/s. Four seconds in
//! all. Cells whose margin is a few milliseconds (no burst: a timer tick; a sliding log:
//! 2 % of its period) and the leaky queue (which holds each request to its slot) are left
//! to the example `pacing_grid` and its table in `docs/ratelimit-fields.md`: on a machine
//! as busy as a shared CI runner that margin is within the noise
//! (`docs/ratelimit-fields.md`, "Pacing on a real clock").

mod common;

use std::time::Duration;

use floodgate_core::Kind;
use grid::{Cell, Timer, run_cell};

#[path = "common/grid.rs"]
mod grid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_few_hard_cells_reach_the_sustained_rate_on_the_real_clock() {
    let run = Duration::from_secs(4);
    let cells = [
        (Kind::FixedWindow, "100/s", 0),
        (Kind::Gcra, "100/s", 100),
        (Kind::SlidingCounter, "10/s", 0),
        (Kind::TokenBucket, "10/s", 5),
    ]
    .map(|(kind, rate, burst)| Cell {
        kind,
        rate: rate.parse().expect("rate"),
        burst,
    });
    let tasks: Vec<_> = cells
        .iter()
        .map(|c| (*c, tokio::spawn(run_cell(*c, run, Timer::Real))))
        .collect();
    let mut report = String::new();
    for (c, t) in tasks {
        let (plain, polite) = t.await.expect("cell");
        report.push_str(&plain.line(&c, "plain"));
        report.push_str(&polite.line(&c, "polite"));
    }
    println!("{report}");
    assert!(!report.contains("FAIL"), "{report}");
}
