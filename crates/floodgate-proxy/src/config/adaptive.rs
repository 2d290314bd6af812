//! The adaptive keys of a `[[policy]]` table and its `[[policy.class]]` tables: one
//! concurrency limit that follows the backend's latency, shared by priority classes
//! ([`floodgate_engine::adaptive`], [`floodgate_http::adaptive`]).
//!
//! ```toml
//! [[policy]]
//! name = "backend"
//! adaptive = "gradient2"        # or "vegas", "aimd"
//! min_limit = 4
//! max_limit = 200
//! initial_limit = 20
//! latency = "head"              # or "end"
//! drop_on = ["5xx", "timeout"]
//! queue = 0
//! queue_timeout = "200ms"
//!
//! [[policy.class]]
//! name = "critical"
//! share = 0.5
//! match = { header = "x-priority", value = "critical" }
//! ```

use floodgate_http::adaptive::{
    AdaptivePolicy, AdaptiveSpec, AlgorithmKind, ClassMatch, ClassSpec, DropOn, Latency,
};

use super::*;

/// The floor of an adaptive policy without `min_limit`.
pub const DEFAULT_MIN_LIMIT: usize = 1;
/// The ceiling of an adaptive policy without `max_limit`.
pub const DEFAULT_MAX_LIMIT: usize = 200;
/// The start of an adaptive policy without `initial_limit` (raised to the floor).
pub const DEFAULT_INITIAL_LIMIT: usize = 20;

/// `[[policy.class]]`: a priority class of an adaptive policy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSection {
    /// The name (the `class` label of the metrics).
    pub name: String,
    /// The fraction of the limit guaranteed to the class, in [0, 1].
    pub share: f64,
    /// The conditions a request meets to be of this class (all of them); none: every
    /// request that reaches this class.
    #[serde(default, rename = "match")]
    pub matches: MatchSection,
}

/// `match = { ... }` of a class: each key given is a condition.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MatchSection {
    /// A request header (with `value`).
    pub header: Option<String>,
    /// The value `header` must have.
    pub value: Option<String>,
    /// The method (`GET` covers `HEAD`).
    pub method: Option<String>,
    /// A path prefix.
    pub route: Option<String>,
    /// The request's key under the policy's `key`.
    pub key: Option<String>,
}

impl MatchSection {
    fn conditions(&self) -> Result<Vec<ClassMatch>, String> {
        let mut out = Vec::new();
        match (&self.header, &self.value) {
            (Some(h), Some(v)) => {
                let name = HeaderName::try_from(h.as_str())
                    .map_err(|_| format!("match.header {h:?} is not a header name"))?;
                out.push(ClassMatch::header(name, v.clone()));
            }
            (None, None) => {}
            _ => return Err("match: header and value go together".into()),
        }
        if let Some(m) = &self.method {
            let method = Method::from_bytes(m.as_bytes())
                .ok()
                .filter(|_| !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()))
                .ok_or_else(|| format!("match.method {m:?} is not an upper-case method"))?;
            out.push(ClassMatch::Method(method));
        }
        if let Some(r) = &self.route {
            if !r.starts_with('/') {
                return Err(format!("match.route {r:?} must start with /"));
            }
            out.push(ClassMatch::Route(r.clone()));
        }
        if let Some(k) = &self.key {
            out.push(ClassMatch::Key(k.as_bytes().to_vec()));
        }
        Ok(out)
    }
}

impl PolicySection {
    /// The adaptive policy this table defines, `None` when it has no `adaptive` key.
    pub(super) fn adaptive_policy(&self) -> Result<Option<Policy>, String> {
        let Some(word) = &self.adaptive else {
            if self.min_limit.is_some()
                || self.max_limit.is_some()
                || self.initial_limit.is_some()
                || self.latency.is_some()
                || self.drop_on.is_some()
                || !self.class.is_empty()
            {
                return Err("min_limit, max_limit, initial_limit, latency, drop_on and [[policy.class]] apply only with adaptive".into());
            }
            return Ok(None);
        };
        if self.rate.is_some()
            || self.burst.is_some()
            || self.capacity.is_some()
            || self.nodelay
            || self.delay.is_some()
            || self.max_in_flight.is_some()
            || self.lease_ttl.is_some()
        {
            return Err("adaptive limits requests at once by latency: remove rate, burst, capacity, nodelay, delay, max_in_flight and lease_ttl (a rate or max_in_flight goes in a policy of its own, listed on the same route)".into());
        }
        let algorithm = AlgorithmKind::parse(word).map_err(|e| format!("adaptive: {e}"))?;
        let min = self.min_limit.unwrap_or(DEFAULT_MIN_LIMIT);
        let max = self.max_limit.unwrap_or(DEFAULT_MAX_LIMIT);
        let initial = self
            .initial_limit
            .unwrap_or(DEFAULT_INITIAL_LIMIT.clamp(min, max.max(min)));
        let mut spec = AdaptiveSpec::new(algorithm, min, initial, max)
            .map_err(|e| format!("min_limit, initial_limit, max_limit: {e}"))?;
        spec.latency = match self.latency.as_deref() {
            None | Some("head") => Latency::Head,
            Some("end") => Latency::End,
            Some(other) => {
                return Err(format!("latency: {other:?} is not \"head\" or \"end\""));
            }
        };
        if let Some(words) = &self.drop_on {
            spec.drop_on = DropOn::parse(words).map_err(|e| format!("drop_on: {e}"))?;
        }
        let queue = self.queue.unwrap_or(0);
        let timeout = self.queue_timeout.unwrap_or(if queue > 0 {
            DEFAULT_QUEUE_TIMEOUT
        } else {
            Duration::ZERO
        });
        spec = spec.with_queue(queue, timeout).map_err(|e| e.to_string())?;
        let mut policy = AdaptivePolicy::new(spec);
        if !self.class.is_empty() {
            let mut classes = Vec::with_capacity(self.class.len());
            let mut matches = Vec::with_capacity(self.class.len());
            for (i, c) in self.class.iter().enumerate() {
                classes.push(ClassSpec {
                    name: c.name.clone(),
                    share: c.share,
                });
                matches.push(
                    c.matches
                        .conditions()
                        .map_err(|m| format!("class[{i}] {:?}: {m}", c.name))?,
                );
            }
            policy.spec = policy
                .spec
                .with_classes(classes)
                .map_err(|e| format!("class: {e}"))?;
            policy.matches = matches;
        }
        Ok(Some(Policy::adaptive(self.name.clone(), policy)))
    }
}
