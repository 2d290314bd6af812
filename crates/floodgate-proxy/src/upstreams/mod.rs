//! Upstream groups: which server of which group a request goes to, and what the proxy
//! knows of each server's health.
//!
//! A group is a name, its servers (each with a weight) and a way to balance between them
//! ([`Balance`]). A server is `http://` or `https://` (verified as `[upstream_tls]` says).
//! A route names its group; requests no route sends elsewhere go to the group `default`
//! (the top-level `upstream = "http://…"` is that group, of one server). The groups are
//! read at startup; which group each route sends to ([`RouteGroups`]) follows the
//! current configuration, built again on each reload.
//!
//! Health is passive (`health`: a server is ejected after `max_fails` consecutive
//! failures, for a back-off that doubles on each ejection in a row) and, when a group
//! has a `probe`, active too (`probe`: a server whose probe fails is not taken until a
//! probe passes). A group of one server is never ejected passively (as nginx's), so a
//! lone upstream coming back is used at once.
//!
//! [`Upstreams`] is all of it, built from the settings and shared by the proxy's
//! workers (each keeps its own connection pools, indexed as the groups' servers are);
//! [`Upstreams::new`] given the previous state keeps the health of every server whose
//! group and URL are unchanged, so that a new configuration can replace it whole.
//!
//! Each worker picks through its own `Balancer`, and a request's place in its server's
//! in-flight count is taken on the worker thread's stripe of that count, held through
//! the worker's own reference, so that counting writes nothing another core reads on
//! every request (the round-robin turn is the one value the workers share). A request is
//! in flight from the moment it is sent until its response body ends or is dropped.

mod balance;
mod health;
pub(crate) mod probe;

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::time::{Clock, MonotonicClock, Nanos};
use floodgate_engine::metrics::upstream::{ServerMetrics, UPSTREAM_CLASSES};
use floodgate_engine::metrics::{Metrics, StripedGauge};
use http::Uri;
use http::uri::Authority;
use serde::Deserialize;

use balance::Picker;
use health::Health;

/// How a group spreads requests over its servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Each server in turn, as often as its weight says (nginx's smooth weighted round
    /// robin).
    #[default]
    RoundRobin,
    /// Of two servers drawn at random, the one with fewer requests in flight (sent, their
    /// response body not yet ended) per unit of weight (power of two choices).
    LeastRequests,
    /// A consistent hash of the request's policy key (the key of the first policy of its
    /// route that counts per key, as a sticky fleet routes by): one key always reaches
    /// one server while it is up, and adding a server moves about 1/N of the keys. A
    /// request without a key (no route, allowlisted) goes round robin.
    Hash,
}

impl Balance {
    /// The config word.
    pub fn name(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round-robin",
            Balance::LeastRequests => "least-requests",
            Balance::Hash => "hash",
        }
    }
}

/// One server of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// `http://host:port` or `https://host:port`.
    pub url: Uri,
    /// Its share of the requests, 1..=100 (default 1).
    pub weight: u32,
}

/// A group's active health check: `GET path` on every server each `interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The path asked (an answer 2xx or 3xx passes).
    pub path: String,
    /// Time between two probes of a server.
    pub interval: Duration,
    /// Time allowed for the probe's response head.
    pub timeout: Duration,
}

/// A group as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// Its name, as routes and metrics give it.
    pub name: String,
    /// Its servers (at least one).
    pub servers: Vec<ServerSpec>,
    /// How requests are spread.
    pub balance: Balance,
    /// Consecutive failures (connect errors, failed responses, timeouts) that eject a
    /// server; 0 turns passive health off.
    pub max_fails: u32,
    /// How long the first ejection lasts; each ejection in a row doubles it, up to
    /// [`MAX_BACKOFF_FACTOR`] times.
    pub fail_timeout: Duration,
    /// The active check, if any.
    pub probe: Option<ProbeSpec>,
}

