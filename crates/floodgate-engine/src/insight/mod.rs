//! Who is being limited: per policy, the keys with the most denials and the most admitted
//! cost over the last minutes, and decisions by outcome in each second. One
//! implementation for every surface: the layer (and so the proxy) and the server record
//! each decision where they count it for the metrics ([`PolicyInsight::record`]), and
//! `floodgate_engine::admin` (feature `admin`) renders what is kept here as the admin API's JSON and page.
//!
//! # Top keys, in bounded memory
//!
//! Each policy keeps, per minute, two [`SpaceSaving`] summaries of [`TOP_K`] counters in
//! each of its [`SHARDS`] shards (a key always lands in the same shard, by its hash):
//! denials (weight 1 each, dry-run denials included) and admitted cost (the request's
//! cost under the policy). The last [`MINUTES`] minutes are kept in a ring (the current
//! minute counts as one, so the view spans between `MINUTES - 1` and `MINUTES` minutes)
//! and merged for the view. Memory per policy is fixed:
//! `SHARDS x MINUTES x 2 x TOP_K` counters of at most [`summary::MAX_KEY_BYTES`] key
//! bytes each, however many distinct keys pass.
//!
//! **Error bound.** With `N` the denials (or admitted cost units) of the policy in the
//! minutes viewed and `k` = [`TOP_K`]: every listed count is at least the key's true
//! count and at most `error` above it, `error <= N / k`; every key whose true count
//! exceeds `N / k` is listed (before the list is cut to the `n` asked for). Merging the
//! minutes keeps the bound: a key absent from one minute's full summary is counted that
//! summary's smallest count (the most it may have had there), which is at most that
//! minute's `N_i / k`, and the `N_i` add up to `N`; sharding only tightens it (a key's
//! shard sees `N_s <= N`).
//!
//! # Timelines
//!
//! Each shard also keeps a [`Timeline`] of the last [`timeline::SECONDS`] seconds:
//! decisions by outcome and admitted cost per Unix second, summed over shards for the
//! view.
//!
//! # Cost on the hot path
//!
//! One [`Clock`] reading, one hash of the key, and one uncontended lock of the key's
//! shard, in which a hash-table probe and a heap step of `log2(TOP_K)` swaps run.

#[cfg(feature = "admin")]
pub mod redact;
#[cfg(feature = "admin")]
pub mod sha256;
pub mod summary;
pub mod timeline;

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, RwLock};

use floodgate_core::{Clock, Kind, Nanos};

use crate::metrics::DecisionOutcome;
use crate::store::{PolicyInfo, TokioWallClock};

pub use summary::{Counter, SpaceSaving};
pub use timeline::{Second, Timeline};

/// Shards per policy: a key's hash picks one, each with its own lock.
pub const SHARDS: usize = 4;
/// Counters per summary (`k` of the error bound).
pub const TOP_K: usize = 32;
/// Minutes of top keys kept (the current one included).
pub const MINUTES: usize = 5;
/// Reload events kept.
pub const RELOADS_KEPT: usize = 32;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// How keys are shown by the admin API and page (they may be personal data).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyDisplay {
    /// As they are (non-UTF-8 bytes replaced).
    #[default]
    Plain,
    /// The first [`TRUNCATED_CHARS`] characters, then `…`.
    Truncated,
    /// `#` and 16 hex digits of a keyed hash, the key drawn at random when the process
    /// starts: stable while it runs, not reversible without the key (a lookup of a plain
    /// key shows its hashed form).
    Hashed,
}

/// Characters [`KeyDisplay::Truncated`] keeps.
pub const TRUNCATED_CHARS: usize = 4;

impl KeyDisplay {
    /// The config word: `plain`, `truncated`, `hashed`.
    pub fn name(self) -> &'static str {
        match self {
            KeyDisplay::Plain => "plain",
            KeyDisplay::Truncated => "truncated",
            KeyDisplay::Hashed => "hashed",
        }
    }
}

impl std::str::FromStr for KeyDisplay {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "plain" => Ok(KeyDisplay::Plain),
            "truncated" => Ok(KeyDisplay::Truncated),
            "hashed" => Ok(KeyDisplay::Hashed),
            other => Err(format!(
                "unknown key display {other:?}; expected plain, truncated or hashed"
            )),
        }
    }
}

