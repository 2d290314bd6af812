//! The limiter every front door shares: the served config generation (matching trees and
//! limiters), the check of one request, and the reload that swaps generations without
//! resetting the counters of unchanged rules.
//!
//! # Matching (Envoy ratelimit's rules)
//! A request descriptor is a list of `(key, value)` entries. Its entries walk the domain's
//! rule tree one level each: at each level the rule with the same key and the same value
//! wins, then a rule whose value ends in `*` and prefixes the value, then a rule with the
//! key and no value. The descriptor's limits are those of the rule reached by its *last*
//! entry; a descriptor longer or shorter than any rule path gets no limit (status OK).
//! The limiter key is the descriptor's values, so a rule without a value (or with a
//! wildcard) limits each value on its own.
//!
//! # All-or-nothing
//! Every enforced limit of every descriptor of one request is decided in one all-or-nothing
//! step: a request denied by one limit consumes from none (Envoy's own service charges all
//! of them). In process that is one [`check_all`]; with Redis one atomic round trip for
//! them all ([`floodgate_redis::multi::check_all`]; on a Redis Cluster a dry run and a
//! charge per limit). Shadow-mode limits are charged on their own and never deny. With
//! the fleet `hybrid` strategy, units admitted before a denial in the same request
//! go back to this server's lease, so the request consumes nothing locally usable either.
//!
//! # Reload
//! A limit is identified by its domain, rule path and name (or position). A new
//! generation takes over the limiter of the same identity from the old one: unchanged
//! limits keep every key's state; a changed limit keeps the state and applies the new
//! parameters from the next request (a change of algorithm starts its keys fresh).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use floodgate_core::multi::{Check, check_all};
use floodgate_core::ratelimit_fields::Advertised;
use floodgate_core::{Algorithm, AnyAlgorithm, Clock, Decision, KeyedLimiter, Nanos, WallClock};
use floodgate_dist::HybridNode;
use floodgate_dist::hybrid::{Finish, Step};
use floodgate_redis::{Fault, RedisLimiter, RedisStore, Source, multi};
use prometheus_client::metrics::counter::Counter;
use thiserror::Error;

use crate::config::{DescriptorDef, LimitDef, Rules, UnknownDomain, ValueMatch};
use crate::headers;
use crate::metrics::Metrics;

/// A request that cannot be checked. Each variant says what was wrong.
#[derive(Debug, Error)]
pub enum CheckError {
    /// No rule names this domain (and `unknown_domain: error`).
    #[error("unknown domain {domain:?}; configured domains: {known}")]
    UnknownDomain {
        /// The domain asked.
        domain: String,
        /// The configured ones, comma-separated.
        known: String,
    },
    /// The domain is empty.
    #[error("the domain must not be empty")]
    EmptyDomain,
    /// No descriptors.
    #[error("the descriptor list must not be empty")]
    NoDescriptors,
    /// Too many descriptors.
    #[error("{count} descriptors is more than the maximum of {max} (limits.max_descriptors)")]
    TooManyDescriptors {
        /// Descriptors sent.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A descriptor without entries.
    #[error("descriptor {index} has no entries")]
    EmptyDescriptor {
        /// Its position.
        index: usize,
    },
    /// Too many entries in a descriptor.
    #[error(
        "descriptor {index} has {count} entries, more than the maximum of {max} (limits.max_entries)"
    )]
    TooManyEntries {
        /// Its position.
        index: usize,
        /// Entries sent.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// An entry with an empty key.
    #[error("descriptor {index} entry {entry}: the key must not be empty")]
    EmptyKey {
        /// Descriptor position.
        index: usize,
        /// Entry position.
        entry: usize,
    },
    /// A key or value above the size cap.
    #[error(
        "descriptor {index} entry {entry}: the {what} is {len} bytes, more than the maximum of {max} (limits.max_value_bytes)"
    )]
    TooLong {
        /// Descriptor position.
        index: usize,
        /// Entry position.
        entry: usize,
        /// `key` or `value`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The HTTP `policy` form names no configured policy.
    #[error("unknown policy {policy:?}; configured policies: {known}")]
    UnknownPolicy {
        /// The name asked.
        policy: String,
        /// The configured ones.
        known: String,
    },
    /// The store refused the call for a reason other than a fault (e.g. key too long).
    #[error("store: {0}")]
    Store(#[from] floodgate_redis::Error),
}

impl CheckError {
    /// Whether this is a lookup miss (unknown domain or policy) rather than bad input.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            CheckError::UnknownDomain { .. } | CheckError::UnknownPolicy { .. }
        )
    }

    /// Whether the fault is the server's, not the caller's.
    pub fn is_internal(&self) -> bool {
        matches!(self, CheckError::Store(_))
    }
}

