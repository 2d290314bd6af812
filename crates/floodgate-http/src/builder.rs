//! [`RateLimiterBuilder`]: policies, routes, keys, allowlist, store and fleet, validated
//! into a [`RateLimiter`] ([`BuildError`] says what is wrong).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use floodgate_core::{ConfigError, MonotonicClock};
use floodgate_engine::adaptive::PartitionedLimiter;
use floodgate_engine::fault::StoreFailure;
use floodgate_engine::fleet::{Fleet, FleetError, Strategy};
use floodgate_engine::headers::HeaderOptions;
use floodgate_engine::insight::{Insight, KeyDisplay};
use floodgate_engine::metrics::Metrics;
use floodgate_engine::store::{DecisionStore, LocalStore};
use http::StatusCode;
use ipnet::IpNet;

use crate::key::{ClientIpConfig, MissingKey, PeerFn, peer_from_extension};
use crate::limiter::{Inner, RateLimiter};
use crate::policy::{CompiledRoute, Policy, PolicyInfo, Route};
use crate::rejection_log::{RejectionLog, RejectionLogConfig};

/// Why a limiter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A policy's parameters are invalid.
    #[error("policy {name:?}: {source}")]
    Policy {
        /// The policy.
        name: String,
        /// What is wrong.
        source: ConfigError,
    },
    /// Two policies share a name.
    #[error("policy {0:?} is defined twice")]
    DuplicatePolicy(String),
    /// A route names a policy that does not exist.
    #[error("route {route:?} names unknown policy {policy:?}; defined: {defined}")]
    UnknownPolicy {
        /// The route's prefix.
        route: String,
        /// The unknown name.
        policy: String,
        /// The defined names.
        defined: String,
    },
    /// Another invalid setting.
    #[error("{0}")]
    Invalid(String),
    /// The fleet does not fit the store (shared/hybrid without a shared store, say).
    #[error("fleet: {0}")]
    Fleet(#[from] FleetError),
}

/// Builds a [`RateLimiter`].
pub struct RateLimiterBuilder {
    policies: Vec<Policy>,
    routes: Vec<Route>,
    client_ip: ClientIpConfig,
    peer: PeerFn,
    allow_nets: Vec<IpNet>,
    allow_keys: HashSet<Vec<u8>>,
    missing_key: MissingKey,
    missing_key_status: StatusCode,
    store_failure: StoreFailure,
    deny_status: StatusCode,
    jitter: Duration,
    headers: HeaderOptions,
    max_waiting: usize,
    max_keys: usize,
    max_key_len: usize,
    store: Option<Arc<dyn DecisionStore>>,
    store_name: &'static str,
    fleet: Option<Fleet>,
    /// The `quota` fleet strategy's client settings.
    #[cfg(feature = "quota")]
    quota: Option<floodgate_engine::quota::QuotaClientConfig>,
    surface: &'static str,
    key_display: KeyDisplay,
    rejection_log: RejectionLogConfig,
    record_decisions: bool,
    no_peer_hint: Option<&'static str>,
    /// The limiter this one replaces ([`RateLimiterBuilder::succeed`]).
    prev: Option<RateLimiter>,
}

impl Default for RateLimiterBuilder {
    fn default() -> Self {
        RateLimiterBuilder {
            policies: Vec::new(),
            routes: Vec::new(),
            client_ip: ClientIpConfig::default(),
            peer: Arc::new(peer_from_extension),
            allow_nets: Vec::new(),
            allow_keys: HashSet::new(),
            missing_key: MissingKey::Deny,
            missing_key_status: StatusCode::BAD_REQUEST,
            store_failure: StoreFailure::Allow,
            deny_status: StatusCode::TOO_MANY_REQUESTS,
            jitter: Duration::from_secs(1),
            headers: HeaderOptions::default(),
            max_waiting: 10_000,
            max_keys: 1_000_000,
            max_key_len: 256,
            store: None,
            store_name: "memory",
            fleet: None,
            #[cfg(feature = "quota")]
            quota: None,
            surface: "layer",
            key_display: KeyDisplay::Plain,
            rejection_log: RejectionLogConfig::default(),
            record_decisions: false,
            no_peer_hint: None,
            prev: None,
        }
    }
}

