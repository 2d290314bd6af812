//! One configuration generation: the matching trees, every limit as an engine policy
//! ([`PolicyInfo`]), and the engine store ([`DecisionStore`]) that decides them; and how a
//! generation is built from [`Rules`], taking over the state of the previous one.
//!
//! A limit is identified by its domain, rule path and name (or position). A new
//! generation takes over the limiter of the same identity from the old one (in process):
//! unchanged limits keep every key's state; a changed limit keeps the state and applies
//! the new parameters from the next request (a change of algorithm starts its keys fresh).
//! On Redis the state is the shared counters, kept by key; the hybrid strategy's leases
//! are this server's and start over (unspent units are lost, never handed out twice).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{AnyAlgorithm, KeyedLimiter, Kind, Rate, Spec};
use floodgate_engine::adaptive::PartitionedLimiter;
use floodgate_engine::{DecisionStore, LocalStore, PolicyInfo, SharedStore, TokioWallClock};
use prometheus_client::metrics::counter::Counter;

use crate::config::{DescriptorDef, LimitDef, Rules, SelectorDef, ValueMatch};
use crate::metrics::Metrics;

use super::limit::{LimitCounters, LimitInst};
use super::matching::{DomainTree, Level, Node, RuleCounters, Selector, TreeHasher};

/// Where state lives, as running (set at startup).
#[derive(Debug, Clone)]
pub enum StoreHandle {
    /// In process ([`LocalStore`]), at most `max_keys` keys per limit.
    Memory {
        /// Keys per limit.
        max_keys: usize,
        /// Fleet `local` strategy: enforce `1/share` of every limit (1: the whole limit).
        share: usize,
        /// The clock every generation's store reads.
        clock: TokioWallClock,
    },
    /// On Redis: every decision shared ([`RedisDecisionStore`](floodgate_engine::RedisDecisionStore)), or the fleet `hybrid`
    /// strategy's leases spent here ([`HybridStore`](floodgate_engine::HybridStore)).
    Shared(SharedStore),
}

impl StoreHandle {
    /// Whether limiter keys must carry the limit's identity (one keyspace for all limits).
    fn shared_keyspace(&self) -> bool {
        !matches!(self, StoreHandle::Memory { .. })
    }
}

/// One configuration generation: what a request is checked against.
pub struct Generation {
    /// 1 at startup, +1 per successful reload.
    pub id: u64,
    /// The rules it was built from.
    pub rules: Rules,
    pub(super) domains: HashMap<String, DomainTree, TreeHasher>,
    pub(super) policies: BTreeMap<String, Arc<LimitInst>>,
    pub(super) policy_counters: HashMap<String, RuleCounters>,
    limits: HashMap<String, Arc<LimitInst>>,
    pub(super) unknown_domain: Counter,
    /// The engine store deciding this generation's limits.
    pub(super) store: Arc<dyn DecisionStore>,
    /// The same store when in process (its limiters are taken over on reload).
    pub(super) local: Option<Arc<LocalStore>>,
    pub(super) shared_keyspace: bool,
    /// The store's policy names, in index order.
    pub(super) store_names: Vec<String>,
    /// The adaptive policies (`/v1/adaptive`), by name.
    pub(super) adaptive: BTreeMap<String, Arc<PartitionedLimiter>>,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("id", &self.id)
            .field("limits", &self.limits.len())
            .finish_non_exhaustive()
    }
}

impl Generation {
    /// Whether the decision store answers ([`DecisionStore::reachable`]).
    pub fn store_reachable(&self) -> bool {
        self.store.reachable()
    }

    /// Where this generation's checks go.
    pub(super) fn stores(&self) -> floodgate_engine::decide::Stores<'_> {
        floodgate_engine::decide::Stores {
            store: &*self.store,
            local: self.local.as_deref(),
        }
    }

    /// The adaptive policy `name`: its limiter and definition.
    pub fn adaptive(
        &self,
        name: &str,
    ) -> Option<(&PartitionedLimiter, &crate::config::AdaptiveDef)> {
        Some((&**self.adaptive.get(name)?, self.rules.adaptive.get(name)?))
    }

    /// The adaptive policies' limiters, in name order.
    pub fn adaptive_limiters(&self) -> impl Iterator<Item = &Arc<PartitionedLimiter>> {
        self.adaptive.values()
    }

    /// Every limit, by identity.
    pub fn limits(&self) -> impl Iterator<Item = &Arc<LimitInst>> {
        self.limits.values()
    }

    /// Keys held in process by `limit` (0 on Redis and for blocking limits).
    pub fn keys(&self, limit: &LimitInst) -> usize {
        self.local
            .as_ref()
            .and_then(|l| l.limiter_at(limit.policy.index))
            .map_or(0, |l| l.len())
    }
}