/// Where state lives, as running.
#[derive(Debug, Clone)]
pub enum StoreHandle {
    /// In-process, at most `max_keys` keys per limit.
    Memory {
        /// Keys per limit.
        max_keys: usize,
        /// Fleet `local` strategy: enforce `1/share` of every limit (1: the whole limit).
        share: usize,
    },
    /// Redis.
    Redis(Arc<RedisStore>),
}

/// A limiter of one limit.
#[derive(Debug)]
enum Backend {
    /// `requests_per_unit: 0`: every request with a cost is denied.
    Block,
    Memory(Arc<KeyedLimiter<String, AnyAlgorithm>>),
    Redis(Arc<RedisLimiter>),
}

/// One configured limit with its limiter.
#[derive(Debug)]
pub struct LimitInst {
    /// The limit as configured.
    pub def: LimitDef,
    /// Identity across reloads: `domain|rule path|name or #position`.
    pub id: String,
    backend: Backend,
}

impl LimitInst {
    /// Keys held in process (0 for Redis and block limits).
    pub fn keys(&self) -> usize {
        match &self.backend {
            Backend::Memory(l) => l.len(),
            _ => 0,
        }
    }
}

#[derive(Debug, Default)]
struct Level {
    keys: HashMap<String, Branch>,
}

#[derive(Debug, Default)]
struct Branch {
    exact: HashMap<String, usize>,
    prefixes: Vec<(String, usize)>,
    any: Option<usize>,
}

#[derive(Debug)]
struct Node {
    value: ValueMatch,
    limits: Vec<Arc<LimitInst>>,
    unlimited: bool,
    shadow: bool,
    detailed_metric: bool,
    value_to_metric: bool,
    children: Level,
    counters: NodeCounters,
}

#[derive(Debug, Clone)]
struct NodeCounters {
    ok: Counter,
    over: Counter,
    shadow_over: Counter,
    unlimited: Counter,
    near: Counter,
}

impl NodeCounters {
    /// The counters of a rule; only the outcomes the rule can have are registered (the
    /// others are detached counters), so `/metrics` lists no impossible series.
    fn new(m: &Metrics, domain: &str, label: &str, unlimited: bool, shadow: bool) -> NodeCounters {
        let reg = |on: bool, outcome: &'static str| {
            if on {
                m.decision_counter(domain, label, outcome)
            } else {
                Counter::default()
            }
        };
        NodeCounters {
            ok: reg(!unlimited, "ok"),
            over: reg(!unlimited && !shadow, "over_limit"),
            shadow_over: reg(!unlimited && shadow, "shadow_over_limit"),
            unlimited: reg(unlimited, "unlimited"),
            near: if unlimited {
                Counter::default()
            } else {
                m.near_limit_counter(domain, label)
            },
        }
    }
}

#[derive(Debug)]
struct DomainTree {
    name: String,
    root: Level,
    nodes: Vec<Node>,
    no_rule: Counter,
    has_replaces: bool,
    dynamic_labels: bool,
}

impl Branch {
    /// The node a descriptor value selects, with Envoy's precedence: an exact value, then
    /// a prefix, then the rule without a value.
    fn pick(&self, value: &str) -> Option<usize> {
        self.exact
            .get(value)
            .copied()
            .or_else(|| {
                self.prefixes
                    .iter()
                    .find(|(p, _)| value.starts_with(p.as_str()))
                    .map(|(_, i)| *i)
            })
            .or(self.any)
    }
}

