//! [`QuotaStore`]: the decision store of the `quota` fleet strategy, a client of the Rate
//! Limit Quota Service (floodgate server's, or any other speaking
//! `envoy.service.rate_limit_quota.v3`).
//!
//! Every decision is local, on the request's path, from one [`QuotaBucket`] per (policy,
//! key): never a round trip. Beside it one task keeps one `StreamRateLimitQuotas` stream
//! open to the server:
//!
//! * every `report_interval` it sends, for every bucket, the requests allowed and denied
//!   since the previous report (`num_requests_allowed`, `num_requests_denied`,
//!   `time_elapsed`); a bucket made by a request is reported at once, so that its first
//!   assignment does not wait for the next interval;
//! * it applies every assignment the server sends (token bucket, requests per time unit,
//!   allow all, deny all) for its `assignment_time_to_live`; an `AbandonAction` drops the
//!   bucket's assignment;
//! * when the stream cannot be opened or ends, it opens a new one after a backoff (100 ms
//!   doubling to 5 s, with jitter), reporting every bucket again on it.
//!
//! A bucket with no live assignment (none yet, the server unreachable long enough for it
//! to expire, or abandoned) follows the [`QuotaFallback`](super::QuotaFallback). A bucket no request used for
//! ten report intervals is dropped (it stops being reported, and the server's division
//! forgets it after its time to live).
//!
//! Each bucket is named by its [`bucket_entries`]: `policy` (the policy's name) and `key`
//! (the request's key under it), in the `domain` of the stream; the server's `quota:`
//! rules match these entries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use floodgate_core::multi::MultiDecision;
use floodgate_core::{Clock, Decision, Nanos};
use tokio::sync::{Notify, mpsc};
use tonic::transport::Endpoint;

use super::assignment::QuotaStrategy;
use super::bucket::QuotaBucket;
use super::envoy::{assignment_of, pb_duration};
use super::settings::{QuotaClientConfig, QuotaClientError, bucket_entries, key_bytes};
use crate::store::{BoxFuture, DecisionStore, PolicyInfo, StoreCheck, StoreError, TokioWallClock};

/// Buckets reported per message (the server caps a message's size).
const BUCKETS_PER_MESSAGE: usize = 256;
/// A bucket unused for this many report intervals is dropped.
const IDLE_INTERVALS: u32 = 10;
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Buckets by policy index, then key.
struct Buckets {
    by_policy: Vec<HashMap<Vec<u8>, QuotaBucket>>,
    count: usize,
    /// Made since the last report: reported at once.
    fresh: Vec<(usize, Vec<u8>)>,
}

struct Inner {
    config: QuotaClientConfig,
    names: Vec<String>,
    fallbacks: Vec<QuotaStrategy>,
    nominal: Vec<u64>,
    buckets: Mutex<Buckets>,
    made: Notify,
    clock: Arc<dyn Clock>,
    /// An assignment arrived on the current stream.
    connected: AtomicBool,
    reports: AtomicU64,
    assignments: AtomicU64,
    streams: AtomicU64,
}

/// Aborts the client's task when the store is dropped.
struct Task(tokio::task::AbortHandle);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The `quota` strategy's decision store (see the module docs).
pub struct QuotaStore {
    inner: Arc<Inner>,
    endpoint: Endpoint,
    /// The stream's task, once started.
    task: Mutex<Option<Task>>,
    started: AtomicBool,
}

impl std::fmt::Debug for QuotaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl QuotaStore {
    /// A store for `policies` (in index order) with `config`, on a [`TokioWallClock`]; it
    /// starts its stream's task on the current tokio runtime (outside one: at its first
    /// decision). The server need not answer yet: buckets follow the fallback until it
    /// does.
    pub fn start(
        policies: &[PolicyInfo],
        config: QuotaClientConfig,
    ) -> Result<QuotaStore, QuotaClientError> {
        QuotaStore::with_clock(policies, config, Arc::new(TokioWallClock::new()))
    }