/// Builds a generation: the limits in tree order, with the store's policy list.
struct Builder<'a> {
    store: &'a StoreHandle,
    prev: Option<&'a Generation>,
    metrics: &'a Metrics,
    limits: HashMap<String, Arc<LimitInst>>,
    policies: Vec<PolicyInfo>,
    limiters: Vec<Arc<KeyedLimiter<Vec<u8>, AnyAlgorithm>>>,
}

/// Build a generation; limiters of the same identity in `prev` are taken over.
pub(super) fn build(
    rules: Rules,
    store: &StoreHandle,
    prev: Option<&Generation>,
    metrics: &Metrics,
    id: u64,
) -> Result<Generation, String> {
    let mut b = Builder {
        store,
        prev,
        metrics,
        limits: HashMap::new(),
        policies: Vec::new(),
        limiters: Vec::new(),
    };
    let mut domains = HashMap::default();
    for (name, defs) in &rules.domains {
        let mut tree = DomainTree::new(name, metrics);
        let mut root = Level::default();
        b.add_level(&mut tree, &mut root, defs, "")?;
        tree.root = root;
        for sel in rules.selectors.get(name).into_iter().flatten() {
            b.add_selector(&mut tree, sel)?;
        }
        domains.insert(name.clone(), tree);
    }
    let mut policies = BTreeMap::new();
    let mut policy_counters = HashMap::new();
    for (name, def) in &rules.policies {
        policy_counters.insert(
            name.clone(),
            RuleCounters::new(metrics, "(policy)", name, false, false),
        );
        let inst = b.instantiate(def, format!("(policy)|{name}"))?;
        policies.insert(name.clone(), inst);
    }
    let Builder {
        limits,
        policies: infos,
        limiters,
        ..
    } = b;
    let (store_dyn, local): (Arc<dyn DecisionStore>, _) = match store {
        StoreHandle::Memory { clock, .. } => {
            let l = Arc::new(LocalStore::from_limiters(limiters, Arc::new(*clock)));
            (l.clone(), Some(l))
        }
        StoreHandle::Shared(shared) => (
            shared.decision_store(&infos).map_err(|e| e.to_string())?,
            None,
        ),
    };
    let names: Vec<&str> = limits.values().map(|l| l.policy.name.as_str()).collect();
    metrics.insight.retain(&names);
    let adaptive = build_adaptive(&rules, prev, metrics)?;
    Ok(Generation {
        id,
        rules,
        domains,
        policies,
        policy_counters,
        limits,
        unknown_domain: metrics.descriptor_counter("(unknown)", "", "unknown_domain"),
        store: store_dyn,
        local,
        shared_keyspace: store.shared_keyspace(),
        store_names: infos.into_iter().map(|p| p.name).collect(),
        adaptive,
    })
}

/// The adaptive policies of `rules`: a policy whose spec did not change keeps its
/// limiter (its limit, permits and queue) from `prev`; a new or changed one starts at its
/// initial limit (permits of the old limiter are released into it, harmlessly).
fn build_adaptive(
    rules: &Rules,
    prev: Option<&Generation>,
    metrics: &Metrics,
) -> Result<BTreeMap<String, Arc<PartitionedLimiter>>, String> {
    let mut out = BTreeMap::new();
    for (name, def) in &rules.adaptive {
        if let Some(old) = prev
            .and_then(|p| p.adaptive.get(name))
            .filter(|l| *l.spec() == def.spec)
        {
            out.insert(name.clone(), old.clone());
            continue;
        }
        let limiter = PartitionedLimiter::new(
            name.clone(),
            def.spec.clone(),
            Arc::new(TokioWallClock::new()),
        )
        .map_err(|e| format!("adaptive.{name}: {e}"))?;
        let classes: Vec<String> = def.spec.classes.iter().map(|c| c.name.clone()).collect();
        limiter.attach_metrics(metrics.adaptive.policy(name, &classes));
        out.insert(name.clone(), Arc::new(limiter));
    }
    Ok(out)
}

