//! `floodgate simulate --nodes N`: the distributed strategies priced on one simulated
//! traffic (table, JSON, SVG bar chart).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use floodgate_core::algorithms::DelayMode;
use floodgate_core::rate::parse_duration;
use floodgate_core::{Kind, Nanos, Rate, Spec};
use floodgate_dist::{Config, Event, Report, Strategy};
use serde::Serialize;

use crate::exit::UsageContext;
use crate::simulate_cmd::SimulateArgs;

/// How long the simulated traffic runs without --duration.
const DEFAULT_DURATION: Duration = Duration::from_secs(60);

#[derive(Serialize)]
struct Row {
    strategy: &'static str,
    nodes: usize,
    skew: String,
    requests: u64,
    admitted: u64,
    ideal: u64,
    over_admitted: u64,
    legit_denied: u64,
    worst_excess: u64,
    round_trips: u64,
    round_trips_per_request: f64,
    added_latency_ms: f64,
    moved_keys: u64,
}

pub fn run(args: &SimulateArgs) -> Result<()> {
    let (config, strategies) = plan(args).usage_err()?;
    let reports = floodgate_dist::sim::run(&config, &strategies).usage_err()?;
    let (nodes, kind, rate) = (config.nodes, config.spec.kind, config.spec.rate);
    let duration = args.duration.unwrap_or(DEFAULT_DURATION);
    let skew = format!("{:?}", args.skew).to_lowercase();
    let rows: Vec<Row> = reports
        .iter()
        .map(|r| Row {
            strategy: r.strategy.name(),
            nodes,
            skew: skew.clone(),
            requests: r.requests,
            admitted: r.admitted,
            ideal: r.ideal,
            over_admitted: r.over_admitted,
            legit_denied: r.legit_denied,
            worst_excess: r.worst_excess,
            round_trips: r.round_trips,
            round_trips_per_request: r.round_trips_per_request(),
            added_latency_ms: r.added_latency_ms,
            moved_keys: r.moved_keys,
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{nodes} nodes, {} per key ({kind}), {} keys, {} req/s for {:.0}s, skew {skew}, rtt {:?}",
            rate,
            args.keys,
            config.rps,
            duration.as_secs_f64(),
            args.rtt
        );
        println!(
            "\n{:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
            "strategy",
            "admitted",
            "ideal",
            "over",
            "waste",
            "worst+",
            "rt/req",
            "+latency",
            "moved"
        );
        for r in &reports {
            println!(
                "{:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10.3} {:>8.3}ms {:>9}",
                r.strategy.name(),
                r.admitted,
                r.ideal,
                r.over_admitted,
                r.legit_denied,
                r.worst_excess,
                r.round_trips_per_request(),
                r.added_latency_ms,
                r.moved_keys
            );
        }
        println!(
            "\nover: admitted beyond an ideal global limiter; waste: requests the ideal admitted but the\n\
             strategy denied; worst+: most any key got in one period above capacity + count;\n\
             rt/req: network round trips per request; moved: keys whose owner changed at a fail/join."
        );
    }
    if let Some(path) = &args.svg {
        plot(path, &reports).with_context(|| format!("writing SVG to {}", path.display()))?;
        if !args.json {
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// The simulated run's configuration and strategies from the flags.
fn plan(args: &SimulateArgs) -> Result<(Config, Vec<Strategy>)> {
    let nodes = args.nodes.unwrap_or(1);
    if nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    if nodes > 1000 {
        bail!("--nodes {nodes} is above the 1000 the simulator runs");
    }
    let rate: Rate = args
        .rate
        .unwrap_or_else(|| "100/min".parse().expect("valid default"));
    let kind = match args.algorithms.as_slice() {
        [] => Kind::Gcra,
        [k] => *k,
        _ => bail!("distributed mode prices one algorithm at a time: give --algorithm once"),
    };
    let capacity = match (args.capacity, args.burst) {
        (Some(c), _) => Some(c),
        (None, Some(b)) => Some(b.checked_add(1).context("--burst is too large")?),
        (None, None) => None,
    };
    let spec = Spec {
        kind,
        rate,
        capacity,
        delay: DelayMode::NoDelay,
    };
    let strategies: Vec<Strategy> =
        if args.strategies.is_empty() || args.strategies.iter().any(|s| s == "all") {
            Strategy::ALL.to_vec()
        } else {
            args.strategies
                .iter()
                .map(|s| s.parse())
                .collect::<Result<_, _>>()?
        };
    let mut events = Vec::new();
    for f in &args.fails {
        let (node, at) = f
            .split_once('@')
            .with_context(|| format!("invalid --fail {f:?}: expected NODE@TIME such as 1@20s"))?;
        let node: usize = node
            .trim()
            .parse()
            .with_context(|| format!("invalid --fail {f:?}: node {node:?} is not a number"))?;
        if node >= nodes {
            bail!(
                "invalid --fail {f:?}: node {node} does not exist (nodes are 0..{})",
                nodes - 1
            );
        }
        events.push(Event::Fail {
            node,
            at: Nanos::from(parse_duration(at)?),
        });
    }
    for j in &args.joins {
        events.push(Event::Join {
            at: Nanos::from(*j),
        });
    }
    let duration = args.duration.unwrap_or(DEFAULT_DURATION);
    let config = Config {
        nodes,
        spec,
        keys: args.keys,
        rps: args.rps.unwrap_or(200),
        duration_ns: floodgate_core::time::duration_to_nanos(duration),
        skew: args.skew,
        rtt_ns: floodgate_core::time::duration_to_nanos(args.rtt),
        events,
        lease: args.lease,
        lease_ttl_ns: floodgate_core::time::duration_to_nanos(args.lease_ttl),
        seed: args.seed,
    };
    Ok((config, strategies))
}

fn plot(path: &std::path::Path, reports: &[Report]) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = reports
        .iter()
        .map(|r| r.over_admitted.max(r.legit_denied))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.15;
    let n = reports.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "distributed strategies: over-admission vs waste",
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n, 0.0..y_max)?;
    let names: Vec<&str> = reports.iter().map(|r| r.strategy.name()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(reports.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.26 {
                names.get(i).map(|s| s.to_string()).unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("requests")
        .draw()?;
    let over = RGBColor(200, 60, 60);
    let waste = RGBColor(60, 110, 200);
    chart
        .draw_series(reports.iter().enumerate().map(|(i, r)| {
            Rectangle::new(
                [
                    (i as f64 + 0.12, 0.0),
                    (i as f64 + 0.48, r.over_admitted as f64),
                ],
                over.filled(),
            )
        }))?
        .label("over-admitted (above the global limit)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], over.filled()));
    chart
        .draw_series(reports.iter().enumerate().map(|(i, r)| {
            Rectangle::new(
                [
                    (i as f64 + 0.52, 0.0),
                    (i as f64 + 0.88, r.legit_denied as f64),
                ],
                waste.filled(),
            )
        }))?
        .label("legit denied (quota idle elsewhere)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], waste.filled()));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
