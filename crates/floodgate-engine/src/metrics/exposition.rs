//! The two text formats `/metrics` answers in, chosen by the scraper's `Accept` field:
//! OpenMetrics 1.0.0 (`application/openmetrics-text`, ending in `# EOF`) or the
//! Prometheus text format 0.0.4 (`text/plain`, the default).
//!
//! Every surface's `/metrics` (the proxy's admin listener, the server's HTTP door) asks
//! [`Exposition::negotiate`] which one, writes [`Exposition::content_type`] and encodes
//! its registry with [`Exposition::encode`].
//!
//! prometheus-client writes OpenMetrics only; the 0.0.4 text is derived from it line by
//! line: `# EOF` and `# UNIT` lines are dropped (0.0.4 has neither), a counter family's
//! `# HELP` and `# TYPE` name its samples' `NAME_total` (OpenMetrics names the family
//! `NAME`, which a 0.0.4 parser would take for a second, sample-less family), `unknown`
//! is `untyped`, and exemplars (` # {...}` after a sample's value) are cut.

use http::HeaderMap;
use http::header::ACCEPT;
use prometheus_client::registry::Registry;

/// A `/metrics` text format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0.0 text, ending in `# EOF`.
    OpenMetrics,
    /// The Prometheus text format 0.0.4.
    Prometheus,
}

impl Exposition {
    /// The format for a request with these headers: OpenMetrics when its `Accept`
    /// fields prefer `application/openmetrics-text` (version 1.0.0 or none named)
    /// strictly over `text/plain` by q-value (each type's q from its most specific
    /// matching range: `type/subtype`, then `type/*`, then `*/*`); otherwise, including
    /// no `Accept`, an unreadable one and a tie (`*/*`), the Prometheus text format.
    pub fn negotiate(headers: &HeaderMap) -> Exposition {
        let mut accept = String::new();
        for v in headers.get_all(ACCEPT) {
            let Ok(v) = v.to_str() else {
                return Exposition::Prometheus;
            };
            if !accept.is_empty() {
                accept.push(',');
            }
            accept.push_str(v);
        }
        Exposition::for_accept(&accept)
    }

    /// The format for one `Accept` value (empty: none), as [`negotiate`](Self::negotiate).
    pub fn for_accept(accept: &str) -> Exposition {
        let openmetrics = quality(accept, "application", "openmetrics-text", "1.0.0");
        let text = quality(accept, "text", "plain", "0.0.4");
        if openmetrics > 0 && openmetrics > text {
            Exposition::OpenMetrics
        } else {
            Exposition::Prometheus
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// `registry` in this format (empty if a collector fails to encode).
    pub fn encode(self, registry: &Registry) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
            return String::new();
        }
        match self {
            Exposition::OpenMetrics => out,
            Exposition::Prometheus => prometheus_text(&out),
        }
    }
}

/// The q-value (in thousandths, 0..=1000) `accept` gives `main/sub` (whose `version`
/// parameter, when a range names one, must be `version`): the q of the most specific
/// matching range, 0 when none matches.
fn quality(accept: &str, main: &str, sub: &str, version: &str) -> u16 {
    // (specificity, q): 3 exact, 2 main/*, 1 */*
    let mut best: Option<(u8, u16)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let Some((m, s)) = parts.next().and_then(|t| t.trim().split_once('/')) else {
            continue;
        };
        let (m, s) = (m.trim(), s.trim());
        let mut q = 1000;
        let mut version_ok = true;
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => q = parse_q(v).unwrap_or(0),
                "version" => version_ok = v == version,
                _ => {}
            }
        }
        let specificity = if m.eq_ignore_ascii_case(main) && s.eq_ignore_ascii_case(sub) {
            if !version_ok {
                continue;
            }
            3
        } else if m.eq_ignore_ascii_case(main) && s == "*" {
            2
        } else if m == "*" && s == "*" {
            1
        } else {
            continue;
        };
        match best {
            Some((b, bq)) if b > specificity || (b == specificity && bq >= q) => {}
            _ => best = Some((specificity, q)),
        }
    }
    best.map_or(0, |(_, q)| q)
}

