//! [`RateLimiter`]: policies, routes, keys, allowlist and a [`DecisionStore`], shared by
//! every clone of the layer. It turns a request into a [`Verdict`].

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floodgate_core::multi::MultiDecision;
use floodgate_core::ratelimit_fields::retry_after_secs;
use floodgate_core::{ConfigError, Decision, Denial};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use ipnet::IpNet;

use crate::deny::{ReplyFormat, short_response};
use crate::fleet::{Fleet, FleetError, Strategy};
use crate::headers::{self, HeaderOptions, RateHeaders, X_RATELIMIT_DELAY_MS, ceil_millis};
use crate::key::{
    ClientIpConfig, KeyError, PeerFn, RequestInfo, in_nets, peer_from_extension, resolve_client_ip,
};
use crate::metrics::{DecisionOutcome, Metrics, RequestOutcome};
use crate::policy::{CompiledRoute, Policy, PolicyInfo, Route};
use crate::store::{DecisionStore, LocalStore, StoreCheck, StoreError};
pub use floodgate_engine::fault::StoreFailure;
use smallvec::SmallVec;

/// What to do with a request whose key cannot be extracted (no peer address, missing
/// API-key header, a key over the length limit, a malformed forwarding header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingKey {
    /// Reject with [`RateLimiterBuilder::missing_key_status`] (400 by default).
    Deny,
    /// Let the request through, unlimited by the policies that need the key.
    Allow,
    /// Count it under this key instead (all keyless clients share one bucket).
    Fallback(Vec<u8>),
}

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
    Fleet(#[from] crate::fleet::FleetError),
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

    /// This node is one of a fleet sharing the limits with `fleet`'s strategy (see
    /// [`crate::fleet`]): `local` enforces [`floodgate_dist::local_share`] of every policy,
    /// `sticky` lets [`RateLimiter::owner_of`] say which node owns a request's key, and
    /// `shared` / `hybrid` require a shared [`store`](Self::store) (checked by `build`).
    pub fn fleet(mut self, fleet: Fleet) -> Self {
        self.fleet = Some(fleet);
        self
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
            let mut spec = p.spec.clone();
            if let Some(f) = self
                .fleet
                .as_ref()
                .filter(|f| f.strategy() == Strategy::Local)
            {
                spec = floodgate_dist::local_share(&spec, f.nodes().len()).map_err(policy_err)?;
                algorithm = spec.build().map_err(policy_err)?;
            }
            infos.push(PolicyInfo::new(index, p.name.clone(), spec, algorithm));
        }
        Ok(infos)
    }

    /// Validate everything and build.
    pub fn build(self) -> Result<RateLimiter, BuildError> {
        let infos = self.policy_infos()?;
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
            compiled.push(CompiledRoute { route, checks });
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
        let (store, local): (Arc<dyn DecisionStore>, _) = match self.store {
            Some(s) => (s, None),
            None => {
                let local = Arc::new(LocalStore::new(&infos, self.max_keys).map_err(|source| {
                    BuildError::Policy {
                        name: "max_keys".into(),
                        source,
                    }
                })?);
                (local.clone(), Some(local))
            }
        };
        let names: Vec<String> = infos.iter().map(|p| p.name.clone()).collect();
        Ok(RateLimiter {
            inner: Arc::new(Inner {
                metrics: Arc::new(Metrics::new(&names)),
                policies: self.policies,
                infos,
                routes: compiled,
                store,
                local,
                store_name: self.store_name,
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
            }),
        })
    }
}

struct Inner {
    policies: Vec<Policy>,
    infos: Vec<PolicyInfo>,
    routes: Vec<CompiledRoute>,
    store: Arc<dyn DecisionStore>,
    /// The same store when it is the built-in [`LocalStore`]: decided without a future.
    local: Option<Arc<LocalStore>>,
    store_name: &'static str,
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
    waiting: AtomicUsize,
    max_key_len: usize,
    metrics: Arc<Metrics>,
    fleet: Option<Fleet>,
}

/// The shared rate-limiting engine. Cloning is cheap and every clone shares the same
/// policies, store and metrics.
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("policies", &self.inner.infos)
            .field("store", &self.inner.store_name)
            .finish_non_exhaustive()
    }
}

/// `(policy index, key, cost)` of a request's checks; a route has one or two policies
/// as a rule, held without an allocation.
type Checks = SmallVec<[(usize, Vec<u8>, u64); 2]>;