impl DomainTree {
    /// The node reached by the last entry, with Envoy's precedence at each level.
    fn find(&self, entries: &[Entry<'_>]) -> Option<usize> {
        let mut level = &self.root;
        let mut at = None;
        for e in entries {
            let branch = level.keys.get(e.key)?;
            let idx = branch.pick(e.value)?;
            at = Some(idx);
            level = &self.nodes[idx].children;
        }
        at
    }

    /// The metric label of a request that reached `idx`, honouring `detailed_metric` and
    /// `value_to_metric` (Envoy: the value joins the label).
    fn label(&self, idx: usize, entries: &[Entry<'_>]) -> Option<String> {
        if !self.dynamic_labels {
            return None;
        }
        let detailed = self.nodes[idx].detailed_metric;
        let mut level = &self.root;
        let mut label = String::new();
        let mut dynamic = detailed;
        for e in entries {
            let branch = level.keys.get(e.key)?;
            let i = branch.pick(e.value)?;
            let n = &self.nodes[i];
            if !label.is_empty() {
                label.push('.');
            }
            if detailed || n.value_to_metric || matches!(n.value, ValueMatch::Exact(_)) {
                dynamic |= n.value_to_metric;
                let _ = write!(label, "{}={}", e.key, e.value);
            } else {
                label.push_str(e.key);
            }
            level = &n.children;
        }
        dynamic.then_some(label)
    }
}

/// One configuration generation: what a request is checked against.
#[derive(Debug)]
pub struct Generation {
    /// 1 at startup, +1 per successful reload.
    pub id: u64,
    /// The rules it was built from.
    pub rules: Rules,
    domains: HashMap<String, DomainTree>,
    policies: BTreeMap<String, Arc<LimitInst>>,
    policy_counters: HashMap<String, NodeCounters>,
    limits: HashMap<String, Arc<LimitInst>>,
    unknown_domain: Counter,
}

impl Generation {
    /// Every limit, by identity.
    pub fn limits(&self) -> impl Iterator<Item = &Arc<LimitInst>> {
        self.limits.values()
    }
}

/// One entry of a request descriptor.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Key.
    pub key: &'a str,
    /// Value.
    pub value: &'a str,
}

/// One request descriptor: its entries and its cost (Envoy's `hits_addend`).
#[derive(Debug, Clone)]
pub struct DescriptorIn<'a> {
    /// Entries, outermost first.
    pub entries: Vec<Entry<'a>>,
    /// Units this request costs under this descriptor's limits (0 peeks).
    pub cost: u64,
}

/// What matched a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// The limit that binds (the denied one with the longest retry, else the one with the
    /// fewest remaining).
    pub fn binding(&self) -> Option<&(Arc<LimitInst>, Decision)> {
        headers::binding(&self.limits)
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
    pub delay: std::time::Duration,
}

/// The fleet `hybrid` strategy's state: leases per limiter key.
#[derive(Debug)]
struct Hybrid {
    node: std::sync::Mutex<HybridNode<String>>,
    lease_admits: Counter,
    round_trips: Counter,
}

