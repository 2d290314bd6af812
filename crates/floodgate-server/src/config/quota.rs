//! The `quota:` section, checked: the buckets of the Rate Limit Quota Service, each a
//! match on `BucketId` entries and a global limit, and what buckets no rule matches get.
//! Values are checked as they are read (`FILE:LINE:COLUMN: FIELD: MESSAGE`); what needs
//! two fields together is checked here and named by its place (`quota.domains[0]
//! ("envoy").buckets[1]: ...`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Invalid, invalid};
use crate::file::{FallbackFile, QuotaBucketFile, QuotaFile, StrategyFile, UnknownBucketFile};
use crate::quota::{ClientFallback, Division, QuotaUnit, StrategyKind};

/// How often clients report when the rules do not say.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The quota buckets of the rules.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRules {
    /// Bucket rules by domain, in file order (the first match applies).
    pub domains: BTreeMap<String, Vec<QuotaBucketDef>>,
    /// What a bucket no rule matches gets.
    pub unknown: UnknownBucket,
    /// Most clients sharing one bucket.
    pub max_clients_per_bucket: usize,
    /// Most buckets one stream may report.
    pub max_buckets_per_stream: usize,
    /// Most buckets tracked in process.
    pub max_buckets: usize,
}

impl Default for QuotaRules {
    fn default() -> Self {
        QuotaRules {
            domains: BTreeMap::new(),
            unknown: UnknownBucket::Deny,
            max_clients_per_bucket: 1_000,
            max_buckets_per_stream: 100,
            max_buckets: 100_000,
        }
    }
}

/// What a bucket no rule matches gets.
#[derive(Debug, Clone, PartialEq)]
pub enum UnknownBucket {
    /// A deny-all assignment.
    Deny,
    /// An allow-all assignment.
    Allow,
    /// This limit, each bucket on its own.
    Default(Box<QuotaBucketDef>),
}

/// A `BucketId` value a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketValue {
    /// Any value (`*`).
    Any,
    /// Exactly this value.
    Exact(String),
}

/// One bucket rule, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaBucketDef {
    /// The rule's name in metrics and errors: `DOMAIN|key=value,...` (sorted keys).
    pub name: String,
    /// The entries a `BucketId` must carry.
    pub matches: BTreeMap<String, BucketValue>,
    /// The global limit and floor, requests per second.
    pub division: Division,
    /// The global capacity (burst + 1), over all clients.
    pub capacity: u64,
    /// How shares are sent.
    pub strategy: StrategyKind,
    /// The unit of `requests_per_time_unit` (the rate's period; `Second` for a token
    /// bucket of another period).
    pub unit: QuotaUnit,
    /// How often clients report.
    pub report_interval: Duration,
    /// How long an assignment holds, and how long a client's last report counts.
    pub assignment_ttl: Duration,
    /// The clients' behaviour before a first assignment.
    pub no_assignment: ClientFallback,
    /// The clients' behaviour after an assignment expired.
    pub expired_assignment: ClientFallback,
}

impl QuotaBucketDef {
    /// Whether `bucket` (a `BucketId`'s entries) carries every entry of this rule.
    pub fn matches<'a>(&self, bucket: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.matches.iter().all(|(k, v)| match (bucket(k), v) {
            (None, _) => false,
            (Some(_), BucketValue::Any) => true,
            (Some(got), BucketValue::Exact(want)) => got == want,
        })
    }
}

impl QuotaRules {
    /// The rule of the first match for `bucket` in `domain`, or `None` (the unknown
    /// choice applies).
    pub fn rule<'a, 'b>(
        &'a self,
        domain: &str,
        bucket: impl Fn(&str) -> Option<&'b str> + Copy,
    ) -> Option<&'a QuotaBucketDef> {
        self.domains.get(domain)?.iter().find(|r| r.matches(bucket))
    }
}