/// The work left after the synchronous part of a decision: the checks to run.
pub(crate) struct Plan {
    /// Enforced policies.
    enforced: Checks,
    /// Dry-run policies (rare: empty, and so unallocated, as a rule).
    shadow: Vec<(usize, Vec<u8>, u64)>,
    start: std::time::Instant,
}

/// A store's answer to one list of checks (`None` for an empty list).
type Answer = Result<Option<MultiDecision>, StoreError>;

/// A [`Verdict`] whose rate-limit headers are not yet in a map: the layer inserts them
/// straight into the response.
pub(crate) enum Outcome {
    /// As [`Verdict::Pass`].
    Pass {
        /// Headers to add to the response.
        headers: RateHeaders,
        /// How long to hold the request first.
        delay: Duration,
    },
    /// As [`Verdict::Respond`].
    Respond(Response<Full<Bytes>>),
}

impl Outcome {
    fn into_verdict(self) -> Verdict {
        match self {
            Outcome::Pass { headers, delay } => Verdict::Pass {
                headers: headers.into_map(),
                delay,
            },
            Outcome::Respond(r) => Verdict::Respond(r),
        }
    }
}

/// The synchronous first step: either a final answer or a plan to check.
pub(crate) enum Prepared {
    /// Let through untouched (no route, allowlisted, keyless and allowed).
    Bypass,
    /// Answer with this response.
    Respond(Response<Full<Bytes>>),
    /// Ask the store.
    Check(Plan),
}

/// What the limiter decided about a request.
pub enum Verdict {
    /// Forward the request after `delay`, adding `headers` to the response.
    Pass {
        /// Headers to add to the response.
        headers: HeaderMap,
        /// How long to hold the request first.
        delay: Duration,
    },
    /// Answer with this response instead of calling the service.
    Respond(Response<Full<Bytes>>),
}

impl RateLimiter {
    /// A builder.
    pub fn builder() -> RateLimiterBuilder {
        RateLimiterBuilder::default()
    }

    /// The tower layer applying this limiter.
    pub fn layer(&self) -> crate::RateLimitLayer {
        crate::RateLimitLayer::new(self.clone())
    }

    /// The metrics (shared by every clone).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The Prometheus text exposition, with the store's key gauges refreshed.
    pub fn render_metrics(&self) -> String {
        self.inner.metrics.update_store(&self.inner.store.stats());
        self.inner
            .metrics
            .update_store_events(&self.inner.store.events());
        self.inner.metrics.encode()
    }

    /// The policies, in index order.
    pub fn policies(&self) -> &[PolicyInfo] {
        &self.inner.infos
    }

    /// The fleet this node belongs to, if any.
    pub fn fleet(&self) -> Option<&Fleet> {
        self.inner.fleet.as_ref()
    }

    /// The key a fleet routes `req` by: `policy name, 0x1f, key` of the first enforced
    /// policy of the matching route that is counted per key (not `global`), else of the
    /// route's first policy. `None` when no route matches, the client is allowlisted or the
    /// key cannot be extracted (the request is then decided where it arrives).
    pub fn routing_key<B>(&self, req: &Request<B>) -> Option<Vec<u8>> {
        let inner = &*self.inner;
        let route = inner
            .routes
            .iter()
            .find(|r| r.route.matches(req.method(), req.uri().path()))?;
        let peer = (inner.peer)(req.extensions());
        let client_ip = resolve_client_ip(peer, req.headers(), &inner.client_ip);
        if let Ok(ip) = &client_ip
            && !inner.allow_nets.is_empty()
            && in_nets(*ip, &inner.allow_nets)
        {
            return None;
        }
        let per_key = |idx: &usize| {
            let p = &inner.policies[*idx];
            !p.dry_run
                && !p
                    .key
                    .0
                    .iter()
                    .all(|k| matches!(k, crate::key::KeyPart::Global))
        };
        let (idx, _) = route
            .checks
            .iter()
            .find(|(i, _)| per_key(i))
            .or_else(|| {
                route
                    .checks
                    .iter()
                    .find(|(i, _)| !inner.policies[*i].dry_run)
            })
            .or_else(|| route.checks.first())?;
        let policy = &inner.policies[*idx];
        let info = RequestInfo {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            client_ip,
        };
        let key = policy
            .key
            .extract(&info, &inner.client_ip, inner.max_key_len)
            .ok()?;
        if policy.key.is_header() && inner.allow_keys.contains(&key) {
            return None;
        }
        let mut out = Vec::with_capacity(policy.name.len() + 1 + key.len());
        out.extend_from_slice(policy.name.as_bytes());
        out.push(0x1f);
        out.extend_from_slice(&key);
        Some(out)
    }

