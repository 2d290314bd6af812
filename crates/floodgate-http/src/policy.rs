//! Named policies (one limit each) and the routes that apply them.
//!
//! A [`Policy`] is one limit: an algorithm and rate from floodgate-core ([`Spec`]), the key
//! it counts by, and whether it is enforced or dry-run. A [`Route`] (path prefix plus
//! optional methods) lists the policies a matching request is checked against and what
//! the request costs under each. The route with the longest matching prefix wins; a
//! request that matches no route is not limited at all.

use floodgate_core::{AnyAlgorithm, ConfigError, Kind, Rate, Spec};
pub use floodgate_engine::inflight::InFlightSpec;
use floodgate_engine::settle::SettleSpec;
pub use floodgate_engine::store::PolicyInfo;
use http::Method;

use crate::adaptive::AdaptivePolicy;
use crate::key::KeySource;

/// One limit: algorithm and rate, key, dry-run flag.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The name: printable ASCII (it is sent as a Structured Fields string).
    pub name: String,
    /// Algorithm, rate, capacity and (leaky-queue) delay mode.
    pub spec: Spec,
    /// What the policy counts by.
    pub key: KeySource,
    /// Dry-run (shadow): decisions are computed, counted, logged and shown in headers,
    /// but never reject or delay a request.
    pub dry_run: bool,
    /// Set for a `max_in_flight` policy: at most `N` requests of one key in flight, held
    /// as leases ([`floodgate_engine::inflight`]); `spec` is then unused.
    pub in_flight: Option<InFlightSpec>,
    /// Set for an adaptive policy: one concurrency limit that follows the backend's
    /// latency, shared by priority classes ([`crate::adaptive`]); `spec` is then unused.
    pub adaptive: Option<AdaptivePolicy>,
}

impl Policy {
    /// An enforced policy counting by client IP.
    pub fn new(name: impl Into<String>, spec: Spec) -> Policy {
        Policy {
            name: name.into(),
            spec,
            key: KeySource::ip(),
            dry_run: false,
            in_flight: None,
            adaptive: None,
        }
    }

    /// A `max_in_flight` policy counting by client IP: at most `spec.limit` requests of
    /// one key in flight at once (see [`floodgate_engine::inflight`]).
    ///
    /// ```
    /// use floodgate_http::{InFlightSpec, Policy};
    /// use std::time::Duration;
    ///
    /// let gpu = Policy::max_in_flight("gpu", InFlightSpec::new(4, Duration::from_secs(30))?);
    /// assert_eq!(gpu.in_flight.unwrap().limit, 4);
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn max_in_flight(name: impl Into<String>, spec: InFlightSpec) -> Policy {
        let placeholder = Spec::new(Kind::Gcra, Rate::per_second(1).expect("1/s is valid"));
        Policy {
            in_flight: Some(spec),
            ..Policy::new(name, placeholder)
        }
    }

    /// An adaptive policy: one concurrency limit for every request it applies to (key
    /// `global`; a [`ClassMatch::Key`](crate::adaptive::ClassMatch::Key) reads the key set with [`key`](Self::key)),
    /// following the backend's latency; refused requests get 503 (see
    /// [`crate::adaptive`]).
    ///
    /// ```
    /// use floodgate_http::adaptive::{AdaptivePolicy, AdaptiveSpec, AlgorithmKind};
    /// use floodgate_http::Policy;
    ///
    /// let spec = AdaptiveSpec::new(AlgorithmKind::Gradient2, 4, 20, 200)?;
    /// let backend = Policy::adaptive("backend", AdaptivePolicy::new(spec));
    /// assert!(backend.adaptive.is_some());
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn adaptive(name: impl Into<String>, policy: AdaptivePolicy) -> Policy {
        let placeholder = Spec::new(Kind::Gcra, Rate::per_second(1).expect("1/s is valid"));
        Policy {
            adaptive: Some(policy),
            key: KeySource::global(),
            ..Policy::new(name, placeholder)
        }
    }

    /// Count by `key` instead.
    pub fn key(mut self, key: KeySource) -> Policy {
        self.key = key;
        self
    }

    /// Make this policy dry-run (shadow).
    pub fn dry_run(mut self, on: bool) -> Policy {
        self.dry_run = on;
        self
    }