/// What the view shows of a policy's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyShape {
    /// The policy's name.
    pub name: String,
    /// The algorithm's config name (`fixed-window`, `gcra`...).
    pub algorithm: &'static str,
    /// The rate as configured (`100/min`).
    pub rate: String,
    /// The capacity (most admitted at once).
    pub capacity: u64,
    /// The rate's period, milliseconds.
    pub period_ms: u64,
    /// Whether the algorithm counts in windows aligned on multiples of the period since
    /// the Unix epoch (fixed window, sliding counter): their boundaries are marked.
    pub windowed: bool,
}

impl PolicyShape {
    /// The shape of an engine policy.
    pub fn of(info: &PolicyInfo) -> PolicyShape {
        let kind = info.spec.kind;
        PolicyShape {
            name: info.name.clone(),
            algorithm: kind.name(),
            rate: info.spec.rate.to_string(),
            capacity: floodgate_core::Algorithm::limit(&info.algorithm),
            period_ms: u64::try_from(info.spec.rate.period().as_millis()).unwrap_or(u64::MAX),
            windowed: matches!(kind, Kind::FixedWindow | Kind::SlidingCounter),
        }
    }
}

#[derive(Debug)]
struct Minute {
    minute: u64,
    denied: SpaceSaving,
    admitted: SpaceSaving,
}

#[derive(Debug)]
struct Shard {
    minutes: Vec<Minute>,
    timeline: Timeline,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            minutes: (0..MINUTES)
                .map(|_| Minute {
                    minute: u64::MAX,
                    denied: SpaceSaving::new(TOP_K),
                    admitted: SpaceSaving::new(TOP_K),
                })
                .collect(),
            timeline: Timeline::default(),
        }
    }
}

/// The heaviest keys of one kind (denials or admitted cost) over the minutes viewed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopList {
    /// `N`: the total recorded in those minutes.
    pub total: u64,
    /// `N / k`: the most any listed count overestimates its key's.
    pub bound: u64,
    /// The keys, largest count first (ties by key), as many as asked.
    pub keys: Vec<Counter>,
}

/// What one policy recorded: its top keys (denied, admitted cost).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Top {
    /// Keys by denials.
    pub denied: TopList,
    /// Keys by admitted cost.
    pub admitted: TopList,
}