    /// Sticky fleets: the node that owns `req`'s key (see [`routing_key`](Self::routing_key)),
    /// or `None` when this limiter is not in a sticky fleet or the request has no routing
    /// key. A caller in library use sends the request (or the client) to that node; this
    /// node's own address is [`Fleet::self_node`].
    pub fn owner_of<B>(&self, req: &Request<B>) -> Option<&str> {
        let fleet = self
            .inner
            .fleet
            .as_ref()
            .filter(|f| f.strategy() == Strategy::Sticky)?;
        let key = self.routing_key(req)?;
        Some(fleet.owner(&key))
    }

    /// Requests being held by leaky queues right now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Decide on a request (extract keys, ask the store). The request is only read.
    pub async fn decide<B>(&self, req: &Request<B>) -> Verdict {
        match self.prepare(req) {
            Prepared::Bypass => Verdict::Pass {
                headers: HeaderMap::new(),
                delay: Duration::ZERO,
            },
            Prepared::Respond(r) => Verdict::Respond(r),
            Prepared::Check(plan) => self.check(plan, req.headers()).await.into_verdict(),
        }
    }

    pub(crate) fn prepare<B>(&self, req: &Request<B>) -> Prepared {
        let inner = &*self.inner;
        let path = req.uri().path();
        let Some(route) = inner
            .routes
            .iter()
            .find(|r| r.route.matches(req.method(), path))
        else {
            inner.metrics.request(RequestOutcome::Unlimited);
            return Prepared::Bypass;
        };
        let start = std::time::Instant::now();
        let peer = (inner.peer)(req.extensions());
        let client_ip = resolve_client_ip(peer, req.headers(), &inner.client_ip);
        if let Ok(ip) = &client_ip
            && !inner.allow_nets.is_empty()
            && in_nets(*ip, &inner.allow_nets)
        {
            inner.metrics.request(RequestOutcome::Allowlisted);
            return Prepared::Bypass;
        }
        let info = RequestInfo {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            client_ip,
        };
        let mut plan = Plan {
            enforced: Checks::new(),
            shadow: Vec::new(),
            start,
        };
        for &(idx, cost) in &route.checks {
            let policy = &inner.policies[idx];
            let key = match policy
                .key
                .extract(&info, &inner.client_ip, inner.max_key_len)
            {
                Ok(k) => {
                    if policy.key.is_header() && inner.allow_keys.contains(&k) {
                        inner.metrics.request(RequestOutcome::Allowlisted);
                        return Prepared::Bypass;
                    }
                    k
                }
                Err(e) => match &inner.missing_key {
                    MissingKey::Deny => {
                        inner.metrics.request(RequestOutcome::MissingKeyDenied);
                        tracing::debug!(policy = %policy.name, error = %e, "no key: denied");
                        return Prepared::Respond(self.missing_key_response(&e, req.headers()));
                    }
                    MissingKey::Allow => {
                        tracing::debug!(policy = %policy.name, error = %e, "no key: policy skipped");
                        continue;
                    }
                    MissingKey::Fallback(k) => k.clone(),
                },
            };
            if policy.dry_run {
                plan.shadow.push((idx, key, cost));
            } else {
                plan.enforced.push((idx, key, cost));
            }
        }
        if plan.enforced.is_empty() && plan.shadow.is_empty() {
            inner.metrics.request(RequestOutcome::MissingKeyAllowed);
            return Prepared::Bypass;
        }
        Prepared::Check(plan)
    }

    fn missing_key_response(&self, e: &KeyError, headers: &HeaderMap) -> Response<Full<Bytes>> {
        short_response(
            self.inner.missing_key_status,
            &format!("no rate-limit key: {e}"),
            None,
            None,
            ReplyFormat::of(headers),
        )
    }

