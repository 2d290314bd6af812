//! The proxy's own tables of the config file: `[client_ip]`, `[deny]`, `[delay]`,
//! `[allowlist]`, `[[policy]]`, `[[route]]`, `[tls]`, `[upstream_tls]` (`[store]`, `[fleet]` and `[headers]` are the
//! sections shared with floodgate server: `floodgate_engine::config`).

use std::ops::Range;
use std::path::PathBuf;

use floodgate_http::policy::InFlightSpec;
use floodgate_net::tls::{CertFiles, TlsVersion, UpstreamTlsOptions};

use crate::access_log::{AccessFormat, AccessLogConfig, AccessTarget};

use super::*;

/// `[client_ip]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClientIpSection {
    /// Peers whose forwarding header is read.
    #[serde(default, deserialize_with = "de_nets")]
    pub trusted_proxies: Vec<IpNet>,
    /// `x-forwarded-for` (default) or `forwarded`.
    #[serde(default)]
    pub header: ForwardedHeader,
    /// 0..=32, default 32.
    pub ipv4_prefix: Option<u8>,
    /// 0..=128, default 64.
    pub ipv6_prefix: Option<u8>,
}

/// `[deny]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DenySection {
    /// Rate-limit denial status (default 429).
    #[serde(default, deserialize_with = "de_opt_status")]
    pub status: Option<StatusCode>,
    /// Old spelling of `headers.retry_after_jitter`.
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub retry_after_jitter: Option<Duration>,
    /// deny | allow | fallback.
    #[serde(default)]
    pub missing_key: MissingKeyChoice,
    /// Status for missing keys (default 400).
    #[serde(default, deserialize_with = "de_opt_status")]
    pub missing_key_status: Option<StatusCode>,
    /// The key for `missing_key = "fallback"`.
    pub fallback_key: Option<String>,
    /// Old spelling of `store.redis.fault_policy`: allow | deny when the store fails.
    #[serde(default, deserialize_with = "fault_policy_legacy")]
    pub store_error: Option<StoreFailure>,
}

/// `missing_key`.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum MissingKeyChoice {
    #[default]
    Deny,
    Allow,
    Fallback,
}

/// `[delay]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DelaySection {
    /// Requests held at once (default 10 000).
    pub max_waiting: Option<usize>,
}

/// `[allowlist]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AllowlistSection {
    /// IPs and CIDRs.
    #[serde(default, deserialize_with = "de_nets")]
    pub ips: Vec<IpNet>,
    /// Header-derived keys.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// `[log]`: the rejection log and the access log (the process log's filter and format
/// are the command's: `FLOODGATE_LOG`, `--log-format`).
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// The level of the line logged per rejected request: error, warn (default), info,
    /// debug or off (nginx's `limit_req_log_level`).
    #[serde(default, deserialize_with = "de_opt_level")]
    pub rejection_level: Option<RejectionLevel>,
    /// Most rejection lines a second (default 10); the rest are counted and told in one
    /// `N rejection lines suppressed` line.
    pub rejections_per_second: Option<u32>,
    /// How log lines show keys: plain (default), truncated or hashed.
    #[serde(default, deserialize_with = "de_opt_key_display")]
    pub keys: Option<KeyDisplay>,
    /// The access log: a file (appended to, reopened on `SIGUSR1` and after a reload) or
    /// `"stdout"`; absent: no access log. Read at startup.
    #[serde(default, deserialize_with = "de_opt_access_target")]
    pub access_log: Option<AccessTarget>,
    /// The access log's format: `combined` (default: nginx's, then floodgate's fields)
    /// or `json` (one object per line). Read at startup.
    pub access_format: Option<AccessFormat>,
}

/// `log.rejection_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejectionLevel(pub Option<tracing::Level>);

impl LogSection {
    /// The rejection log this section asks for.
    pub fn rejection_log(&self) -> floodgate_http::RejectionLogConfig {
        floodgate_http::RejectionLogConfig {
            level: self
                .rejection_level
                .map_or(Some(tracing::Level::WARN), |l| l.0),
            per_second: self.rejections_per_second.unwrap_or(10),
            keys: self.keys.unwrap_or_default(),
        }
    }