/// The insight of one policy: where its decisions are recorded.
pub struct PolicyInsight {
    shape: RwLock<PolicyShape>,
    shards: [Mutex<Shard>; SHARDS],
    hasher: foldhash::fast::RandomState,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for PolicyInsight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyInsight")
            .field("shape", &self.shape())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PolicyInsight {
    /// An empty insight of a policy shaped `shape`, on `clock` (Unix nanoseconds).
    pub fn new(shape: PolicyShape, clock: Arc<dyn Clock>) -> PolicyInsight {
        PolicyInsight {
            shape: RwLock::new(shape),
            shards: std::array::from_fn(|_| Mutex::new(Shard::new())),
            hasher: foldhash::fast::RandomState::default(),
            clock,
        }
    }

    /// The policy's shape.
    pub fn shape(&self) -> PolicyShape {
        self.shape.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Record one decision of this policy for `key` costing `cost` units, now.
    pub fn record(&self, key: &[u8], outcome: DecisionOutcome, cost: u64) {
        self.record_at(self.clock.now(), key, outcome, cost);
    }

    /// Record one decision at `now` (Unix nanoseconds).
    pub fn record_at(&self, now: Nanos, key: &[u8], outcome: DecisionOutcome, cost: u64) {
        let key = &key[..key.len().min(summary::MAX_KEY_BYTES)];
        let hash = self.hasher.hash_one(key);
        let second = now.0 / NANOS_PER_SEC;
        let minute = second / 60;
        let denied = matches!(
            outcome,
            DecisionOutcome::Rejected | DecisionOutcome::RejectedDryRun
        );
        let admitted_cost = if denied { 0 } else { cost };
        let mut shard = lock(&self.shards[(hash >> 32) as usize % SHARDS]);
        shard.timeline.record(second, outcome, admitted_cost);
        let m = &mut shard.minutes[(minute % MINUTES as u64) as usize];
        if m.minute != minute {
            if m.minute != u64::MAX && m.minute > minute {
                return; // older than the ring (a clock step back)
            }
            m.minute = minute;
            m.denied.clear();
            m.admitted.clear();
        }
        if denied {
            m.denied.record(hash, key, 1);
        } else if cost > 0 {
            m.admitted.record(hash, key, cost);
        }
    }

    /// The `n` heaviest keys of the last [`MINUTES`] minutes at `now`.
    pub fn top(&self, now: Nanos, n: usize) -> Top {
        let minute = now.0 / NANOS_PER_SEC / 60;
        let current = |m: &Minute| m.minute <= minute && minute - m.minute < MINUTES as u64;
        let mut denied = Merge::default();
        let mut admitted = Merge::default();
        for shard in &self.shards {
            let shard = lock(shard);
            denied.shard(
                shard
                    .minutes
                    .iter()
                    .filter(|m| current(m))
                    .map(|m| &m.denied),
            );
            admitted.shard(
                shard
                    .minutes
                    .iter()
                    .filter(|m| current(m))
                    .map(|m| &m.admitted),
            );
        }
        Top {
            denied: denied.finish(n),
            admitted: admitted.finish(n),
        }
    }

    /// The `seconds` last seconds' counts at `now`, oldest first (at most
    /// [`timeline::SECONDS`]).
    pub fn timeline(&self, now: Nanos, seconds: usize) -> Vec<Second> {
        let last = now.0 / NANOS_PER_SEC;
        let seconds = seconds.min(timeline::SECONDS) as u64;
        let first = last.saturating_sub(seconds.saturating_sub(1));
        let mut out: Vec<Second> = (first..=last)
            .map(|second| Second {
                second,
                ..Second::default()
            })
            .collect();
        for shard in &self.shards {
            let shard = lock(shard);
            for s in &mut out {
                let got = shard.timeline.get(s.second);
                for (a, b) in s.decisions.iter_mut().zip(got.decisions) {
                    *a += b;
                }
                s.admitted_cost = s.admitted_cost.saturating_add(got.admitted_cost);
            }
        }
        out
    }

    /// Counters held and bytes allocated by the summaries: bounded by the constants of
    /// the module docs, whatever was recorded.
    pub fn memory(&self) -> (usize, usize) {
        let mut entries = 0;
        let mut bytes = std::mem::size_of::<Self>();
        for shard in &self.shards {
            let shard = lock(shard);
            bytes +=
                std::mem::size_of::<Timeline>() + std::mem::size_of::<Second>() * timeline::SECONDS;
            for m in &shard.minutes {
                entries += m.denied.len() + m.admitted.len();
                bytes +=
                    std::mem::size_of::<Minute>() + m.denied.heap_bytes() + m.admitted.heap_bytes();
            }
        }
        (entries, bytes)
    }
}

/// Merges summaries into one list: disjoint shards are unioned; a shard's minutes are
/// added, a key absent from a full minute counted at that minute's floor.
#[derive(Default)]
struct Merge {
    total: u64,
    keys: Vec<Counter>,
}

impl Merge {
    fn shard<'a>(&mut self, minutes: impl Iterator<Item = &'a SpaceSaving>) {
        let minutes: Vec<&SpaceSaving> = minutes.collect();
        let floors: u64 = minutes.iter().map(|s| s.floor()).sum();
        // key -> (count, error, floors of the minutes that hold it)
        let mut by_key: HashMap<&[u8], (u64, u64, u64)> = HashMap::new();
        for s in &minutes {
            self.total = self.total.saturating_add(s.total());
            for c in s.counters() {
                let e = by_key.entry(&c.key).or_default();
                e.0 = e.0.saturating_add(c.count);
                e.1 = e.1.saturating_add(c.error);
                e.2 += s.floor();
            }
        }
        for (key, (count, error, held_floors)) in by_key {
            let absent = floors - held_floors;
            self.keys.push(Counter {
                key: key.to_vec(),
                count: count.saturating_add(absent),
                error: error.saturating_add(absent),
            });
        }
    }

    fn finish(mut self, n: usize) -> TopList {
        self.keys
            .sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        self.keys.truncate(n);
        TopList {
            total: self.total,
            bound: self.total / TOP_K as u64,
            keys: self.keys,
        }
    }
}

/// One configuration load or reload, as the admin API lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadEvent {
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// The generation served afterwards (unchanged after a failed reload).
    pub generation: u64,
    /// Whether the file was taken.
    pub ok: bool,
    /// What happened (the error of a failed reload).
    pub message: String,
}

/// Every policy's insight, the configuration shown and its reload history: what the
/// admin API (`floodgate_engine::admin` (feature `admin`)) renders. Shared by a surface's every worker.
pub struct Insight {
    surface: &'static str,
    display: KeyDisplay,
    policies: RwLock<Vec<Arc<PolicyInsight>>>,
    clock: Arc<dyn Clock>,
    salt: foldhash::quality::RandomState,
    #[cfg(feature = "admin")]
    config: RwLock<serde_json::Value>,
    reloads: Mutex<VecDeque<ReloadEvent>>,
}

