//! The hot-reloadable part of the config: domains and their descriptor rules, limits,
//! named policies, headers, request caps.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use floodgate_core::inflight::{LeaseTtl, check_limit};
use floodgate_core::rate::parse_duration;
use floodgate_core::ratelimit_fields::Advertised;
use floodgate_core::{Kind, Rate, Spec};
use floodgate_engine::inflight::{DEFAULT_LEASE_TTL, InFlightSpec};

use super::{Invalid, invalid, positive};
use crate::file::{DescriptorFile, FileConfig, RateLimitFile};

/// What to answer for a domain that no rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownDomain {
    /// A clear error (gRPC `NOT_FOUND`, HTTP 404). The default.
    Error,
    /// Envoy ratelimit's behaviour: every descriptor OK, no limit applied.
    Allow,
}

/// Response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderSettings {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
    pub ratelimit: bool,
    /// The legacy `X-RateLimit-Limit`, `-Remaining`, `-Reset` (Envoy ratelimit's), with the
    /// reset in seconds from now (`delta`) or at a Unix time (`epoch`); `None`: off.
    pub legacy: Option<floodgate_engine::headers::ResetFormat>,
    /// Retry-After jitter span: `ceil(retry + uniform(0, jitter))` seconds.
    pub retry_after_jitter: Duration,
}

/// Caps on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Most descriptors per request.
    pub max_descriptors: usize,
    /// Most entries per descriptor.
    pub max_entries: usize,
    /// Longest key or value in bytes.
    pub max_value_bytes: usize,
    /// Largest gRPC message or HTTP body in bytes (read at startup).
    pub max_request_bytes: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            max_descriptors: 64,
            max_entries: 16,
            max_value_bytes: 1024,
            max_request_bytes: 1 << 20,
        }
    }
}

/// The hot-reloadable part of the config.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Domains by name.
    pub domains: BTreeMap<String, Vec<DescriptorDef>>,
    /// Named limits for the HTTP `{key, policy}` form.
    pub policies: BTreeMap<String, LimitDef>,
    /// Headers.
    pub headers: HeaderSettings,
    /// Caps.
    pub caps: Caps,
    /// Unknown domains.
    pub unknown_domain: UnknownDomain,
    /// The buckets of the Rate Limit Quota Service.
    pub quota: super::quota::QuotaRules,
    /// Adaptive concurrency policies (`/v1/adaptive/...`), by name.
    pub adaptive: BTreeMap<String, super::AdaptiveDef>,
    /// Rules that select a request by the entries it holds, in any order and beside other
    /// entries (Limitador's limits), by domain; their domains are in `domains` too.
    pub selectors: BTreeMap<String, Vec<super::SelectorDef>>,
}

impl Rules {
    /// How many descriptor rules carry `max_in_flight` (enforced by the HTTP door's
    /// `/v1/check` only: gRPC's `ShouldRateLimit` has no release call).
    pub fn in_flight_rules(&self) -> usize {
        fn count(defs: &[DescriptorDef]) -> usize {
            defs.iter()
                .map(|d| usize::from(d.in_flight.is_some()) + count(&d.children))
                .sum()
        }
        self.domains.values().map(|d| count(d)).sum()
    }
}

/// How a rule's value matches a request entry's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueMatch {
    /// No value in the rule: any value, each limited on its own.
    Any,
    /// Exactly this value.
    Exact(String),
    /// Values starting with this prefix (the rule's value ended in `*`), each on its own.
    Prefix(String),
}

/// One descriptor rule, checked.
#[derive(Debug, Clone)]
pub struct DescriptorDef {
    /// Entry key.
    pub key: String,
    /// Entry value match.
    pub value: ValueMatch,
    /// Limits applied when a request descriptor ends here (all-or-nothing).
    pub limits: Vec<LimitDef>,
    /// Never limited.
    pub unlimited: bool,
    /// `max_in_flight` with its lease TTL: at most `limit` checks of one value admitted
    /// and not yet released at once (no queue: a full rule denies at once).
    pub in_flight: Option<InFlightSpec>,
    /// Counted, never denies.
    pub shadow: bool,
    /// Metric label includes the request's values.
    pub detailed_metric: bool,
    /// Metric label includes this entry's value.
    pub value_to_metric: bool,
    /// Nested rules.
    pub children: Vec<DescriptorDef>,
}