impl Hybrid {
    fn node(&self) -> std::sync::MutexGuard<'_, HybridNode<String>> {
        self.node.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The shared limiter: the served generation and the store.
#[derive(Debug)]
pub struct Engine {
    current: ArcSwap<Generation>,
    store: StoreHandle,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
    reload_lock: std::sync::Mutex<()>,
    hybrid: Option<Hybrid>,
}

fn never(cost: u64) -> Decision {
    if cost == 0 {
        Decision::allow(0, 0, std::time::Duration::ZERO)
    } else {
        Decision::never(0, cost, 0, std::time::Duration::ZERO)
    }
}

/// Append the values of `entries` to `out`, length-prefixed (unambiguous for any bytes).
fn push_values(out: &mut String, entries: &[Entry<'_>]) {
    for e in entries {
        let _ = write!(out, "{}:", e.value.len());
        out.push_str(e.value);
    }
}

struct Item {
    desc: usize,
    limit: Arc<LimitInst>,
    key: String,
    cost: u64,
    shadow: bool,
    decision: Decision,
}

impl Engine {
    /// An engine serving `rules` on `store`.
    pub fn new(rules: Rules, store: StoreHandle, metrics: Arc<Metrics>) -> Result<Engine, String> {
        let first = build(rules, &store, None, &metrics, 1)?;
        metrics.generation.set(1);
        Ok(Engine {
            current: ArcSwap::from_pointee(first),
            store,
            metrics,
            next_id: AtomicU64::new(2),
            reload_lock: std::sync::Mutex::new(()),
            hybrid: None,
        })
    }

    /// Use the fleet `hybrid` strategy (Redis store only): leases of at most `lease` units
    /// taken from the shared counter and spent here, every decision shared once fewer
    /// than `nodes x lease` units remain (see `floodgate_dist::hybrid` for the bound).
    /// At most `max_keys` leases are held.
    pub fn with_hybrid(
        mut self,
        nodes: usize,
        lease: u64,
        lease_ttl: std::time::Duration,
        max_keys: usize,
    ) -> Engine {
        let ttl = u64::try_from(lease_ttl.as_nanos()).unwrap_or(u64::MAX);
        let near = (nodes as u64).saturating_mul(lease);
        let event = |e: &'static str| {
            self.metrics
                .fleet_events
                .get_or_create(&crate::metrics::EventLabels { event: e })
                .clone()
        };
        self.hybrid = Some(Hybrid {
            node: std::sync::Mutex::new(HybridNode::new(lease, near, ttl, max_keys)),
            lease_admits: event("lease_admit"),
            round_trips: event("round_trip"),
        });
        self
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
        let next = build(rules, &self.store, Some(&prev), &self.metrics, id)?;
        self.current.store(Arc::new(next));
        self.metrics.generation.set(id as i64);
        Ok(id)
    }

    /// Check one request: `domain` and its descriptors, all-or-nothing.
    pub async fn check(
        &self,
        domain: &str,
        descriptors: &[DescriptorIn<'_>],
    ) -> Result<Outcome, CheckError> {
        let generation = self.current.load_full();
        let g = &*generation;
        let caps = g.rules.caps;
        if domain.is_empty() {
            return Err(CheckError::EmptyDomain);
        }
        if descriptors.is_empty() {
            return Err(CheckError::NoDescriptors);
        }
        if descriptors.len() > caps.max_descriptors {
            return Err(CheckError::TooManyDescriptors {
                count: descriptors.len(),
                max: caps.max_descriptors,
            });
        }
        for (index, d) in descriptors.iter().enumerate() {
            if d.entries.is_empty() {
                return Err(CheckError::EmptyDescriptor { index });
            }
            if d.entries.len() > caps.max_entries {
                return Err(CheckError::TooManyEntries {
                    index,
                    count: d.entries.len(),
                    max: caps.max_entries,
                });
            }
            for (entry, e) in d.entries.iter().enumerate() {
                if e.key.is_empty() {
                    return Err(CheckError::EmptyKey { index, entry });
                }
                for (what, s) in [("key", e.key), ("value", e.value)] {
                    if s.len() > caps.max_value_bytes {
                        return Err(CheckError::TooLong {
                            index,
                            entry,
                            what,
                            len: s.len(),
                            max: caps.max_value_bytes,
                        });
                    }
                }
            }
        }
        let Some(tree) = g.domains.get(domain) else {
            g.unknown_domain.inc();
            return match g.rules.unknown_domain {
                UnknownDomain::Allow => Ok(Outcome {
                    over_limit: false,
                    statuses: descriptors
                        .iter()
                        .map(|_| Status {
                            over_limit: false,
                            matched: Matched::NoRule,
                            shadow: false,
                            limits: Vec::new(),
                        })
                        .collect(),
                    headers: Vec::new(),
                    delay: std::time::Duration::ZERO,
                }),
                UnknownDomain::Error => Err(CheckError::UnknownDomain {
                    domain: domain.to_string(),
                    known: g.domains.keys().cloned().collect::<Vec<_>>().join(", "),
                }),
            };
        };

        let found: Vec<Option<usize>> = descriptors.iter().map(|d| tree.find(&d.entries)).collect();
        let replaced: HashSet<&str> = if tree.has_replaces {
            found
                .iter()
                .flatten()
                .flat_map(|&i| tree.nodes[i].limits.iter())
                .flat_map(|l| l.def.replaces.iter().map(String::as_str))
                .collect()
        } else {
            HashSet::new()
        };
        let mut items = Vec::new();
        for (desc, (d, node)) in descriptors.iter().zip(&found).enumerate() {
            let Some(node) = node.map(|i| &tree.nodes[i]) else {
                continue;
            };
            for l in &node.limits {
                if l.def
                    .explicit_name
                    .as_deref()
                    .is_some_and(|n| replaced.contains(n))
                {
                    continue;
                }
                let mut key = String::new();
                if matches!(l.backend, Backend::Redis(_)) {
                    key.push_str(&l.id);
                    key.push('|');
                }
                push_values(&mut key, &d.entries);
                items.push(Item {
                    desc,
                    limit: l.clone(),
                    key,
                    cost: d.cost,
                    shadow: node.shadow,
                    decision: never(d.cost),
                });
            }
        }
        self.decide(&mut items).await?;

        let mut statuses = Vec::with_capacity(descriptors.len());
        let mut by_desc: Vec<Vec<(Arc<LimitInst>, Decision, bool)>> =
            (0..descriptors.len()).map(|_| Vec::new()).collect();
        for it in items {
            by_desc[it.desc].push((it.limit, it.decision, it.shadow));
        }
        let mut applied: Vec<(&LimitDef, Decision)> = Vec::new();
        let mut delay = std::time::Duration::ZERO;
        for (desc, (limits, node)) in by_desc.iter().zip(&found).enumerate() {
            let Some(idx) = *node else {
                tree.no_rule.inc();
                statuses.push(Status {
                    over_limit: false,
                    matched: Matched::NoRule,
                    shadow: false,
                    limits: Vec::new(),
                });
                continue;
            };
            let n = &tree.nodes[idx];
            let dynamic = tree.label(idx, &descriptors[desc].entries).map(|label| {
                NodeCounters::new(&self.metrics, &tree.name, &label, n.unlimited, n.shadow)
            });
            let counters = dynamic.as_ref().unwrap_or(&n.counters);
            if n.unlimited {
                counters.unlimited.inc();
                statuses.push(Status {
                    over_limit: false,
                    matched: Matched::Unlimited,
                    shadow: n.shadow,
                    limits: Vec::new(),
                });
                continue;
            }
            if limits.is_empty() && n.limits.is_empty() {
                tree.no_rule.inc();
                statuses.push(Status {
                    over_limit: false,
                    matched: Matched::NoRule,
                    shadow: false,
                    limits: Vec::new(),
                });
                continue;
            }
            let denied = limits.iter().any(|(_, d, _)| !d.allowed);
            let over = denied && !n.shadow;
            if over {
                counters.over.inc();
            } else if denied {
                counters.shadow_over.inc();
            } else {
                counters.ok.inc();
                let near = limits.iter().any(|(_, d, _)| {
                    let used = d.limit.saturating_sub(d.remaining) as u128;
                    d.limit > 0 && used * 5 >= d.limit as u128 * 4
                });
                if near {
                    counters.near.inc();
                }
            }
            if !n.shadow {
                for (l, d, _) in limits {
                    applied.push((&l.def, *d));
                    delay = delay.max(d.delay);
                }
            }
            statuses.push(Status {
                over_limit: over,
                matched: Matched::Limited,
                shadow: n.shadow,
                limits: limits.iter().map(|(l, d, _)| (l.clone(), *d)).collect(),
            });
        }
        let over_limit = statuses.iter().any(|s| s.over_limit);
        let headers = headers::render(&g.rules.headers, &applied, over_limit);
        Ok(Outcome {
            over_limit,
            statuses,
            headers,
            delay: if over_limit {
                std::time::Duration::ZERO
            } else {
                delay
            },
        })
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
        let mut k = String::new();
        if matches!(limit.backend, Backend::Redis(_)) {
            k.push_str(&limit.id);
            k.push('|');
        }
        k.push_str(key);
        let mut items = vec![Item {
            desc: 0,
            limit: limit.clone(),
            key: k,
            cost,
            shadow: false,
            decision: never(cost),
        }];
        self.decide(&mut items).await?;
        let d = items[0].decision;
        let counters = &g.policy_counters[policy];
        if d.allowed {
            counters.ok.inc();
        } else {
            counters.over.inc();
        }
        let over_limit = !d.allowed;
        let headers = headers::render(&g.rules.headers, &[(&limit.def, d)], over_limit);
        Ok(Outcome {
            over_limit,
            statuses: vec![Status {
                over_limit,
                matched: Matched::Limited,
                shadow: false,
                limits: vec![(limit.clone(), d)],
            }],
            headers,
            delay: if over_limit {
                std::time::Duration::ZERO
            } else {
                d.delay
            },
        })
    }

    /// Decide every item, all-or-nothing: in process, or on Redis (one call for all).
    async fn decide(&self, items: &mut [Item]) -> Result<(), CheckError> {
        if items.is_empty() {
            return Ok(());
        }
        match &self.store {
            StoreHandle::Memory { .. } => {
                let now = WallClock.now();
                self.decide_memory(items, now);
                Ok(())
            }
            StoreHandle::Redis(_) => self.decide_redis(items).await,
        }
    }

    fn decide_memory(&self, items: &mut [Item], now: Nanos) {
        let blocked = items
            .iter()
            .any(|it| !it.shadow && it.cost > 0 && matches!(it.limit.backend, Backend::Block));
        let mut enforced = Vec::new();
        for (i, it) in items.iter_mut().enumerate() {
            match &it.limit.backend {
                Backend::Memory(l) if it.shadow => it.decision = l.check(&it.key, now, it.cost),
                Backend::Memory(l) if blocked => it.decision = l.peek(&it.key, now, 0),
                Backend::Memory(_) => enforced.push(i),
                _ => {} // block: decided at construction; Redis: not in this store
            }
        }
        match enforced.len() {
            0 => {}
            1 => {
                let it = &mut items[enforced[0]];
                if let Backend::Memory(l) = &it.limit.backend {
                    it.decision = l.check(&it.key, now, it.cost);
                }
            }
            _ => {
                let checks: Vec<Check<'_, String, AnyAlgorithm>> = enforced
                    .iter()
                    .filter_map(|&i| match &items[i].limit.backend {
                        Backend::Memory(l) => Some(Check {
                            limiter: &**l,
                            key: &items[i].key,
                            cost: items[i].cost,
                        }),
                        _ => None,
                    })
                    .collect();
                let multi = check_all(&checks, now);
                drop(checks);
                for (&i, d) in enforced.iter().zip(multi.decisions) {
                    items[i].decision = d;
                }
            }
        }
    }

    fn count_fault(&self, source: &Source) {
        if let Source::Fault(f) = source {
            let kind = match f {
                Fault::Timeout => "timeout",
                Fault::Error(_) => "error",
                Fault::CircuitOpen => "circuit_open",
            };
            self.metrics
                .store_faults
                .get_or_create(&crate::metrics::KindLabels { kind })
                .inc();
        }
    }

    /// The hybrid strategy on every Redis item: enforced limits in order, all-or-nothing
    /// (units admitted before a denial go back to this server's leases), then shadow ones.
    async fn decide_hybrid(&self, h: &Hybrid, items: &mut [Item]) -> Result<(), CheckError> {
        let order: Vec<usize> = (0..items.len())
            .filter(|&i| !items[i].shadow)
            .chain((0..items.len()).filter(|&i| items[i].shadow))
            .collect();
        let mut denied = items
            .iter()
            .any(|it| !it.shadow && it.cost > 0 && matches!(it.limit.backend, Backend::Block));
        let mut admitted: Vec<usize> = Vec::new();
        for i in order {
            let Backend::Redis(l) = &items[i].limit.backend else {
                continue;
            };
            let l = l.clone();
            if denied && !items[i].shadow {
                let now = WallClock.now();
                let lease = h.node().lease(&items[i].key, now);
                items[i].decision = lease_view(&items[i].limit, &l, lease);
                continue;
            }
            let d = self
                .hybrid_one(h, &items[i].limit, &l, &items[i].key, items[i].cost)
                .await?;
            items[i].decision = d;
            if items[i].shadow {
                continue;
            }
            if d.allowed {
                admitted.push(i);
            } else {
                denied = true;
                let mut node = h.node();
                for &j in &admitted {
                    node.refund(&items[j].key, items[j].cost);
                }
            }
        }
        Ok(())
    }

    async fn hybrid_one(
        &self,
        h: &Hybrid,
        limit: &LimitInst,
        l: &RedisLimiter,
        key: &String,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let now = WallClock.now();
        let step = {
            let mut node = h.node();
            match node.begin(key, now, cost) {
                Step::Admit => Err(node.lease(key, now)),
                Step::Ask { units } => Ok(units),
            }
        };
        let mut units = match step {
            Err(lease) => {
                h.lease_admits.inc();
                return Ok(lease_view(limit, l, lease));
            }
            Ok(u) => u,
        };
        // at most two round trips: a refused lease is retried for the cost alone
        loop {
            h.round_trips.inc();
            let out = l.check(key.as_bytes(), units).await?;
            if matches!(out.source, Source::Fault(_)) {
                self.count_fault(&out.source);
                return Ok(out.decision);
            }
            let mut d = out.decision;
            let finish = h.node().finish(key, now, cost, units, &d);
            match finish {
                Finish::Admit => {
                    d.remaining = d.remaining.saturating_add(units - cost).min(d.limit);
                    return Ok(d);
                }
                Finish::Deny => return Ok(d),
                Finish::Retry { units: u } => units = u,
            }
        }
    }

    async fn decide_redis(&self, items: &mut [Item]) -> Result<(), CheckError> {
        if let Some(h) = &self.hybrid {
            return self.decide_hybrid(h, items).await;
        }
        // shadow limits are charged on their own and never deny
        let calls = items.iter().map(|it| async move {
            match &it.limit.backend {
                Backend::Redis(l) if it.shadow => Some(l.check(it.key.as_bytes(), it.cost).await),
                _ => None,
            }
        });
        let results = futures_util::future::join_all(calls).await;
        for (it, r) in items.iter_mut().zip(results) {
            let Some(r) = r else { continue };
            let out = r?;
            self.count_fault(&out.source);
            it.decision = out.decision;
        }
        // the enforced ones all-or-nothing, in one atomic round trip (single node); a
        // blocking limit denies the request, and the others are only looked at
        let blocked = items
            .iter()
            .any(|it| !it.shadow && it.cost > 0 && matches!(it.limit.backend, Backend::Block));
        let enforced: Vec<usize> = (0..items.len())
            .filter(|&i| !items[i].shadow && matches!(items[i].limit.backend, Backend::Redis(_)))
            .collect();
        if enforced.is_empty() {
            return Ok(());
        }
        let checks: Vec<multi::Check<'_>> = enforced
            .iter()
            .filter_map(|&i| match &items[i].limit.backend {
                Backend::Redis(l) => Some(multi::Check {
                    limiter: l,
                    user: items[i].key.as_bytes(),
                    cost: if blocked { 0 } else { items[i].cost },
                }),
                _ => None,
            })
            .collect();
        let out = multi::check_all(&checks).await?;
        drop(checks);
        self.count_fault(&out.source);
        for (&i, d) in enforced.iter().zip(out.decisions) {
            items[i].decision = d;
        }
        Ok(())
    }
}

/// What a key admitted from its lease looks like: the lease's unspent units plus what the
/// shared counter said remained (capped at the limit); reset = time to refill the rest.
fn lease_view(limit: &LimitInst, l: &RedisLimiter, lease: Option<(u64, u64)>) -> Decision {
    let cap = l.algorithm().limit();
    let (units, shared) = lease.unwrap_or((0, 0));
    let remaining = units.saturating_add(shared).min(cap);
    let t = limit
        .def
        .spec
        .as_ref()
        .map_or(0, |s| s.rate.emission_interval_nanos());
    let ns = u128::from(cap - remaining) * u128::from(t);
    Decision::allow(
        cap,
        remaining,
        std::time::Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)),
    )
}

