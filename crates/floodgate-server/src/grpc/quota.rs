//! Envoy's Rate Limit Quota Service on the gRPC door:
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`.
//!
//! A client opens one stream and sends usage reports: the first names the domain; the
//! first report of a `BucketId` subscribes it. Every report is answered on the stream
//! with one `RateLimitQuotaResponse` holding an action per bucket reported:
//!
//! * a bucket a rule matches: its demand (`num_requests_allowed + num_requests_denied`
//!   over `time_elapsed`) is recorded ([`DemandBook`]), the bucket's limit is divided
//!   among its live clients ([`crate::quota::share`]) and the client's share is sent as a
//!   `QuotaAssignmentAction` (`TokenBucket` or `RequestsPerTimeUnit`) with the rule's
//!   `assignment_time_to_live`. Clients report every interval, so shares follow demand,
//!   and a reload's new limits reach every client, within one interval;
//! * a bucket no rule matches: `quota.unknown_bucket` (deny all, allow all, or the
//!   default bucket's limit);
//! * a bucket whose rule a reload removed: an `AbandonAction` (the client forgets it; a
//!   later report subscribes again and gets the unknown bucket's answer);
//! * a bucket past `quota.max_clients_per_bucket` (or the server's `max_buckets`): deny
//!   all, until a place frees;
//! * a store failure: no action for the bucket (the client keeps its assignment until it
//!   expires, then follows its `expired_assignment_behavior`).
//!
//! Between a client's reports the server also pushes: every report interval (the
//! shortest of the rules its buckets matched, at least 100 ms) each stream's buckets are
//! divided again from the live reports (recording nothing: [`DemandBook::read`]), and
//! the buckets whose assignment changed since the last one sent on the stream get the
//! new one. So shares converge on other clients' reports (and on a silent client's
//! report ageing out of the division) without waiting for this client's next report.
//!
//! Caps: the door's message size (`limits.max_request_bytes`), HTTP/2's concurrent
//! streams per connection, `quota.max_buckets_per_stream` (past it the stream ends with
//! `RESOURCE_EXHAUSTED`), `limits.max_entries` and `limits.max_value_bytes` on each
//! `BucketId`, and a stream with no report for the door's idle timeout is ended
//! (`DEADLINE_EXCEEDED`). When the server stops, every stream ends with `UNAVAILABLE`, so
//! that clients reconnect (to another server) rather than hold the shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use floodgate_engine::quota::envoy::assignment_action;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::config::{Caps, DEFAULT_REPORT_INTERVAL, QuotaBucketDef, QuotaRules, UnknownBucket};
use crate::descriptors::Engine;
use crate::quota::{
    Assignment, BookError, BucketView, ClientView, DemandBook, QuotaStrategy, QuotaView, Report,
    demand_of, strategy_for,
};

/// Pushes are at most this frequent, whatever the rules' report intervals.
const MIN_PUSH_INTERVAL: Duration = Duration::from_millis(100);

/// The time to live of a deny-all or allow-all answer to a bucket no rule matches.
pub const UNKNOWN_BUCKET_TTL: Duration = Duration::from_secs(15);

/// The quota service over the shared [`Engine`]'s rules.
#[derive(Debug, Clone)]
pub struct QuotaService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    engine: Arc<Engine>,
    book: DemandBook,
    view: Arc<QuotaView>,
    /// This process's part of every client name (clients of several replicas share a
    /// bucket in Redis).
    replica: String,
    streams: AtomicU64,
    idle: Duration,
    /// Turns true when the server stops: every stream ends with `UNAVAILABLE` (the client
    /// reconnects, to another server behind its cluster).
    stop: watch::Receiver<bool>,
}

impl QuotaService {
    /// The service: reports kept in `book`, divisions shown in `view`; a stream with no
    /// report for `idle` is ended, and every stream when `stop` turns true.
    pub fn new(
        engine: Arc<Engine>,
        book: DemandBook,
        view: Arc<QuotaView>,
        idle: Duration,
        stop: watch::Receiver<bool>,
    ) -> QuotaService {
        QuotaService {
            inner: Arc::new(Inner {
                engine,
                book,
                view,
                replica: format!("{:08x}", fastrand::u32(..)),
                streams: AtomicU64::new(0),
                idle,
                stop,
            }),
        }
    }

    /// The tonic server of this service, accepting messages up to `max_bytes`.
    pub fn into_server(self, max_bytes: usize) -> RateLimitQuotaServiceServer<QuotaService> {
        RateLimitQuotaServiceServer::new(self).max_decoding_message_size(max_bytes)
    }
}

#[tonic::async_trait]
impl RateLimitQuotaService for QuotaService {
    type StreamRateLimitQuotasStream = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let n = self.inner.streams.fetch_add(1, Ordering::Relaxed);
        let client = format!("{}-{n}", self.inner.replica);
        let (tx, rx) = mpsc::channel(4);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut stream = StreamState {
                client,
                domain: None,
                buckets: HashMap::new(),
            };
            let mut reports = request.into_inner();
            let mut stop = inner.stop.clone();
            let mut idle_since = tokio::time::Instant::now();
            // pushes tick on their own, whatever the client's reports
            let mut push_at = idle_since + inner.push_interval(&stream);
            loop {
                let idle_at = idle_since + inner.idle;
                let next = tokio::select! {
                    next = reports.message() => next,
                    () = tokio::time::sleep_until(push_at.min(idle_at)) => {
                        if tokio::time::Instant::now() >= idle_at {
                            let _ = tx
                                .send(Err(Status::deadline_exceeded(format!(
                                    "no usage report for {:?}; reconnect to report again",
                                    inner.idle
                                ))))
                                .await;
                            return;
                        }
                        push_at = tokio::time::Instant::now() + inner.push_interval(&stream);
                        if let Some(push) = inner.push(&mut stream).await {
                            inner.view.count_push();
                            if tx.send(Ok(push)).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                    () = tx.closed() => return,
                    () = async { drop(stop.wait_for(|s| *s).await) } => {
                        let _ = tx
                            .send(Err(Status::unavailable(
                                "the server is stopping; reconnect to report again",
                            )))
                            .await;
                        return;
                    }
                };
                let reports = match next {
                    Ok(Some(r)) => r,
                    Ok(None) => return,
                    Err(status) => {
                        tracing::debug!(%status, "quota stream ended by the client");
                        return;
                    }
                };
                idle_since = tokio::time::Instant::now();
                inner.view.count_report();
                let answer = inner.answer(&mut stream, reports).await;
                // a first bucket (or a rule of a shorter interval) brings the push nearer
                push_at = push_at.min(idle_since + inner.push_interval(&stream));
                let end = answer.is_err();
                if tx.send(answer).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// What one stream knows: its client name, its domain, the buckets it subscribed.
struct StreamState {
    client: String,
    domain: Option<String>,
    /// Bucket key -> what the stream knows of it.
    buckets: HashMap<String, Subscribed>,
}

/// One bucket a stream subscribed.
struct Subscribed {
    /// The rule it matched at its last report (`None`: no rule).
    rule: Option<String>,
    /// Its `BucketId`, as reported.
    id: BucketId,
    /// Its name for people (`DOMAIN|key=value,...`).
    name: String,
    /// The assignment last sent for it on this stream.
    sent: Option<Assignment>,
}

/// A `BucketId` under the request caps, as a key: the domain and the sorted entries,
/// each length-prefixed (injective whatever the values hold), and a name for people.
fn bucket_key(domain: &str, id: &BucketId, caps: &Caps) -> Result<(String, String), Status> {
    if id.bucket.is_empty() {
        return Err(Status::invalid_argument("a bucket_id with no entries"));
    }
    if id.bucket.len() > caps.max_entries {
        return Err(Status::invalid_argument(format!(
            "a bucket_id with {} entries; at most {} (limits.max_entries)",
            id.bucket.len(),
            caps.max_entries
        )));
    }
    let mut entries: Vec<(&String, &String)> = id.bucket.iter().collect();
    entries.sort();
    let mut key = format!("{}:{domain}", domain.len());
    let mut name = format!("{domain}|");
    for (i, (k, v)) in entries.iter().enumerate() {
        if k.len() > caps.max_value_bytes || v.len() > caps.max_value_bytes {
            return Err(Status::invalid_argument(format!(
                "bucket_id entry {k:?}: a key or value above {} bytes (limits.max_value_bytes)",
                caps.max_value_bytes
            )));
        }
        key.push_str(&format!("{}:{k}{}:{v}", k.len(), v.len()));
        if i > 0 {
            name.push(',');
        }
        name.push_str(&format!("{k}={v}"));
    }
    Ok((key, name))
}

impl Inner {
    /// The answer to one message of reports (an error status ends the stream).
    async fn answer(
        &self,
        stream: &mut StreamState,
        reports: RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, Status> {
        let domain = match &stream.domain {
            Some(d) => d.clone(),
            None => {
                if reports.domain.is_empty() {
                    return Err(Status::invalid_argument(
                        "the first usage report must name the domain",
                    ));
                }
                stream.domain = Some(reports.domain.clone());
                reports.domain.clone()
            }
        };
        let generation = self.engine.current();
        let rules = &generation.rules;
        let quota = &rules.quota;
        let mut actions = Vec::with_capacity(reports.bucket_quota_usages.len());
        for usage in &reports.bucket_quota_usages {
            let id = usage
                .bucket_id
                .as_ref()
                .ok_or_else(|| Status::invalid_argument("a bucket usage without a bucket_id"))?;
            let (key, name) = bucket_key(&domain, id, &rules.caps)?;
            let rule = quota.rule(&domain, |k| id.bucket.get(k).map(String::as_str));
            let known = stream.buckets.get(&key).map(|b| b.rule.is_some());
            if known.is_none() && stream.buckets.len() >= quota.max_buckets_per_stream {
                return Err(Status::resource_exhausted(format!(
                    "a stream may report at most {} buckets (quota.max_buckets_per_stream)",
                    quota.max_buckets_per_stream
                )));
            }
            if known == Some(true) && rule.is_none() {
                // its rule was removed by a reload: the client forgets the bucket
                stream.buckets.remove(&key);
                actions.push(BucketAction {
                    bucket_id: Some(id.clone()),
                    bucket_action: Some(Action::AbandonAction(AbandonAction {})),
                });
                continue;
            }
            let elapsed = usage
                .time_elapsed
                .map(|d| {
                    Duration::new(
                        u64::try_from(d.seconds).unwrap_or(0),
                        u32::try_from(d.nanos).unwrap_or(0).min(999_999_999),
                    )
                })
                .unwrap_or_default();
            let assignment = match (rule, &quota.unknown) {
                (Some(def), _) => {
                    self.assign(&key, &name, &stream.client, def, quota, usage, elapsed)
                        .await
                }
                (None, UnknownBucket::Default(def)) => {
                    self.assign(&key, &name, &stream.client, def, quota, usage, elapsed)
                        .await
                }
                (None, UnknownBucket::Allow) => Some(Assignment {
                    strategy: QuotaStrategy::AllowAll,
                    ttl: UNKNOWN_BUCKET_TTL,
                }),
                (None, UnknownBucket::Deny) => Some(Assignment {
                    strategy: QuotaStrategy::DenyAll,
                    ttl: UNKNOWN_BUCKET_TTL,
                }),
            };
            stream.buckets.insert(
                key.clone(),
                Subscribed {
                    rule: rule.map(|r| r.name.clone()),
                    id: id.clone(),
                    name,
                    sent: assignment,
                },
            );
            if let Some(a) = assignment {
                actions.push(BucketAction {
                    bucket_id: Some(id.clone()),
                    bucket_action: Some(Action::QuotaAssignmentAction(assignment_action(&a))),
                });
            }
        }
        Ok(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// How long until the next push to `stream`: the shortest report interval of the
    /// rules its buckets matched ([`DEFAULT_REPORT_INTERVAL`] without one).
    fn push_interval(&self, stream: &StreamState) -> Duration {
        let generation = self.engine.current();
        let quota = &generation.rules.quota;
        let Some(domain) = &stream.domain else {
            return DEFAULT_REPORT_INTERVAL;
        };
        stream
            .buckets
            .values()
            .filter_map(|b| {
                quota
                    .rule(domain, |k| b.id.bucket.get(k).map(String::as_str))
                    .or(match &quota.unknown {
                        UnknownBucket::Default(d) => Some(d),
                        _ => None,
                    })
            })
            .map(|d| d.report_interval)
            .min()
            .unwrap_or(DEFAULT_REPORT_INTERVAL)
            .max(MIN_PUSH_INTERVAL)
    }

    /// Fresh assignments for the buckets of `stream` whose division changed since the
    /// last one sent on it (other clients' reports came or aged out): divided from the
    /// live reports, recording nothing. `None` when nothing changed.
    async fn push(&self, stream: &mut StreamState) -> Option<RateLimitQuotaResponse> {
        let domain = stream.domain.clone()?;
        let generation = self.engine.current();
        let quota = &generation.rules.quota;
        let mut actions = Vec::new();
        for (key, b) in stream.buckets.iter_mut() {
            let def = match (
                quota.rule(&domain, |k| b.id.bucket.get(k).map(String::as_str)),
                &quota.unknown,
            ) {
                (Some(def), _) => def,
                (None, UnknownBucket::Default(def)) => def,
                // allow all or deny all: nothing to divide
                (None, _) => continue,
            };
            let recorded = match self.book.read(key, def.assignment_ttl).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(bucket = b.name, error = %e, "quota push: the store failed");
                    continue;
                }
            };
            let Some(a) = self.divide(&b.name, &stream.client, def, &recorded) else {
                continue;
            };
            if b.sent == Some(a) {
                continue;
            }
            b.sent = Some(a);
            actions.push(BucketAction {
                bucket_id: Some(b.id.clone()),
                bucket_action: Some(Action::QuotaAssignmentAction(assignment_action(&a))),
            });
        }
        (!actions.is_empty()).then_some(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// Record the usage and divide the bucket: this client's assignment (`None` when the
    /// store failed).
    #[allow(clippy::too_many_arguments)]
    async fn assign(
        &self,
        key: &str,
        name: &str,
        client: &str,
        def: &QuotaBucketDef,
        quota: &QuotaRules,
        usage: &envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage,
        elapsed: Duration,
    ) -> Option<Assignment> {
        let demand = demand_of(
            usage.num_requests_allowed,
            usage.num_requests_denied,
            elapsed,
            def.report_interval,
        );
        let report = Report {
            bucket: key,
            client,
            demand,
            ttl: def.assignment_ttl,
            max_clients: quota.max_clients_per_bucket,
            max_buckets: quota.max_buckets,
        };
        let deny = Assignment {
            strategy: QuotaStrategy::DenyAll,
            ttl: def.assignment_ttl,
        };
        let recorded = match self.book.record(report).await {
            Ok(r) => r,
            Err(e @ (BookError::ClientsFull(_) | BookError::BucketsFull(_))) => {
                tracing::debug!(bucket = name, error = %e, "quota bucket full: deny all");
                return Some(deny);
            }
            Err(e) => {
                tracing::warn!(bucket = name, error = %e, "quota store failed: no assignment sent; the client's current one runs to its time to live");
                return None;
            }
        };
        self.divide(name, client, def, &recorded)
    }

    /// `client`'s assignment in the division of `recorded` under `def` (shown in the
    /// view); `None` when the client is not among the live reports.
    fn divide(
        &self,
        name: &str,
        client: &str,
        def: &QuotaBucketDef,
        recorded: &crate::quota::Recorded,
    ) -> Option<Assignment> {
        let ttl_ms = u64::try_from(def.assignment_ttl.as_millis()).unwrap_or(u64::MAX);
        let shares = def
            .division
            .shares(&recorded.clients, recorded.now_ms, ttl_ms);
        let limit = def.division.limit();
        let mine = shares.iter().find(|(c, _)| c.client == client).map(|x| x.1);
        self.view.set(
            name,
            BucketView {
                rule: def.name.clone(),
                limit,
                divided_ms: recorded.now_ms,
                ttl_ms,
                clients: shares
                    .iter()
                    .map(|(c, share)| ClientView {
                        client: c.client.clone(),
                        demand: c.demand,
                        share: *share,
                    })
                    .collect(),
            },
        );
        let share = mine?;
        Some(Assignment {
            strategy: strategy_for(def.strategy, share, limit, def.capacity, def.unit),
            ttl: def.assignment_ttl,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_keys_are_injective_and_capped() {
        let caps = Caps::default();
        let id = |pairs: &[(&str, &str)]| BucketId {
            bucket: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let (a, name) = bucket_key("d", &id(&[("b", "2"), ("a", "1")]), &caps).unwrap();
        assert_eq!(name, "d|a=1,b=2");
        let (b, _) = bucket_key("d", &id(&[("a", "1,b=2")]), &caps).unwrap();
        assert_ne!(a, b);
        let (c, _) = bucket_key("d|a", &id(&[("x", "1")]), &caps).unwrap();
        let (d, _) = bucket_key("d", &id(&[("a|x", "1")]), &caps).unwrap();
        assert_ne!(c, d);
        assert!(bucket_key("d", &id(&[]), &caps).is_err());
        let long = "x".repeat(caps.max_value_bytes + 1);
        assert!(bucket_key("d", &id(&[("k", &long)]), &caps).is_err());
        let many: Vec<(String, String)> = (0..=caps.max_entries)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert!(bucket_key("d", &id(&many), &caps).is_err());
    }
}