    /// The access log this section asks for, if any.
    pub fn access_log(&self) -> Option<AccessLogConfig> {
        self.access_log.clone().map(|target| AccessLogConfig {
            target,
            format: self.access_format.unwrap_or_default(),
        })
    }
}

/// Why a configured limiter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildConfigError {
    /// Invalid policies or settings.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The Redis store could not be reached or set up.
    #[error("store {url}: {message}")]
    Store {
        /// The URL, password redacted.
        url: String,
        /// What went wrong.
        message: String,
    },
}

/// `[[policy]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// Name (printable ASCII).
    pub name: String,
    /// Algorithm (default leaky-queue, as nginx).
    #[serde(default = "default_kind")]
    pub algorithm: Kind,
    /// COUNT/PERIOD (required, unless `max_in_flight` is set).
    #[serde(default)]
    pub rate: Option<Rate>,
    /// nginx / redis-cell burst: capacity - 1.
    pub burst: Option<u64>,
    /// Units admitted at once from rest.
    pub capacity: Option<u64>,
    /// leaky-queue: never delay.
    #[serde(default)]
    pub nodelay: bool,
    /// leaky-queue: delay only beyond this many excess requests.
    pub delay: Option<u64>,
    /// What to count by (default ip).
    pub key: Option<KeySpec>,
    /// Shadow mode: decided, counted and logged, never enforced.
    #[serde(default)]
    pub dry_run: bool,
    /// A dry-run policy shows in the response's rate-limit headers (default false).
    #[serde(default)]
    pub advertise: bool,
    /// At most this many requests of one key in flight at once (instead of a rate).
    pub max_in_flight: Option<u64>,
    /// max_in_flight: how long a lease lives unless its response ends first (default 30 s).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub lease_ttl: Option<Duration>,
    /// max_in_flight, adaptive: requests that may wait for a place on this node
    /// (default 0).
    pub queue: Option<usize>,
    /// max_in_flight, adaptive: the longest a queued request waits (default 1 s).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub queue_timeout: Option<Duration>,
    /// An adaptive concurrency limit driven by this algorithm: `gradient2`, `vegas` or
    /// `aimd` (instead of a rate; `docs/adaptive.md`).
    pub adaptive: Option<String>,
    /// adaptive: the floor of the limit (default 1).
    pub min_limit: Option<usize>,
    /// adaptive: the ceiling of the limit (default 200).
    pub max_limit: Option<usize>,
    /// adaptive: the limit at start (default 20, or the floor when above).
    pub initial_limit: Option<usize>,
    /// adaptive: when a request's latency is taken: `head` (default) or `end`.
    pub latency: Option<String>,
    /// adaptive: responses that count as drops: `5xx`, `timeout` (default both).
    pub drop_on: Option<Vec<String>>,
    /// adaptive: the priority classes, highest first (`[[policy.class]]`).
    #[serde(default)]
    pub class: Vec<ClassSection>,
}

/// The lease TTL of a `max_in_flight` policy without `lease_ttl`.
pub use floodgate_engine::inflight::DEFAULT_LEASE_TTL;
/// The queue timeout of a `max_in_flight` policy with a `queue` and no `queue_timeout`.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(1);

fn default_kind() -> Kind {
    Kind::LeakyQueue
}

/// `[[route]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Path prefix (default "/").
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Methods (default any).
    #[serde(default, deserialize_with = "de_methods")]
    pub methods: Vec<Method>,
    /// Policy names.
    pub policies: Vec<Spanned<String>>,
    /// The upstream group its requests go to (default: the group `default`, the
    /// top-level `upstream`).
    pub upstream: Option<Spanned<String>>,
    /// Cost per request under every policy (default 1).
    pub cost: Option<u64>,
    /// Per-policy cost overrides.
    #[serde(default)]
    pub costs: std::collections::BTreeMap<Spanned<String>, u64>,
    /// Settle the cost after the response: the estimate a request is admitted at (under
    /// every policy of the route, instead of `cost`/`costs`).
    pub estimate: Option<u64>,
    /// A request header carrying the estimate instead (absent: `estimate`, default 1).
    #[serde(default, deserialize_with = "de_opt_header")]
    pub estimate_header: Option<HeaderName>,
    /// A response header carrying the actual cost.
    #[serde(default, deserialize_with = "de_opt_header")]
    pub cost_header: Option<HeaderName>,
    /// A response trailer carrying the actual cost (a streamed body's).
    #[serde(default, deserialize_with = "de_opt_header")]
    pub cost_trailer: Option<HeaderName>,
    /// Units charged when the actual cost never arrives (the client left and the body
    /// could not be read to its trailer, the upstream failed, the header or trailer was
    /// missing or malformed). Default: the request's estimate.
    pub abort_cost: Option<u64>,
    /// How long an abandoned response's body is read on for its cost trailer (above
    /// zero; default 60 s).
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub abort_drain_timeout: Option<Duration>,
    /// How many octets of an abandoned response's body are read for its cost trailer,
    /// at most (at least 1; default 16 MiB).
    #[serde(default, deserialize_with = "de_opt_octets")]
    pub abort_drain_bytes: Option<u64>,
}

