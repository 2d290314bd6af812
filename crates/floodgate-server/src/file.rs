//! The config file as written: YAML or TOML, deserialized as-is. [`crate::config`] turns
//! it into checked settings and rules; the descriptors are validated there.
//!
//! The descriptor shape is Envoy's ratelimit service's (`domain`, `descriptors` of `key`,
//! optional `value`, `rate_limit: {unit, requests_per_unit, name, replaces, unlimited}`,
//! `shadow_mode`, `detailed_metric`, `value_to_metric`, nested `descriptors`), so an
//! Envoy ratelimit file is a valid floodgate file. Extensions are listed on each field.
//! `store`, `fleet` and `headers` are the sections floodgate proxy reads too
//! (`floodgate_engine::config`), checked as they are deserialized.

use floodgate_engine::config::{FleetSection, HeadersSection, StoreSection};
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Where the three front doors listen.
    #[serde(default)]
    pub listen: ListenFile,
    /// Where limiter state lives (shared with floodgate proxy: `floodgate_engine::config`).
    #[serde(default)]
    pub store: StoreSection,
    /// Several floodgate servers sharing limits (shared with floodgate proxy).
    #[serde(default)]
    pub fleet: FleetSection,
    /// Response headers: RateLimit draft fields, Retry-After jitter, the legacy
    /// X-RateLimit trio (shared with floodgate proxy).
    #[serde(default)]
    pub headers: HeadersSection,
    /// Caps on requests (descriptor counts, sizes).
    #[serde(default)]
    pub limits: LimitsFile,
    /// Timeouts of client connections.
    #[serde(default)]
    pub connections: ConnectionsFile,
    /// Defaults for every rate limit.
    #[serde(default)]
    pub defaults: DefaultsFile,
    /// `error` (default) or `allow` (Envoy's behaviour: every descriptor OK, no limit).
    pub unknown_domain: Option<String>,
    /// How the admin page and API (`/admin` on the HTTP listener) show keys: `plain`
    /// (default), `truncated` or `hashed`.
    pub admin_keys: Option<String>,
    /// Named limits for the HTTP API's `{"key": ..., "policy": NAME}` form.
    #[serde(default)]
    pub policies: std::collections::BTreeMap<String, RateLimitFile>,
    /// Several domains in one file.
    #[serde(default)]
    pub domains: Vec<DomainFile>,
    /// Envoy's one-domain file form: `domain` and `descriptors` at the top level.
    pub domain: Option<String>,
    /// Envoy's one-domain file form.
    #[serde(default)]
    pub descriptors: Vec<DescriptorFile>,
    /// The RESP door's password and command set.
    #[serde(default)]
    pub resp: RespFile,
    /// The HTTP door's bearer token for the `/v1` calls, and the `Host` names it answers.
    #[serde(default)]
    pub http: HttpFile,
    /// TLS on the doors: certificate, key, and the CA of client certificates (mTLS).
    pub tls: Option<TlsFile>,
    /// Buckets of the Rate Limit Quota Service on the gRPC door.
    #[serde(default)]
    pub quota: QuotaFile,
    /// Adaptive concurrency limits for callers that report each request's end
    /// (`/v1/adaptive/acquire` and `/v1/adaptive/release`), by policy name.
    #[serde(default)]
    pub adaptive: std::collections::BTreeMap<String, AdaptiveFile>,
}

/// One adaptive policy (`adaptive: {NAME: {...}}`): the keys of floodgate proxy's
/// adaptive `[[policy]]` (its `adaptive = "..."` is `algorithm` here), less `latency`
/// (the caller releases when its request ends), plus `lease_ttl`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveFile {
    /// `gradient2`, `vegas` or `aimd`.
    pub algorithm: String,
    /// The floor, in requests at once.
    pub min_limit: Option<usize>,
    /// The ceiling, in requests at once.
    pub max_limit: Option<usize>,
    /// The limit at start.
    pub initial_limit: Option<usize>,
    /// Outcomes that count as drops: `5xx`, `timeout`.
    pub drop_on: Option<Vec<String>>,
    /// Requests that may wait for a permit.
    pub queue: Option<usize>,
    /// How long one waits (e.g. `200ms`).
    pub queue_timeout: Option<String>,
    /// A permit never released is given back (without a sample) after this (e.g. `30s`,
    /// the default).
    pub lease_ttl: Option<String>,
    /// Priority classes, highest first.
    #[serde(default)]
    pub classes: Vec<AdaptiveClassFile>,
}

