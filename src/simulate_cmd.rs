//! `floodgate simulate`: tables, JSON and SVG around `floodgate_core::simulate`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use floodgate_core::algorithms::DelayMode;
use floodgate_core::rate::{format_duration, parse_duration};
use floodgate_core::simulate::{self, Burst, Outcome, Scenario};
use floodgate_core::{Kind, Rate, Spec};
use serde::Serialize;

use crate::exit::UsageContext;

const EXAMPLES: &str = "\
Examples:
  floodgate simulate
      the two classic cases: 100/60s across a boundary, and a token bucket refilling
  floodgate simulate --scenario boundary --rate 100/60s --offset 100ms
  floodgate simulate --scenario refill --rate 2/s --capacity 10
  floodgate simulate --arrivals 100@59.9s --arrivals 100@60.1s --rate 100/min
  floodgate simulate --scenario steady --rps 5 --duration 120s --rate 100/min
  floodgate simulate --algorithm fixed-window --algorithm gcra --json
  floodgate simulate --svg boundary.svg
  floodgate simulate --nodes 3                       distributed strategies, uniform traffic
  floodgate simulate --nodes 3 --skew spread         one client spreading over all nodes
  floodgate simulate --nodes 3 --skew hot --fail 1@20s --join 40s --json";

/// Flags of `floodgate simulate`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct SimulateArgs {
    /// Which scenario(s): boundary, refill, steady, all. Default: boundary and refill (or
    /// the custom --arrivals when given).
    #[arg(long, value_name = "NAME")]
    scenario: Option<String>,
    /// Limit as COUNT/PERIOD (10/s, 100/min, 100/60s). Default per scenario: boundary
    /// 100/60s, refill 2/s, steady 100/min.
    #[arg(long)]
    pub(crate) rate: Option<Rate>,
    /// Units a key at rest admits at once, for the bucket algorithms (token bucket, leaky,
    /// GCRA). Default: the rate's count (refill: 10).
    #[arg(long, conflicts_with = "burst")]
    pub(crate) capacity: Option<u64>,
    /// nginx/redis-cell style burst: the excess above one request (capacity = burst + 1).
    #[arg(long)]
    pub(crate) burst: Option<u64>,
    /// Leaky queue: let the first N excess requests through without delay (nginx delay=N).
    #[arg(long, value_name = "N")]
    delay: Option<u64>,
    /// Boundary scenario: how far before and after the boundary the two bursts arrive.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    offset: Duration,
    /// Custom traffic, COUNT@TIME[xCOST], repeatable: --arrivals 100@59.9s --arrivals 100@60.1s
    #[arg(long, value_name = "COUNT@TIME")]
    arrivals: Vec<Burst>,
    /// Steady scenario (default 5) and distributed mode (default 200): requests per second.
    #[arg(long)]
    pub(crate) rps: Option<u64>,
    /// Steady scenario (default 180s) and distributed mode (default 60s): how long.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// Distributed mode: price the strategies for a fleet of N nodes (see --strategy).
    #[arg(long, value_name = "N", help_heading = "Distributed mode")]
    pub(crate) nodes: Option<usize>,
    /// sticky, local, shared, hybrid or all (repeatable; default all).
    #[arg(
        long = "strategy",
        value_name = "NAME",
        help_heading = "Distributed mode"
    )]
    pub(crate) strategies: Vec<String>,
    /// Traffic shape: uniform, zipf, hot (one hot key), spread (one client over all nodes).
    #[arg(long, default_value = "uniform", help_heading = "Distributed mode")]
    pub(crate) skew: floodgate_dist::Skew,
    /// Distinct keys (clients).
    #[arg(long, default_value_t = 100, help_heading = "Distributed mode")]
    pub(crate) keys: u64,
    /// Simulated round-trip time to another node or to the shared store.
    #[arg(long, default_value = "1ms", value_parser = parse_duration, help_heading = "Distributed mode")]
    pub(crate) rtt: Duration,
    /// A node fails: NODE@TIME, e.g. 1@20s (repeatable).
    #[arg(
        long = "fail",
        value_name = "NODE@TIME",
        help_heading = "Distributed mode"
    )]
    pub(crate) fails: Vec<String>,
    /// A node joins at TIME, e.g. 40s (repeatable).
    #[arg(long = "join", value_name = "TIME", value_parser = parse_duration, help_heading = "Distributed mode")]
    pub(crate) joins: Vec<Duration>,
    /// Hybrid: units per lease.
    #[arg(long, default_value_t = 10, help_heading = "Distributed mode")]
    pub(crate) lease: u64,
    /// Hybrid: how long a lease is valid.
    #[arg(long, default_value = "1s", value_parser = parse_duration, help_heading = "Distributed mode")]
    pub(crate) lease_ttl: Duration,
    /// Seed for the simulated traffic.
    #[arg(long, default_value_t = 1, help_heading = "Distributed mode")]
    pub(crate) seed: u64,
    /// Only these algorithms (repeatable): fixed-window, sliding-log, sliding-counter,
    /// token-bucket, leaky-meter, leaky-queue, gcra.
    #[arg(long = "algorithm", value_name = "NAME")]
    pub(crate) algorithms: Vec<Kind>,
    /// Print JSON: an array with one object per (scenario, algorithm).
    #[arg(long)]
    pub(crate) json: bool,
    /// Write an SVG plot of admissions over time, window boundaries marked.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
}