/// An RFC 9110 qvalue (`0`, `0.5`, `1.000`) in thousandths; `None` when malformed.
fn parse_q(v: &str) -> Option<u16> {
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_value = format!("{frac:0<3}").parse::<u16>().unwrap_or(0);
    match whole {
        "0" => Some(frac_value),
        "1" if frac_value == 0 => Some(1000),
        _ => None,
    }
}

/// The Prometheus 0.0.4 text of an OpenMetrics text written by prometheus-client.
fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // the HELP line of the family being read: written once its TYPE is known
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" if !name.ends_with("_total") => (format!("{name}_total"), "counter"),
                "unknown" => (name.to_string(), "untyped"),
                "info" => (format!("{name}_info"), "gauge"),
                "stateset" => (name.to_string(), "gauge"),
                "gaugehistogram" => (name.to_string(), "untyped"),
                k => (name.to_string(), k),
            };
            if let Some((_, text)) = help.take() {
                out.push_str("# HELP ");
                out.push_str(&name);
                out.push(' ');
                out.push_str(text);
                out.push('\n');
            }
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
        } else if line.starts_with('#') {
            // # EOF, # UNIT: not in 0.0.4
        } else if !line.is_empty() {
            out.push_str(without_exemplar(line));
            out.push('\n');
        }
    }
    out
}

