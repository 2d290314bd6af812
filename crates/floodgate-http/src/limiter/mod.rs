//! [`RateLimiter`]: policies, routes, keys, allowlist and a [`DecisionStore`], shared by
//! every clone of the layer. It turns a request into a [`Verdict`]. Built by
//! [`RateLimiter::builder`] ([`crate::builder`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floodgate_core::multi::binding_rank;
use floodgate_core::ratelimit_fields::retry_after_secs;
use floodgate_core::{Decision, Denial};
use floodgate_engine::adaptive::{AdaptivePermit, Admitted};
use floodgate_engine::decide::{self, Check, Decided, FaultPolicy, Role, Stores};
use floodgate_engine::deny::{ReplyFormat, short_response};
use floodgate_engine::fault::StoreFailure;
use floodgate_engine::fleet::{Fleet, Strategy};
use floodgate_engine::headers::{
    self, HeaderOptions, RateHeaders, X_RATELIMIT_DELAY_MS, ceil_millis,
};
use floodgate_engine::insight::{Insight, PolicyInsight};
use floodgate_engine::leases::{self, Admission, LeaseGuard, LeaseStep, LeasesAndRates, Ordered};
use floodgate_engine::metrics::{DecisionOutcome, Metrics, RequestOutcome};
use floodgate_engine::settle::{Reservation, SettleSpec, Settled};
use floodgate_engine::store::{DecisionStore, LocalStore, StoreCheck, StoreError};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use ipnet::IpNet;

use crate::key::{
    ClientIpConfig, KeyError, MissingKey, NO_PEER, PeerFn, RequestInfo, in_nets, resolve_client_ip,
};
use crate::policy::{CompiledRoute, Policy, PolicyInfo};
use crate::recorded::{RecordedDecision, RecordedOutcome};
use crate::rejection_log::{Rejection, RejectionLog};
use smallvec::SmallVec;

/// What a built limiter holds (every clone of it shares one); [`crate::builder`] makes it.
pub(crate) struct Inner {
    pub(crate) policies: Vec<Policy>,
    pub(crate) infos: Vec<PolicyInfo>,
    pub(crate) routes: Vec<CompiledRoute>,
    pub(crate) store: Arc<dyn DecisionStore>,
    /// The same store when it is the built-in [`LocalStore`]: decided without a future.
    pub(crate) local: Option<Arc<LocalStore>>,
    pub(crate) store_name: &'static str,
    pub(crate) client_ip: ClientIpConfig,
    pub(crate) peer: PeerFn,
    pub(crate) allow_nets: Vec<IpNet>,
    pub(crate) allow_keys: HashSet<Vec<u8>>,
    pub(crate) missing_key: MissingKey,
    pub(crate) missing_key_status: StatusCode,
    pub(crate) store_failure: StoreFailure,
    pub(crate) deny_status: StatusCode,
    pub(crate) jitter: Duration,
    pub(crate) headers: HeaderOptions,
    pub(crate) max_waiting: usize,
    pub(crate) waiting: AtomicUsize,
    pub(crate) max_key_len: usize,
    pub(crate) metrics: Arc<Metrics>,
    /// Who is being limited (the admin API's source).
    pub(crate) insight: Arc<Insight>,
    /// Each policy's insight, by index.
    pub(crate) policy_insights: Vec<Arc<PolicyInsight>>,
    pub(crate) fleet: Option<Fleet>,
    /// Where rejections are logged ([`crate::rejection_log`]).
    pub(crate) rejections: RejectionLog,
    /// Whether responses carry a [`RecordedDecision`] ([`RateLimiterBuilder::record_decisions`](crate::RateLimiterBuilder::record_decisions)).
    pub(crate) record_decisions: bool,
    /// The advice of a missing-key response to a request without a peer address, when
    /// not the Rust one ([`RateLimiterBuilder::no_peer_hint`](crate::RateLimiterBuilder::no_peer_hint)).
    pub(crate) no_peer_hint: Option<&'static str>,
    /// The quota strategy's store (also `store`), kept by a reload that serves the same
    /// policies with the same settings.
    #[cfg(feature = "quota")]
    pub(crate) quota: Option<Arc<floodgate_engine::quota::QuotaStore>>,
}