impl RouteSection {
    /// The route's settle spec, when it settles its cost after the response.
    pub(super) fn settle(&self) -> Option<floodgate_http::SettleSpec> {
        let settles = self.estimate.is_some()
            || self.estimate_header.is_some()
            || self.cost_header.is_some()
            || self.cost_trailer.is_some();
        settles.then(|| floodgate_http::SettleSpec {
            estimate: self.estimate.unwrap_or(1),
            estimate_header: self.estimate_header.clone(),
            cost_header: self.cost_header.clone(),
            cost_trailer: self.cost_trailer.clone(),
            abort_cost: self.abort_cost,
            abort_drain_timeout: self
                .abort_drain_timeout
                .unwrap_or(floodgate_http::SettleSpec::DEFAULT_ABORT_DRAIN_TIMEOUT),
            abort_drain_bytes: self
                .abort_drain_bytes
                .unwrap_or(floodgate_http::SettleSpec::DEFAULT_ABORT_DRAIN_BYTES),
        })
    }

    /// Why the route's abort options cannot apply (they need a settled cost, and the
    /// drain bounds a cost trailer), naming the option.
    pub(super) fn abort_options_error(&self) -> Option<String> {
        let settles = self.cost_header.is_some() || self.cost_trailer.is_some();
        if self.abort_cost.is_some() && !settles {
            return Some(format!(
                "route {:?}: abort_cost applies to a route that settles its cost (cost_header or cost_trailer)",
                self.prefix
            ));
        }
        let drain = [
            ("abort_drain_timeout", self.abort_drain_timeout.is_some()),
            ("abort_drain_bytes", self.abort_drain_bytes.is_some()),
        ];
        drain
            .iter()
            .find(|(_, set)| *set && self.cost_trailer.is_none())
            .map(|(name, _)| {
                format!(
                    "route {:?}: {name} bounds the reading of an abandoned body for its cost trailer, which needs cost_trailer",
                    self.prefix
                )
            })
    }
}

fn default_prefix() -> String {
    "/".into()
}

impl PolicySection {
    /// The policy this table defines, validated (its key and dry-run flag not yet set).
    pub(super) fn policy(&self) -> Result<Policy, String> {
        if self.advertise && !self.dry_run {
            return Err(
                "advertise applies to a dry_run policy (an enforced policy is always advertised)"
                    .into(),
            );
        }
        if let Some(p) = self.adaptive_policy()? {
            return Ok(p);
        }
        let Some(n) = self.max_in_flight else {
            if self.lease_ttl.is_some() || self.queue.is_some() || self.queue_timeout.is_some() {
                return Err(
                    "lease_ttl applies only with max_in_flight, queue and queue_timeout only with max_in_flight or adaptive".into(),
                );
            }
            return Ok(Policy::new(self.name.clone(), self.spec()?));
        };
        if self.rate.is_some()
            || self.burst.is_some()
            || self.capacity.is_some()
            || self.nodelay
            || self.delay.is_some()
        {
            return Err("max_in_flight limits requests at once, not a rate: remove rate, burst, capacity, nodelay and delay (a rate goes in a policy of its own, listed on the same route)".into());
        }
        let queue = self.queue.unwrap_or(0);
        let spec = InFlightSpec::new(n, self.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL))
            .and_then(|s| {
                s.with_queue(
                    queue,
                    self.queue_timeout.unwrap_or(if queue > 0 {
                        DEFAULT_QUEUE_TIMEOUT
                    } else {
                        Duration::ZERO
                    }),
                )
            })
            .map_err(|e| e.to_string())?;
        Ok(Policy::max_in_flight(self.name.clone(), spec))
    }

    pub(super) fn spec(&self) -> Result<Spec, String> {
        let rate = self
            .rate
            .ok_or("rate is required (COUNT/PERIOD such as \"10/s\"), or max_in_flight")?;
        rate_spec(
            self.algorithm,
            rate,
            RateShape {
                burst: self.burst,
                capacity: self.capacity,
                nodelay: self.nodelay,
                delay: self.delay,
            },
        )
    }
}