impl RateLimiterBuilder {
    /// Add a policy.
    pub fn policy(mut self, p: Policy) -> Self {
        self.policies.push(p);
        self
    }
    /// Add a route. Without any route, every request is checked against every policy at
    /// cost 1.
    pub fn route(mut self, r: Route) -> Self {
        self.routes.push(r);
        self
    }
    /// How the client IP is found (trusted proxies, prefixes).
    pub fn client_ip(mut self, c: ClientIpConfig) -> Self {
        self.client_ip = c;
        self
    }
    /// Where the peer address comes from (default: the [`crate::PeerAddr`] extension).
    /// For axum: `|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())`.
    pub fn peer(
        mut self,
        f: impl Fn(&http::Extensions) -> Option<std::net::IpAddr> + Send + Sync + 'static,
    ) -> Self {
        self.peer = Arc::new(f);
        self
    }
    /// Client IPs in `net` bypass every policy (counted as `allowlisted`).
    pub fn allow_net(mut self, net: IpNet) -> Self {
        self.allow_nets.push(net);
        self
    }
    /// Requests whose header-derived key (an API key) equals `key` bypass every policy.
    pub fn allow_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.allow_keys.insert(key.into());
        self
    }
    /// Outcome for requests whose key cannot be extracted (default: deny with 400).
    pub fn missing_key(mut self, m: MissingKey) -> Self {
        self.missing_key = m;
        self
    }
    /// Status for [`MissingKey::Deny`] (a 4xx; default 400).
    pub fn missing_key_status(mut self, s: StatusCode) -> Self {
        self.missing_key_status = s;
        self
    }
    /// Outcome when the store fails (default: allow).
    pub fn store_failure(mut self, s: StoreFailure) -> Self {
        self.store_failure = s;
        self
    }
    /// Status of a rate-limit denial (default 429; nginx uses 503).
    pub fn deny_status(mut self, s: StatusCode) -> Self {
        self.deny_status = s;
        self
    }
    /// Extra `Retry-After` span: a uniform extra in `[0, jitter]` is added to the true
    /// retry time before rounding up (default 1 s; zero disables jitter).
    pub fn retry_after_jitter(mut self, j: Duration) -> Self {
        self.jitter = j;
        self
    }
    /// Which headers to write.
    pub fn headers(mut self, h: HeaderOptions) -> Self {
        self.headers = h;
        self
    }
    /// The most requests held by leaky queues at once; beyond it, a request that should
    /// wait is rejected (default 10 000).
    pub fn max_waiting(mut self, n: usize) -> Self {
        self.max_waiting = n;
        self
    }
    /// The most keys each policy keeps in the in-process store (default 1 000 000).
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n;
        self
    }
    /// The longest key in bytes (default 256); longer keys count as missing.
    pub fn max_key_len(mut self, n: usize) -> Self {
        self.max_key_len = n;
        self
    }
    /// Use another decision store (default: [`LocalStore`]). Its policy indices are those
    /// of the policies in the order they were added.
    pub fn store(mut self, store: Arc<dyn DecisionStore>, name: &'static str) -> Self {
        self.store = Some(store);
        self.store_name = name;
        self
    }

    /// How the admin API shows keys (default plain; they may be personal data), and the
    /// surface it names (`layer` by default; the proxy says `proxy`). See
    /// [`floodgate_engine::insight`].
    pub fn admin_keys(mut self, surface: &'static str, display: KeyDisplay) -> Self {
        self.surface = surface;
        self.key_display = display;
        self
    }

    /// This node is one of a fleet sharing the limits with `fleet`'s strategy (see
    /// [`floodgate_engine::fleet`]): `local` enforces
    /// [`local_share`](floodgate_engine::fleet::local_share) of every policy, `sticky` lets
    /// [`RateLimiter::owner_of`] say which node owns a request's key, and `shared` /
    /// `hybrid` require a shared [`store`](Self::store) (checked by `build`).
    pub fn fleet(mut self, fleet: Fleet) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// This node is one of a fleet under the `quota` strategy (see
    /// [`floodgate_engine::quota`]): `build` starts a
    /// [`QuotaStore`](floodgate_engine::quota::QuotaStore) on the current tokio runtime
    /// (so `build` must then run inside one), a client of the quota server at
    /// `config.server` that decides every request locally from the share the server
    /// assigns each (policy, key) bucket. Exclusive with [`store`](Self::store); refused
    /// with `max_in_flight` policies (a quota store keeps no leases).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), floodgate_http::BuildError> {
    /// use floodgate_core::{Kind, Spec};
    /// use floodgate_engine::quota::{QuotaClientConfig, QuotaFallback};
    /// use floodgate_http::{Policy, RateLimiter};
    ///
    /// let mut quota = QuotaClientConfig::new("http://127.0.0.1:8081", "edge");
    /// quota.fallback = QuotaFallback::LocalShare { nodes: 3 };
    /// let spec = Spec::new(Kind::Gcra, "100/s".parse().unwrap());
    /// let limiter = RateLimiter::builder()
    ///     .policy(Policy::new("per-ip", spec))
    ///     .quota(quota)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "quota")]
    pub fn quota(mut self, config: floodgate_engine::quota::QuotaClientConfig) -> Self {
        self.quota = Some(config);
        self
    }

    /// The quota strategy's store (`None` without [`quota`](Self::quota)): the one of
    /// the limiter this one succeeds when it serves the same policies with the same
    /// settings ([`QuotaStore::serves`](floodgate_engine::quota::QuotaStore::serves)),
    /// else a new one, started.
    #[cfg(feature = "quota")]
    fn quota_store(
        &self,
        infos: &[PolicyInfo],
    ) -> Result<Option<Arc<floodgate_engine::quota::QuotaStore>>, BuildError> {
        let Some(q) = &self.quota else {
            return Ok(None);
        };
        if self.store.is_some() {
            return Err(BuildError::Invalid(
                "quota: the quota strategy decides on its own store; give no store with it".into(),
            ));
        }
        if let Some(p) = infos.iter().find(|p| p.in_flight.is_some()) {
            return Err(BuildError::Invalid(format!(
                "policy {:?} limits requests in flight, and the quota strategy's store keeps no leases",
                p.name
            )));
        }
        if let Some(kept) = self
            .prev
            .as_ref()
            .and_then(|p| p.inner.quota.as_ref())
            .filter(|kept| kept.serves(infos, q))
        {
            return Ok(Some(kept.clone()));
        }
        let store = floodgate_engine::quota::QuotaStore::start(infos, q.clone())
            .map_err(|e| BuildError::Invalid(format!("quota: {e}")))?;
        Ok(Some(Arc::new(store)))
    }

    /// The policies as a store sees them (to build a custom store before `build`). Under
    /// the `local` fleet strategy, each spec is already this node's share.
    pub fn policy_infos(&self) -> Result<Vec<PolicyInfo>, BuildError> {
        let mut infos = Vec::with_capacity(self.policies.len());
        for (index, p) in self.policies.iter().enumerate() {
            let policy_err = |source| BuildError::Policy {
                name: p.name.clone(),
                source,
            };
            let mut algorithm = p.validate().map_err(policy_err)?;
            if self.policies[..index].iter().any(|q| q.name == p.name) {
                return Err(BuildError::DuplicatePolicy(p.name.clone()));
            }
            if let Some(a) = &p.adaptive {
                // a reloaded limiter keeps the limit (and the permits held) of a policy of
                // the same name and spec
                let kept = self.prev.as_ref().and_then(|prev| {
                    prev.inner
                        .infos
                        .iter()
                        .filter_map(|i| i.adaptive.as_ref())
                        .find(|l| l.name() == p.name && *l.spec() == a.spec)
                        .cloned()
                });
                let limiter = match kept {
                    Some(l) => l,
                    None => PartitionedLimiter::new(
                        p.name.clone(),
                        a.spec.clone(),
                        Arc::new(MonotonicClock::new()),
                    )
                    .map_err(policy_err)?,
                };
                infos.push(PolicyInfo::adaptive(index, limiter));
                continue;
            }
            if let Some(f) = p.in_flight {
                // N in flight is a fleet-wide count on a shared store, and this node's
                // own count in process (the local strategy does not divide it)
                infos.push(PolicyInfo::in_flight(index, p.name.clone(), f));
                continue;
            }
            let mut spec = p.spec.clone();
            if let Some(f) = self
                .fleet
                .as_ref()
                .filter(|f| f.strategy() == Strategy::Local)
            {
                spec = floodgate_engine::fleet::local_share(&spec, f.nodes().len())
                    .map_err(policy_err)?;
                algorithm = spec.build().map_err(policy_err)?;
            }
            infos.push(PolicyInfo::new(index, p.name.clone(), spec, algorithm));
        }
        Ok(infos)
    }

    /// How rejections are logged (default: DEBUG, 10 lines a second, keys as they are;
    /// [`crate::rejection_log`]).
    pub fn rejection_log(mut self, config: RejectionLogConfig) -> Self {
        self.rejection_log = config;
        self
    }

    /// Put a [`RecordedDecision`](crate::RecordedDecision) (outcome, policy, key as the rejection log
    /// shows keys) in every limited response's extensions, for an access log (default:
    /// off, nothing is allocated for it).
    pub fn record_decisions(mut self, on: bool) -> Self {
        self.record_decisions = on;
        self
    }

    /// What the missing-key response to a request without a peer address tells the
    /// client to do, in place of the Rust advice of
    /// [`KeyError::NoPeer`](crate::KeyError::NoPeer) ("insert floodgate_http::PeerAddr or
    /// set a peer extractor"): a binding names its own way of passing the address. The body reads "no rate-limit key: no peer address on
    /// the request (HINT)".
    pub fn no_peer_hint(mut self, hint: &'static str) -> Self {
        self.no_peer_hint = Some(hint);
        self
    }

    /// Build a limiter that replaces `prev` (a reloaded configuration): it shares `prev`'s
    /// metrics ([`Metrics::successor`]: counters go on counting) and admin insight, and,
    /// both being in process, takes over the key state of every policy of the same name
    /// and algorithm kind (new parameters read the kept state from the next request; a
    /// policy whose algorithm kind changed starts its keys fresh). In-flight leases and
    /// held requests stay with `prev`'s policies until they end.
    pub fn succeed(mut self, prev: &RateLimiter) -> Self {
        self.prev = Some(prev.clone());
        self
    }

    /// The in-process store's limiters, one per policy of `infos`: those `prev` holds for
    /// a policy of the same name and kind (on `prev`'s clock, and with its key cap), the
    /// others new.
    fn local_store(
        prev: Option<&RateLimiter>,
        max_keys: usize,
        infos: &[PolicyInfo],
    ) -> Result<LocalStore, BuildError> {
        let prev = prev.and_then(|p| Some((p.inner.local.as_ref()?, &p.inner.infos)));
        let Some((prev_store, prev_infos)) = prev else {
            return LocalStore::new(infos, max_keys).map_err(|source| BuildError::Policy {
                name: "max_keys".into(),
                source,
            });
        };
        let mut limiters = Vec::with_capacity(infos.len());
        for info in infos {
            let kept = prev_infos
                .iter()
                .find(|o| o.name == info.name && o.spec.kind == info.spec.kind)
                .and_then(|o| prev_store.limiter_at(o.index));
            let limiter = match kept {
                Some(l) => {
                    l.set_algorithm(info.algorithm.clone());
                    l.clone()
                }
                None => Arc::new(
                    floodgate_core::KeyedLimiter::new(info.algorithm.clone(), max_keys).map_err(
                        |source| BuildError::Policy {
                            name: info.name.clone(),
                            source,
                        },
                    )?,
                ),
            };
            limiters.push(limiter);
        }
        Ok(LocalStore::from_limiters(
            limiters,
            prev_store.clock().clone(),
        ))
    }

    /// Validate everything and build.
    pub fn build(self) -> Result<RateLimiter, BuildError> {
        let infos = self.policy_infos()?;
        #[cfg(feature = "quota")]
        let quota = self.quota_store(&infos)?;
        #[cfg(feature = "quota")]
        let quota_store: Option<Arc<dyn DecisionStore>> =
            quota.clone().map(|q| q as Arc<dyn DecisionStore>);
        #[cfg(not(feature = "quota"))]
        let quota_store: Option<Arc<dyn DecisionStore>> = None;
        let store_name = if quota_store.is_some() {
            "quota"
        } else {
            self.store_name
        };
        if infos.is_empty() {
            return Err(BuildError::Invalid(
                "at least one policy is required".into(),
            ));
        }
        if !self.deny_status.is_client_error() && !self.deny_status.is_server_error() {
            return Err(BuildError::Invalid(format!(
                "deny status {} must be a 4xx or 5xx",
                self.deny_status.as_u16()
            )));
        }
        if !self.missing_key_status.is_client_error() {
            return Err(BuildError::Invalid(format!(
                "missing-key status {} must be a 4xx",
                self.missing_key_status.as_u16()
            )));
        }
        if self.client_ip.ipv4_prefix > 32 || self.client_ip.ipv6_prefix > 128 {
            return Err(BuildError::Invalid(format!(
                "ipv4_prefix must be 0..=32 and ipv6_prefix 0..=128, got {} and {}",
                self.client_ip.ipv4_prefix, self.client_ip.ipv6_prefix
            )));
        }
        if self.max_key_len == 0 {
            return Err(BuildError::Invalid("max_key_len must be at least 1".into()));
        }
        let routes = if self.routes.is_empty() {
            vec![Route {
                prefix: "/".into(),
                methods: Vec::new(),
                policies: infos.iter().map(|p| (p.name.clone(), 1)).collect(),
                settle: None,
            }]
        } else {
            self.routes
        };
        let defined = infos
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let mut compiled = Vec::with_capacity(routes.len());
        for route in routes {
            let mut checks = Vec::new();
            for (name, cost) in &route.policies {
                let idx = infos.iter().position(|p| &p.name == name).ok_or_else(|| {
                    BuildError::UnknownPolicy {
                        route: route.prefix.clone(),
                        policy: name.clone(),
                        defined: defined.clone(),
                    }
                })?;
                if checks.iter().any(|&(i, _)| i == idx) {
                    return Err(BuildError::Invalid(format!(
                        "route {:?} names policy {name:?} twice; name it once, with its cost",
                        route.prefix
                    )));
                }
                checks.push((idx, *cost));
            }
            let settle = route.settle.clone().map(std::sync::Arc::new);
            compiled.push(CompiledRoute {
                route,
                checks,
                settle,
            });
        }
        // longest prefix first; stable, so among equal prefixes the first listed wins
        compiled.sort_by_key(|r| std::cmp::Reverse(r.route.prefix.len()));
        if let Some(f) = &self.fleet {
            let shared = self.store.as_ref().is_some_and(|s| s.shared());
            if f.strategy().needs_shared_store() && !shared {
                return Err(FleetError::NeedsSharedStore(f.strategy()).into());
            }
            if !f.strategy().needs_shared_store() && shared {
                return Err(FleetError::NeedsLocalStore(f.strategy()).into());
            }
        }
        if let Some(s) = &self.store
            && !s.keeps_leases()
            && let Some(p) = infos.iter().find(|p| p.in_flight.is_some())
        {
            return Err(BuildError::Invalid(format!(
                "policy {:?} limits requests in flight, and the store {:?} keeps no leases (use the in-process, Redis or hybrid store)",
                p.name, self.store_name
            )));
        }
        let (store, local): (Arc<dyn DecisionStore>, _) = match self.store.or(quota_store) {
            Some(s) => (s, None),
            None => {
                let local = Arc::new(Self::local_store(
                    self.prev.as_ref(),
                    self.max_keys,
                    &infos,
                )?);
                (local.clone(), Some(local))
            }
        };
        let names: Vec<String> = infos.iter().map(|p| p.name.clone()).collect();
        let (insight, metrics) = match &self.prev {
            Some(prev) => {
                let insight = prev.inner.insight.clone();
                insight.retain(&names.iter().map(String::as_str).collect::<Vec<_>>());
                (insight, Arc::new(prev.inner.metrics.successor(&names)))
            }
            None => (
                Arc::new(Insight::new(self.surface, self.key_display)),
                Arc::new(Metrics::new(&names)),
            ),
        };
        let policy_insights = infos.iter().map(|p| insight.policy(p)).collect();
        for limiter in infos.iter().filter_map(|p| p.adaptive.as_ref()) {
            let classes: Vec<String> = limiter
                .spec()
                .classes
                .iter()
                .map(|c| c.name.clone())
                .collect();
            limiter.attach_metrics(metrics.adaptive(limiter.name(), &classes));
        }
        for lease in infos.iter().filter_map(|p| p.in_flight.as_ref()) {
            lease.attach_gauge(metrics.lease_gauge(&lease.name));
            lease.attach_waiting_gauge(metrics.waiting.clone());
        }
        Ok(RateLimiter {
            inner: Arc::new(Inner {
                metrics,
                insight,
                policy_insights,
                policies: self.policies,
                infos,
                routes: compiled,
                store,
                local,
                store_name,
                client_ip: self.client_ip,
                peer: self.peer,
                allow_nets: self.allow_nets,
                allow_keys: self.allow_keys,
                missing_key: self.missing_key,
                missing_key_status: self.missing_key_status,
                store_failure: self.store_failure,
                deny_status: self.deny_status,
                jitter: self.jitter,
                headers: self.headers,
                max_waiting: self.max_waiting,
                waiting: AtomicUsize::new(0),
                max_key_len: self.max_key_len,
                fleet: self.fleet,
                rejections: match &self.prev {
                    Some(prev) => {
                        RejectionLog::succeeding(self.rejection_log, &prev.inner.rejections)
                    }
                    None => RejectionLog::new(self.rejection_log),
                },
                record_decisions: self.record_decisions,
                #[cfg(feature = "quota")]
                quota,
                no_peer_hint: self.no_peer_hint,
            }),
        })
    }
}