/// The shared rate-limiting engine. Cloning is cheap and every clone shares the same
/// policies, store and metrics.
#[derive(Clone)]
pub struct RateLimiter {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("policies", &self.inner.infos)
            .field("store", &self.inner.store_name)
            .finish_non_exhaustive()
    }
}

/// The `Retry-After` of a request an adaptive policy sheds (503), seconds.
pub use floodgate_engine::adaptive::SHED_RETRY_AFTER_SECS;

/// `(policy index, key, cost)` of a request's checks; a route has one or two policies
/// as a rule, held without an allocation.
type Checks = SmallVec<[(usize, Vec<u8>, u64); 2]>;

/// The work left after the synchronous part of a decision: the checks to run.
pub struct Plan {
    /// Enforced policies.
    enforced: Checks,
    /// Dry-run policies (rare: empty, and so unallocated, as a rule).
    shadow: Vec<(usize, Vec<u8>, u64)>,
    /// `max_in_flight` policies: `(policy index, key, dry run)`, leased before the rest
    /// is checked (empty, and so unallocated, as a rule).
    leases: Vec<(usize, Vec<u8>, bool)>,
    /// Adaptive policies: `(policy index, class, dry run)`, a permit taken before the
    /// leases and rates (empty, and so unallocated, as a rule).
    adaptive: Vec<(usize, usize, bool)>,
    start: std::time::Instant,
    /// A route settling its cost after the response: its spec and the estimate.
    pub(crate) settle: Option<(Arc<SettleSpec>, u64)>,
}

impl Plan {
    /// Whether the plan takes leases (so it cannot be decided without waiting).
    pub(crate) fn has_leases(&self) -> bool {
        !self.leases.is_empty() || !self.adaptive.is_empty()
    }
}

/// The leases a request holds while it runs.
pub type Leases = Vec<LeaseGuard>;

/// The adaptive permits a request holds while it runs ([`crate::adaptive`]).
pub type Permits = Vec<AdaptivePermit>;

/// A lease taken for a request (or a dry run's denial, kept for the headers): the
/// policy's index, the decision and the guard.
type Taken = (usize, Decision, Option<LeaseGuard>);

/// A [`Verdict`] whose rate-limit headers are not yet in a map: the layer inserts them
/// straight into the response.
pub(crate) enum Outcome {
    /// As [`Verdict::Pass`].
    Pass {
        /// Headers to add to the response.
        headers: RateHeaders,
        /// How long to hold the request first.
        delay: Duration,
        /// In-flight leases to hold until the response ends.
        leases: Leases,
        /// Adaptive permits to release at the response head or the body's end.
        permits: Permits,
        /// The decision, for the response's extensions (when recorded).
        decided: Option<RecordedDecision>,
    },
    /// As [`Verdict::Respond`] (a recorded [`RecordedDecision`] in its extensions).
    Respond(Response<Full<Bytes>>),
}

impl Outcome {
    fn into_verdict(self) -> Verdict {
        match self {
            Outcome::Pass {
                headers,
                delay,
                leases,
                permits,
                ..
            } => Verdict::Pass {
                headers: headers.into_map(),
                delay,
                leases,
                permits,
            },
            Outcome::Respond(r) => Verdict::Respond(r),
        }
    }
}

/// The synchronous first step: either a final answer or a plan to check.
pub(crate) enum Prepared {
    /// Let through untouched (no route, allowlisted, keyless and allowed); the decision
    /// of an allowlisted request when decisions are recorded.
    Bypass(Option<RecordedDecision>),
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
        /// In-flight leases (`max_in_flight` policies): hold them until the response
        /// has been sent, then drop them (dropping releases).
        leases: Leases,
        /// Adaptive permits: release them when the response head comes, with
        /// [`floodgate_engine::adaptive::at_head`], then the rest at the body's end
        /// (dropping one releases it without a latency sample).
        permits: Permits,
    },
    /// Answer with this response instead of calling the service.
    Respond(Response<Full<Bytes>>),
}

impl RateLimiter {
    /// The metrics (shared by every clone).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The OpenMetrics text exposition, with the store's key gauges refreshed.
    pub fn render_metrics(&self) -> String {
        self.render_metrics_as(floodgate_engine::metrics::Exposition::OpenMetrics)
    }

