//! The timeline as an SVG: admitted and denied requests per bucket (stacked bars), the
//! p99 latency per bucket (line, right axis), window boundaries as vertical lines.

use std::path::Path;

use plotters::prelude::*;

use crate::error::LoadError;
use crate::report::Report;

/// Draw `report`'s timeline to `path` under `title`.
pub fn plot_timeline(report: &Report, title: &str, path: &Path) -> Result<(), LoadError> {
    draw(report, title, path).map_err(|e| LoadError::Plot(format!("{}: {e}", path.display())))
}

fn draw(report: &Report, title: &str, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let tl = &report.timeline;
    let root = SVGBackend::new(path, (1000, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let w = tl.bucket_s;
    let (x0, x1) = match (tl.buckets.first(), tl.buckets.last()) {
        (Some(a), Some(b)) => (a.start_s, b.start_s + w),
        _ => (0.0, 1.0),
    };
    let y_max = tl
        .buckets
        .iter()
        .map(|b| b.admitted + b.denied + b.errors)
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.45;
    let p99_max = tl
        .buckets
        .iter()
        .map(|b| b.p99_ms)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.45;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .right_y_label_area_size(56)
        .build_cartesian_2d(x0..x1, 0.0..y_max)?
        .set_secondary_coord(x0..x1, 0.0..p99_max);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("seconds since start (bars: requests per bucket, by send time)")
        .y_desc("requests per bucket")
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("p99 latency (ms)")
        .draw()?;

    let admitted = RGBColor(46, 139, 87);
    let denied = RGBColor(214, 39, 40);
    let errors = RGBColor(127, 127, 127);
    let gap = w * 0.08;
    for b in &tl.buckets {
        let (l, r) = (b.start_s + gap, b.start_s + w - gap);
        let a = b.admitted as f64;
        let d = a + b.denied as f64;
        let e = d + b.errors as f64;
        chart.draw_series([
            Rectangle::new([(l, 0.0), (r, a)], admitted.filled()),
            Rectangle::new([(l, a), (r, d)], denied.filled()),
            Rectangle::new([(l, d), (r, e)], errors.filled()),
        ])?;
    }
    // Legend entries for the bars (drawn as empty series with a legend).
    chart
        .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
        .label(format!("admitted ({})", report.admitted()))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], admitted.filled()));
    chart
        .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
        .label(format!("denied ({})", report.denied()))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], denied.filled()));
    if report.requests > report.responses {
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(format!("errors ({})", report.requests - report.responses))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], errors.filled()));
    }
    for (i, &b) in tl.boundaries_s.iter().enumerate() {
        let s = chart.draw_series(LineSeries::new(
            vec![(b, 0.0), (b, y_max)],
            BLACK.stroke_width(2),
        ))?;
        if i == 0 {
            s.label("window boundary").legend(|(x, y)| {
                PathElement::new(vec![(x + 7, y - 6), (x + 7, y + 6)], BLACK.stroke_width(2))
            });
        }
    }
    let blue = RGBColor(31, 119, 180);
    let line: Vec<(f64, f64)> = tl
        .buckets
        .iter()
        .filter(|b| b.admitted + b.denied > 0)
        .map(|b| (b.start_s + w / 2.0, b.p99_ms))
        .collect();
    chart
        .draw_secondary_series(LineSeries::new(line, blue.stroke_width(2)))?
        .label("p99 latency (right axis)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], blue.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}