/// Build a generation; limiters of the same identity in `prev` are taken over.
fn build(
    rules: Rules,
    store: &StoreHandle,
    prev: Option<&Generation>,
    metrics: &Metrics,
    id: u64,
) -> Result<Generation, String> {
    let mut limits = HashMap::new();
    let mut domains = HashMap::new();
    for (name, defs) in &rules.domains {
        let mut tree = DomainTree {
            name: name.clone(),
            root: Level::default(),
            nodes: Vec::new(),
            no_rule: metrics.decision_counter(name, "", "no_rule"),
            has_replaces: false,
            dynamic_labels: false,
        };
        let mut root = Level::default();
        add_level(
            &mut tree,
            &mut root,
            defs,
            name,
            "",
            store,
            prev,
            metrics,
            &mut limits,
        )?;
        tree.root = root;
        domains.insert(name.clone(), tree);
    }
    let mut policies = BTreeMap::new();
    let mut policy_counters = HashMap::new();
    for (name, def) in &rules.policies {
        policy_counters.insert(
            name.clone(),
            NodeCounters::new(metrics, "(policy)", name, false, false),
        );
        let lid = format!("(policy)|{name}");
        let inst = instantiate(def, lid.clone(), store, prev)?;
        limits.insert(lid, inst.clone());
        policies.insert(name.clone(), inst);
    }
    Ok(Generation {
        id,
        rules,
        domains,
        policies,
        policy_counters,
        limits,
        unknown_domain: metrics.decision_counter("(unknown)", "", "unknown_domain"),
    })
}