    /// The text exposition in `format` (the one a scraper's `Accept` asks for:
    /// [`Exposition::negotiate`](floodgate_engine::metrics::Exposition::negotiate)),
    /// with the store's key gauges refreshed.
    pub fn render_metrics_as(&self, format: floodgate_engine::metrics::Exposition) -> String {
        self.inner.metrics.update_store(&self.inner.store.stats());
        self.inner
            .metrics
            .update_store_up(self.inner.store.reachable());
        self.inner
            .metrics
            .update_store_events(&self.inner.store.events());
        self.inner.metrics.encode_as(format)
    }

    /// Whether the decision store answers ([`DecisionStore::reachable`]): false while
    /// every decision is the fault policy's.
    pub fn store_reachable(&self) -> bool {
        self.inner.store.reachable()
    }

    /// Who is being limited: top keys and per-second decisions of every policy.
    pub fn insight(&self) -> &Arc<Insight> {
        &self.inner.insight
    }

    #[cfg(feature = "admin")]
    /// Answer an admin API request (`/admin...`; `None` for other paths), key lookups
    /// read from this limiter's store ([`floodgate_engine::admin`]). The caller serves it:
    /// answer only the `Host` names [`floodgate_engine::admin::AllowedHosts`] allows
    /// (`misdirected` otherwise) and send `security_headers` with the reply, as the proxy's
    /// admin listener does.
    pub async fn admin(
        &self,
        req: &floodgate_engine::admin::AdminRequest<'_>,
    ) -> Option<floodgate_engine::admin::AdminReply> {
        let inner = &*self.inner;
        let peek = floodgate_engine::admin::StorePeek {
            policies: &inner.infos,
            store: &*inner.store,
        };
        floodgate_engine::admin::respond(&inner.insight, &peek, req).await
    }

    /// Count a policy's decision: in the metrics, and for its key in the insight.
    fn record(&self, idx: usize, key: &[u8], outcome: DecisionOutcome, cost: u64) {
        self.inner.metrics.decision(idx, outcome);
        if let Some(p) = self.inner.policy_insights.get(idx) {
            p.record(key, outcome, cost);
        }
    }

    /// The policies, in index order.
    pub fn policies(&self) -> &[PolicyInfo] {
        &self.inner.infos
    }

    /// The request headers some policy's key reads ([`KeyPart::Header`]), each once.
    /// A proxy refuses a request that repeats one of them (the limiter reads the first
    /// value, a backend may read the last) and never lets `Connection` remove one.
    ///
    /// [`KeyPart::Header`]: crate::key::KeyPart::Header
    pub fn key_headers(&self) -> Vec<http::HeaderName> {
        let mut out: Vec<http::HeaderName> = Vec::new();
        for p in &self.inner.policies {
            for part in &p.key.0 {
                if let crate::key::KeyPart::Header(h) = part
                    && !out.contains(h)
                {
                    out.push(h.clone());
                }
            }
        }
        out
    }

    /// The fleet this node belongs to, if any.
    pub fn fleet(&self) -> Option<&Fleet> {
        self.inner.fleet.as_ref()
    }

    /// The index of the route `req` matches (the first whose prefix and methods fit, as
    /// the limiter decides), in the order the routes were added; `None` when none does.
    pub fn route_index<B>(&self, req: &Request<B>) -> Option<usize> {
        self.inner
            .routes
            .iter()
            .position(|r| r.route.matches(req.method(), req.uri().path()))
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
        let (client_ip, allowlisted) = self.client_of(req);
        if allowlisted {
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
        let info = RequestInfo::of(req, client_ip);
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
            Prepared::Bypass(_) => Verdict::Pass {
                headers: HeaderMap::new(),
                delay: Duration::ZERO,
                leases: Leases::new(),
                permits: Permits::new(),
            },
            Prepared::Respond(r) => Verdict::Respond(r),
            Prepared::Check(plan) => self.check(plan, req.headers()).await.into_verdict(),
        }
    }

