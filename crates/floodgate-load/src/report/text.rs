//! [`Report::render_text`]: the report as a person reads it.

use std::fmt::Write as _;

use super::*;

impl Report {
    /// The human-readable report.
    pub fn render_text(&self) -> String {
        let mut o = String::new();
        let deny = self
            .deny_statuses
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join("/");
        let _ = writeln!(
            o,
            "Target:   {} {} ({})",
            self.method, self.url, self.address
        );
        let pace = match (self.mode, self.rate) {
            ("open-loop", Some(q)) if self.arrivals == "poisson" => format!(
                "open loop, Poisson arrivals at {} req/s in total (seed {})",
                fmt_num(q),
                self.seed
            ),
            ("open-loop", Some(q)) => format!("open loop at {} req/s in total", fmt_num(q)),
            (_, Some(q)) => format!(
                "closed loop, each connection paced at {} req/s ({} in total)",
                fmt_num(q / self.concurrency as f64),
                fmt_num(q)
            ),
            _ => "closed loop, as fast as possible".to_string(),
        };
        let bound = match (self.count, self.duration_s) {
            (Some(n), _) => format!("{n} requests"),
            (_, Some(z)) => format!("{}s", fmt_num(z)),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "Plan:     {pace}, {} connections, {bound}; latency from the {}",
            self.concurrency, self.latency.measured_from
        );
        if self.stopped_early {
            let _ = writeln!(o, "          (stopped before the plan was done)");
        }
        let _ = writeln!(o, "\nSummary");
        let _ = writeln!(
            o,
            "  requests      {} ({} responses, {} errors)",
            self.requests,
            self.responses,
            self.requests - self.responses
        );
        let _ = writeln!(o, "  elapsed       {:.3} s", self.elapsed_s);
        let _ = writeln!(
            o,
            "  rps           {:.1} (sending at {:.1}/s)",
            self.rps, self.send_rate
        );
        let codes = self
            .statuses
            .iter()
            .map(|(s, c)| format!("[{s}] {c}"))
            .collect::<Vec<_>>()
            .join("  ");
        let _ = writeln!(
            o,
            "  status codes  {}",
            if codes.is_empty() {
                "none".into()
            } else {
                codes
            }
        );
        let _ = writeln!(
            o,
            "  errors        connect refused {}, timeout {}, other {}",
            self.errors.connect_refused, self.errors.timeout, self.errors.other
        );
        for e in &self.errors.examples {
            let _ = writeln!(o, "                e.g. {e}");
        }
        self.render_outcome(&mut o, &deny);
        self.goodput.render_text(&mut o);

        let _ = writeln!(o, "\nLatency (ms, from the {})", self.latency.measured_from);
        let _ = writeln!(
            o,
            "  {:<12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "count", "mean", "p50", "p90", "p99", "p99.9", "max"
        );
        let rows: [(&str, &Percentiles); 4] = [
            ("all", &self.latency.all),
            ("200", &self.latency.status_200),
            (&deny, &self.latency.denied),
            ("other", &self.latency.other),
        ];
        for (name, p) in rows {
            let _ = writeln!(o, "  {}", pct_row(name, p));
        }
        if let Some(lag) = &self.send_lag {
            let _ = writeln!(o, "  {}", pct_row("send lag", lag));
            let _ = writeln!(
                o,
                "  (send lag: how late requests left their schedule; large means the generator fell behind)"
            );
        }

        self.render_timeline(&mut o, &deny);

        if let Some(v) = &self.boundary {
            let _ = writeln!(
                o,
                "\nBoundary verdict (window {}s{}, near = within {} ms of a boundary, {} boundaries crossed)",
                fmt_num(v.window_s),
                if v.window_offset_s > 0.0 {
                    format!(" + {}s", fmt_num(v.window_offset_s))
                } else {
                    String::new()
                },
                fmt_num(v.near_s * 1000.0),
                v.boundaries
            );
            let _ = writeln!(
                o,
                "  near boundaries: {:.0}% of the time, {:.0}% of requests sent, {:.0}% of admitted, {:.0}% of {deny}s",
                v.time_share_near * 100.0,
                v.sent_share_near * 100.0,
                v.admitted_share_near * 100.0,
                v.denied_share_near * 100.0
            );
            let _ = writeln!(
                o,
                "  admitted: {:.0}% of requests just before boundaries, {:.0}% just after, {:.0}% elsewhere",
                v.admit_rate_before * 100.0,
                v.admit_rate_after * 100.0,
                v.admit_rate_elsewhere * 100.0
            );
            let _ = writeln!(
                o,
                "  p99: {:.2} ms near boundaries, {:.2} ms elsewhere",
                v.latency_near.p99_ms, v.latency_elsewhere.p99_ms
            );
            let _ = writeln!(o, "  verdict: {}", v.verdict.to_uppercase());
            for r in &v.reasons {
                let _ = writeln!(o, "    - {r}");
            }
        } else if let Some(w) = self.advertised_window_s {
            let _ = writeln!(
                o,
                "\nBoundary verdict: the server advertises a {w}s window (RateLimit-Policy w={w}); \
                 run again with --window {w}s to judge its boundaries"
            );
        }

        let _ = writeln!(o, "\nWhat the server advertised");
        if self.advertised.is_empty() {
            let _ = writeln!(
                o,
                "  no RateLimit-Policy, RateLimit, Retry-After or X-RateLimit-* headers"
            );
        }
        for h in &self.advertised {
            let _ = writeln!(
                o,
                "  {:<22} {:>8} responses   last: {}",
                h.header, h.responses, h.last
            );
        }
        o
    }