/// One priority class of an adaptive policy.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveClassFile {
    /// The name callers give in `class` (and the metrics' `class` label).
    pub name: String,
    /// The fraction of the limit guaranteed to the class, in [0, 1].
    pub share: f64,
}

/// `listen:` addresses (`host:port`, or `off` to disable a front door).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenFile {
    /// gRPC (Envoy RLS v3 and health). Default `127.0.0.1:8081` (Envoy ratelimit's port).
    pub grpc: Option<String>,
    /// HTTP (`/v1/check`, `/metrics`, `/healthz`). Default `127.0.0.1:8080`.
    pub http: Option<String>,
    /// RESP (`CL.THROTTLE`). Default `127.0.0.1:16379`; never 6379.
    pub resp: Option<String>,
}

/// `limits:` caps on what one request may carry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Most descriptors in one request (default 64).
    pub max_descriptors: Option<u64>,
    /// Most entries in one descriptor (default 16).
    pub max_entries: Option<u64>,
    /// Longest descriptor key or value, in bytes (default 1024).
    pub max_value_bytes: Option<u64>,
    /// Largest request body or gRPC message, in bytes (default 1 MiB).
    pub max_request_bytes: Option<u64>,
}

/// `connections:` caps and timeouts of every door's client connections (durations such
/// as `"10s"`, `"5m"`, each above zero; counts and sizes at least 1).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsFile {
    /// gRPC: how long a new connection may take to send the HTTP/2 preface (default 10s).
    #[serde(default, deserialize_with = "some_timeout")]
    pub preface_timeout: Option<std::time::Duration>,
    /// HTTP: how long a request head may take, from its first octet (default 10s).
    #[serde(default, deserialize_with = "some_timeout")]
    pub head_timeout: Option<std::time::Duration>,
    /// Every door: how long a connection may stay open with nothing under way (default 5m).
    #[serde(default, deserialize_with = "some_timeout")]
    pub idle_timeout: Option<std::time::Duration>,
    /// gRPC: a call's request; HTTP: a request body; RESP: a command, from its first
    /// octet to its last (default 10s).
    #[serde(default, deserialize_with = "some_timeout")]
    pub request_timeout: Option<std::time::Duration>,
    /// Most client connections open at once on each door (default: derived from the
    /// open-descriptor limit at start, at most 16,384).
    pub max_connections: Option<u64>,
    /// Most client connections open at once from one address on each door (default: a
    /// quarter of `max_connections`, at most 1,024).
    pub max_connections_per_client: Option<u64>,
    /// RESP: the largest command, octets (default 69,632: a 64 KiB argument and 4 KiB for
    /// the rest).
    pub max_command_bytes: Option<u64>,
    /// gRPC: request octets one connection may hold unanswered, its HTTP/2 connection
    /// window (default twice the stream window; at least `limits.max_request_bytes` + 5).
    pub grpc_connection_window: Option<u64>,
}

fn some_timeout<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    floodgate_core::de::timeout(d).map(Some)
}

/// `defaults:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultsFile {
    /// Algorithm of every limit that names none (default `gcra`).
    pub algorithm: Option<String>,
}

/// One domain: Envoy's file shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainFile {
    /// The domain name requests carry.
    pub domain: String,
    /// The rules.
    #[serde(default)]
    pub descriptors: Vec<DescriptorFile>,
}

