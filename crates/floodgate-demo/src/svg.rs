//! One plot per algorithm: what the backend received per bucket (green bars, by arrival
//! time), the 429s per bucket (red, by send time), the window boundaries (vertical
//! lines), and on the right axis the backend's arrivals in the trailing window (blue
//! line) against the limit and the algorithm's bound (dashed).

use std::path::Path;

use plotters::prelude::*;

use crate::{DemoError, DemoReport, Row, fmt_secs, utc_time};

/// Draw `row` of `report` to `path`.
pub fn plot(report: &DemoReport, row: &Row, path: &Path) -> Result<(), DemoError> {
    draw(report, row, path).map_err(|e| DemoError::Plot(format!("{}: {e}", path.display())))
}

fn draw(report: &DemoReport, row: &Row, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let w = report.window_s;
    let ws = fmt_secs(w);
    let b = report.boundary_unix_s;
    let bucket = w / 8.0;
    // x: seconds relative to the boundary the bursts straddle
    let x0 = report.start_unix_s - b - bucket;
    let last = row
        .arrivals
        .last()
        .map_or(report.burst_gap_s, |&t| t as f64 / 1e9 - b);
    let x1 = (last.max(report.burst_gap_s) + w / 2.0).max(w * 0.75);
    let nb = ((x1 - x0) / bucket).ceil() as usize + 1;
    let bucket_of = |x: f64| ((x - x0) / bucket).floor();
    let mut received = vec![0u64; nb];
    for &t in &row.arrivals {
        let k = bucket_of(t as f64 / 1e9 - b);
        if k >= 0.0 && (k as usize) < nb {
            received[k as usize] += 1;
        }
    }
    let mut refused = vec![0u64; nb];
    for bk in &row.load.timeline.buckets {
        // the load timeline's buckets are the same width, aligned to the epoch as well
        let k = bucket_of(bk.start_unix_s - b + bucket / 2.0);
        if k >= 0.0 && (k as usize) < nb {
            refused[k as usize] += bk.denied;
        }
    }
    let bars_max = received
        .iter()
        .zip(&refused)
        .map(|(a, d)| a + d)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    // headroom above the data for the legend
    let bars_top = bars_max * 2.0;
    let roll_max = (row
        .max_in_window
        .max(row.bound.unwrap_or(0))
        .max(report.limit) as f64)
        * 1.7;

    let root = SVGBackend::new(path, (1000, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "{}: {} per {ws}, {} store; the backend got at most {} in any {ws} span",
        row.algorithm, report.limit, report.store, row.max_in_window
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .right_y_label_area_size(56)
        .build_cartesian_2d(x0..x1, 0.0..bars_top)?
        .set_secondary_coord(x0..x1, 0.0..roll_max);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc(format!(
            "seconds from the boundary at {} UTC (bars: per {:.2}s bucket)",
            utc_time(b),
            bucket
        ))
        .y_desc("requests per bucket")
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc(format!("arrivals in the trailing {ws}"))
        .draw()?;

    let green = RGBColor(46, 139, 87);
    let red = RGBColor(214, 39, 40);
    let blue = RGBColor(31, 119, 180);
    let gap = bucket * 0.08;
    for k in 0..nb {
        let l = x0 + k as f64 * bucket + gap;
        let r = x0 + (k + 1) as f64 * bucket - gap;
        let a = received[k] as f64;
        let d = a + refused[k] as f64;
        chart.draw_series([
            Rectangle::new([(l, 0.0), (r, a)], green.filled()),
            Rectangle::new([(l, a), (r, d)], red.filled()),
        ])?;
    }
    chart
        .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
        .label(format!(
            "received by the backend ({})",
            row.backend_received
        ))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], green.filled()));
    chart
        .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
        .label(format!("429 ({}), by send time", row.denied))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], red.filled()));

    // window boundaries inside the range
    let first = (x0 / w).ceil() as i64;
    let last_k = (x1 / w).floor() as i64;
    for (i, k) in (first..=last_k).enumerate() {
        let x = k as f64 * w;
        let s = chart.draw_series(LineSeries::new(
            vec![(x, 0.0), (x, bars_top)],
            BLACK.stroke_width(if k == 0 { 2 } else { 1 }),
        ))?;
        if i == 0 {
            s.label("window boundary").legend(|(x, y)| {
                PathElement::new(vec![(x + 7, y - 6), (x + 7, y + 6)], BLACK.stroke_width(2))
            });
        }
    }

    // arrivals in the trailing window, sampled
    let steps = 400;
    let times: Vec<f64> = row.arrivals.iter().map(|&t| t as f64 / 1e9 - b).collect();
    let line: Vec<(f64, f64)> = (0..=steps)
        .map(|i| {
            let x = x0 + (x1 - x0) * i as f64 / steps as f64;
            let n = times.iter().filter(|&&t| t <= x && t > x - w).count();
            (x, n as f64)
        })
        .collect();
    chart
        .draw_secondary_series(LineSeries::new(line, blue.stroke_width(2)))?
        .label(format!("arrivals in the trailing {ws} (right axis)"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], blue.stroke_width(2)));
    let dashed = |y: f64, color: RGBColor| {
        let mut pts = Vec::new();
        let n = 60;
        for i in 0..n {
            if i % 2 == 0 {
                let a = x0 + (x1 - x0) * i as f64 / n as f64;
                let c = x0 + (x1 - x0) * (i + 1) as f64 / n as f64;
                pts.push(PathElement::new(
                    vec![(a, y), (c, y)],
                    color.stroke_width(1),
                ));
            }
        }
        pts
    };
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_secondary_series(dashed(report.limit as f64, grey))?
        .label(format!("limit {} per {ws} (right axis)", report.limit))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 5, y)], grey.stroke_width(1)));
    if let Some(bound) = row.bound.filter(|&b| b != report.limit) {
        let purple = RGBColor(148, 103, 189);
        chart
            .draw_secondary_series(dashed(bound as f64, purple))?
            .label(format!("bound {bound} in any {ws} span (right axis)"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 5, y)], purple.stroke_width(1))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