    fn render_outcome(&self, o: &mut String, deny: &str) {
        let c = &self.outcome;
        let f = &c.finals;
        let _ = writeln!(o, "\nOutcome (each request once, after its retries)");
        let _ = writeln!(
            o,
            "  requests      {}: succeeded {}, failed {} ({deny} {}, other status {}, no response {}), abandoned {}",
            c.requests, c.succeeded, c.failed, f.denied, f.other_status, f.errors, c.abandoned
        );
        let _ = writeln!(
            o,
            "  {:<13} {} of {} attempts",
            format!("{deny}s seen"),
            c.denied_responses,
            c.attempts
        );
        let Some(p) = &self.polite else {
            let _ = writeln!(
                o,
                "  retries       0 (naive: every request sent once, no waits; --polite to compare)"
            );
            return;
        };
        let _ = writeln!(
            o,
            "  retries       {} ({} refused by the retry budget)",
            c.retries, p.budget_refused
        );
        let _ = writeln!(
            o,
            "  waited        {:.3} s pacing + {:.3} s before retries, summed over requests ({:.1} ms per request)",
            p.pacing_wait_s, p.retry_wait_s, p.wait_per_request_ms
        );
        let _ = writeln!(
            o,
            "  polite client {}, up to {} attempts, {} jitter backoff {}..{} s, retry budget {}% + {}/s, waits capped at {} s{}",
            if p.pacing { "paced" } else { "not paced" },
            p.max_attempts,
            p.jitter,
            fmt_num(p.backoff_base_s),
            fmt_num(p.backoff_cap_s),
            fmt_num(p.retry_budget * 100.0),
            p.retry_budget_min_per_s,
            fmt_num(p.max_wait_s),
            if p.retry_non_idempotent {
                ", every method retried"
            } else {
                ", idempotent methods only"
            }
        );
        if p.retry_wait.count > 0 {
            let _ = writeln!(
                o,
                "  retry waits (ms): mean {:.1}, p50 {:.1}, p90 {:.1}, p99 {:.1}, max {:.1}",
                p.retry_wait.mean_ms,
                p.retry_wait.p50_ms,
                p.retry_wait.p90_ms,
                p.retry_wait.p99_ms,
                p.retry_wait.max_ms
            );
        }
    }

    fn render_timeline(&self, o: &mut String, deny: &str) {
        let all = &self.timeline.buckets;
        if all.is_empty() {
            return;
        }
        let group = all.len().div_ceil(MAX_TEXT_ROWS);
        let rows: Vec<BucketReport> = all.chunks(group).map(merge_rows).collect();
        let width = self.timeline.bucket_s * group as f64;
        let _ = writeln!(
            o,
            "\nTimeline ({}s buckets by send time{}; admitted # and {deny} . per bucket)",
            fmt_num(width),
            if self.boundary.is_some() {
                ", === marks a window boundary"
            } else {
                ""
            }
        );
        let polite = self.polite.is_some();
        let _ = writeln!(
            o,
            "  {:>8}  {:<12} {:>7} {:>8} {:>7} {:>6}{} {:>9}",
            "t",
            "UTC",
            "sent",
            "admitted",
            deny,
            "errors",
            if polite { " retries" } else { "" },
            "p99 ms"
        );
        let peak = rows.iter().map(|r| r.sent).max().unwrap_or(1).max(1);
        for r in &rows {
            if r.boundary_at_start {
                let _ = writeln!(o, "  ===== boundary at {} =====", utc(r.start_unix_s));
            }
            let bar_len = 30usize;
            let a = (r.admitted as f64 / peak as f64 * bar_len as f64).round() as usize;
            let d = (r.denied as f64 / peak as f64 * bar_len as f64).round() as usize;
            let _ = writeln!(
                o,
                "  {:>+8.3}  {:<12} {:>7} {:>8} {:>7} {:>6}{} {:>9.2}  {}{}{}",
                r.start_s,
                utc(r.start_unix_s),
                r.sent,
                r.admitted,
                r.denied,
                r.errors,
                if polite {
                    format!(" {:>7}", r.retries)
                } else {
                    String::new()
                },
                r.p99_ms,
                "#".repeat(a),
                ".".repeat(d),
                if r.boundaries_inside > 0 {
                    format!("  (boundary inside x{})", r.boundaries_inside)
                } else {
                    String::new()
                }
            );
        }
    }
}

pub(super) fn merge_rows(chunk: &[BucketReport]) -> BucketReport {
    let mut m = chunk[0].clone();
    for r in &chunk[1..] {
        m.sent += r.sent;
        m.admitted += r.admitted;
        m.denied += r.denied;
        m.errors += r.errors;
        m.retries += r.retries;
        m.p99_ms = m.p99_ms.max(r.p99_ms);
        m.boundaries_inside += r.boundaries_inside + u32::from(r.boundary_at_start);
    }
    m
}

pub(super) fn pct_row(name: &str, p: &Percentiles) -> String {
    if p.count == 0 {
        return format!("{name:<12} {:>8}", 0);
    }
    format!(
        "{name:<12} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        p.count, p.mean_ms, p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms
    )
}

pub(super) fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// `hh:mm:ss.mmm` (UTC) of a Unix time in seconds.
pub(super) fn utc(unix_s: f64) -> String {
    let ms = (unix_s * 1000.0).round() as u64;
    let day_ms = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_times() {
        assert_eq!(utc(3661.5), "01:01:01.500");
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(0.25), "0.25");
    }
}