    /// The request's client IP (its peer, or the address trusted proxies forwarded) and
    /// whether the allowlist's networks hold it.
    fn client_of<B>(&self, req: &Request<B>) -> (Result<std::net::IpAddr, KeyError>, bool) {
        let inner = &*self.inner;
        let peer = (inner.peer)(req.extensions());
        let client_ip = resolve_client_ip(peer, req.headers(), &inner.client_ip);
        let allowlisted = matches!(&client_ip, Ok(ip)
            if !inner.allow_nets.is_empty() && in_nets(*ip, &inner.allow_nets));
        (client_ip, allowlisted)
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
            return Prepared::Bypass(None);
        };
        let start = std::time::Instant::now();
        let (client_ip, allowlisted) = self.client_of(req);
        if allowlisted {
            inner.metrics.request(RequestOutcome::Allowlisted);
            return Prepared::Bypass(self.allowlisted());
        }
        let info = RequestInfo::of(req, client_ip);
        let settle = match &route.settle {
            None => None,
            Some(spec) => match spec.estimate_of(req.headers()) {
                Ok(estimate) => Some((spec.clone(), estimate)),
                Err(e) => {
                    inner.metrics.request(RequestOutcome::Invalid);
                    return Prepared::Respond(short_response(
                        StatusCode::BAD_REQUEST,
                        &format!("invalid cost estimate: {e}"),
                        None,
                        None,
                        ReplyFormat::of(req.headers()),
                    ));
                }
            },
        };
        let estimate = settle.as_ref().map(|(_, e)| *e);
        let mut plan = Plan {
            enforced: Checks::new(),
            shadow: Vec::new(),
            leases: Vec::new(),
            adaptive: Vec::new(),
            start,
            settle,
        };
        for &(idx, cost) in &route.checks {
            let cost = estimate.unwrap_or(cost);
            let policy = &inner.policies[idx];
            let key = match policy
                .key
                .extract(&info, &inner.client_ip, inner.max_key_len)
            {
                Ok(k) => {
                    if policy.key.is_header() && inner.allow_keys.contains(&k) {
                        inner.metrics.request(RequestOutcome::Allowlisted);
                        return Prepared::Bypass(self.allowlisted());
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
            if let Some(a) = &policy.adaptive {
                plan.adaptive
                    .push((idx, a.class_of(&info, &key), policy.dry_run));
            } else if inner.infos[idx].in_flight.is_some() {
                plan.leases.push((idx, key, policy.dry_run));
            } else if policy.dry_run {
                plan.shadow.push((idx, key, cost));
            } else {
                plan.enforced.push((idx, key, cost));
            }
        }
        if plan.enforced.is_empty()
            && plan.shadow.is_empty()
            && plan.leases.is_empty()
            && plan.adaptive.is_empty()
        {
            inner.metrics.request(RequestOutcome::MissingKeyAllowed);
            return Prepared::Bypass(None);
        }
        Prepared::Check(plan)
    }

    fn missing_key_response(&self, e: &KeyError, headers: &HeaderMap) -> Response<Full<Bytes>> {
        let why = match (e, self.inner.no_peer_hint) {
            (KeyError::NoPeer, Some(hint)) => format!("no rate-limit key: {NO_PEER} ({hint})"),
            _ => format!("no rate-limit key: {e}"),
        };
        short_response(
            self.inner.missing_key_status,
            &why,
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

    /// `plan`'s rate checks for the engine's procedure ([`decide`]): the enforced ones,
    /// then the dry runs (each charged on its own, never denying).
    fn rate_checks<'a>(&'a self, plan: &'a Plan) -> SmallVec<[Check<'a>; 2]> {
        let infos = &self.inner.infos;
        let enforced = plan.enforced.iter().map(|c| (c, Role::Enforced));
        let shadow = plan.shadow.iter().map(|c| (c, Role::Shadow));
        enforced
            .chain(shadow)
            .map(|((idx, key, cost), role)| Check {
                policy: &infos[*idx],
                key,
                cost: *cost,
                role,
            })
            .collect()
    }

    /// The fault policy of the procedure: the limiter's [`StoreFailure`] (a fail-closed
    /// answer is the layer's own 503).
    fn fault_policy(&self) -> FaultPolicy {
        FaultPolicy {
            failure: self.inner.store_failure,
            retry: Duration::ZERO,
        }
    }

    /// Count and log a store fault.
    fn report(&self, e: &StoreError) {
        let inner = &*self.inner;
        inner.metrics.store_error(e);
        tracing::warn!(error = %e, kind = e.label(), store = inner.store_name, "decision store failed");
    }

    /// Decide `plan`'s rates through the engine's procedure, on the in-process store at
    /// once when it is one.
    async fn decide_rates_of(&self, plan: &Plan) -> Result<Decided, StoreError> {
        let checks = self.rate_checks(plan);
        let stores = Stores {
            store: &*self.inner.store,
            local: self.inner.local.as_deref(),
        };
        decide::decide(stores, &self.fault_policy(), &checks, &mut |e| {
            self.report(e)
        })
        .await
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
        let checks = self.rate_checks(&plan);
        let decided = decide::decide_now(local, &self.fault_policy(), &checks, &mut |e| {
            self.report(e)
        });
        drop(checks);
        self.finish(plan, decided, &[], req_headers)
    }

    /// The decision store.
    pub fn store(&self) -> &Arc<dyn DecisionStore> {
        &self.inner.store
    }

    /// Decide on `plan` as [`check`](Self::check) does, reserving its enforced policies at
    /// the estimate: the outcome and, when admitted, the reservation to settle.
    pub(crate) async fn reserve(
        &self,
        plan: Plan,
        req_headers: &HeaderMap,
    ) -> (Outcome, Option<Reservation>) {
        self.with_leases(plan, req_headers, true).await
    }

    /// The RateLimit fields of settled policies (each as a request of cost 0 sees it),
    /// `policies` being the indices of the settled parts, in order.
    pub(crate) fn settled_headers(&self, policies: &[usize], settled: &Settled) -> RateHeaders {
        let items: SmallVec<[(&PolicyInfo, Decision); 2]> = policies
            .iter()
            .zip(settled)
            .filter_map(|(i, s)| Some((self.inner.infos.get(*i)?, s.decision)))
            .collect();
        headers::render(&items, &self.inner.headers)
    }

    /// Decide on `plan` with whatever store this limiter has: its leases first (a
    /// request denied for concurrency is charged nothing), then its rates (a request
    /// they deny gives its leases back at once: see [`floodgate_engine::inflight`]).
    pub(crate) async fn check(&self, plan: Plan, req_headers: &HeaderMap) -> Outcome {
        self.with_leases(plan, req_headers, false).await.0
    }

    /// Decide `plan`'s rates, `leased` the decisions of its leases.
    async fn decide_rates(
        &self,
        plan: Plan,
        leased: &[(usize, Decision)],
        req_headers: &HeaderMap,
        reserve: bool,
    ) -> (Outcome, Option<Reservation>) {
        if reserve {
            let (decided, reservation) = self.reserve_rates(&plan).await;
            let outcome = self.finish(plan, decided, leased, req_headers);
            return (outcome, reservation);
        }
        let decided = self.decide_rates_of(&plan).await;
        (self.finish(plan, decided, leased, req_headers), None)
    }

    /// `plan`'s enforced rates reserved at the estimate (one all-or-nothing reservation;
    /// a fault is the fault policy's, as in the procedure), its dry runs decided by the
    /// procedure: the decisions in the order of [`rate_checks`](Self::rate_checks).
    async fn reserve_rates(
        &self,
        plan: &Plan,
    ) -> (Result<Decided, StoreError>, Option<Reservation>) {
        let (mut decided, reservation) = if plan.enforced.is_empty() {
            let none = Decided {
                decisions: SmallVec::new(),
                admitted: true,
                fault: None,
            };
            (none, None)
        } else {
            let list = self.store_checks(&plan.enforced);
            match self.inner.store.reserve(&list).await {
                Ok((m, r)) => {
                    let d = Decided {
                        decisions: m.decisions.into_iter().collect(),
                        admitted: m.allowed,
                        fault: None,
                    };
                    (d, r)
                }
                Err(e) => {
                    self.report(&e);
                    return (Err(e), None);
                }
            }
        };
        if !plan.shadow.is_empty() {
            let dry = Plan {
                enforced: Checks::new(),
                shadow: plan.shadow.clone(),
                leases: Vec::new(),
                adaptive: Vec::new(),
                start: plan.start,
                settle: None,
            };
            match self.decide_rates_of(&dry).await {
                Ok(d) => decided.decisions.extend(d.decisions),
                Err(e) => return (Err(e), None),
            }
        }
        (Ok(decided), reservation)
    }
}

mod answer;
mod concurrency;