/// A sample line without its exemplar (` # {...} value`), which 0.0.4 has no place for.
fn without_exemplar(line: &str) -> &str {
    // past the label set (if the name has one), whose quoted values may hold '#'
    let mut in_quotes = false;
    let mut escaped = false;
    let mut after_labels = 0;
    let labels_at = match line.find(['{', ' ']) {
        Some(i) if line.as_bytes()[i] == b'{' => i,
        _ => line.len(),
    };
    for (i, b) in line.bytes().enumerate().skip(labels_at) {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_quotes => escaped = true,
            b'"' => in_quotes = !in_quotes,
            b'}' if !in_quotes => {
                after_labels = i + 1;
                break;
            }
            _ => {}
        }
    }
    match line[after_labels..].find(" # ") {
        Some(at) => &line[..after_labels + at],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OM: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

    #[test]
    fn content_type_follows_accept() {
        let prometheus_scrape = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let table: &[(Option<&str>, &str)] = &[
            (None, TEXT),
            (Some(""), TEXT),
            (Some("application/openmetrics-text"), OM),
            (Some("Application/OpenMetrics-Text"), OM),
            (Some("application/openmetrics-text; version=1.0.0"), OM),
            (Some("application/openmetrics-text;version=\"1.0.0\""), OM),
            (Some("application/openmetrics-text; version=0.0.1"), TEXT),
            (Some(prometheus_scrape), OM),
            (Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), TEXT),
            (Some("text/plain"), TEXT),
            (Some("*/*"), TEXT),
            (Some("application/*"), OM),
            (Some("text/*, application/*"), TEXT),
            (Some("text/*;q=0.2, application/*;q=0.3"), OM),
            (
                Some("application/openmetrics-text;q=0.5, text/plain;q=0.9"),
                TEXT,
            ),
            (
                Some("application/openmetrics-text;q=0.9, text/plain;q=0.5"),
                OM,
            ),
            (
                Some("application/openmetrics-text;q=0.5, text/plain;q=0.5"),
                TEXT,
            ),
            (Some("application/openmetrics-text;q=0"), TEXT),
            (Some("application/openmetrics-text;q=0, */*"), TEXT),
            (Some("*/*;q=0.1, application/openmetrics-text;q=0.2"), OM),
            (Some("application/openmetrics-text;q=1.5"), TEXT),
            (Some("application/openmetrics-text;q=abc"), TEXT),
            (Some("application/openmetrics-text;q=0.001"), OM),
            (Some("application/openmetrics-text;q=1.000"), OM),
            (Some("application/json"), TEXT),
            (Some("garbage;;;,,/"), TEXT),
        ];
        for (accept, want) in table {
            let mut h = HeaderMap::new();
            if let Some(a) = accept {
                h.insert(ACCEPT, a.parse().unwrap());
            }
            assert_eq!(
                Exposition::negotiate(&h).content_type(),
                *want,
                "{accept:?}"
            );
        }
        // several Accept fields are one list
        let mut h = HeaderMap::new();
        h.append(ACCEPT, "text/plain;q=0.1".parse().unwrap());
        h.append(ACCEPT, "application/openmetrics-text".parse().unwrap());
        assert_eq!(Exposition::negotiate(&h), Exposition::OpenMetrics);
        // bytes that are not text: the default
        let mut h = HeaderMap::new();
        h.insert(
            ACCEPT,
            http::HeaderValue::from_bytes(b"\xffapplication/openmetrics-text").unwrap(),
        );
        assert_eq!(Exposition::negotiate(&h), Exposition::Prometheus);
    }

    #[test]
    fn the_prometheus_text_names_counters_by_their_samples() {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        use prometheus_client::metrics::gauge::Gauge;
        use prometheus_client::metrics::histogram::Histogram;
        use prometheus_client::registry::Unit;

        let mut r = Registry::default();
        let c: Family<Vec<(String, String)>, Counter> = Family::default();
        c.get_or_create(&vec![("k".into(), "a \"#\" {b}".into())])
            .inc();
        r.register("floodgate_things", "Things", c);
        let g: Gauge = Gauge::default();
        g.set(3);
        r.register("floodgate_level", "Level", g);
        let h = Histogram::new([0.1, 1.0]);
        h.observe(0.5);
        r.register_with_unit("floodgate_wait", "Wait", Unit::Seconds, h);
        let om = Exposition::OpenMetrics.encode(&r);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE floodgate_things counter\n"), "{om}");
        let text = Exposition::Prometheus.encode(&r);
        assert_eq!(
            text,
            "# HELP floodgate_things_total Things.\n\
             # TYPE floodgate_things_total counter\n\
             floodgate_things_total{k=\"a \\\"#\\\" {b}\"} 1\n\
             # HELP floodgate_level Level.\n\
             # TYPE floodgate_level gauge\n\
             floodgate_level 3\n\
             # HELP floodgate_wait_seconds Wait.\n\
             # TYPE floodgate_wait_seconds histogram\n\
             floodgate_wait_seconds_sum 0.5\n\
             floodgate_wait_seconds_count 1\n\
             floodgate_wait_seconds_bucket{le=\"0.1\"} 0\n\
             floodgate_wait_seconds_bucket{le=\"1.0\"} 1\n\
             floodgate_wait_seconds_bucket{le=\"+Inf\"} 1\n"
        );
    }

    /// `promtool check metrics` on `text`: its complaints, empty when it accepts it.
    fn promtool(text: &str) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool is installed");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            String::new()
        } else {
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        }
    }

    #[test]
    fn promtool_accepts_every_metric_of_the_engine_in_the_prometheus_text() {
        use crate::metrics::{DecisionOutcome, Metrics, RequestOutcome};
        let m = Metrics::new(&["api".to_string(), "global".to_string()]);
        m.decision(0, DecisionOutcome::Passed);
        m.decision(1, DecisionOutcome::RejectedDryRun);
        m.request(RequestOutcome::Passed);
        m.config_reload(true);
        let text = m.encode_as(Exposition::Prometheus);
        assert!(
            text.contains("# TYPE floodgate_requests_total counter\n"),
            "{text}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert_eq!(promtool(&text), "", "{text}");
        // the check can fail: OpenMetrics' counter family names are not 0.0.4's
        let om = m.encode_as(Exposition::OpenMetrics);
        assert_ne!(promtool(&om), "", "{om}");
    }

    #[test]
    fn exemplars_are_cut_and_quoted_hashes_kept() {
        assert_eq!(
            without_exemplar("x_total{a=\"# }\"} 1 # {trace=\"t\"} 1.0"),
            "x_total{a=\"# }\"} 1"
        );
        assert_eq!(without_exemplar("x_total 2 # {t=\"1\"} 1.0"), "x_total 2");
        assert_eq!(
            without_exemplar("x_total{a=\"\\\"}\"} 3"),
            "x_total{a=\"\\\"}\"} 3"
        );
    }
}
