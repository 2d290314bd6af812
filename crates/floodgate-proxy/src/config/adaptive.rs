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

use floodgate_http::adaptive::{AdaptiveFields, AdaptivePolicy, ClassMatch, ClassSpec};
#[cfg(test)]
use floodgate_http::adaptive::{
    AlgorithmKind, DEFAULT_INITIAL_LIMIT, DEFAULT_MAX_LIMIT, DEFAULT_MIN_LIMIT, DropOn, Latency,
};

use super::*;

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
        ClassMatch::conditions(
            self.header.as_deref(),
            self.value.as_deref(),
            self.method.as_deref(),
            self.route.as_deref(),
            self.key.as_deref(),
        )
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
        let spec = AdaptiveFields {
            algorithm: word,
            min_limit: self.min_limit,
            max_limit: self.max_limit,
            initial_limit: self.initial_limit,
            latency: self.latency.as_deref(),
            drop_on: self.drop_on.as_deref(),
            queue: self.queue,
            queue_timeout: self.queue_timeout,
        }
        .spec()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"[[policy]]
name = "backend"
adaptive = "gradient2"
min_limit = 4
max_limit = 200
initial_limit = 20
latency = "end"
drop_on = ["5xx"]
queue = 8
queue_timeout = "200ms"

[[policy.class]]
name = "critical"
share = 0.5
match = { header = "x-priority", value = "critical" }

[[policy.class]]
name = "default"
share = 0.3
match = { method = "GET", route = "/api" }

[[policy.class]]
name = "sheddable"
share = 0.0
"#;

    fn err(src: &str) -> String {
        Config::parse(src, Path::new("floodgate.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_full_table_parses_into_an_adaptive_policy() {
        let cfg = Config::parse(FULL, Path::new("floodgate.toml")).unwrap();
        let p = cfg.policies[0].get_ref().policy().unwrap();
        let a = p.adaptive.expect("adaptive");
        let s = &a.spec;
        assert_eq!(s.algorithm, AlgorithmKind::Gradient2);
        assert_eq!((s.min_limit, s.initial_limit, s.max_limit), (4, 20, 200));
        assert_eq!(s.latency, Latency::End);
        assert_eq!(
            s.drop_on,
            DropOn {
                server_errors: true,
                timeouts: false
            }
        );
        assert_eq!((s.queue, s.queue_timeout), (8, Duration::from_millis(200)));
        let names: Vec<&str> = s.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["critical", "default", "sheddable"]);
        assert_eq!(a.matches[1].len(), 2);
        assert!(a.matches[2].is_empty());
        // the limiter builds, counting by nothing (one limit for every request)
        let limiter = cfg.limiter_builder().build().unwrap();
        assert!(limiter.policies()[0].adaptive.is_some());
    }

    #[test]
    fn defaults_without_classes_or_limits() {
        let cfg = Config::parse(
            "[[policy]]\nname = \"b\"\nadaptive = \"vegas\"\n",
            Path::new("f.toml"),
        )
        .unwrap();
        let a = cfg.policies[0]
            .get_ref()
            .policy()
            .unwrap()
            .adaptive
            .unwrap();
        assert_eq!(
            (a.spec.min_limit, a.spec.initial_limit, a.spec.max_limit),
            (DEFAULT_MIN_LIMIT, DEFAULT_INITIAL_LIMIT, DEFAULT_MAX_LIMIT)
        );
        assert_eq!((a.spec.queue, a.spec.latency), (0, Latency::Head));
        assert_eq!(a.spec.classes.len(), 1);
        // a floor above the default start raises the start
        let cfg = Config::parse(
            "[[policy]]\nname = \"b\"\nadaptive = \"aimd\"\nmin_limit = 50\n",
            Path::new("f.toml"),
        )
        .unwrap();
        let a = cfg.policies[0]
            .get_ref()
            .policy()
            .unwrap()
            .adaptive
            .unwrap();
        assert_eq!(a.spec.initial_limit, 50);
    }

    /// Each bad value is an error at FILE:LINE:COL naming the field; `line` is the line
    /// the error points at.
    #[test]
    fn bad_values_are_errors_at_their_place() {
        let head = "[[policy]]\nname = \"b\"\n";
        let cases: &[(&str, usize, &str)] = &[
            ("adaptive = \"cubic\"\n", 1, "gradient2, vegas or aimd"),
            ("adaptive = \"aimd\"\nmin_limit = 0\n", 1, "min (0)"),
            (
                "adaptive = \"aimd\"\nmin_limit = 30\nmax_limit = 10\n",
                1,
                "min_limit",
            ),
            ("adaptive = \"aimd\"\nmax_limit = 2000000\n", 1, "max_limit"),
            ("adaptive = \"aimd\"\nmin_limit = -1\n", 4, "min_limit"),
            ("adaptive = \"aimd\"\nlatency = \"tail\"\n", 1, "latency"),
            ("adaptive = \"aimd\"\ndrop_on = [\"4xx\"]\n", 1, "drop_on"),
            (
                "adaptive = \"aimd\"\nqueue = 3\nqueue_timeout = \"0s\"\n",
                1,
                "queue_timeout",
            ),
            ("adaptive = \"aimd\"\nrate = \"10/s\"\n", 1, "remove rate"),
            (
                "adaptive = \"aimd\"\nmax_in_flight = 3\n",
                1,
                "max_in_flight",
            ),
            (
                "min_limit = 3\nrate = \"10/s\"\n",
                1,
                "apply only with adaptive",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = 1.5\n",
                1,
                "share must be within [0, 1]",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = \"half\"\n",
                6,
                "share",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = 0.6\n[[policy.class]]\nname = \"b\"\nshare = 0.6\n",
                1,
                "above 1",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = 0.5\nweight = 2\n",
                7,
                "weight",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = 0.5\nmatch = { header = \"x-p\" }\n",
                1,
                "header and value go together",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = 0.5\nmatch = { method = \"get\" }\n",
                1,
                "upper-case method",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = 0.5\nmatch = { route = \"api\" }\n",
                1,
                "must start with /",
            ),
            (
                "adaptive = \"aimd\"\n[[policy.class]]\nname = \"a\"\nshare = 0.5\nmatch = { colour = \"red\" }\n",
                7,
                "colour",
            ),
        ];
        for (body, line, needle) in cases {
            let e = err(&format!("{head}{body}"));
            assert!(
                e.starts_with(&format!("floodgate.toml:{line}:")) && e.contains(needle),
                "{body:?}: {e}"
            );
        }
    }
}
