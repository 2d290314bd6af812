//! Adaptive policies in the layer: an [`AdaptivePolicy`] is the engine's
//! [`AdaptiveSpec`] (algorithm, floor, ceiling, queue, classes with their shares) plus
//! how a request finds its class ([`ClassMatch`]). The rule, the queue and the metrics
//! are the engine's ([`floodgate_engine::adaptive`]); the layer takes a permit before the
//! leases and rates of the request, refuses with `503 Service Unavailable` and
//! `Retry-After` when none is given, and releases it at the response head or the end of
//! the body ([`Latency`]).
//!
//! # Classes
//! A request belongs to the first class (in the order listed: highest priority first)
//! whose conditions all hold; a class without conditions takes every request that
//! reaches it. A request that matches no class belongs to the last (lowest) one.

use floodgate_core::ConfigError;
pub use floodgate_engine::adaptive::{
    AdaptiveFields, AdaptiveSpec, AlgorithmKind, ClassSpec, DEFAULT_INITIAL_LIMIT,
    DEFAULT_MAX_LIMIT, DEFAULT_MIN_LIMIT, DEFAULT_QUEUE_TIMEOUT, DropOn, Latency,
};
use http::{HeaderName, Method};

use crate::key::RequestInfo;

/// One condition of a class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassMatch {
    /// The request has header `name` with exactly `value` (its first value).
    Header {
        /// The header.
        name: HeaderName,
        /// The value it must have.
        value: String,
    },
    /// The request's method is this one (`GET` covers `HEAD`).
    Method(Method),
    /// The request's path starts with this prefix.
    Route(String),
    /// The request's key under the policy's `key` is exactly this one.
    Key(Vec<u8>),
}

impl ClassMatch {
    /// Header `name` equal to `value`.
    pub fn header(name: HeaderName, value: impl Into<String>) -> ClassMatch {
        ClassMatch::Header {
            name,
            value: value.into(),
        }
    }

    /// The conditions of a class as a configuration names them (the proxy's
    /// `match = { ... }`, Python's `"match": {...}`): each field given is one condition;
    /// `header` and `value` go together; `method` is upper case (`GET` covers `HEAD`);
    /// `route` starts with `/`. `Err` says which field is wrong.
    pub fn conditions(
        header: Option<&str>,
        value: Option<&str>,
        method: Option<&str>,
        route: Option<&str>,
        key: Option<&str>,
    ) -> Result<Vec<ClassMatch>, String> {
        let mut out = Vec::new();
        match (header, value) {
            (Some(h), Some(v)) => {
                let name = HeaderName::try_from(h)
                    .map_err(|_| format!("match.header {h:?} is not a header name"))?;
                out.push(ClassMatch::header(name, v));
            }
            (None, None) => {}
            _ => return Err("match: header and value go together".into()),
        }
        if let Some(m) = method {
            let method = Method::from_bytes(m.as_bytes())
                .ok()
                .filter(|_| !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()))
                .ok_or_else(|| format!("match.method {m:?} is not an upper-case method"))?;
            out.push(ClassMatch::Method(method));
        }
        if let Some(r) = route {
            if !r.starts_with('/') {
                return Err(format!("match.route {r:?} must start with /"));
            }
            out.push(ClassMatch::Route(r.to_string()));
        }
        if let Some(k) = key {
            out.push(ClassMatch::Key(k.as_bytes().to_vec()));
        }
        Ok(out)
    }

    fn holds(&self, info: &RequestInfo<'_>, key: &[u8]) -> bool {
        match self {
            ClassMatch::Header { name, value } => info
                .headers
                .get(name)
                .is_some_and(|v| v.as_bytes() == value.as_bytes()),
            ClassMatch::Method(m) => {
                info.method == m || (*m == Method::GET && info.method == Method::HEAD)
            }
            ClassMatch::Route(prefix) => info.uri.path().starts_with(prefix.as_str()),
            ClassMatch::Key(k) => k == key,
        }
    }
}

/// An adaptive policy: the engine's spec and, per class (by index), its conditions.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptivePolicy {
    /// Algorithm, limits, latency, drops, queue, classes.
    pub spec: AdaptiveSpec,
    /// The conditions of each class of `spec.classes`, by index (all must hold).
    pub matches: Vec<Vec<ClassMatch>>,
}

impl AdaptivePolicy {
    /// `spec` with its classes taking no condition (a request is in the first class,
    /// unless classes with conditions are set with [`class`](Self::class)).
    pub fn new(spec: AdaptiveSpec) -> AdaptivePolicy {
        let matches = vec![Vec::new(); spec.classes.len()];
        AdaptivePolicy { spec, matches }
    }

    /// Add class `name` with `share` of the limit and its `conditions`, below the classes
    /// added before. The first call replaces the spec's classes.
    ///
    /// ```
    /// use floodgate_http::adaptive::{AdaptivePolicy, AdaptiveSpec, AlgorithmKind, ClassMatch};
    /// use http::HeaderName;
    ///
    /// let p = AdaptivePolicy::new(AdaptiveSpec::new(AlgorithmKind::Gradient2, 4, 20, 200)?)
    ///     .class("critical", 0.5, [ClassMatch::header(HeaderName::from_static("x-priority"), "critical")])?
    ///     .class("sheddable", 0.1, [])?;
    /// assert_eq!(p.spec.classes.len(), 2);
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn class(
        mut self,
        name: impl Into<String>,
        share: f64,
        conditions: impl IntoIterator<Item = ClassMatch>,
    ) -> Result<AdaptivePolicy, ConfigError> {
        if self.matches.iter().all(Vec::is_empty)
            && self.spec.classes.len() == 1
            && self.spec.classes[0].name == "default"
            && self.spec.classes[0].share == 1.0
        {
            self.spec.classes.clear();
            self.matches.clear();
        }
        let mut classes = self.spec.classes.clone();
        classes.push(ClassSpec {
            name: name.into(),
            share,
        });
        self.spec = self.spec.with_classes(classes)?;
        self.matches.push(conditions.into_iter().collect());
        Ok(self)
    }

    /// The class of a request (`key`: its key under the policy).
    pub fn class_of(&self, info: &RequestInfo<'_>, key: &[u8]) -> usize {
        self.matches
            .iter()
            .position(|conds| conds.iter().all(|c| c.holds(info, key)))
            .unwrap_or(self.matches.len().saturating_sub(1))
    }
}