/// The group name of the top-level `upstream` and of requests no route sends elsewhere.
pub const DEFAULT_GROUP: &str = "default";
/// The default [`GroupSpec::max_fails`].
pub const DEFAULT_MAX_FAILS: u32 = 3;
/// The default [`GroupSpec::fail_timeout`].
pub const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest back-off, in multiples of `fail_timeout`.
pub const MAX_BACKOFF_FACTOR: u32 = 8;
/// The default [`ProbeSpec::interval`].
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// The default [`ProbeSpec::timeout`].
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Other servers a request without a body and with an idempotent method is sent to
/// after a connection to one could not be made, at most.
pub const MAX_RETRIES: usize = 2;

impl GroupSpec {
    /// A group of one server with the defaults.
    pub fn single(name: &str, url: Uri) -> GroupSpec {
        GroupSpec {
            name: name.to_string(),
            servers: vec![ServerSpec { url, weight: 1 }],
            balance: Balance::RoundRobin,
            max_fails: DEFAULT_MAX_FAILS,
            fail_timeout: DEFAULT_FAIL_TIMEOUT,
            probe: None,
        }
    }
}

/// One server's address, health and counters, shared by the workers.
#[derive(Debug)]
pub(crate) struct Server {
    /// As configured.
    pub(crate) url: Uri,
    /// The URL's authority (the `Host` sent when the client gave none).
    pub(crate) authority: Authority,
    /// `host:port`, as the connector dials it (port 80, or 443 for `https://`, when the
    /// URL gives none).
    pub(crate) addr: String,
    /// `https://`: TLS to the server.
    pub(crate) tls: bool,
    pub(crate) weight: u32,
    health: Health,
    metrics: ServerMetrics,
    /// Requests sent whose response body has not ended (nor been dropped), striped per
    /// thread.
    in_flight: StripedGauge,
}

impl Server {
    fn new(
        url: &Uri,
        weight: u32,
        group: &str,
        metrics: &Metrics,
    ) -> Result<Server, UpstreamsError> {
        let authority = url
            .authority()
            .cloned()
            .ok_or_else(|| UpstreamsError(format!("{url} has no host")))?;
        let tls = match url.scheme_str() {
            None | Some("http") => false,
            Some("https") => true,
            Some(other) => {
                return Err(UpstreamsError(format!(
                    "{url}: scheme {other:?} is not supported (http:// or https://)"
                )));
            }
        };
        let addr = format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(if tls { 443 } else { 80 })
        );
        let metrics = metrics.upstream_server(group, &shown_url(url));
        metrics.up.set(1);
        Ok(Server {
            url: url.clone(),
            authority,
            addr,
            tls,
            weight: weight.max(1),
            health: Health::default(),
            metrics,
            in_flight: StripedGauge::default(),
        })
    }

    fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }
}

/// A URL as the metrics and logs show it: `http://host:port`, without the trailing `/`
/// `Uri` adds.
fn shown_url(u: &Uri) -> String {
    match (u.scheme_str(), u.authority()) {
        (Some(s), Some(a)) => format!("{s}://{a}"),
        _ => u.to_string(),
    }
}

/// A group and its servers' states.
pub(crate) struct Group {
    pub(crate) spec: GroupSpec,
    pub(crate) servers: Vec<Arc<Server>>,
    picker: Picker,
}

/// Why no server of a group was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllDown {
    /// The group.
    pub(crate) group: String,
    /// How long until the first ejected server is tried again (`None`: every server
    /// left fails its probe, or was already tried).
    pub(crate) retry_in: Option<Duration>,
}

impl std::fmt::Display for AllDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "upstream {:?}: no server is available", self.group)?;
        match self.retry_in {
            Some(d) => write!(
                f,
                " (every server is ejected after failures; the first is tried again in {:.1} s)",
                d.as_secs_f64()
            ),
            None => write!(
                f,
                " (every server is ejected, failing its probe, or was tried)"
            ),
        }
    }
}

/// Why a set of upstream groups cannot be built (a server URL without a host, a group
/// defined twice or without servers, a route naming no group).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UpstreamsError(pub String);

