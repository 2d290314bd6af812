//! The limiter every front door shares: the served configuration generation, the check
//! of one request, and the reload that swaps generations without resetting the counters
//! of unchanged rules.
//!
//! The decisions themselves are floodgate-engine's: each limit is an engine policy
//! decided by an engine store ([`floodgate_engine::LocalStore`] in process,
//! [`floodgate_engine::RedisDecisionStore`], [`floodgate_engine::HybridStore`] for the
//! fleet `hybrid` strategy), store faults follow the engine's fault policy, and the
//! headers are the engine's rendering. This module and its parts add what is the
//! server's own:
//!
//! * [`matching`]: Envoy's descriptor matching (rule trees, precedence, limiter keys);
//! * [`generation`]: a configuration generation and how a reload takes over its state;
//! * [`decide`]: the request's limits through the store, all-or-nothing, shadow mode,
//!   blocking limits, the fault policy;
//! * rendering to each door: [`crate::headers`] (HTTP fields), [`crate::grpc`],
//!   [`crate::http`] (JSON); `CL.THROTTLE` ([`crate::resp`]) has its own store.

pub mod decide;
pub mod error;
pub mod generation;
pub mod limit;
pub mod matching;
pub mod settle;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use floodgate_core::Decision;
use floodgate_engine::StoreFailure;
use floodgate_engine::admin::{AdminReply, AdminRequest, Peek, PeekError};
use floodgate_engine::metrics::{DecisionOutcome, RequestOutcome};

use crate::config::{Rules, UnknownDomain};
use crate::headers;
use crate::metrics::Metrics;

pub use decide::FaultPolicy;
pub use error::CheckError;
pub use generation::{Generation, StoreHandle};
pub use limit::LimitInst;
pub use matching::{DescriptorIn, Entry};

use decide::{Decided, Item, decide};
use matching::{RuleCounters, push_values};

/// What matched a descriptor (ordered: a descriptor that several rules reach is what
/// the greatest says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Matched {
    /// No rule: OK, no limit (Envoy's behaviour).
    NoRule,
    /// An `unlimited` rule.
    Unlimited,
    /// Limited.
    Limited,
}

/// The answer for one descriptor.
#[derive(Debug, Clone)]
pub struct Status {
    /// Denied by an enforced limit.
    pub over_limit: bool,
    /// What matched.
    pub matched: Matched,
    /// The rule is in shadow mode (its denials are counted, not enforced).
    pub shadow: bool,
    /// Every limit checked with its decision, in config order; replaced limits are absent.
    pub limits: Vec<(Arc<LimitInst>, Decision)>,
}

impl Status {
    fn plain(matched: Matched, shadow: bool) -> Status {
        Status {
            over_limit: false,
            matched,
            shadow,
            limits: Vec::new(),
        }
    }

    /// One status of a descriptor that several rules reached (a rule of the tree and
    /// selectors): over limit when any is, in shadow mode when all are, every limit.
    fn merge(mut self, other: Status) -> Status {
        self.over_limit |= other.over_limit;
        self.matched = self.matched.max(other.matched);
        self.shadow &= other.shadow;
        self.limits.extend(other.limits);
        self
    }

    /// The limit that binds (the denied one with the longest retry, else the one with the
    /// fewest remaining).
    pub fn binding(&self) -> Option<&(Arc<LimitInst>, Decision)> {
        floodgate_engine::headers::binding(&self.limits)
    }
}

/// The answer for one request.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Over limit as a whole (some descriptor's enforced limit denied it).
    pub over_limit: bool,
    /// One per descriptor, in request order.
    pub statuses: Vec<Status>,
    /// Headers a proxy should add to its response.
    pub headers: Vec<(&'static str, String)>,
    /// The largest forwarding delay asked by a delaying leaky queue (zero otherwise).
    pub delay: Duration,
    /// The store failed and the fault policy decided.
    pub fault: Option<StoreFailure>,
}

impl Outcome {
    /// What `floodgate_requests_total` counts this request as.
    pub fn request_outcome(&self) -> RequestOutcome {
        match (self.fault, self.over_limit) {
            (Some(StoreFailure::Allow), _) => RequestOutcome::StoreErrorAllowed,
            (Some(StoreFailure::Deny), _) => RequestOutcome::StoreErrorDenied,
            (None, true) => RequestOutcome::Rejected,
            (None, false) if !self.delay.is_zero() => RequestOutcome::Delayed,
            (None, false) => RequestOutcome::Passed,
        }
    }
}