/// Envoy's time units (`RateLimitResponse.RateLimit.Unit` numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Not expressible as one unit (e.g. `window: 30s`).
    Unknown = 0,
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3600 s.
    Hour = 3,
    /// 86 400 s.
    Day = 4,
    /// 30 days (Envoy ratelimit's divider).
    Month = 5,
    /// 365 days.
    Year = 6,
    /// 7 days.
    Week = 7,
}

impl Unit {
    const NAMED: [(Unit, &'static str, u64); 7] = [
        (Unit::Second, "second", 1),
        (Unit::Minute, "minute", 60),
        (Unit::Hour, "hour", 3600),
        (Unit::Day, "day", 86_400),
        (Unit::Week, "week", 7 * 86_400),
        (Unit::Month, "month", 30 * 86_400),
        (Unit::Year, "year", 365 * 86_400),
    ];

    /// Parse a unit name (any case).
    pub fn parse(s: &str) -> Option<Unit> {
        let l = s.trim().to_ascii_lowercase();
        Unit::NAMED.iter().find(|u| u.1 == l).map(|u| u.0)
    }

    /// The unit whose length is exactly `window`, or `Unknown`.
    pub fn of_window(window: Duration) -> Unit {
        Unit::NAMED
            .iter()
            .find(|u| Duration::from_secs(u.2) == window)
            .map_or(Unit::Unknown, |u| u.0)
    }

    /// Seconds in this unit (0 for `Unknown`).
    pub fn secs(self) -> u64 {
        Unit::NAMED.iter().find(|u| u.0 == self).map_or(0, |u| u.2)
    }

    /// The lowercase name (`unknown` for `Unknown`).
    pub fn name(self) -> &'static str {
        Unit::NAMED
            .iter()
            .find(|u| u.0 == self)
            .map_or("unknown", |u| u.1)
    }
}

/// One limit, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDef {
    /// Name shown in headers and statuses: the `name` given, else derived from the rule.
    pub name: String,
    /// The `name` given in the file (the one `replaces` refers to).
    pub explicit_name: Option<String>,
    /// Names of limits this one replaces.
    pub replaces: Vec<String>,
    /// The limiter spec; `None` blocks every request (`requests_per_unit: 0`).
    pub spec: Option<Spec>,
    /// Units per window, as configured.
    pub requests_per_unit: u64,
    /// The Envoy unit of the window (`Unknown` when the window is not one unit).
    pub unit: Unit,
    /// The window.
    pub window: Duration,
    /// What the RateLimit fields advertise for this limit (its sustained rate, and the
    /// capacity of a bucket algorithm), computed once from `spec`.
    pub fields: Advertised,
}

impl LimitDef {
    /// The algorithm's name (`block` for a zero limit).
    pub fn algorithm(&self) -> &'static str {
        self.spec.as_ref().map_or("block", |s| s.kind.name())
    }
}

pub(super) fn rules(file: FileConfig) -> Result<Rules, Invalid> {
    let default_kind = match &file.defaults.algorithm {
        None => Kind::Gcra,
        Some(a) => a
            .parse::<Kind>()
            .map_err(|e| invalid("defaults.algorithm", e.to_string()))?,
    };
    let h = &file.headers;
    let headers = HeaderSettings {
        ratelimit: h.ratelimit,
        legacy: h.legacy,
        retry_after_jitter: h.retry_after_jitter(),
    };
    let d = Caps::default();
    let l = &file.limits;
    let caps = Caps {
        max_descriptors: positive(
            "limits",
            "max_descriptors",
            l.max_descriptors,
            d.max_descriptors as u64,
        )?,
        max_entries: positive("limits", "max_entries", l.max_entries, d.max_entries as u64)?,
        max_value_bytes: positive(
            "limits",
            "max_value_bytes",
            l.max_value_bytes,
            d.max_value_bytes as u64,
        )?,
        max_request_bytes: positive(
            "limits",
            "max_request_bytes",
            l.max_request_bytes,
            d.max_request_bytes as u64,
        )?,
    };
    let unknown_domain = match file.unknown_domain.as_deref().map(str::to_ascii_lowercase) {
        None => UnknownDomain::Error,
        Some(s) if s == "error" => UnknownDomain::Error,
        Some(s) if s == "allow" => UnknownDomain::Allow,
        Some(s) => {
            return Err(invalid(
                "unknown_domain",
                format!("{s:?}: expected error or allow"),
            ));
        }
    };

    let quota = super::quota::quota(file.quota)?;
    let mut domain_files = file.domains;
    if let Some(domain) = file.domain {
        domain_files.push(crate::file::DomainFile {
            domain,
            descriptors: file.descriptors,
        });
    } else if !file.descriptors.is_empty() {
        return Err(invalid(
            "descriptors",
            "top-level descriptors need a top-level `domain` (or put them under `domains:`)",
        ));
    }
    let mut domains = BTreeMap::new();
    for df in domain_files {
        let at = format!("domain {:?}", df.domain);
        if df.domain.trim().is_empty() {
            return Err(invalid("domains", "a domain name must not be empty"));
        }
        if domains.contains_key(&df.domain) {
            return Err(invalid(at, "this domain is defined twice"));
        }
        let descriptors = descriptor_list(&at, &df.descriptors, default_kind, &[])?;
        domains.insert(df.domain, descriptors);
    }

    let mut policies = BTreeMap::new();
    for (name, rl) in &file.policies {
        let at = format!("policies.{name}");
        if rl.unlimited {
            return Err(invalid(at, "a policy cannot be unlimited"));
        }
        let mut def = limit(&at, rl, default_kind, name.clone())?;
        def.name = rl.name.clone().unwrap_or_else(|| name.clone());
        policies.insert(name.clone(), def);
    }
    let adaptive = super::adaptive::adaptive(file.adaptive, |n| policies.contains_key(n))?;
    Ok(Rules {
        domains,
        policies,
        adaptive,
        headers,
        caps,
        unknown_domain,
        quota,
        selectors: BTreeMap::new(),
    })
}

