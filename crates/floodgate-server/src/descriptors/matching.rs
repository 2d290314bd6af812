//! Descriptor matching, as Envoy's ratelimit service matches: a domain's rule tree, the
//! walk of a request descriptor down it, the limiter key of a descriptor, and the
//! per-rule counters (`floodgate_descriptor_decisions_total`, `floodgate_near_limit_total`).
//!
//! A request descriptor is a list of `(key, value)` entries. Its entries walk the domain's
//! rule tree one level each: at each level the rule with the same key and the same value
//! wins, then a rule whose value ends in `*` and prefixes the value, then a rule with the
//! key and no value. The descriptor's limits are those of the rule reached by its *last*
//! entry; a descriptor longer or shorter than any rule path gets no limit (status OK).
//! The limiter key is the descriptor's values, so a rule without a value (or with a
//! wildcard) limits each value on its own.
//!
//! A domain may also hold selectors (Limitador's limits): a selector reads one request
//! descriptor by position and applies when that descriptor holds each of its condition
//! entries with the value given and each of its variable entries, in any order and beside
//! any other entries. Its limiter key is the values of its variable entries. Every
//! selector that applies to a request counts it, beside the rule its descriptor reaches.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;

use crate::config::{Condition, ValueMatch};
use crate::metrics::Metrics;

use super::limit::LimitInst;

/// One entry of a request descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Append the values of `entries` to `out`, length-prefixed (unambiguous for any bytes).
pub(super) fn push_values(out: &mut Vec<u8>, entries: &[Entry<'_>]) {
    for e in entries {
        // written in place: no String per entry on the request path
        let _ = std::io::Write::write_fmt(out, format_args!("{}", e.value.len()));
        out.push(b':');
        out.extend_from_slice(e.value.as_bytes());
    }
}

/// The hasher of the rule tree's maps: foldhash, seeded per process. Their keys come from
/// the config, and a request's strings only look up, so a fast hasher is safe here; SipHash
/// (std's) cost more than the rest of the walk.
pub(super) type TreeHasher = foldhash::fast::RandomState;

/// The rules of one level of a domain's tree, by entry key.
#[derive(Debug, Default)]
pub(super) struct Level {
    pub(super) keys: HashMap<String, Branch, TreeHasher>,
}

/// The rules of one key at one level, by how they match the value.
#[derive(Debug, Default)]
pub(super) struct Branch {
    pub(super) exact: HashMap<String, usize, TreeHasher>,
    pub(super) prefixes: Vec<(String, usize)>,
    pub(super) any: Option<usize>,
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

/// One rule of a domain's tree.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) value: ValueMatch,
    pub(super) limits: Vec<Arc<LimitInst>>,
    pub(super) unlimited: bool,
    /// The rule's `max_in_flight` as an engine in-flight policy (headers, `N`, TTL).
    pub(super) in_flight: Option<Arc<floodgate_engine::PolicyInfo>>,
    pub(super) shadow: bool,
    pub(super) detailed_metric: bool,
    pub(super) value_to_metric: bool,
    pub(super) children: Level,
    pub(super) counters: RuleCounters,
}

impl Node {
    /// A node with `limits` that is neither unlimited, nor in shadow mode, nor labelled
    /// with values, and has no children.
    pub(super) fn plain(
        value: ValueMatch,
        limits: Vec<Arc<LimitInst>>,
        counters: RuleCounters,
    ) -> Node {
        Node {
            value,
            limits,
            unlimited: false,
            in_flight: None,
            shadow: false,
            detailed_metric: false,
            value_to_metric: false,
            children: Level::default(),
            counters,
        }
    }
}

/// The per-rule counters: `floodgate_descriptor_decisions_total{domain, descriptor,
/// outcome}` (one per descriptor per request) and `floodgate_near_limit_total`.
#[derive(Debug, Clone)]
pub(super) struct RuleCounters {
    pub(super) passed: Counter,
    pub(super) rejected: Counter,
    pub(super) rejected_dry_run: Counter,
    pub(super) unlimited: Counter,
    pub(super) near: Counter,
}

impl RuleCounters {
    /// The counters of a rule; only the outcomes the rule can have are registered (the
    /// others are detached counters), so `/metrics` lists no impossible series.
    pub(super) fn new(
        m: &Metrics,
        domain: &str,
        label: &str,
        unlimited: bool,
        shadow: bool,
    ) -> RuleCounters {
        let reg = |on: bool, outcome: &'static str| {
            if on {
                m.descriptor_counter(domain, label, outcome)
            } else {
                Counter::default()
            }
        };
        RuleCounters {
            passed: reg(!unlimited, "passed"),
            rejected: reg(!unlimited && !shadow, "rejected"),
            rejected_dry_run: reg(!unlimited && shadow, "rejected_dry_run"),
            unlimited: reg(unlimited, "unlimited"),
            near: if unlimited {
                Counter::default()
            } else {
                m.near_limit_counter(domain, label)
            },
        }
    }
}