/// A `max_in_flight` rule reached by one descriptor of a request ([`Engine::in_flight_rules`]).
#[derive(Debug, Clone)]
pub struct InFlightRule {
    /// The descriptor's position in the request.
    pub desc: usize,
    /// The lease key on the server's lease store (`/v1/release` takes it back):
    /// `rule|DOMAIN|RULE#in-flight|["VALUE",...]`, one key per rule and request values.
    pub key: String,
    /// The rule as an engine in-flight policy: `N` and the TTL in its `in_flight`, the
    /// name and `q` of its `RateLimit-Policy` member (`qu="concurrent-requests"`).
    pub policy: Arc<floodgate_engine::PolicyInfo>,
}

/// The shared limiter: the served generation and the store.
#[derive(Debug)]
pub struct Engine {
    current: ArcSwap<Generation>,
    store: StoreHandle,
    fault: FaultPolicy,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
    reload_lock: std::sync::Mutex<()>,
    /// Reservations made over the wire, not settled yet.
    reservations: settle::Reservations,
}

/// Count the decisions of one descriptor's limits under their policies, as the layer
/// does (a denied request's admitted decisions are cost-0 views and not counted), and
/// record each for its key (the values, without the limit's keyspace prefix).
fn count_decisions(items: &[Item], admitted: bool) {
    for it in items {
        let d = &it.decision;
        if !admitted && d.allowed {
            continue;
        }
        let outcome = match (it.shadow, d.allowed, d.delay.is_zero()) {
            (false, false, _) => DecisionOutcome::Rejected,
            (true, false, _) => DecisionOutcome::RejectedDryRun,
            (false, true, false) => DecisionOutcome::Delayed,
            (true, true, false) => DecisionOutcome::DelayedDryRun,
            (_, true, true) => DecisionOutcome::Passed,
        };
        it.limit.counters.count(outcome);
        let key = it
            .key
            .strip_prefix(it.limit.id.as_bytes())
            .and_then(|k| k.strip_prefix(b"|"))
            .unwrap_or(&it.key);
        it.limit.insight.record(key, outcome, it.cost);
    }
}

impl Peek for Engine {
    fn peek<'a>(
        &'a self,
        policy: &'a str,
        key: &'a [u8],
    ) -> floodgate_engine::store::BoxFuture<'a, Result<Decision, PeekError>> {
        Box::pin(Engine::peek(self, policy, key))
    }

    fn adaptive(&self) -> Vec<floodgate_engine::adaptive::AdaptiveView> {
        self.current()
            .adaptive_limiters()
            .map(|l| l.view())
            .collect()
    }
}

impl Engine {
    /// An engine serving `rules` on `store`; a store fault is decided by `fault`.
    pub fn new(
        rules: Rules,
        store: StoreHandle,
        fault: FaultPolicy,
        metrics: Arc<Metrics>,
    ) -> Result<Engine, String> {
        let first = generation::build(rules, &store, None, &metrics, 1)?;
        metrics.insight.reloaded(1, true, "loaded at startup");
        metrics.generation.set(1);
        metrics.set_store(first.store.clone(), first.store_names.clone());
        Ok(Engine {
            current: ArcSwap::from_pointee(first),
            store,
            fault,
            metrics,
            next_id: AtomicU64::new(2),
            reload_lock: std::sync::Mutex::new(()),
            reservations: settle::Reservations::default(),
        })
    }