fn descriptor_list(
    at: &str,
    files: &[DescriptorFile],
    default_kind: Kind,
    path: &[String],
) -> Result<Vec<DescriptorDef>, Invalid> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let value = match f.value.as_deref() {
            None => ValueMatch::Any,
            Some(v) => match v.strip_suffix('*') {
                Some(prefix) => ValueMatch::Prefix(prefix.to_string()),
                None => ValueMatch::Exact(v.to_string()),
            },
        };
        let step = match &f.value {
            None => f.key.clone(),
            Some(v) => format!("{}={}", f.key, v),
        };
        let here = format!("{at} > {step}");
        if f.key.is_empty() {
            return Err(invalid(here, "descriptor key must not be empty"));
        }
        if !seen.insert((f.key.clone(), value.clone())) {
            return Err(invalid(
                here,
                "duplicate descriptor (same key and value at the same level)",
            ));
        }
        let mut path = path.to_vec();
        path.push(step);
        let mut limits_files: Vec<&RateLimitFile> = f.rate_limit.iter().collect();
        if !f.rate_limits.is_empty() && f.rate_limit.is_some() {
            return Err(invalid(
                here,
                "use either rate_limit or rate_limits, not both",
            ));
        }
        limits_files.extend(&f.rate_limits);
        let unlimited = limits_files.iter().any(|l| l.unlimited);
        if unlimited && limits_files.len() > 1 {
            return Err(invalid(
                here,
                "an unlimited descriptor cannot carry other limits",
            ));
        }
        let mut limits = Vec::new();
        let mut names = HashSet::new();
        if !unlimited {
            let several = limits_files.len() > 1;
            for (i, rl) in limits_files.iter().enumerate() {
                let lat = if several {
                    format!("{here} > rate_limits[{i}]")
                } else {
                    format!("{here} > rate_limit")
                };
                let derived = if several {
                    format!("{}#{}", path.join("."), i + 1)
                } else {
                    path.join(".")
                };
                let def = limit(&lat, rl, default_kind, derived)?;
                if !names.insert(def.name.clone()) {
                    return Err(invalid(
                        lat,
                        format!("limit name {:?} is used twice on this descriptor", def.name),
                    ));
                }
                limits.push(def);
            }
        } else if let Some(rl) = limits_files.first()
            && (rl.requests_per_unit.is_some()
                || rl.unit.is_some()
                || rl.rate.is_some()
                || rl.window.is_some())
        {
            return Err(invalid(
                format!("{here} > rate_limit"),
                "unlimited: true takes no unit, requests_per_unit, window or rate",
            ));
        }
        let in_flight = in_flight(&here, f, unlimited)?;
        let children = descriptor_list(&here, &f.descriptors, default_kind, &path)?;
        out.push(DescriptorDef {
            key: f.key.clone(),
            value,
            limits,
            unlimited,
            in_flight,
            shadow: f.shadow_mode,
            detailed_metric: f.detailed_metric,
            value_to_metric: f.value_to_metric,
            children,
        });
    }
    Ok(out)
}