/// The configured upstreams: the top-level `upstream` (when it has a host: the group
/// `default` of one server), the named groups, and the group each route names (in the
/// limiter's route order; `None`: the default).
#[derive(Debug, Clone, Copy)]
pub struct UpstreamsConfig<'a> {
    /// The top-level `upstream`.
    pub upstream: &'a Uri,
    /// `[upstreams.NAME]`.
    pub groups: &'a [GroupSpec],
    /// Each route's `upstream`.
    pub routes: &'a [Option<String>],
}

/// Every group and the clock health is judged by. Shared by the workers (`Arc`); built
/// whole from the settings. Which group each route sends to is a [`RouteGroups`], built
/// per configuration ([`Upstreams::route_groups`]).
pub struct Upstreams {
    groups: Vec<Group>,
    default: Option<usize>,
    clock: Arc<dyn Clock>,
}

/// The group each route of one limiter sends to (one configuration's routes, resolved
/// against the groups of an [`Upstreams`]).
#[derive(Debug, Clone, Default)]
pub struct RouteGroups {
    /// Per limiter route (in the order they were added): its group, `None` for the
    /// default.
    routes: Vec<Option<usize>>,
    /// Whether some route names a group.
    named: bool,
    /// The group `default`, if defined.
    default: Option<usize>,
}

impl RouteGroups {
    /// Whether some route names a group (else every request goes to the default, and
    /// its route need not be matched).
    pub(crate) fn name_groups(&self) -> bool {
        self.named
    }