/// One descriptor rule (Envoy's shape; `rate_limits` is floodgate's).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorFile {
    /// The entry key to match.
    pub key: String,
    /// The value to match; absent: any value, each value limited on its own. A value
    /// ending in `*` matches values by prefix (Envoy's wildcard), each value on its own.
    pub value: Option<String>,
    /// The limit (Envoy).
    pub rate_limit: Option<RateLimitFile>,
    /// Several limits on this descriptor, checked all-or-nothing (floodgate).
    #[serde(default)]
    pub rate_limits: Vec<RateLimitFile>,
    /// At most this many requests matching this rule at once, per value (floodgate):
    /// a lease per admitted check, given back through `/v1/release` (HTTP and RESP doors).
    pub max_in_flight: Option<u64>,
    /// With `max_in_flight`: how long a lease lives unless released or renewed (e.g.
    /// `30s`, the default).
    pub lease_ttl: Option<String>,
    /// Evaluate and count, never deny (Envoy).
    #[serde(default)]
    pub shadow_mode: bool,
    /// Metrics labelled with the full descriptor including values (Envoy).
    #[serde(default)]
    pub detailed_metric: bool,
    /// Metrics labelled with this entry's value (Envoy).
    #[serde(default)]
    pub value_to_metric: bool,
    /// Nested rules.
    #[serde(default)]
    pub descriptors: Vec<DescriptorFile>,
}

/// One limit: Envoy's `rate_limit` block plus floodgate's fields.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitFile {
    /// Name (headers, statuses, `replaces`) (Envoy).
    pub name: Option<String>,
    /// Names of limits this one replaces when both match a request (Envoy).
    #[serde(default)]
    pub replaces: Vec<ReplaceFile>,
    /// `second`, `minute`, `hour`, `day`, `week`, `month` (30 d), `year` (365 d) (Envoy).
    pub unit: Option<String>,
    /// Requests per unit (Envoy); 0 blocks every request.
    pub requests_per_unit: Option<u64>,
    /// Never limited (Envoy).
    #[serde(default)]
    pub unlimited: bool,
    /// Any window instead of `unit`: `30s`, `1.5m`, `250ms` (floodgate).
    pub window: Option<String>,
    /// `COUNT/PERIOD` instead of `requests_per_unit` + `unit`: `100/30s` (floodgate).
    pub rate: Option<String>,
    /// `gcra` (default), `fixed-window`, `sliding-log`, `sliding-counter`, `token-bucket`,
    /// `leaky-meter`, `leaky-queue` (floodgate).
    pub algorithm: Option<String>,
    /// Requests admitted at once above one (capacity = burst + 1), as nginx and
    /// redis-cell (floodgate).
    pub burst: Option<u64>,
    /// Requests admitted at once from rest (default: the rate's count) (floodgate).
    pub capacity: Option<u64>,
}

/// An entry of `replaces`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaceFile {
    /// The name of the replaced limit.
    pub name: String,
}

/// `resp:` the RESP door's password (`AUTH`) and which commands it takes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespFile {
    /// The password, in the file (prefer `password_file` or `password_env`).
    pub password: Option<String>,
    /// A file whose content (less one trailing newline) is the password.
    pub password_file: Option<std::path::PathBuf>,
    /// An environment variable holding the password.
    pub password_env: Option<String>,
    /// The user name of Redis 6's `AUTH <username> <password>` (default `default`).
    pub username: Option<String>,
    /// Refuse the commands whose rate or limit the caller chooses (`CL.THROTTLE`,
    /// `FG.ACQUIRE`): callers take the config's policies (`FG.THROTTLE`, `FG.RESERVE`).
    #[serde(default)]
    pub policies_only: bool,
}

/// `http:` the token the HTTP door's `/v1` calls must carry (`Authorization: Bearer`),
/// and the `Host` names `/v1` and `/admin` answer.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFile {
    /// `Host` names `/v1` and `/admin` answer besides loopback ones (`localhost`,
    /// `127.0.0.0/8`, `[::1]`), any port: host names or IP addresses, without a port.
    /// Any other `Host` gets 421 (a guard against DNS rebinding).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// The token, in the file (prefer `token_file` or `token_env`).
    pub token: Option<String>,
    /// A file whose content (less one trailing newline) is the token.
    pub token_file: Option<std::path::PathBuf>,
    /// An environment variable holding the token.
    pub token_env: Option<String>,
}

/// `tls:` TLS on the doors (rustls).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// The server's certificate chain, PEM, leaf first.
    pub cert_file: std::path::PathBuf,
    /// The server's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: std::path::PathBuf,
    /// CA certificates, PEM: when set, every client must present a certificate signed by
    /// one of them (mutual TLS).
    pub client_ca_file: Option<std::path::PathBuf>,
    /// The doors that speak TLS: any of `grpc`, `http`, `resp` (default all three).
    pub doors: Option<Vec<String>>,
}