#[allow(clippy::too_many_arguments)]
fn add_level(
    tree: &mut DomainTree,
    level: &mut Level,
    defs: &[DescriptorDef],
    domain: &str,
    parent: &str,
    store: &StoreHandle,
    prev: Option<&Generation>,
    metrics: &Metrics,
    all: &mut HashMap<String, Arc<LimitInst>>,
) -> Result<(), String> {
    for def in defs {
        let step = match &def.value {
            ValueMatch::Any => def.key.clone(),
            ValueMatch::Exact(v) => format!("{}={}", def.key, v),
            ValueMatch::Prefix(p) => format!("{}={}*", def.key, p),
        };
        let label = if parent.is_empty() {
            step
        } else {
            format!("{parent}.{step}")
        };
        let mut insts = Vec::with_capacity(def.limits.len());
        for (i, l) in def.limits.iter().enumerate() {
            let which = l
                .explicit_name
                .clone()
                .unwrap_or_else(|| format!("#{}", i + 1));
            let lid = format!("{domain}|{label}|{which}");
            let inst = instantiate(l, lid.clone(), store, prev)?;
            all.insert(lid, inst.clone());
            insts.push(inst);
        }
        tree.has_replaces |= def.limits.iter().any(|l| !l.replaces.is_empty());
        tree.dynamic_labels |= def.detailed_metric || def.value_to_metric;
        let idx = tree.nodes.len();
        tree.nodes.push(Node {
            value: def.value.clone(),
            limits: insts,
            unlimited: def.unlimited,
            shadow: def.shadow,
            detailed_metric: def.detailed_metric,
            value_to_metric: def.value_to_metric,
            children: Level::default(),
            counters: NodeCounters::new(metrics, domain, &label, def.unlimited, def.shadow),
        });
        let mut children = Level::default();
        add_level(
            tree,
            &mut children,
            &def.children,
            domain,
            &label,
            store,
            prev,
            metrics,
            all,
        )?;
        tree.nodes[idx].children = children;
        let branch = level.keys.entry(def.key.clone()).or_default();
        match &def.value {
            ValueMatch::Any => branch.any = Some(idx),
            ValueMatch::Exact(v) => {
                branch.exact.insert(v.clone(), idx);
            }
            ValueMatch::Prefix(p) => branch.prefixes.push((p.clone(), idx)),
        }
    }
    Ok(())
}