    fn store_checks<'a>(
        &'a self,
        checks: &'a [(usize, Vec<u8>, u64)],
    ) -> SmallVec<[StoreCheck<'a>; 2]> {
        checks
            .iter()
            .map(|(idx, key, cost)| StoreCheck {
                policy: &self.inner.infos[*idx],
                key,
                cost: *cost,
            })
            .collect()
    }

    async fn run_checks(&self, checks: &[(usize, Vec<u8>, u64)]) -> Answer {
        if checks.is_empty() {
            return Ok(None);
        }
        let list = self.store_checks(checks);
        self.inner.store.check(&list).await.map(Some)
    }

    fn run_local(&self, local: &LocalStore, checks: &[(usize, Vec<u8>, u64)]) -> Answer {
        if checks.is_empty() {
            return Ok(None);
        }
        local.check_now(&self.store_checks(checks)).map(Some)
    }

    /// The store when it is the built-in in-process one, which
    /// [`check_now`](Self::check_now) asks without a future to build or box.
    pub(crate) fn local_store(&self) -> Option<&LocalStore> {
        self.inner.local.as_deref()
    }

    /// Decide on `plan` at once with `local`, this limiter's [`local_store`](Self::local_store).
    /// `req_headers` are the request's (for the form of a denial's body).
    pub(crate) fn check_now(
        &self,
        local: &LocalStore,
        plan: Plan,
        req_headers: &HeaderMap,
    ) -> Outcome {
        let enforced = self.run_local(local, &plan.enforced);
        let shadow = self.run_local(local, &plan.shadow);
        self.finish(plan, enforced, shadow, req_headers)
    }

    /// Decide on `plan` with whatever store this limiter has.
    pub(crate) async fn check(&self, plan: Plan, req_headers: &HeaderMap) -> Outcome {
        if let Some(local) = self.local_store() {
            return self.check_now(local, plan, req_headers);
        }
        let enforced = self.run_checks(&plan.enforced).await;
        let shadow = self.run_checks(&plan.shadow).await;
        self.finish(plan, enforced, shadow, req_headers)
    }

    /// The outcome of `plan` from the store's answers.
    fn finish(
        &self,
        plan: Plan,
        enforced: Answer,
        shadow: Answer,
        req_headers: &HeaderMap,
    ) -> Outcome {
        let inner = &*self.inner;
        let m = &inner.metrics;
        m.decision_seconds.observe(plan.start.elapsed());
        let (enforced, shadow) = match (enforced, shadow) {
            (Ok(e), Ok(s)) => (e, s),
            (Err(e), _) | (_, Err(e)) => {
                m.store_errors.inc();
                tracing::warn!(error = %e, store = inner.store_name, "decision store failed");
                return match inner.store_failure {
                    StoreFailure::Allow => {
                        m.request(RequestOutcome::StoreErrorAllowed);
                        Outcome::Pass {
                            headers: RateHeaders::default(),
                            delay: Duration::ZERO,
                        }
                    }
                    StoreFailure::Deny => {
                        m.request(RequestOutcome::StoreErrorDenied);
                        Outcome::Respond(short_response(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "rate limiter unavailable",
                            None,
                            None,
                            ReplyFormat::of(req_headers),
                        ))
                    }
                };
            }
        };
        // every policy's decision, enforced first, for the headers
        let mut items: SmallVec<[(&PolicyInfo, Decision); 2]> = SmallVec::new();
        if let Some(e) = &enforced {
            for ((idx, key, _), d) in plan.enforced.iter().zip(&e.decisions) {
                let outcome = if !d.allowed {
                    tracing::debug!(policy = %inner.infos[*idx].name, key = %String::from_utf8_lossy(key), "rejected");
                    DecisionOutcome::Rejected
                } else if !d.delay.is_zero() {
                    DecisionOutcome::Delayed
                } else {
                    DecisionOutcome::Passed
                };
                // a denied multi-check's other decisions are cost-0 views: count only the binding ones
                if e.allowed || !d.allowed {
                    m.decision(*idx, outcome);
                }
                items.push((&inner.infos[*idx], *d));
            }
        }
        if let Some(s) = &shadow {
            for ((idx, key, _), d) in plan.shadow.iter().zip(&s.decisions) {
                let outcome = if !d.allowed {
                    tracing::info!(policy = %inner.infos[*idx].name, key = %String::from_utf8_lossy(key), "dry run: would reject");
                    DecisionOutcome::RejectedDryRun
                } else if !d.delay.is_zero() {
                    DecisionOutcome::DelayedDryRun
                } else {
                    DecisionOutcome::Passed
                };
                if s.allowed || !d.allowed {
                    m.decision(*idx, outcome);
                }
                items.push((&inner.infos[*idx], *d));
            }
        }
        let mut headers = headers::render(&items, &inner.headers);
        match enforced {
            Some(e) if !e.allowed => {
                m.request(RequestOutcome::Rejected);
                let binding = e.binding().copied();
                let (idx, _) = plan
                    .enforced
                    .iter()
                    .zip(&e.decisions)
                    .find(|(_, d)| !d.allowed)
                    .map(|((i, _, _), d)| (*i, d))
                    .unwrap_or((plan.enforced[0].0, &e.decisions[0]));
                let name = &inner.infos[idx].name;
                Outcome::Respond(self.denial(binding, name, headers, ReplyFormat::of(req_headers)))
            }
            Some(e) => {
                let delay = e.delay();
                if delay.is_zero() {
                    m.request(RequestOutcome::Passed);
                } else if inner.headers.delay {
                    headers.push(&X_RATELIMIT_DELAY_MS, ceil_millis(delay).into());
                }
                Outcome::Pass { headers, delay }
            }
            None => {
                m.request(RequestOutcome::Passed);
                Outcome::Pass {
                    headers,
                    delay: Duration::ZERO,
                }
            }
        }
    }

    fn denial(
        &self,
        binding: Option<Decision>,
        policy: &str,
        headers: RateHeaders,
        format: ReplyFormat,
    ) -> Response<Full<Bytes>> {
        let inner = &*self.inner;
        let (detail, retry) = match binding {
            Some(Decision {
                denial: Some(Denial::CostExceedsLimit { cost, limit }),
                ..
            }) => (
                format!(
                    "policy {policy:?}: request cost {cost} exceeds the limit of {limit}; it can never be admitted"
                ),
                None,
            ),
            Some(Decision {
                retry_after: Some(r),
                ..
            }) => {
                let mut rng = fastrand::Rng::new();
                let secs = retry_after_secs(r, inner.jitter, |span| rng.u64(0..=span));
                // the hottest denial: written without the formatting machinery
                let mut detail = String::with_capacity(48 + policy.len());
                detail.push_str("rate limited by policy ");
                push_quoted(&mut detail, policy);
                detail.push_str("; retry after ");
                detail.push_str(itoa::Buffer::new().format(secs));
                detail.push_str(" s");
                (detail, Some(secs))
            }
            _ => (format!("rate limited by policy {policy:?}"), None),
        };
        let mut resp = short_response(inner.deny_status, &detail, retry, Some(policy), format);
        headers.insert_into(resp.headers_mut());
        resp
    }

    /// Hold a request for `delay` (a leaky queue's smoothing) without blocking a thread.
    /// Returns `false`, counting `queue_full`, when `max_waiting` requests are already held.
    pub async fn hold(&self, delay: Duration) -> bool {
        let inner = &*self.inner;
        if inner.waiting.fetch_add(1, Ordering::AcqRel) >= inner.max_waiting {
            inner.waiting.fetch_sub(1, Ordering::AcqRel);
            inner.metrics.request(RequestOutcome::QueueFull);
            return false;
        }
        struct Release<'a>(&'a Inner);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.waiting.fetch_sub(1, Ordering::AcqRel);
                self.0.metrics.waiting.dec();
            }
        }
        inner.metrics.waiting.inc();
        let _release = Release(inner);
        tokio::time::sleep(delay).await;
        inner.metrics.request(RequestOutcome::Delayed);
        inner.metrics.delay_seconds.observe(delay);
        true
    }

    /// The response for a request that should have been held but found the queue full.
    pub fn queue_full_response(&self, headers: &HeaderMap) -> Response<Full<Bytes>> {
        short_response(
            self.inner.deny_status,
            "too many requests are waiting",
            Some(1),
            None,
            ReplyFormat::of(headers),
        )
    }
}

/// `s` in quotes as `{:?}` writes it: plain copy when nothing needs escaping (policy
/// names are printable ASCII), `Debug` otherwise.
fn push_quoted(out: &mut String, s: &str) {
    if s.bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ')
    {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        use std::fmt::Write as _;
        let _ = write!(out, "{s:?}");
    }
}

#[cfg(test)]
mod push_quoted_tests {
    #[test]
    fn writes_what_debug_writes() {
        for s in [
            "default",
            "per key",
            "a\"b",
            "back\\slash",
            "tab\there",
            "\u{e9}t\u{e9}",
            "",
            "it's",
        ] {
            let mut out = String::new();
            super::push_quoted(&mut out, s);
            assert_eq!(out, format!("{s:?}"));
        }
    }
}

#[cfg(test)]
mod build_tests {
    use super::*;
    use floodgate_core::{Kind, Spec};

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
        use crate::fleet::{Fleet, Strategy};
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