impl RateLimiter {
    /// A builder.
    pub fn builder() -> RateLimiterBuilder {
        RateLimiterBuilder::default()
    }
}

#[cfg(test)]
mod build_tests {
    use super::*;
    use floodgate_core::{Kind, Spec};

    #[test]
    fn a_max_in_flight_policy_needs_a_store_that_keeps_leases() {
        struct NoLeases;
        impl DecisionStore for NoLeases {
            fn check<'a>(
                &'a self,
                _: &'a [floodgate_engine::store::StoreCheck<'a>],
            ) -> floodgate_engine::store::BoxFuture<
                'a,
                Result<floodgate_core::multi::MultiDecision, floodgate_engine::store::StoreError>,
            > {
                Box::pin(std::future::ready(Err(
                    floodgate_engine::store::StoreError::refused("custom", "unused"),
                )))
            }
        }
        let spec = crate::policy::InFlightSpec::new(2, Duration::from_secs(1)).unwrap();
        let e = RateLimiter::builder()
            .policy(Policy::max_in_flight("gpu", spec))
            .store(Arc::new(NoLeases), "custom")
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"gpu\"") && e.contains("keeps no leases"),
            "{e}"
        );
    }

    #[cfg(feature = "quota")]
    #[test]
    fn the_quota_strategy_names_what_it_cannot_take() {
        use floodgate_engine::quota::QuotaClientConfig;
        let quota = QuotaClientConfig::new("http://127.0.0.1:1", "edge");
        let spec = Spec::new(Kind::Gcra, "10/s".parse().unwrap());
        // built outside a runtime (a configuration check): its stream starts later
        let l = RateLimiter::builder()
            .policy(Policy::new("p", spec.clone()))
            .quota(quota.clone())
            .build()
            .unwrap();
        assert_eq!(l.inner.store_name, "quota");
        let e = RateLimiter::builder()
            .policy(Policy::new("p", spec.clone()))
            .quota(quota.clone())
            .store(Arc::new(LocalStore::new(&[], 10).unwrap()), "memory")
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("give no store with it"), "{e}");
        let inflight = crate::policy::InFlightSpec::new(2, Duration::from_secs(1)).unwrap();
        let e = RateLimiter::builder()
            .policy(Policy::max_in_flight("gpu", inflight))
            .quota(quota.clone())
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"gpu\"") && e.contains("keeps no leases"),
            "{e}"
        );
        let e = RateLimiter::builder()
            .policy(Policy::new("p", spec))
            .quota(QuotaClientConfig::new("127.0.0.1:1", "edge"))
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("quota: quota_server \"127.0.0.1:1\""), "{e}");
    }

    #[test]
    fn a_route_naming_a_policy_twice_is_refused() {
        let spec = Spec::new(Kind::Gcra, "10/s".parse().unwrap());
        let e = RateLimiter::builder()
            .policy(Policy::new("p", spec))
            .route(Route::prefix("/").policy("p", 1).policy("p", 2))
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("names policy \"p\" twice"), "{e}");
    }

    #[test]
    fn the_builder_checks_the_store_against_the_strategy() {
        use floodgate_engine::fleet::{Fleet, Strategy};
        let nodes = ["127.0.0.1:1", "127.0.0.1:2"];
        let builder = |s: Strategy| {
            RateLimiter::builder()
                .policy(Policy::new(
                    "p",
                    Spec::new(Kind::Gcra, "10/s".parse().unwrap()),
                ))
                .fleet(Fleet::new(s, nodes, "127.0.0.1:1").unwrap())
        };
        for s in [Strategy::Shared, Strategy::Hybrid] {
            let e = builder(s).build().unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("fleet: strategy \"{s}\" needs a shared store")),
                "{e}"
            );
        }
        let l = builder(Strategy::Local).build().unwrap();
        assert_eq!(l.policies()[0].spec.capacity, Some(5));
        assert_eq!(l.fleet().unwrap().strategy(), Strategy::Local);
        let l = builder(Strategy::Sticky).build().unwrap();
        assert_eq!(l.policies()[0].spec.capacity, None);
    }
}