impl std::fmt::Debug for Insight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Insight")
            .field("surface", &self.surface)
            .field("display", &self.display)
            .finish_non_exhaustive()
    }
}

impl Insight {
    /// An insight for `surface` (`proxy`, `server`, `layer`), showing keys as `display`,
    /// on a [`TokioWallClock`].
    pub fn new(surface: &'static str, display: KeyDisplay) -> Insight {
        Insight::with_clock(surface, display, Arc::new(TokioWallClock::new()))
    }

    /// As [`new`](Self::new) on `clock` (Unix nanoseconds).
    pub fn with_clock(
        surface: &'static str,
        display: KeyDisplay,
        clock: Arc<dyn Clock>,
    ) -> Insight {
        Insight {
            surface,
            display,
            policies: RwLock::new(Vec::new()),
            clock,
            salt: foldhash::quality::RandomState::default(),
            #[cfg(feature = "admin")]
            config: RwLock::new(serde_json::Value::Null),
            reloads: Mutex::new(VecDeque::new()),
        }
    }

    /// The surface's name.
    pub fn surface(&self) -> &'static str {
        self.surface
    }

    /// How keys are shown.
    pub fn display(&self) -> KeyDisplay {
        self.display
    }

    /// The clock's reading (Unix nanoseconds).
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// The insight of `info`'s policy, by name: created on first use, the same one after
    /// (a reload keeps a policy's history; its shape is updated).
    pub fn policy(&self, info: &PolicyInfo) -> Arc<PolicyInsight> {
        let shape = PolicyShape::of(info);
        let mut all = self.policies.write().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = all.iter().find(|p| p.shape().name == shape.name) {
            *p.shape.write().unwrap_or_else(|e| e.into_inner()) = shape;
            return p.clone();
        }
        let p = Arc::new(PolicyInsight::new(shape, self.clock.clone()));
        all.push(p.clone());
        p
    }

    /// Forget the policies not named in `names` (a reload removed them).
    pub fn retain(&self, names: &[&str]) {
        self.policies
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| names.contains(&p.shape().name.as_str()));
    }

    /// Every policy, in the order first seen.
    pub fn policies(&self) -> Vec<Arc<PolicyInsight>> {
        self.policies
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The policy named `name`.
    pub fn find(&self, name: &str) -> Option<Arc<PolicyInsight>> {
        self.policies
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|p| p.shape().name == name)
            .cloned()
    }

    #[cfg(feature = "admin")]
    /// Show `config` (the parsed config file) in the API, its secrets redacted
    /// ([`redact::redact`]).
    pub fn set_config(&self, mut config: serde_json::Value) {
        redact::redact(&mut config);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    #[cfg(feature = "admin")]
    /// The configuration shown (redacted), `null` when none was set.
    pub fn config(&self) -> serde_json::Value {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Note a configuration load or reload (the last [`RELOADS_KEPT`] are kept).
    pub fn reloaded(&self, generation: u64, ok: bool, message: impl Into<String>) {
        let mut r = lock(&self.reloads);
        if r.len() == RELOADS_KEPT {
            r.pop_front();
        }
        r.push_back(ReloadEvent {
            at_ms: self.clock.now().0 / 1_000_000,
            generation,
            ok,
            message: message.into(),
        });
    }

    /// The loads and reloads noted, oldest first.
    pub fn reloads(&self) -> Vec<ReloadEvent> {
        lock(&self.reloads).iter().cloned().collect()
    }

    /// `key` as the API shows it ([`KeyDisplay`]).
    pub fn show_key(&self, key: &[u8]) -> String {
        match self.display {
            KeyDisplay::Plain => String::from_utf8_lossy(key).into_owned(),
            KeyDisplay::Truncated => {
                let s = String::from_utf8_lossy(key);
                let mut chars = s.chars();
                let head: String = chars.by_ref().take(TRUNCATED_CHARS).collect();
                if chars.next().is_some() {
                    format!("{head}…")
                } else {
                    head
                }
            }
            KeyDisplay::Hashed => {
                let held = &key[..key.len().min(summary::MAX_KEY_BYTES)];
                format!("#{:016x}", self.salt.hash_one(held))
            }
        }
    }
}

#[cfg(test)]
mod tests;