pub(super) fn quota(file: QuotaFile) -> Result<QuotaRules, Invalid> {
    let d = QuotaRules::default();
    let unknown = match (file.unknown_bucket, file.default_bucket) {
        (None | Some(UnknownBucketFile::Deny), None) => UnknownBucket::Deny,
        (Some(UnknownBucketFile::Allow), None) => UnknownBucket::Allow,
        (Some(UnknownBucketFile::Default), Some(b)) => {
            if !b.matches.is_empty() {
                return Err(invalid(
                    "quota.default_bucket",
                    "takes no match: it applies to every bucket no rule matches",
                ));
            }
            UnknownBucket::Default(Box::new(bucket("quota.default_bucket", "(default)", &b)?))
        }
        (Some(UnknownBucketFile::Default), None) => {
            return Err(invalid(
                "quota.unknown_bucket",
                "default needs quota.default_bucket (a rate and its settings)",
            ));
        }
        (_, Some(_)) => {
            return Err(invalid(
                "quota.default_bucket",
                "applies only with unknown_bucket: default",
            ));
        }
    };
    let mut domains = BTreeMap::new();
    for (i, df) in file.domains.iter().enumerate() {
        let at = format!("quota.domains[{i}] ({:?})", df.domain);
        if df.domain.trim().is_empty() {
            return Err(invalid(at, "a domain name must not be empty"));
        }
        if domains.contains_key(&df.domain) {
            return Err(invalid(at, "this domain is defined twice"));
        }
        let mut rules: Vec<QuotaBucketDef> = Vec::with_capacity(df.buckets.len());
        for (j, b) in df.buckets.iter().enumerate() {
            let here = format!("{at}.buckets[{j}]");
            let def = bucket(&here, &df.domain, b)?;
            if rules.iter().any(|r| r.matches == def.matches) {
                return Err(invalid(
                    here,
                    "the same match as an earlier bucket: it would never apply",
                ));
            }
            rules.push(def);
        }
        domains.insert(df.domain.clone(), rules);
    }
    Ok(QuotaRules {
        domains,
        unknown,
        max_clients_per_bucket: file
            .max_clients_per_bucket
            .unwrap_or(d.max_clients_per_bucket),
        max_buckets_per_stream: file
            .max_buckets_per_stream
            .unwrap_or(d.max_buckets_per_stream),
        max_buckets: file.max_buckets.unwrap_or(d.max_buckets),
    })
}

fn fallback(f: Option<FallbackFile>, default: ClientFallback) -> ClientFallback {
    match f {
        None => default,
        Some(FallbackFile::AllowAll) => ClientFallback::AllowAll,
        Some(FallbackFile::DenyAll) => ClientFallback::DenyAll,
        Some(FallbackFile::ReuseLast) => ClientFallback::ReuseLast,
    }
}