    /// As [`start`](Self::start) with a chosen clock.
    pub fn with_clock(
        policies: &[PolicyInfo],
        config: QuotaClientConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<QuotaStore, QuotaClientError> {
        config.check()?;
        let endpoint = Endpoint::from_shared(config.server.clone())
            .map_err(|e| QuotaClientError::Server(config.server.clone(), e.to_string()))?
            .connect_timeout(Duration::from_secs(1));
        let inner = Arc::new(Inner {
            names: policies.iter().map(|p| p.name.clone()).collect(),
            fallbacks: policies
                .iter()
                .map(|p| config.fallback.strategy(p))
                .collect(),
            nominal: policies
                .iter()
                .map(|p| p.fields.capacity.unwrap_or(p.fields.q))
                .collect(),
            buckets: Mutex::new(Buckets {
                by_policy: policies.iter().map(|_| HashMap::new()).collect(),
                count: 0,
                fresh: Vec::new(),
            }),
            made: Notify::new(),
            clock,
            connected: AtomicBool::new(false),
            reports: AtomicU64::new(0),
            assignments: AtomicU64::new(0),
            streams: AtomicU64::new(0),
            config,
        });
        let store = QuotaStore {
            inner,
            endpoint,
            task: Mutex::new(None),
            started: AtomicBool::new(false),
        };
        store.start_task();
        Ok(store)
    }

    /// Start the stream's task if it is not running and a tokio runtime is current (a
    /// store made outside one, by a configuration check say, starts it at its first
    /// decision).
    fn start_task(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.is_none() {
            let t = rt.spawn(run(self.inner.clone(), self.endpoint.clone()));
            *task = Some(Task(t.abort_handle()));
            self.started.store(true, Ordering::Release);
        }
    }

    /// The settings.
    pub fn config(&self) -> &QuotaClientConfig {
        &self.inner.config
    }

    /// Whether this store serves `policies` with `config` as a new one would: the same
    /// settings, and the same policies in the same order, each with the same fallback and
    /// nominal size. A reload that changes neither keeps the store (its buckets, their
    /// assignments and its stream), so no bucket falls back to `no_assignment` while a
    /// new stream waits for its first answer.
    pub fn serves(&self, policies: &[PolicyInfo], config: &QuotaClientConfig) -> bool {
        let i = &self.inner;
        i.config == *config
            && i.names.len() == policies.len()
            && policies.iter().enumerate().all(|(n, p)| {
                i.names[n] == p.name
                    && i.fallbacks[n] == config.fallback.strategy(p)
                    && i.nominal[n] == p.fields.capacity.unwrap_or(p.fields.q)
            })
    }

    /// Whether the bucket of `policy` (its index) and `key` has a live assignment.
    pub fn assigned(&self, policy: usize, key: &[u8]) -> bool {
        let now = self.inner.clock.now();
        let b = self.inner.lock();
        b.by_policy
            .get(policy)
            .and_then(|m| m.get(key))
            .is_some_and(|b| b.assigned(now))
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self) -> Duration {
        self.config.report_interval.saturating_mul(IDLE_INTERVALS)
    }

    /// The policy of `index`, or the store error of a check naming a policy this store
    /// was not made for.
    fn policy(&self, index: usize, name: &str) -> Result<(), StoreError> {
        if self.names.get(index).is_some_and(|n| n == name) {
            Ok(())
        } else {
            Err(StoreError::refused(
                "quota",
                format!("policy {name:?} (index {index}) is not one this quota store was made for"),
            ))
        }
    }

    fn decide(&self, checks: &[StoreCheck<'_>]) -> Result<MultiDecision, StoreError> {
        for c in checks {
            self.policy(c.policy.index, &c.policy.name)?;
        }
        let now = self.clock.now();
        let mut made = false;
        let mut guard = self.lock();
        let b = &mut *guard;
        for c in checks {
            let i = c.policy.index;
            if b.by_policy[i].contains_key(c.key.as_slice()) {
                continue;
            }
            if b.count >= self.config.max_buckets {
                let idle = self.idle();
                let mut dropped = 0;
                for m in &mut b.by_policy {
                    let before = m.len();
                    m.retain(|_, q| now.saturating_since(q.used()) < idle);
                    dropped += before - m.len();
                }
                b.count -= dropped;
            }
            if b.count < self.config.max_buckets {
                b.by_policy[i].insert(
                    c.key.clone(),
                    QuotaBucket::new(self.fallbacks[i], self.nominal[i], now),
                );
                b.count += 1;
                b.fresh.push((i, c.key.clone()));
                made = true;
            }
        }
        let mut spare: Vec<QuotaBucket> = Vec::new();
        let mut decisions: Vec<Decision> = Vec::with_capacity(checks.len());
        for c in checks {
            let i = c.policy.index;
            let d = match b.by_policy[i].get_mut(c.key.as_slice()) {
                Some(q) => q.peek(now, c.cost),
                None => {
                    // past max_buckets: the fallback, untracked
                    let mut q = QuotaBucket::new(self.fallbacks[i], self.nominal[i], now);
                    let d = q.peek(now, c.cost);
                    spare.push(q);
                    d
                }
            };
            decisions.push(d);
        }
        let allowed = decisions.iter().all(|d| d.allowed);
        for (c, d) in checks.iter().zip(decisions.iter_mut()) {
            if let Some(q) = b.by_policy[c.policy.index].get_mut(c.key.as_slice()) {
                if allowed {
                    q.charge(c.cost);
                } else if d.allowed {
                    // not charged: its cost-0 view
                    *d = q.peek(now, 0);
                }
                q.count(allowed);
            }
        }
        drop(guard);
        if made {
            self.made.notify_one();
        }
        Ok(MultiDecision { allowed, decisions })
    }

    /// Usage reports of every bucket (`fresh_only`: of the buckets made since the last
    /// report), dropping idle buckets first; in messages of at most 256 buckets.
    fn reports(&self, fresh_only: bool) -> Vec<RateLimitQuotaUsageReports> {
        let now = self.clock.now();
        let idle = self.idle();
        let mut guard = self.lock();
        let b = &mut *guard;
        let mut usages = Vec::new();
        let mut usage = |i: usize, key: &[u8], q: &mut QuotaBucket| {
            let u = q.take_usage(now);
            usages.push(BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: bucket_entries(&self.names[i], key),
                }),
                time_elapsed: Some(pb_duration(u.elapsed)),
                num_requests_allowed: u.allowed,
                num_requests_denied: u.denied,
            });
        };
        if fresh_only {
            let fresh = std::mem::take(&mut b.fresh);
            for (i, key) in fresh {
                if let Some(q) = b.by_policy[i].get_mut(&key) {
                    usage(i, &key, q);
                }
            }
        } else {
            b.fresh.clear();
            let mut dropped = 0;
            for (i, m) in b.by_policy.iter_mut().enumerate() {
                let before = m.len();
                m.retain(|_, q| now.saturating_since(q.used()) < idle);
                dropped += before - m.len();
                for (key, q) in m.iter_mut() {
                    usage(i, key, q);
                }
            }
            b.count -= dropped;
        }
        drop(guard);
        if usages.is_empty() && fresh_only {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut usages = usages.into_iter().peekable();
        loop {
            let chunk: Vec<BucketQuotaUsage> = usages.by_ref().take(BUCKETS_PER_MESSAGE).collect();
            // an empty message keeps the stream alive while no bucket is held
            out.push(RateLimitQuotaUsageReports {
                domain: self.config.domain.clone(),
                bucket_quota_usages: chunk,
            });
            if usages.peek().is_none() {
                break;
            }
        }
        self.reports.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Apply the server's answer.
    fn apply(&self, response: RateLimitQuotaResponse) {
        let now = self.clock.now();
        let mut b = self.lock();
        for action in response.bucket_action {
            let Some(id) = action.bucket_id else {
                continue;
            };
            let index = id
                .bucket
                .get("policy")
                .and_then(|p| self.names.iter().position(|n| n == p));
            let key = id.bucket.get("key").and_then(|k| key_bytes(k));
            let (Some(i), Some(key)) = (index, key) else {
                tracing::debug!(
                    ?id,
                    "quota: an action for a bucket this client does not hold"
                );
                continue;
            };
            let Some(q) = b.by_policy[i].get_mut(&key) else {
                continue;
            };
            match action.bucket_action {
                Some(Action::QuotaAssignmentAction(a)) => match assignment_of(&a) {
                    Ok(a) => {
                        q.assign(a, now);
                        self.assignments.fetch_add(1, Ordering::Relaxed);
                        self.connected.store(true, Ordering::Relaxed);
                    }
                    Err(e) => tracing::warn!(?id, error = %e, "quota: assignment not applied"),
                },
                Some(Action::AbandonAction(_)) => q.abandon(now),
                None => {}
            }
        }
    }
}

/// The stream's task: open, report, apply; reopen after a backoff.
async fn run(inner: Arc<Inner>, endpoint: Endpoint) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let answered = match endpoint.connect().await {
            Ok(channel) => stream(&inner, channel).await,
            Err(e) => {
                tracing::debug!(server = %inner.config.server, error = %e, "quota server not reached");
                false
            }
        };
        inner.connected.store(false, Ordering::Relaxed);
        if answered {
            backoff = BACKOFF_MIN;
        }
        let jitter = backoff.mul_f64(0.5 + fastrand::f64() * 0.5);
        tokio::time::sleep(jitter).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One stream, until it ends: whether the server answered on it.
async fn stream(inner: &Inner, channel: tonic::transport::Channel) -> bool {
    let mut client = RateLimitQuotaServiceClient::new(channel);
    let (tx, rx) = mpsc::channel::<RateLimitQuotaUsageReports>(16);
    inner.streams.fetch_add(1, Ordering::Relaxed);
    for m in inner.reports(false) {
        if tx.try_send(m).is_err() {
            break;
        }
    }
    let mut responses = match client
        .stream_rate_limit_quotas(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => {
            tracing::debug!(%status, "quota stream refused");
            return false;
        }
    };
    let mut tick = tokio::time::interval(inner.config.report_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut answered = false;
    loop {
        let messages = tokio::select! {
            _ = tick.tick() => inner.reports(false),
            () = inner.made.notified() => inner.reports(true),
            next = responses.message() => {
                match next {
                    Ok(Some(r)) => {
                        answered = true;
                        inner.apply(r);
                        continue;
                    }
                    Ok(None) => return answered,
                    Err(status) => {
                        tracing::info!(%status, "quota stream ended; reconnecting");
                        return answered;
                    }
                }
            }
        };
        for m in messages {
            if tx.send(m).await.is_err() {
                return answered;
            }
        }
    }
}

impl DecisionStore for QuotaStore {
    fn check<'a>(
        &'a self,
        checks: &'a [StoreCheck<'a>],
    ) -> BoxFuture<'a, Result<MultiDecision, StoreError>> {
        self.start_task();
        Box::pin(std::future::ready(self.inner.decide(checks)))
    }

    fn stats(&self) -> Vec<crate::store::PolicyStats> {
        let b = self.inner.lock();
        b.by_policy
            .iter()
            .map(|m| crate::store::PolicyStats {
                keys: m.len() as u64,
                ..Default::default()
            })
            .collect()
    }

    /// True while the current stream has brought an assignment.
    fn reachable(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed)
    }

    fn events(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("quota_report", self.inner.reports.load(Ordering::Relaxed)),
            (
                "quota_assignment",
                self.inner.assignments.load(Ordering::Relaxed),
            ),
            ("quota_stream", self.inner.streams.load(Ordering::Relaxed)),
        ]
    }

    fn peek<'a>(
        &'a self,
        policy: &'a PolicyInfo,
        key: &'a [u8],
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        let answer = self.inner.policy(policy.index, &policy.name).map(|()| {
            let now = self.inner.clock.now();
            let mut b = self.inner.lock();
            match b.by_policy[policy.index].get_mut(key) {
                Some(q) => q.peek(now, 0),
                None => QuotaBucket::new(
                    self.inner.fallbacks[policy.index],
                    self.inner.nominal[policy.index],
                    Nanos(now.0),
                )
                .peek(now, 0),
            }
        });
        Box::pin(std::future::ready(answer))
    }
}