    /// The group of a request on limiter route `route` (`None`: no route matched).
    pub(crate) fn group_for(&self, route: Option<usize>) -> Option<usize> {
        route
            .and_then(|r| self.routes.get(r).copied().flatten())
            .or(self.default)
    }
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field(
                "groups",
                &self.groups.iter().map(|g| &g.spec.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// One worker's way to the groups' servers, shared by its requests' in-flight guards:
/// each worker has its own, so that its reference count is written by that worker alone.
pub(crate) struct Balancer {
    upstreams: Arc<Upstreams>,
}

impl Balancer {
    /// A worker's balancer over `upstreams`.
    pub(crate) fn new(upstreams: Arc<Upstreams>) -> Balancer {
        Balancer { upstreams }
    }

    /// The groups.
    pub(crate) fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// A server of group `g` for a request with policy key `key`, other than those in
    /// `tried`, among those taken now.
    pub(crate) fn pick(
        &self,
        g: usize,
        key: Option<&[u8]>,
        tried: &[usize],
    ) -> Result<usize, AllDown> {
        self.upstreams.pick(g, key, tried)
    }

    /// Count a request sent to server `s` of group `g` as in flight, until the returned
    /// guard is dropped (the response body holds it until it ends).
    pub(crate) fn start(self: &Arc<Self>, g: usize, s: usize) -> InFlight {
        self.upstreams.groups[g].servers[s].in_flight.inc();
        InFlight {
            balancer: self.clone(),
            group: g,
            server: s,
        }
    }
}

/// A request's place in an upstream server's in-flight count, given back when dropped.
pub(crate) struct InFlight {
    balancer: Arc<Balancer>,
    group: usize,
    server: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.balancer.upstreams.groups[self.group].servers[self.server]
            .in_flight
            .dec();
    }
}

impl Upstreams {
    /// The groups `config` gives, on the monotonic clock. `previous`: the state this one
    /// replaces; a server of the same group, URL and weight keeps its health.
    pub fn new(
        config: UpstreamsConfig<'_>,
        metrics: &Metrics,
        previous: Option<&Upstreams>,
    ) -> Result<Upstreams, UpstreamsError> {
        Self::with_clock(config, metrics, previous, Arc::new(MonotonicClock::new()))
    }

    /// As [`new`](Self::new), judging health by `clock` (the previous state's clock
    /// when there is one, so that its ejections keep their meaning).
    pub fn with_clock(
        config: UpstreamsConfig<'_>,
        metrics: &Metrics,
        previous: Option<&Upstreams>,
        clock: Arc<dyn Clock>,
    ) -> Result<Upstreams, UpstreamsError> {
        let clock = previous.map_or(clock, |p| p.clock.clone());
        let mut specs = Vec::new();
        if config.upstream.authority().is_some() {
            if config.groups.iter().any(|g| g.name == DEFAULT_GROUP) {
                return Err(UpstreamsError(format!(
                    "set the top-level upstream or [upstreams.{DEFAULT_GROUP}], not both"
                )));
            }
            specs.push(GroupSpec::single(DEFAULT_GROUP, config.upstream.clone()));
        }
        specs.extend(config.groups.iter().cloned());
        let mut groups: Vec<Group> = Vec::with_capacity(specs.len());
        for spec in specs {
            if spec.servers.is_empty() {
                return Err(UpstreamsError(format!(
                    "upstream {:?} has no servers",
                    spec.name
                )));
            }
            if groups.iter().any(|g| g.spec.name == spec.name) {
                return Err(UpstreamsError(format!(
                    "upstream {:?} is defined twice",
                    spec.name
                )));
            }
            let old = previous.and_then(|p| p.groups.iter().find(|g| g.spec.name == spec.name));
            let mut servers = Vec::with_capacity(spec.servers.len());
            for s in &spec.servers {
                let kept = old.and_then(|g| {
                    g.servers
                        .iter()
                        .find(|o| o.url == s.url && o.weight == s.weight.max(1))
                });
                servers.push(match kept {
                    Some(k) => k.clone(),
                    None => Arc::new(Server::new(&s.url, s.weight, &spec.name, metrics)?),
                });
            }
            let picker = Picker::new(spec.balance, &servers);
            groups.push(Group {
                spec,
                servers,
                picker,
            });
        }
        let default = groups.iter().position(|g| g.spec.name == DEFAULT_GROUP);
        let upstreams = Upstreams {
            groups,
            default,
            clock,
        };
        // the routes given must name defined groups
        upstreams.route_groups(config.routes)?;
        Ok(upstreams)
    }

    /// The group each of `routes` (a configuration's `route.upstream`, in the limiter's
    /// route order; `None`: the default) sends to; an error names a route whose group is
    /// not one of these.
    pub fn route_groups(&self, routes: &[Option<String>]) -> Result<RouteGroups, UpstreamsError> {
        let find = |name: &str| self.groups.iter().position(|g| g.spec.name == name);
        let mut resolved = Vec::with_capacity(routes.len());
        for (i, r) in routes.iter().enumerate() {
            resolved.push(match r {
                None => None,
                Some(name) => Some(find(name).ok_or_else(|| {
                    UpstreamsError(format!(
                        "route[{i}] names upstream {name:?}, which is not defined"
                    ))
                })?),
            });
        }
        Ok(RouteGroups {
            named: resolved.iter().any(Option::is_some),
            routes: resolved,
            default: self.default,
        })
    }

    /// Whether some server of some group is `https://`.
    pub fn any_tls(&self) -> bool {
        self.groups.iter().flat_map(|g| &g.servers).any(|s| s.tls)
    }

    /// Whether any group is defined (a proxy with none has nowhere to send requests).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub(crate) fn groups(&self) -> &[Group] {
        &self.groups
    }

    pub(crate) fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Whether group `g` balances by the policy key (so the caller extracts it).
    pub(crate) fn wants_key(&self, g: usize) -> bool {
        self.groups[g].spec.balance == Balance::Hash && self.groups[g].servers.len() > 1
    }

    /// A server of group `g` for a request with policy key `key`, other than those in
    /// `tried`, among those taken now. The clock is read only when a server considered
    /// was ever ejected.
    fn pick(&self, g: usize, key: Option<&[u8]>, tried: &[usize]) -> Result<usize, AllDown> {
        let group = &self.groups[g];
        // read once, when first needed
        let now: Cell<Option<Nanos>> = Cell::new(None);
        let usable = |i: usize| {
            !tried.contains(&i)
                && group.servers[i].health.available_with(|| match now.get() {
                    Some(t) => t,
                    None => {
                        let t = self.now();
                        now.set(Some(t));
                        t
                    }
                })
        };
        group
            .picker
            .pick(&group.servers, key, usable)
            .ok_or_else(|| {
                let now = self.now();
                AllDown {
                    group: group.spec.name.clone(),
                    retry_in: group
                        .servers
                        .iter()
                        .enumerate()
                        .filter(|(i, s)| !tried.contains(i) && !s.health.probe_failing())
                        .filter_map(|(_, s)| s.health.ejected_for(now))
                        .min(),
                }
            })
    }

    /// The server `s` of group `g`.
    pub(crate) fn server(&self, g: usize, s: usize) -> &Server {
        &self.groups[g].servers[s]
    }

    /// Record what server `s` of group `g` did with a request: `Ok(status)` for a
    /// response head (a success for health, whatever the status), `Err(true)` for a
    /// failure of the server's (connect error, failed response, timeout), `Err(false)`
    /// for a failure that was the client's (its body stalled or was malformed).
    pub(crate) fn record(&self, g: usize, s: usize, outcome: Result<u16, bool>) {
        let group = &self.groups[g];
        let server = &group.servers[s];
        server.metrics.request(outcome.ok());
        match outcome {
            Ok(_) => server.health.success(),
            Err(false) => {}
            Err(true) => {
                // a group of one is never ejected: there is nowhere else to go
                if group.servers.len() < 2 {
                    return;
                }
                let backoff = server.health.failure(
                    self.now(),
                    group.spec.max_fails,
                    group.spec.fail_timeout,
                );
                if let Some(backoff) = backoff {
                    server.metrics.ejections.inc();
                    server.metrics.up.set(0);
                    tracing::warn!(upstream = %group.spec.name, server = %shown_url(&server.url), ?backoff, "upstream server ejected after consecutive failures");
                }
            }
        }
    }

    /// Bring the `floodgate_upstream_up` and `floodgate_upstream_in_flight` gauges to the
    /// servers' states now (an ejection's end is seen here, not by a timer; the request
    /// path touches only the servers' own counts).
    pub fn refresh_gauges(&self) {
        let now = self.now();
        for g in &self.groups {
            for s in &g.servers {
                s.metrics.up.set(i64::from(s.health.available(now)));
                s.metrics.in_flight.set(s.in_flight());
            }
        }
    }

    /// Each group's servers as JSON, for the admin API and page: URL, weight, `up`,
    /// requests in flight, consecutive failures, seconds left of an ejection, the probe's
    /// verdict, and the counts of `floodgate_upstream_requests_total` (by status class,
    /// their sum, and `failures`: those with no response head, class `error`) and of
    /// `floodgate_upstream_ejections_total`.
    pub fn status(&self) -> serde_json::Value {
        let now = self.now();
        let groups: serde_json::Map<String, serde_json::Value> = self
            .groups
            .iter()
            .map(|g| {
                let servers: Vec<serde_json::Value> = g
                    .servers
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "url": shown_url(&s.url),
                            "weight": s.weight,
                            "up": s.health.available(now),
                            "in_flight": s.in_flight(),
                            "consecutive_failures": s.health.fails(),
                            "ejected_for_seconds": s.health.ejected_for(now).map(|d| d.as_secs_f64()),
                            "probe_failing": s.health.probe_failing(),
                            "requests": requests(&s.metrics),
                            "requests_total": UPSTREAM_CLASSES.iter().map(|c| s.metrics.request_count(c)).sum::<u64>(),
                            "failures": s.metrics.request_count("error"),
                            "ejections": s.metrics.ejections.get(),
                        })
                    })
                    .collect();
                (
                    g.spec.name.clone(),
                    serde_json::json!({ "balance": g.spec.balance.name(), "servers": servers }),
                )
            })
            .collect();
        serde_json::Value::Object(groups)
    }
}

/// A server's requests by status class (`1xx` ... `5xx`, `error`), as a JSON object.
fn requests(m: &ServerMetrics) -> serde_json::Value {
    UPSTREAM_CLASSES
        .iter()
        .map(|c| ((*c).to_string(), m.request_count(c).into()))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[cfg(test)]
mod tests;