/// One row of output, as JSON.
#[derive(Serialize)]
struct Row {
    scenario: String,
    algorithm: &'static str,
    guarantee: &'static str,
    rate: String,
    capacity: u64,
    allowed: u64,
    denied: u64,
    allowed_by_burst: Vec<u64>,
    max_in_window: u64,
    window_s: f64,
    max_in_second: u64,
    max_delay_s: f64,
}

pub(crate) struct Run {
    scenario: Scenario,
    rate: Rate,
    capacity: u64,
    outcomes: Vec<Outcome>,
}

/// The algorithms on one simulated traffic (`--nodes` is [`crate::simulate_dist`]'s).
pub fn run(args: SimulateArgs) -> Result<()> {
    let runs = plan(&args)
        .usage_err()?
        .into_iter()
        .map(|(scenario, rate, capacity)| execute(&args, scenario, rate, capacity))
        .collect::<Result<Vec<_>>>()
        .usage_err()?;
    if args.json {
        let rows: Vec<Row> = runs.iter().flat_map(rows_of).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for r in &runs {
            print_table(r);
        }
    }
    if let Some(path) = &args.svg {
        crate::simulate_cmd::plot(path, &runs)
            .with_context(|| format!("writing SVG to {}", path.display()))?;
        if !args.json {
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn plan(args: &SimulateArgs) -> Result<Vec<(Scenario, Rate, u64)>> {
    let rate_or = |default: &str| -> Rate {
        args.rate
            .unwrap_or_else(|| default.parse().expect("valid default"))
    };
    let capacity_for = |rate: Rate, default: Option<u64>| -> Result<u64> {
        let c = match (args.capacity, args.burst) {
            (Some(c), _) => c,
            (None, Some(b)) => b.checked_add(1).context("--burst is too large")?,
            (None, None) => default.unwrap_or(rate.count()),
        };
        if c == 0 {
            bail!("--capacity must be at least 1");
        }
        Ok(c)
    };
    if !args.arrivals.is_empty() {
        if args.scenario.is_some() {
            bail!("--arrivals and --scenario are exclusive: --arrivals is a scenario of its own");
        }
        let rate = rate_or("100/60s");
        let desc = args
            .arrivals
            .iter()
            .map(|b| format!("{}@{:.3}s", b.count, b.at.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ");
        let sc = Scenario {
            name: "custom".into(),
            description: desc,
            bursts: args.arrivals.clone(),
        };
        return Ok(vec![(sc, rate, capacity_for(rate, None)?)]);
    }
    let names: Vec<&str> = match args.scenario.as_deref() {
        None => vec!["boundary", "refill"],
        Some("all") => vec!["boundary", "refill", "steady"],
        Some(s) => s.split(',').map(str::trim).collect(),
    };
    names
        .into_iter()
        .map(|name| match name {
            "boundary" => {
                let rate = rate_or("100/60s");
                let sc = Scenario::boundary(rate.count(), rate.period(), args.offset);
                Ok((sc, rate, capacity_for(rate, None)?))
            }
            "refill" => {
                let rate = rate_or("2/s");
                let cap = capacity_for(
                    rate,
                    Some(if args.rate.is_some() {
                        rate.count()
                    } else {
                        10
                    }),
                )?;
                let sc = Scenario::refill(cap + cap / 2, Duration::from_secs(3), cap);
                Ok((sc, rate, cap))
            }
            "steady" => {
                let rate = rate_or("100/min");
                let sc = Scenario::steady(
                    args.rps.unwrap_or(5),
                    args.duration.unwrap_or(Duration::from_secs(180)),
                )?;
                Ok((sc, rate, capacity_for(rate, None)?))
            }
            other => bail!("unknown scenario {other:?}; expected boundary, refill, steady or all"),
        })
        .collect()
}

fn execute(args: &SimulateArgs, scenario: Scenario, rate: Rate, capacity: u64) -> Result<Run> {
    let kinds: Vec<Kind> = if args.algorithms.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.algorithms.clone()
    };
    let outcomes = kinds
        .into_iter()
        .map(|kind| {
            let spec = Spec {
                kind,
                rate,
                capacity: Some(capacity),
                delay: DelayMode::After(args.delay.unwrap_or(0)),
            };
            simulate::run(&spec, &scenario, rate.period())
                .with_context(|| format!("{kind} with rate {rate} and capacity {capacity}"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Run {
        scenario,
        rate,
        capacity,
        outcomes,
    })
}

fn rows_of(r: &Run) -> Vec<Row> {
    r.outcomes
        .iter()
        .map(|o| Row {
            scenario: r.scenario.name.clone(),
            algorithm: o.kind.name(),
            guarantee: o.kind.guarantee(),
            rate: r.rate.to_string(),
            capacity: r.capacity,
            allowed: o.allowed,
            denied: o.denied,
            allowed_by_burst: o.allowed_by_burst.clone(),
            max_in_window: o.max_in_window,
            window_s: r.rate.period().as_secs_f64(),
            max_in_second: o.max_in_second,
            max_delay_s: o.max_delay.as_secs_f64(),
        })
        .collect()
}

fn print_table(r: &Run) {
    let w = format_duration(r.rate.period());
    println!("scenario {}: {}", r.scenario.name, r.scenario.description);
    println!(
        "limit {} (capacity {} for the bucket algorithms)\n",
        r.rate, r.capacity
    );
    let win_col = format!("max in any {w}");
    println!(
        "{:<16} {:<52} {:>8} {:>7} {:>12} {:>w$} {:>14} {:>10}",
        "algorithm",
        "guarantee",
        "allowed",
        "denied",
        "per burst",
        win_col,
        "max in any 1s",
        "max delay",
        w = win_col.len().max(14)
    );
    for o in &r.outcomes {
        println!(
            "{:<16} {:<52} {:>8} {:>7} {:>12} {:>w$} {:>14} {:>10}",
            o.kind.name(),
            o.kind.guarantee(),
            o.allowed,
            o.denied,
            per_burst(&o.allowed_by_burst),
            o.max_in_window,
            o.max_in_second,
            format!("{:.1}s", o.max_delay.as_secs_f64()),
            w = win_col.len().max(14)
        );
    }
    println!();
}

fn per_burst(v: &[u64]) -> String {
    if v.len() > 4 {
        return "-".into();
    }
    v.iter().map(u64::to_string).collect::<Vec<_>>().join("+")
}

/// Cumulative admissions (as the backend sees them) per algorithm, one panel per scenario.
pub(crate) fn plot(path: &std::path::Path, runs: &[Run]) -> Result<()> {
    use plotters::prelude::*;
    let height = 420 * runs.len() as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((runs.len(), 1));
    for (panel, r) in panels.iter().zip(runs) {
        let t_min = r
            .scenario
            .bursts
            .iter()
            .map(|b| b.at.as_secs_f64())
            .fold(f64::INFINITY, f64::min);
        let t_max = r
            .outcomes
            .iter()
            .flat_map(|o| o.forwarded.last().map(|f| f.0.as_secs_f64()))
            .chain(r.scenario.bursts.iter().map(|b| b.at.as_secs_f64()))
            .fold(t_min, f64::max);
        let span = (t_max - t_min).max(1.0);
        let (x0, x1) = (t_min - span * 0.05, t_max + span * 0.05);
        let y_max = r
            .outcomes
            .iter()
            .map(|o| o.forwarded.iter().map(|f| f.1).sum::<u64>())
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "{}: {} (limit {})",
                    r.scenario.name, r.scenario.description, r.rate
                ),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(x0..x1, 0.0..y_max * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("admitted (cumulative, as forwarded)")
            .draw()?;
        let w = r.rate.period().as_secs_f64();
        let first = (x0 / w).ceil() as i64;
        let last = (x1 / w).floor() as i64;
        if last - first < 200 {
            for k in first..=last {
                let x = k as f64 * w;
                let style = RED.mix(0.6).stroke_width(2);
                let drawn = chart.draw_series(DashedLineSeries::new(
                    vec![(x, 0.0), (x, y_max * 1.1)],
                    6,
                    4,
                    style,
                ))?;
                if k == first {
                    drawn
                        .label("window boundary")
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
                }
            }
        }
        for (i, o) in r.outcomes.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut points = vec![(x0, 0.0)];
            let mut total = 0u64;
            for &(t, units) in &o.forwarded {
                let x = t.as_secs_f64();
                points.push((x, total as f64));
                total += units;
                points.push((x, total as f64));
            }
            points.push((x1, total as f64));
            // earlier series drawn wider, so lines that coincide stay visible underneath
            let width = 2 + 2 * (r.outcomes.len() - 1 - i) as u32;
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(width)))?
                .label(format!(
                    "{} ({} allowed, max {} per window)",
                    o.kind.name(),
                    o.allowed,
                    o.max_in_window
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