/// A rule that selects a request by the entries one of its descriptors holds.
#[derive(Debug)]
pub(super) struct Selector {
    /// The position of the descriptor read.
    pub(super) descriptor: usize,
    /// Entries required, with or without a value.
    pub(super) conditions: Vec<Condition>,
    /// Entries required with any value; their values key the limiter.
    pub(super) variables: Vec<String>,
    /// The node holding the selector's limit and counters.
    pub(super) node: usize,
}

impl Selector {
    /// The variable entries of `d` when every condition and variable of the selector is
    /// there (a key given twice in `d`: its last value), else `None`.
    fn select<'a>(&self, d: &DescriptorIn<'a>) -> Option<Vec<Entry<'a>>> {
        let last = |key: &str| d.entries.iter().rev().find(|e| e.key == key);
        for c in &self.conditions {
            if !c.holds(last(&c.key)?.value) {
                return None;
            }
        }
        self.variables.iter().map(|k| last(k).copied()).collect()
    }
}

/// A node a request reaches: through a descriptor's walk of the tree, or a selector.
#[derive(Debug)]
pub(super) struct Hit<'b, 'a> {
    /// The descriptor's position in the request.
    pub(super) desc: usize,
    /// The node.
    pub(super) node: usize,
    /// The entries whose values key the node's limiters.
    pub(super) values: Cow<'b, [Entry<'a>]>,
    /// Reached by the tree's walk (its metric label may carry values).
    pub(super) walked: bool,
}

/// One domain's rules.
#[derive(Debug)]
pub(super) struct DomainTree {
    pub(super) name: String,
    pub(super) root: Level,
    pub(super) nodes: Vec<Node>,
    pub(super) no_rule: Counter,
    pub(super) has_replaces: bool,
    pub(super) dynamic_labels: bool,
    pub(super) selectors: Vec<Selector>,
}

impl DomainTree {
    /// A domain without rules yet.
    pub(super) fn new(name: &str, metrics: &Metrics) -> DomainTree {
        DomainTree {
            name: name.to_string(),
            root: Level::default(),
            nodes: Vec::new(),
            no_rule: metrics.descriptor_counter(name, "", "no_rule"),
            has_replaces: false,
            dynamic_labels: false,
            selectors: Vec::new(),
        }
    }