/// The shaping of a rate policy (`burst`/`capacity`, `nodelay`/`delay`), shared with
/// every surface that reads the proxy's policy fields.
pub use floodgate_http::shape::{DEFAULT_CAPACITY, RateShape, rate_spec};

/// `[tls]`: TLS on the listener. One certificate (`cert_file` and `key_file`), or
/// several (`[[tls.certificate]]`), chosen by the name the client asks for (SNI) among
/// each certificate's subject alternative names; the first is the default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The certificate chain (PEM, leaf first).
    pub cert_file: Option<Spanned<PathBuf>>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<Spanned<PathBuf>>,
    /// More certificates, each with `cert_file` and `key_file`.
    #[serde(default, rename = "certificate")]
    pub certificates: Vec<CertificateSection>,
    /// The oldest version accepted: "1.2" (default) or "1.3".
    #[serde(default, deserialize_with = "de_opt_tls_version")]
    pub min_version: Option<TlsVersion>,
    /// How often the certificate and key files are read again (default 60 s; "0s":
    /// never).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub reload_interval: Option<Duration>,
    /// Longest a client may take to complete the handshake (default 10 s).
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub handshake_timeout: Option<Duration>,
}

/// One `[[tls.certificate]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateSection {
    /// The certificate chain (PEM, leaf first).
    pub cert_file: Spanned<PathBuf>,
    /// Its private key (PEM).
    pub key_file: Spanned<PathBuf>,
}

/// `[upstream_tls]`: how an `https://` upstream is verified.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsSection {
    /// The CA bundle (PEM) the upstream's certificate must chain to (default: the
    /// system's roots).
    pub ca_file: Option<Spanned<PathBuf>>,
    /// The name sent as SNI and checked against the certificate (default: the
    /// upstream URL's host).
    pub server_name: Option<String>,
    /// Accept any certificate (logged as a warning at start). Default false.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// Certificate files and the places of their `cert_file` and `key_file` in the file.
pub(super) type PlacedCertFiles = (CertFiles, [Range<usize>; 2]);

impl TlsSection {
    /// The certificate files, `cert_file`/`key_file` first, each with the spans of its
    /// two fields; an error when a certificate lacks one of the two, or there is none.
    pub(super) fn files(&self) -> Result<Vec<PlacedCertFiles>, String> {
        let mut out = Vec::new();
        match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => out.push((
                CertFiles {
                    cert_file: c.get_ref().clone(),
                    key_file: k.get_ref().clone(),
                },
                [c.span(), k.span()],
            )),
            (None, None) => {}
            (Some(_), None) => return Err("cert_file is given without key_file".into()),
            (None, Some(_)) => return Err("key_file is given without cert_file".into()),
        }
        for c in &self.certificates {
            out.push((
                CertFiles {
                    cert_file: c.cert_file.get_ref().clone(),
                    key_file: c.key_file.get_ref().clone(),
                },
                [c.cert_file.span(), c.key_file.span()],
            ));
        }
        if out.is_empty() {
            return Err(
                "no certificate: give cert_file and key_file, or [[tls.certificate]] tables".into(),
            );
        }
        Ok(out)
    }
}

impl UpstreamTlsSection {
    /// The options the proxy's upstream connector takes.
    pub fn options(&self) -> UpstreamTlsOptions {
        UpstreamTlsOptions {
            ca_file: self.ca_file.as_ref().map(|c| c.get_ref().clone()),
            server_name: self.server_name.clone(),
            insecure_skip_verify: self.insecure_skip_verify,
        }
    }
}
