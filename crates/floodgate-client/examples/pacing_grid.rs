//! The pacing grid on the real clock: every algorithm x rate (1/s, 10/s, 100/s, 1000/s,
//! 30/min) x burst (0, 5, 100), each cell behind the floodgate proxy (crate floodgate-proxy)
//! on loopback, the plain pacer (reads only `q`, `w`, `r`, `t`) and the polite client of
//! this crate each on its own proxy.
//!
//! `cargo run --release -p floodgate-client --example pacing_grid [-- SCALE [FILTER]]`
//!
//! The test `pacing_grid` runs the same grid in tokio's virtual time and asserts on it;
//! this one measures it on the wall clock, network stack and timer included. Each cell runs
//! for `max(2 periods, 40 sustained intervals, 5 s) x SCALE` (SCALE defaults to 1): 5 s at
//! 10/s, 100/s and 1000/s, 40 s at 1/s, 80 s at 30/min. The cells of one rate run
//! together, those at 100/s seven at a time and those at 1000/s three at a time (about
//! 1,400 and 6,000 requests a second), so the whole grid takes about four minutes. FILTER keeps the cells whose name (as in
//! `gcra 100/s burst 0`) contains it. It prints one markdown row per cell: the share of
//! the sustained rate each client got, its 429s among its attempts, and whether it met the
//! test's bar (at least 90 %, at most 1 % 429s, never more than the sustained count + 1
//! admitted in a rolling period, by the instants the client sent them, plus what the rate
//! fits in a 50 ms stall of the machine).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/common/grid.rs"]
mod grid;

use std::time::{Duration, Instant};

use grid::{Cell, RATES, Timer, Verdict, cells, run_cell, sustained_per_period};

fn run_length(cell: &Cell, scale: f64) -> Duration {
    let (count, period) = sustained_per_period(&cell.spec());
    let per_interval = period / u32::try_from(count).expect("small count");
    (period * 2)
        .max(per_interval * 40)
        .max(Duration::from_secs(5))
        .mul_f64(scale)
}

fn cellv(v: &Verdict) -> String {
    format!(
        "{:.1} % / {:.2} %{}",
        v.rate() * 100.0,
        v.share_429() * 100.0,
        if v.ok { "" } else { " (below the bar)" }
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let scale: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("SCALE is a number, e.g. 0.5"))
        .unwrap_or(1.0);
    let filter = std::env::args().nth(2).unwrap_or_default();
    let started = Instant::now();
    let all: Vec<Cell> = cells()
        .into_iter()
        .filter(|c| c.to_string().contains(&filter))
        .collect();
    let mut rows: Vec<(Cell, Verdict, Verdict)> = Vec::new();
    for rate in RATES {
        let rate = rate.parse().expect("rate");
        let group: Vec<Cell> = all.iter().filter(|c| c.rate == rate).copied().collect();
        // about 1,400 to 6,000 requests a second at once, not 4,200 at 100/s and 42,000 at
        // 1000/s: on two cores the grid's own load would be the noise it measures
        let at_once = match rate.count() {
            1000.. => 3,
            100.. => 7,
            _ => group.len().max(1),
        };
        for chunk in group.chunks(at_once) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|c| {
                    (
                        *c,
                        tokio::spawn(run_cell(*c, run_length(c, scale), Timer::Real)),
                    )
                })
                .collect();
            for (c, t) in tasks {
                let (plain, polite) = t.await.expect("cell");
                eprint!("{}{}", plain.line(&c, "plain"), polite.line(&c, "polite"));
                rows.push((c, plain, polite));
            }
        }
    }
    println!(
        "| algorithm | rate | burst | plain pacer: sustained rate / 429s | polite client: sustained rate / 429s |"
    );
    println!("|---|---|---:|---:|---:|");
    rows.sort_by_key(|(c, _, _)| all.iter().position(|x| x == c));
    for (c, plain, polite) in &rows {
        let rate = c.rate;
        let rate = if rate.period() == Duration::from_secs(60) {
            format!("{}/min", rate.count())
        } else {
            format!("{}/s", rate.count())
        };
        println!(
            "| {} | {rate} | {} | {} | {} |",
            c.kind,
            c.burst,
            cellv(plain),
            cellv(polite)
        );
    }
    let below = rows
        .iter()
        .map(|(_, a, b)| usize::from(!a.ok) + usize::from(!b.ok))
        .sum::<usize>();
    println!(
        "\n{} runs, {below} below the bar; {:.0} s in all",
        rows.len() * 2,
        started.elapsed().as_secs_f64()
    );
}