    /// The node reached by the last entry, with Envoy's precedence at each level.
    pub(super) fn find(&self, entries: &[Entry<'_>]) -> Option<usize> {
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

    /// The nodes `descriptors` reach: each descriptor's walk of the tree, then every
    /// selector that applies, in config order.
    pub(super) fn hits<'b, 'a>(&self, descriptors: &'b [DescriptorIn<'a>]) -> Vec<Hit<'b, 'a>> {
        let mut hits: Vec<Hit<'b, 'a>> = descriptors
            .iter()
            .enumerate()
            .filter_map(|(desc, d)| {
                self.find(&d.entries).map(|node| Hit {
                    desc,
                    node,
                    values: Cow::Borrowed(&d.entries[..]),
                    walked: true,
                })
            })
            .collect();
        for s in &self.selectors {
            if let Some(values) = descriptors.get(s.descriptor).and_then(|d| s.select(d)) {
                hits.push(Hit {
                    desc: s.descriptor,
                    node: s.node,
                    values: Cow::Owned(values),
                    walked: false,
                });
            }
        }
        hits
    }

    /// The metric label of a request that reached `idx`, honouring `detailed_metric` and
    /// `value_to_metric` (Envoy: the value joins the label).
    pub(super) fn label(&self, idx: usize, entries: &[Entry<'_>]) -> Option<String> {
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

    /// Add `node` under `level` by its key and value match; returns its index.
    pub(super) fn insert(&mut self, level: &mut Level, key: &str, node: Node) -> usize {
        let idx = self.nodes.len();
        let branch = level.keys.entry(key.to_string()).or_default();
        match &node.value {
            ValueMatch::Any => branch.any = Some(idx),
            ValueMatch::Exact(v) => {
                branch.exact.insert(v.clone(), idx);
            }
            ValueMatch::Prefix(p) => branch.prefixes.push((p.clone(), idx)),
        }
        self.nodes.push(node);
        idx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: ValueMatch) -> Node {
        let m = Metrics::new(None);
        Node::plain(
            value,
            Vec::new(),
            RuleCounters::new(&m, "d", "x", false, false),
        )
    }

    #[test]
    fn exact_then_prefix_then_any() {
        let mut t = DomainTree::new("d", &Metrics::new(None));
        let mut root = Level::default();
        let any = t.insert(&mut root, "k", node(ValueMatch::Any));
        let pre = t.insert(&mut root, "k", node(ValueMatch::Prefix("ab".into())));
        let exact = t.insert(&mut root, "k", node(ValueMatch::Exact("abc".into())));
        t.root = root;
        let e = |v| [Entry { key: "k", value: v }];
        assert_eq!(t.find(&e("abc")), Some(exact));
        assert_eq!(t.find(&e("abd")), Some(pre));
        assert_eq!(t.find(&e("x")), Some(any));
        assert_eq!(
            t.find(&[Entry {
                key: "other",
                value: "x"
            }]),
            None
        );
        // longer than any rule path: no limit
        assert_eq!(t.find(&[e("x")[0], e("x")[0]]), None);
    }

    #[test]
    fn selectors_match_entries_in_any_order_beside_others() {
        let mut t = DomainTree::new("d", &Metrics::new(None));
        t.nodes.push(node(ValueMatch::Any));
        t.selectors.push(Selector {
            descriptor: 0,
            conditions: vec![Condition {
                key: "m".into(),
                value: "POST".into(),
                equal: true,
            }],
            variables: vec!["user".into()],
            node: 0,
        });
        let d = |entries: Vec<Entry<'static>>| DescriptorIn { entries, cost: 1 };
        let en = |key, value| Entry { key, value };
        let reqs = [
            d(vec![en("user", "ann"), en("x", "1"), en("m", "POST")]),
            d(vec![en("m", "GET"), en("user", "ann")]),
        ];
        let hits = t.hits(&reqs[..1]);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].values.as_ref(), [en("user", "ann")]);
        assert!(t.hits(&reqs[1..]).is_empty(), "a condition's value differs");
        assert!(
            t.hits(&[d(vec![en("m", "POST")])]).is_empty(),
            "no variable entry"
        );
        // the selector reads descriptor 0 only
        assert!(t.hits(&[reqs[1].clone(), reqs[0].clone()]).is_empty());
    }

    #[test]
    fn values_are_length_prefixed() {
        let mut a = Vec::new();
        push_values(
            &mut a,
            &[Entry {
                key: "k",
                value: "a:1",
            }],
        );
        let mut b = Vec::new();
        push_values(
            &mut b,
            &[
                Entry {
                    key: "k",
                    value: "a",
                },
                Entry {
                    key: "k",
                    value: "1",
                },
            ],
        );
        assert_eq!(a, b"3:a:1");
        assert_ne!(a, b);
    }
}