    /// Check the name and build the algorithm.
    pub fn validate(&self) -> Result<AnyAlgorithm, ConfigError> {
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            return Err(ConfigError::Inconsistent(format!(
                "policy name {:?} must be 1 to 64 printable ASCII characters without quotes or backslashes",
                self.name
            )));
        }
        if let Some(a) = &self.adaptive {
            if self.in_flight.is_some() {
                return Err(ConfigError::Inconsistent(format!(
                    "policy {:?} is adaptive and max_in_flight at once; make them two policies on the route",
                    self.name
                )));
            }
            a.spec.validate()?;
            if a.matches.len() != a.spec.classes.len() {
                return Err(ConfigError::Inconsistent(format!(
                    "policy {:?}: {} classes and {} lists of conditions",
                    self.name,
                    a.spec.classes.len(),
                    a.matches.len()
                )));
            }
        }
        if let Some(f) = &self.in_flight {
            // the fields were validated by InFlightSpec::new; a literal may skip it
            floodgate_core::inflight::check_limit(f.limit)?;
        }
        self.spec.build()
    }
}

/// Requests a set of policies applies to, and their cost under each.
#[derive(Debug, Clone)]
pub struct Route {
    /// Path prefix (plain string prefix, as nginx's `location /prefix`).
    pub prefix: String,
    /// Methods; empty means any.
    pub methods: Vec<Method>,
    /// `(policy name, cost)` pairs. Cost is in the policy's units (0 = only look).
    pub policies: Vec<(String, u64)>,
    /// Settle the cost after the response: admit at an estimate (which replaces the
    /// costs above, under every policy), settle with the actual cost
    /// ([`crate::settle`]).
    pub settle: Option<SettleSpec>,
}

impl Route {
    /// A route for every path starting with `prefix`, any method, no policies yet.
    pub fn prefix(prefix: impl Into<String>) -> Route {
        Route {
            prefix: prefix.into(),
            methods: Vec::new(),
            policies: Vec::new(),
            settle: None,
        }
    }

    /// Admit at an estimate and settle the actual cost after the response (see
    /// [`crate::settle`]).
    pub fn settle(mut self, spec: SettleSpec) -> Route {
        self.settle = Some(spec);
        self
    }

    /// Only these methods.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Route {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Apply policy `name` at `cost` units per request.
    pub fn policy(mut self, name: impl Into<String>, cost: u64) -> Route {
        self.policies.push((name.into(), cost));
        self
    }

    /// Whether a request with `method` and `path` is this route's. `GET` in
    /// [`methods`](Self::methods) covers `HEAD` (a HEAD is a GET without the body, RFC
    /// 9110 §9.3.2). The asterisk-form target `*` (`OPTIONS *`, the server as a whole)
    /// and an empty path (a target with no path: the proxy refuses those, a layer may
    /// see them) match as `/`, so a `/` route covers them.
    pub(crate) fn matches(&self, method: &Method, path: &str) -> bool {
        let path = if path.is_empty() || path == "*" {
            "/"
        } else {
            path
        };
        path.starts_with(&self.prefix)
            && (self.methods.is_empty()
                || self.methods.contains(method)
                || (method == Method::HEAD && self.methods.contains(&Method::GET)))
    }
}

/// A route resolved to policy indices.
#[derive(Debug, Clone)]
pub(crate) struct CompiledRoute {
    pub route: Route,
    /// `(policy index, cost)`.
    pub checks: Vec<(usize, u64)>,
    /// The route's settle spec, shared with every handle.
    pub settle: Option<std::sync::Arc<SettleSpec>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_covers_head_and_the_whole_server_matches_slash() {
        let search = Route::prefix("/search").methods([Method::GET]);
        assert!(search.matches(&Method::GET, "/search"));
        assert!(search.matches(&Method::HEAD, "/search?q=1"));
        assert!(!search.matches(&Method::POST, "/search"));
        let head_only = Route::prefix("/h").methods([Method::HEAD]);
        assert!(!head_only.matches(&Method::GET, "/h"));
        let root = Route::prefix("/");
        assert!(root.matches(&Method::OPTIONS, "*"));
        assert!(root.matches(&Method::GET, ""));
        assert!(!Route::prefix("/a").matches(&Method::OPTIONS, "*"));
    }
}