/// `quota:` the buckets of the Rate Limit Quota Service (Envoy's
/// `envoy.service.rate_limit_quota.v3`), served on the gRPC door.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaFile {
    /// The domains clients report in (a client names its domain in its first report).
    #[serde(default)]
    pub domains: Vec<QuotaDomainFile>,
    /// What a bucket no rule matches gets (and every bucket of a domain not listed):
    /// `deny` (the default: a deny-all assignment), `allow` (an allow-all assignment) or
    /// `default` (the limit of `default_bucket`, each such bucket on its own).
    #[serde(default)]
    pub unknown_bucket: Option<UnknownBucketFile>,
    /// The bucket settings of `unknown_bucket: default` (no `match`).
    pub default_bucket: Option<QuotaBucketFile>,
    /// Most clients sharing one bucket at once (default 1,000); a client past it gets a
    /// deny-all assignment for that bucket until another leaves.
    #[serde(default, deserialize_with = "some_count")]
    pub max_clients_per_bucket: Option<usize>,
    /// Most buckets one stream may report (default 100); a report past it ends the
    /// stream with `RESOURCE_EXHAUSTED`.
    #[serde(default, deserialize_with = "some_count")]
    pub max_buckets_per_stream: Option<usize>,
    /// Most buckets tracked in process at once (default 100,000): a new bucket past it
    /// gets a deny-all assignment until one expires.
    #[serde(default, deserialize_with = "some_count")]
    pub max_buckets: Option<usize>,
}

fn some_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    floodgate_core::de::positive_count(d).map(Some)
}

fn some_positive<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    floodgate_core::de::positive_duration(d).map(Some)
}

/// `quota.unknown_bucket`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownBucketFile {
    /// A deny-all assignment.
    Deny,
    /// An allow-all assignment.
    Allow,
    /// `default_bucket`'s limit.
    Default,
}

/// One quota domain.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaDomainFile {
    /// The domain clients name in their first report.
    pub domain: String,
    /// Its buckets, the first matching rule applying.
    #[serde(default)]
    pub buckets: Vec<QuotaBucketFile>,
}

/// One bucket rule: which `BucketId`s it matches and the global limit each of them gets.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaBucketFile {
    /// `BucketId` keys and values the bucket must carry (others may be there too); the
    /// value `*` matches any value. Each distinct `BucketId` matched is a bucket of its
    /// own with the whole limit.
    #[serde(default, rename = "match")]
    pub matches: std::collections::BTreeMap<String, String>,
    /// The global limit, `COUNT/PERIOD` (`100/s`, `6000/m`).
    pub rate: Option<floodgate_core::Rate>,
    /// Requests admitted at once above one, over all clients (capacity = burst + 1;
    /// default: the rate's count less one).
    pub burst: Option<u64>,
    /// How shares are sent: `token_bucket` (default) or `requests_per_time_unit` (the
    /// rate's period must then be one second, minute, hour or day).
    pub strategy: Option<StrategyFile>,
    /// How often clients report (their filter's `reporting_interval`; default `5s`).
    #[serde(default, deserialize_with = "some_positive")]
    pub report_interval: Option<std::time::Duration>,
    /// How long an assignment holds (default three report intervals; more than one).
    #[serde(default, deserialize_with = "some_positive")]
    pub assignment_ttl: Option<std::time::Duration>,
    /// The least share of a live client, `COUNT/PERIOD` (default 1% of the rate).
    pub floor: Option<floodgate_core::Rate>,
    /// What clients do before their first assignment (their filter's
    /// `no_assignment_behavior`): `allow_all` (default) or `deny_all`.
    pub no_assignment: Option<FallbackFile>,
    /// What clients do once an assignment expired (their filter's
    /// `expired_assignment_behavior`): `reuse_last` (default), `allow_all` or `deny_all`.
    pub expired_assignment: Option<FallbackFile>,
}

/// `strategy:` of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyFile {
    /// Token bucket.
    TokenBucket,
    /// Requests per time unit.
    RequestsPerTimeUnit,
}

/// `no_assignment:` / `expired_assignment:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackFile {
    /// Allow every request.
    AllowAll,
    /// Deny every request.
    DenyAll,
    /// Keep applying the last assignment.
    ReuseLast,
}