fn instantiate(
    def: &LimitDef,
    id: String,
    store: &StoreHandle,
    prev: Option<&Generation>,
) -> Result<Arc<LimitInst>, String> {
    let old = prev.and_then(|g| g.limits.get(&id));
    let Some(spec) = &def.spec else {
        return Ok(Arc::new(LimitInst {
            def: def.clone(),
            id,
            backend: Backend::Block,
        }));
    };
    let local;
    let spec = match store {
        StoreHandle::Memory { share, .. } if *share > 1 => {
            local = floodgate_dist::local_share(spec, *share).map_err(|e| format!("{id}: {e}"))?;
            &local
        }
        _ => spec,
    };
    let alg = spec.build().map_err(|e| format!("{id}: {e}"))?;
    let backend = match store {
        StoreHandle::Memory { max_keys, .. } => match old.map(|o| (&o.backend, &o.def)) {
            Some((Backend::Memory(l), old_def)) => {
                if old_def.spec != def.spec {
                    l.set_algorithm(alg);
                }
                Backend::Memory(l.clone())
            }
            _ => Backend::Memory(Arc::new(
                KeyedLimiter::new(alg, *max_keys).map_err(|e| format!("{id}: {e}"))?,
            )),
        },
        StoreHandle::Redis(s) => match old.map(|o| &o.backend) {
            Some(Backend::Redis(l)) if *l.algorithm() == alg => Backend::Redis(l.clone()),
            _ => Backend::Redis(Arc::new(
                RedisLimiter::new(s.clone(), alg).map_err(|e| format!("{id}: {e}"))?,
            )),
        },
    };
    // the RateLimit fields advertise what this server enforces (a local share's rate)
    let mut def = def.clone();
    def.fields = Advertised::of(spec);
    Ok(Arc::new(LimitInst { def, id, backend }))
}