/// A rule's `max_in_flight` and `lease_ttl`, checked: `N` from 1, a TTL from 1 µs to a
/// day; refused on an unlimited or a shadow-mode rule, and `lease_ttl` without
/// `max_in_flight`.
fn in_flight(
    at: &str,
    f: &DescriptorFile,
    unlimited: bool,
) -> Result<Option<InFlightSpec>, Invalid> {
    let Some(n) = f.max_in_flight else {
        if f.lease_ttl.is_some() {
            return Err(invalid(at, "lease_ttl applies only with max_in_flight"));
        }
        return Ok(None);
    };
    if unlimited {
        return Err(invalid(
            at,
            "max_in_flight: an unlimited descriptor cannot carry other limits",
        ));
    }
    if f.shadow_mode {
        return Err(invalid(
            at,
            "max_in_flight is not available in shadow_mode (a lease is either held or not)",
        ));
    }
    let ttl = match &f.lease_ttl {
        None => DEFAULT_LEASE_TTL,
        Some(t) => parse_duration(t).map_err(|e| invalid(at, format!("lease_ttl: {e}")))?,
    };
    let n = check_limit(n).map_err(|e| invalid(at, format!("max_in_flight: {e}")))?;
    LeaseTtl::new(ttl).map_err(|e| invalid(at, format!("lease_ttl: {e}")))?;
    InFlightSpec::new(n, ttl)
        .map(Some)
        .map_err(|e| invalid(at, format!("max_in_flight/lease_ttl: {e}")))
}

pub(super) fn limit(
    at: &str,
    rl: &RateLimitFile,
    default_kind: Kind,
    derived: String,
) -> Result<LimitDef, Invalid> {
    let kind = match &rl.algorithm {
        None => default_kind,
        Some(a) => a.parse::<Kind>().map_err(|e| invalid(at, e.to_string()))?,
    };
    if rl.rate.is_some()
        && (rl.requests_per_unit.is_some() || rl.unit.is_some() || rl.window.is_some())
    {
        return Err(invalid(
            at,
            "rate replaces requests_per_unit with unit or window: give one form",
        ));
    }
    if rl.unit.is_some() && rl.window.is_some() {
        return Err(invalid(at, "give either unit or window, not both"));
    }
    let (count, window) = if let Some(r) = &rl.rate {
        let rate: Rate = r
            .parse()
            .map_err(|e: floodgate_core::ConfigError| invalid(at, e.to_string()))?;
        (rate.count(), rate.period())
    } else {
        let count = rl.requests_per_unit.ok_or_else(|| {
            invalid(
                at,
                "requests_per_unit is missing (or give rate: COUNT/PERIOD)",
            )
        })?;
        let window = match (&rl.unit, &rl.window) {
            (Some(u), None) => {
                let unit = Unit::parse(u).ok_or_else(|| {
                    invalid(
                        at,
                        format!(
                            "unit {u:?}: expected second, minute, hour, day, week, month or year"
                        ),
                    )
                })?;
                Duration::from_secs(unit.secs())
            }
            (None, Some(w)) => {
                parse_duration(w).map_err(|e| invalid(at, format!("window: {e}")))?
            }
            _ => {
                return Err(invalid(
                    at,
                    "unit (second, minute, ...) or window (e.g. 30s) is missing",
                ));
            }
        };
        (count, window)
    };
    if window.is_zero() {
        return Err(invalid(at, "the window must be longer than 0"));
    }
    let capacity = match (rl.burst, rl.capacity) {
        (Some(_), Some(_)) => return Err(invalid(at, "give either burst or capacity, not both")),
        (Some(b), None) => Some(
            b.checked_add(1)
                .ok_or_else(|| invalid(at, "burst is too large"))?,
        ),
        (None, Some(0)) => return Err(invalid(at, "capacity must be at least 1, got 0")),
        (None, c) => c,
    };
    let spec = if count == 0 {
        None
    } else {
        let rate = Rate::new(count, window).map_err(|e| invalid(at, e.to_string()))?;
        let spec = Spec {
            capacity,
            ..Spec::new(kind, rate)
        };
        spec.build().map_err(|e| invalid(at, e.to_string()))?;
        Some(spec)
    };
    Ok(LimitDef {
        name: rl.name.clone().unwrap_or(derived),
        explicit_name: rl.name.clone(),
        replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
        requests_per_unit: count,
        unit: Unit::of_window(window),
        window,
        fields: spec
            .as_ref()
            .map_or(Advertised::blocked(window), Advertised::of),
        spec,
    })
}