    /// The generation being served.
    pub fn current(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The store.
    pub fn store(&self) -> &StoreHandle {
        &self.store
    }

    /// Build a generation from `rules`, taking over the limiters of the current one, and
    /// serve it. In-flight requests finish on the generation they started with.
    pub fn reload(&self, rules: Rules) -> Result<u64, String> {
        let _one_at_a_time = self.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let prev = self.current.load_full();
        let next = generation::build(rules, &self.store, Some(&prev), &self.metrics, id)?;
        self.metrics
            .set_store(next.store.clone(), next.store_names.clone());
        self.current.store(Arc::new(next));
        self.metrics.generation.set(id as i64);
        Ok(id)
    }

    /// The `max_in_flight` rules `descriptors` of a cost above 0 reach in `domain` (none
    /// for an unknown domain), and what matched each descriptor. Takes no lease and
    /// decides nothing.
    pub fn in_flight_rules(
        &self,
        domain: &str,
        descriptors: &[DescriptorIn<'_>],
    ) -> (Vec<InFlightRule>, Vec<Matched>) {
        let generation = self.current.load_full();
        let Some(tree) = generation.domains.get(domain) else {
            return (Vec::new(), vec![Matched::NoRule; descriptors.len()]);
        };
        let mut rules = Vec::new();
        let mut matched = vec![Matched::NoRule; descriptors.len()];
        for hit in tree.hits(descriptors) {
            let node = &tree.nodes[hit.node];
            let m = if node.unlimited {
                Matched::Unlimited
            } else {
                Matched::Limited
            };
            matched[hit.desc] = matched[hit.desc].max(m);
            // a cost-0 descriptor peeks: it consumes nothing, so it takes no lease
            if let Some(policy) = &node.in_flight
                && descriptors[hit.desc].cost > 0
            {
                let values: Vec<&str> = hit.values.iter().map(|e| e.value).collect();
                let values = serde_json::to_string(&values).unwrap_or_default();
                rules.push(InFlightRule {
                    desc: hit.desc,
                    key: format!("rule|{domain}|{}|{values}", policy.name),
                    policy: policy.clone(),
                });
            }
        }
        (rules, matched)
    }

    /// Decide one request: `domain` and its descriptors, matched to limits and decided
    /// all-or-nothing through the generation's store (rates only: a rule's
    /// `max_in_flight` is the HTTP door's, [`crate::http::inflight`]).
    pub async fn decide_descriptors(
        &self,
        domain: &str,
        descriptors: &[DescriptorIn<'_>],
    ) -> Result<Outcome, CheckError> {
        let generation = self.current.load_full();
        let g = &*generation;
        error::validate(domain, descriptors, &g.rules.caps)?;
        let Some(tree) = g.domains.get(domain) else {
            g.unknown_domain.inc();
            return match g.rules.unknown_domain {
                UnknownDomain::Allow => Ok(Outcome {
                    over_limit: false,
                    statuses: descriptors
                        .iter()
                        .map(|_| Status::plain(Matched::NoRule, false))
                        .collect(),
                    headers: Vec::new(),
                    delay: Duration::ZERO,
                    fault: None,
                }),
                UnknownDomain::Error => Err(CheckError::UnknownDomain {
                    domain: domain.to_string(),
                    known: g.domains.keys().cloned().collect::<Vec<_>>().join(", "),
                }),
            };
        };

        let hits = tree.hits(descriptors);
        let replaced: HashSet<&str> = if tree.has_replaces {
            hits.iter()
                .flat_map(|h| tree.nodes[h.node].limits.iter())
                .flat_map(|l| l.def.replaces.iter().map(String::as_str))
                .collect()
        } else {
            HashSet::new()
        };
        let mut items = Vec::new();
        for (slot, hit) in hits.iter().enumerate() {
            let node = &tree.nodes[hit.node];
            for l in &node.limits {
                if l.def
                    .explicit_name
                    .as_deref()
                    .is_some_and(|n| replaced.contains(n))
                {
                    continue;
                }
                let key = l.key(g.shared_keyspace, |k| push_values(k, &hit.values));
                let cost = descriptors[hit.desc].cost;
                items.push(Item::new(slot, l.clone(), key, cost, node.shadow));
            }
        }
        let decided = if items.is_empty() {
            Decided {
                admitted: true,
                fault: None,
            }
        } else {
            decide(g.stores(), &self.fault, &self.metrics, &mut items).await?
        };
        count_decisions(&items, decided.admitted);

        let mut by_hit: Vec<Vec<(Arc<LimitInst>, Decision)>> =
            (0..hits.len()).map(|_| Vec::new()).collect();
        for it in items {
            by_hit[it.desc].push((it.limit, it.decision));
        }
        let mut by_desc: Vec<Option<Status>> = vec![None; descriptors.len()];
        let mut delay = Duration::ZERO;
        for (hit, limits) in hits.iter().zip(by_hit) {
            let (status, hit_delay) = self.hit_status(tree, hit, &descriptors[hit.desc], limits);
            delay = delay.max(hit_delay);
            let merged = match by_desc[hit.desc].take() {
                None => status,
                Some(s) => s.merge(status),
            };
            by_desc[hit.desc] = Some(merged);
        }
        let statuses: Vec<Status> = by_desc
            .into_iter()
            .map(|s| {
                s.unwrap_or_else(|| {
                    tree.no_rule.inc();
                    Status::plain(Matched::NoRule, false)
                })
            })
            .collect();
        let over_limit = statuses.iter().any(|s| s.over_limit);
        let mut applied: Vec<(&floodgate_engine::PolicyInfo, Decision)> = Vec::new();
        for s in statuses.iter().filter(|s| !s.shadow) {
            applied.extend(s.limits.iter().map(|(l, d)| (&l.policy, *d)));
        }
        let headers = headers::render(&g.rules.headers, &applied, over_limit);
        Ok(Outcome {
            over_limit,
            statuses,
            headers,
            delay: if over_limit { Duration::ZERO } else { delay },
            fault: decided.fault,
        })
    }

    /// The status of one node a request reached, with its limits' decisions, counted on
    /// the node's counters; and the forwarding delay it asks (zero in shadow mode).
    fn hit_status(
        &self,
        tree: &matching::DomainTree,
        hit: &matching::Hit<'_, '_>,
        d: &DescriptorIn<'_>,
        limits: Vec<(Arc<LimitInst>, Decision)>,
    ) -> (Status, Duration) {
        let n = &tree.nodes[hit.node];
        let dynamic = hit
            .walked
            .then(|| tree.label(hit.node, &d.entries))
            .flatten()
            .map(|label| {
                RuleCounters::new(&self.metrics, &tree.name, &label, n.unlimited, n.shadow)
            });
        let counters = dynamic.as_ref().unwrap_or(&n.counters);
        if n.unlimited {
            counters.unlimited.inc();
            return (Status::plain(Matched::Unlimited, n.shadow), Duration::ZERO);
        }
        if limits.is_empty() && n.limits.is_empty() {
            tree.no_rule.inc();
            return (Status::plain(Matched::NoRule, false), Duration::ZERO);
        }
        let denied = limits.iter().any(|(_, d)| !d.allowed);
        let over = denied && !n.shadow;
        if over {
            counters.rejected.inc();
        } else if denied {
            counters.rejected_dry_run.inc();
        } else {
            counters.passed.inc();
            let near = limits.iter().any(|(_, d)| {
                let used = d.limit.saturating_sub(d.remaining) as u128;
                d.limit > 0 && used * 5 >= d.limit as u128 * 4
            });
            if near {
                counters.near.inc();
            }
        }
        let delay = if n.shadow {
            Duration::ZERO
        } else {
            limits
                .iter()
                .map(|(_, d)| d.delay)
                .max()
                .unwrap_or_default()
        };
        let status = Status {
            over_limit: over,
            matched: Matched::Limited,
            shadow: n.shadow,
            limits,
        };
        (status, delay)
    }

    /// What a request of cost 1 for `key` would be told by the limit named `policy` (a
    /// named policy first, else the first limit of that name, whose keys are the
    /// descriptor values as the admin API lists them), as a check costing 0 sees it:
    /// consuming nothing and creating no key, on any store ([`DecisionStore::peek`]).
    ///
    /// [`DecisionStore::peek`]: floodgate_engine::DecisionStore::peek
    pub async fn peek(&self, policy: &str, key: &[u8]) -> Result<Decision, PeekError> {
        let g = self.current.load_full();
        let limit = g.policies.get(policy).or_else(|| {
            let mut named: Vec<&Arc<LimitInst>> =
                g.limits().filter(|l| l.policy.name == policy).collect();
            named.sort_by(|a, b| a.id.cmp(&b.id));
            named.into_iter().next()
        });
        let Some(limit) = limit.filter(|l| !l.blocks()) else {
            let mut known: Vec<&str> = g.limits().map(|l| l.policy.name.as_str()).collect();
            known.sort_unstable();
            known.dedup();
            return Err(PeekError::UnknownPolicy {
                policy: policy.chars().take(128).collect(),
                known: known.join(", "),
            });
        };
        let k = limit.key(g.shared_keyspace, |k| k.extend_from_slice(key));
        Ok(g.store.peek(&limit.policy, &k).await?)
    }

    /// Answer an admin API request (`/admin...`; `None` for other paths).
    pub async fn admin(&self, req: &AdminRequest<'_>) -> Option<AdminReply> {
        floodgate_engine::admin::respond(&self.metrics.insight, self, req).await
    }

    /// Check `key` under the named policy (the HTTP API's key form).
    pub async fn check_policy(
        &self,
        policy: &str,
        key: &str,
        cost: u64,
    ) -> Result<Outcome, CheckError> {
        let generation = self.current.load_full();
        let g = &*generation;
        let Some(limit) = g.policies.get(policy) else {
            return Err(CheckError::UnknownPolicy {
                policy: policy.to_string(),
                known: g.policies.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        };
        if key.len() > g.rules.caps.max_value_bytes {
            return Err(CheckError::TooLong {
                index: 0,
                entry: 0,
                what: "key",
                len: key.len(),
                max: g.rules.caps.max_value_bytes,
            });
        }
        let k = limit.key(g.shared_keyspace, |k| k.extend_from_slice(key.as_bytes()));
        let mut items = vec![Item::new(0, limit.clone(), k, cost, false)];
        let decided = decide(g.stores(), &self.fault, &self.metrics, &mut items).await?;
        count_decisions(&items, decided.admitted);
        let d = items[0].decision;
        let counters = &g.policy_counters[policy];
        if d.allowed {
            counters.passed.inc();
        } else {
            counters.rejected.inc();
        }
        let over_limit = !d.allowed;
        let headers = headers::render(&g.rules.headers, &[(&limit.policy, d)], over_limit);
        Ok(Outcome {
            over_limit,
            statuses: vec![Status {
                over_limit,
                matched: Matched::Limited,
                shadow: false,
                limits: vec![(limit.clone(), d)],
            }],
            headers,
            delay: if over_limit { Duration::ZERO } else { d.delay },
            fault: decided.fault,
        })
    }
}