impl Builder<'_> {
    fn add_level(
        &mut self,
        tree: &mut DomainTree,
        level: &mut Level,
        defs: &[DescriptorDef],
        parent: &str,
    ) -> Result<(), String> {
        let domain = tree.name.clone();
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
                insts.push(self.instantiate(l, format!("{domain}|{label}|{which}"))?);
            }
            tree.has_replaces |= def.limits.iter().any(|l| !l.replaces.is_empty());
            tree.dynamic_labels |= def.detailed_metric || def.value_to_metric;
            let node = Node {
                value: def.value.clone(),
                limits: insts,
                unlimited: def.unlimited,
                in_flight: def.in_flight.map(|spec| {
                    Arc::new(floodgate_engine::PolicyInfo::in_flight(
                        0,
                        format!("{label}#in-flight"),
                        spec,
                    ))
                }),
                shadow: def.shadow,
                detailed_metric: def.detailed_metric,
                value_to_metric: def.value_to_metric,
                children: Level::default(),
                counters: RuleCounters::new(
                    self.metrics,
                    &domain,
                    &label,
                    def.unlimited,
                    def.shadow,
                ),
            };
            let idx = tree.insert(level, &def.key, node);
            let mut children = Level::default();
            self.add_level(tree, &mut children, &def.children, &label)?;
            tree.nodes[idx].children = children;
        }
        Ok(())
    }

    /// Add a selector (a Limitador limit) with its node: its identity is
    /// `domain|label|name`, the label holding its conditions, variables and window.
    fn add_selector(&mut self, tree: &mut DomainTree, sel: &SelectorDef) -> Result<(), String> {
        let which = sel.limit.explicit_name.as_deref().unwrap_or("#1");
        let inst = self.instantiate(&sel.limit, format!("{}|{}|{which}", tree.name, sel.label))?;
        let node = tree.nodes.len();
        let counters = RuleCounters::new(self.metrics, &tree.name, &sel.label, false, false);
        tree.nodes
            .push(Node::plain(ValueMatch::Any, vec![inst], counters));
        tree.selectors.push(Selector {
            descriptor: sel.descriptor,
            conditions: sel.conditions.clone(),
            variables: sel.variables.clone(),
            node,
        });
        Ok(())
    }

    fn instantiate(&mut self, def: &LimitDef, id: String) -> Result<Arc<LimitInst>, String> {
        let counters = LimitCounters::new(self.metrics, &def.name);
        let Some(spec) = &def.spec else {
            // never sent to a store: the spec only fills the policy's type
            let spec = Spec::new(
                Kind::FixedWindow,
                Rate::new(1, def.window.max(Duration::from_secs(1)))
                    .map_err(|e| format!("{id}: {e}"))?,
            );
            let alg = spec.build().map_err(|e| format!("{id}: {e}"))?;
            let policy =
                PolicyInfo::with_fields(usize::MAX, def.name.clone(), spec, alg, def.fields);
            return Ok(self.add(def, id, policy, counters));
        };
        let local;
        let spec = match self.store {
            StoreHandle::Memory { share, .. } if *share > 1 => {
                local = floodgate_engine::fleet::local_share(spec, *share)
                    .map_err(|e| format!("{id}: {e}"))?;
                &local
            }
            _ => spec,
        };
        let alg = spec.build().map_err(|e| format!("{id}: {e}"))?;
        if let StoreHandle::Memory { max_keys, .. } = self.store {
            let old = self.prev.and_then(|g| {
                let o = g.limits.get(&id)?;
                Some((
                    g.local.as_ref()?.limiter_at(o.policy.index)?.clone(),
                    o.def.spec.clone(),
                ))
            });
            let limiter = match old {
                Some((l, old_spec)) => {
                    if old_spec != def.spec {
                        l.set_algorithm(alg.clone());
                    }
                    l
                }
                None => Arc::new(
                    KeyedLimiter::new(alg.clone(), *max_keys).map_err(|e| format!("{id}: {e}"))?,
                ),
            };
            self.limiters.push(limiter);
        }
        // the RateLimit fields advertise what this server enforces (a local share's rate)
        let policy = PolicyInfo::new(self.policies.len(), def.name.clone(), spec.clone(), alg);
        self.policies.push(policy.clone());
        Ok(self.add(def, id, policy, counters))
    }

    fn add(
        &mut self,
        def: &LimitDef,
        id: String,
        policy: PolicyInfo,
        counters: LimitCounters,
    ) -> Arc<LimitInst> {
        let inst = Arc::new(LimitInst {
            def: def.clone(),
            id: id.clone(),
            insight: self.metrics.insight.policy(&policy),
            policy,
            counters,
        });
        self.limits.insert(id, inst.clone());
        inst
    }
}