fn bucket(at: &str, domain: &str, b: &QuotaBucketFile) -> Result<QuotaBucketDef, Invalid> {
    let rate = b
        .rate
        .ok_or_else(|| invalid(at, "rate is missing (COUNT/PERIOD, e.g. 100/s)"))?;
    let mut matches = BTreeMap::new();
    for (k, v) in &b.matches {
        if k.is_empty() {
            return Err(invalid(at, "a match key must not be empty"));
        }
        let value = if v == "*" {
            BucketValue::Any
        } else {
            BucketValue::Exact(v.clone())
        };
        matches.insert(k.clone(), value);
    }
    let per_sec = rate.per_second_value();
    let floor = match b.floor {
        None => per_sec / 100.0,
        Some(f) => f.per_second_value(),
    };
    let division =
        Division::new(per_sec, floor).map_err(|e| invalid(at, format!("rate/floor: {e}")))?;
    let capacity = match b.burst {
        None => rate.count(),
        Some(burst) => burst
            .checked_add(1)
            .ok_or_else(|| invalid(at, "burst is too large"))?,
    };
    let unit = QuotaUnit::of_period(rate.period());
    let strategy = match b.strategy {
        None | Some(StrategyFile::TokenBucket) => StrategyKind::TokenBucket,
        Some(StrategyFile::RequestsPerTimeUnit) => {
            if unit.is_none() {
                return Err(invalid(
                    at,
                    format!(
                        "requests_per_time_unit needs a rate per second, minute, hour or day (1s, 1m, 1h, 1d), got a period of {}",
                        floodgate_core::rate::format_duration(rate.period())
                    ),
                ));
            }
            StrategyKind::RequestsPerTimeUnit
        }
    };
    let report_interval = b.report_interval.unwrap_or(DEFAULT_REPORT_INTERVAL);
    let assignment_ttl = b
        .assignment_ttl
        .unwrap_or_else(|| report_interval.saturating_mul(3));
    if assignment_ttl <= report_interval {
        return Err(invalid(
            at,
            format!(
                "assignment_ttl ({}) must be longer than report_interval ({}): assignments would lapse between reports",
                floodgate_core::rate::format_duration(assignment_ttl),
                floodgate_core::rate::format_duration(report_interval)
            ),
        ));
    }
    if assignment_ttl > Duration::from_secs(86_400) {
        return Err(invalid(at, "assignment_ttl must be at most a day"));
    }
    let no_assignment = fallback(b.no_assignment, ClientFallback::AllowAll);
    if no_assignment == ClientFallback::ReuseLast {
        return Err(invalid(
            at,
            "no_assignment: reuse_last has no last assignment to reuse; give allow_all or deny_all",
        ));
    }
    let name = {
        let m: Vec<String> = b.matches.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{domain}|{}", m.join(","))
    };
    Ok(QuotaBucketDef {
        name,
        matches,
        division,
        capacity,
        strategy,
        unit: unit.unwrap_or(QuotaUnit::Second),
        report_interval,
        assignment_ttl,
        no_assignment,
        expired_assignment: fallback(b.expired_assignment, ClientFallback::ReuseLast),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse;

    fn yaml(text: &str) -> Result<QuotaRules, String> {
        parse(Path::new("limits.yaml"), text)
            .map(|c| c.rules.quota)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn buckets_with_their_defaults() {
        let q = yaml(
            "quota:\n  unknown_bucket: default\n  default_bucket: {rate: 10/s}\n  domains:\n    - domain: envoy\n      buckets:\n        - match: {name: api, user: \"*\"}\n          rate: 6000/m\n          burst: 99\n          strategy: requests_per_time_unit\n          report_interval: 2s\n          assignment_ttl: 5s\n          floor: 1/s\n          no_assignment: deny_all\n          expired_assignment: allow_all\n        - match: {name: web}\n          rate: 100/s\n",
        )
        .unwrap();
        let rules = &q.domains["envoy"];
        let api = &rules[0];
        assert_eq!(api.name, "envoy|name=api,user=*");
        assert_eq!(api.division.limit(), 100.0);
        assert_eq!(api.division.floor_among(1), 1.0);
        assert_eq!(api.capacity, 100);
        assert_eq!(
            (api.strategy, api.unit),
            (StrategyKind::RequestsPerTimeUnit, QuotaUnit::Minute)
        );
        assert_eq!(api.report_interval, Duration::from_secs(2));
        assert_eq!(api.assignment_ttl, Duration::from_secs(5));
        assert_eq!(api.no_assignment, ClientFallback::DenyAll);
        assert_eq!(api.expired_assignment, ClientFallback::AllowAll);
        let web = &rules[1];
        assert_eq!(web.strategy, StrategyKind::TokenBucket);
        assert_eq!(web.report_interval, DEFAULT_REPORT_INTERVAL);
        assert_eq!(web.assignment_ttl, Duration::from_secs(15));
        assert_eq!(web.division.floor_among(1), 1.0, "1% of the rate");
        assert_eq!(web.capacity, 100);
        assert_eq!(web.no_assignment, ClientFallback::AllowAll);
        assert_eq!(web.expired_assignment, ClientFallback::ReuseLast);
        // matching: every entry of the rule, `*` any value, extra entries allowed
        let id = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1)
        };
        let found = |pairs| q.rule("envoy", id(pairs)).map(|r| r.name.as_str());
        assert_eq!(
            found(&[("name", "api"), ("user", "bob"), ("x", "1")]),
            Some("envoy|name=api,user=*")
        );
        assert_eq!(found(&[("name", "api")]), None);
        assert_eq!(found(&[("name", "web")]), Some("envoy|name=web"));
        assert!(q.rule("other", id(&[("name", "web")])).is_none());
        assert!(matches!(q.unknown, UnknownBucket::Default(ref d) if d.division.limit() == 10.0));
        // no quota section: deny unknown buckets, default caps
        assert_eq!(yaml("domain: d\n").unwrap(), QuotaRules::default());
        // TOML alike
        let t = parse(
            Path::new("l.toml"),
            "[quota]\nunknown_bucket = \"allow\"\n[[quota.domains]]\ndomain = \"envoy\"\n[[quota.domains.buckets]]\nmatch = { name = \"api\" }\nrate = \"100/s\"\n",
        )
        .unwrap();
        assert_eq!(t.rules.quota.unknown, UnknownBucket::Allow);
        assert_eq!(t.rules.quota.domains["envoy"][0].division.limit(), 100.0);
    }

    /// `limits.yaml:LINE:COLUMN: ...`
    fn located(e: &str) -> bool {
        let mut parts = e.splitn(4, ':');
        parts.next() == Some("limits.yaml")
            && parts.next().is_some_and(|l| l.parse::<usize>().is_ok())
            && parts.next().is_some_and(|c| c.parse::<usize>().is_ok())
    }

    #[test]
    fn bad_values_name_their_place() {
        let b = "quota:\n  domains:\n    - domain: envoy\n      buckets:\n        - match: {name: api}\n";
        let cases = [
            // checked while read: FILE:LINE:COLUMN: FIELD
            (
                "          rate: 100/s\n          report_interval: 0s\n",
                "LOC quota.domains[0].buckets[0].report_interval: must be above 0",
            ),
            (
                "          rate: 100/s\n          strategy: magic\n",
                "LOC quota.domains[0].buckets[0].strategy: unknown variant `magic`",
            ),
            (
                "          rate: lots\n",
                "LOC quota.domains[0].buckets[0].rate: ",
            ),
            (
                "          rate: 100/s\n          no_assignment: maybe\n",
                "LOC quota.domains[0].buckets[0].no_assignment: unknown variant `maybe`",
            ),
            (
                "          rate: 100/s\n          limit: 5\n",
                "quota.domains[0].buckets[0].limit: unknown field `limit`",
            ),
            (
                "          rate: 100/s\n          assignment_ttl: -1s\n",
                "quota.domains[0].buckets[0].assignment_ttl: ",
            ),
            // checked together: the place by name
            (
                "          burst: 3\n",
                "quota.domains[0] (\"envoy\").buckets[0]: rate is missing",
            ),
            (
                "          rate: 100/s\n          report_interval: 10s\n          assignment_ttl: 5s\n",
                "assignment_ttl (5s) must be longer than report_interval (10s)",
            ),
            (
                "          rate: 100/s\n          report_interval: 10s\n          assignment_ttl: 10s\n",
                "must be longer than report_interval (10s)",
            ),
            (
                "          rate: 100/30s\n          strategy: requests_per_time_unit\n",
                "requests_per_time_unit needs a rate per second, minute, hour or day",
            ),
            (
                "          rate: 10/s\n          floor: 20/s\n",
                "rate/floor: the floor must be between 0 and the limit",
            ),
            (
                "          rate: 10/s\n          no_assignment: reuse_last\n",
                "no_assignment: reuse_last has no last assignment",
            ),
            (
                "          rate: 10/s\n          burst: 18446744073709551615\n",
                "burst is too large",
            ),
            (
                "          rate: 10/s\n          assignment_ttl: 2d\n",
                "at most a day",
            ),
            (
                "          rate: 10/s\n        - match: {name: api}\n          rate: 5/s\n",
                "buckets[1]: the same match as an earlier bucket",
            ),
        ];
        for (rest, want) in cases {
            let e = yaml(&format!("{b}{rest}")).unwrap_err();
            // LOC: FILE:LINE:COLUMN (the place of the bucket or of its value)
            let ok = match want.strip_prefix("LOC ") {
                Some(w) => e.contains(&format!(": {w}")) && located(&e),
                None => e.contains(want),
            };
            assert!(ok, "{rest}: {e}");
        }
        let e = yaml("quota:\n  unknown_bucket: default\n").unwrap_err();
        assert!(
            e.contains("quota.unknown_bucket: default needs quota.default_bucket"),
            "{e}"
        );
        let e = yaml("quota:\n  default_bucket: {rate: 1/s}\n").unwrap_err();
        assert!(
            e.contains("applies only with unknown_bucket: default"),
            "{e}"
        );
        let e = yaml(
            "quota:\n  unknown_bucket: default\n  default_bucket: {rate: 1/s, match: {a: b}}\n",
        )
        .unwrap_err();
        assert!(e.contains("takes no match"), "{e}");
        let e = yaml("quota:\n  unknown_bucket: sometimes\n").unwrap_err();
        assert!(
            e.starts_with("limits.yaml:2:19: quota.unknown_bucket: unknown variant `sometimes`"),
            "{e}"
        );
        let e = yaml("quota:\n  max_clients_per_bucket: 0\n").unwrap_err();
        assert!(
            e.starts_with("limits.yaml:2:27: quota.max_clients_per_bucket: must be at least 1"),
            "{e}"
        );
        let e = yaml("quota:\n  domains: [{domain: a}, {domain: a}]\n").unwrap_err();
        assert!(e.contains("defined twice"), "{e}");
        let e = yaml("quota:\n  domains: [{domain: \"\"}]\n").unwrap_err();
        assert!(e.contains("must not be empty"), "{e}");
    }
}
