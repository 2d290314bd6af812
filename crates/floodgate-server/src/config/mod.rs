//! Loading and checking the config file: YAML (`.yaml`, `.yml`) or TOML (`.toml`), by
//! extension. Every error names the file and where in it the problem is.
//!
//! [`load`] returns a [`Config`]: [`Settings`] (read once at startup: listen addresses and
//! the store) and [`Rules`] (hot-reloadable: domains, policies, headers, caps).
//!
//! The file's parts are checked by job: `settings` (listen addresses, the store, the
//! fleet) and `rules` (domains, descriptors, limits, policies, headers, caps). `store`,
//! `fleet` and `headers` are the sections floodgate proxy shares
//! (`floodgate_engine::config`): checked while deserialized, their errors read
//! `FILE:LINE:COLUMN: FIELD: MESSAGE` as the proxy's do.

mod adaptive;
mod envoy_dir;
mod limitador;
mod quota;
mod rules;
mod security;
mod settings;

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::file::FileConfig;

pub use adaptive::AdaptiveDef;
pub use envoy_dir::root as layout_root;
/// `store:`, resolved: the type floodgate proxy's `[store]` resolves to as well.
pub use floodgate_engine::config::StoreSettings;
pub use limitador::{Condition, SelectorDef, detect as is_limitador};
pub use quota::{BucketValue, DEFAULT_REPORT_INTERVAL, QuotaBucketDef, QuotaRules, UnknownBucket};
pub use rules::{
    Caps, DescriptorDef, HeaderSettings, LimitDef, Rules, Unit, UnknownDomain, ValueMatch,
};
pub use security::{
    DEFAULT_USER, HttpSettings, Password, RespAuth, RespSettings, constant_time_eq,
    exposure_warnings,
};
pub use settings::{
    ConnectionSettings, DEFAULT_MAX_COMMAND_BYTES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, FleetSettings, RESERVED_DESCRIPTORS, Settings,
};

/// A config file that cannot be used. The message names the file and the place in it.
#[derive(Debug, Error)]
pub enum ConfigFileError {
    /// The file cannot be read.
    #[error("{path}: cannot read the config file: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The extension says neither YAML nor TOML.
    #[error("{path}: unknown config format; the file name must end in .yaml, .yml or .toml")]
    Format {
        /// The file.
        path: PathBuf,
    },
    /// Not valid YAML/TOML, a field of the wrong type or unknown name, or a value of the
    /// shared sections that is wrong: `FILE:LINE:COLUMN: FIELD: MESSAGE`.
    #[error(transparent)]
    Parse(#[from] floodgate_engine::config::ConfigError),
    /// Well-formed, but a value is wrong.
    #[error("{path}: {at}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where: e.g. `domain "edge" > remote_address > rate_limit`.
        at: String,
        /// What is wrong.
        message: String,
    },
}

/// Everything the file says.
#[derive(Debug, Clone)]
pub struct Config {
    /// Startup-only settings.
    pub settings: Settings,
    /// Hot-reloadable rules.
    pub rules: Rules,
    /// Keys read in an old spelling (logged by [`load`]).
    pub renamed: Vec<floodgate_engine::config::Renamed>,
    /// What the reader should know of how the file is served (logged by [`load`], printed
    /// by `--check`): e.g. the boundary burst of a Limitador file's fixed windows.
    pub notes: Vec<String>,
}

/// Read and check `path`: a file, or a directory in Envoy's layout (its `config/`
/// subdirectory's `*.yaml` files, one domain per file or per YAML document).
pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
    let (cfg, _) = read(path)?;
    floodgate_engine::config::warn_renamed(path, &cfg.renamed);
    for note in &cfg.notes {
        tracing::info!(file = %path.display(), "{note}");
    }
    Ok(cfg)
}

/// Read and check `path` (a file or an Envoy layout directory): the config and the text
/// it was read from (for a directory, every file's name and text), which a reload
/// compares to see a change.
pub fn read(path: &Path) -> Result<(Config, String), ConfigFileError> {
    if path.is_dir() {
        let (file, text) = envoy_dir::read(path)?;
        let cfg = compile(file).map_err(|(at, message)| ConfigFileError::Invalid {
            path: envoy_dir::root(path),
            at,
            message,
        })?;
        return Ok((cfg, text));
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((parse(path, &text)?, text))
}

/// The text [`read`] would read at `path` (`None` when it cannot be read), to see whether
/// it changed without checking it.
pub fn text(path: &Path) -> Option<String> {
    if path.is_dir() {
        envoy_dir::read(path).ok().map(|(_, t)| t)
    } else {
        std::fs::read_to_string(path).ok()
    }
}

/// Check `text` as the content of `path` (the extension picks the format; a YAML file
/// whose top level is a list is Limitador's limits file, [`is_limitador`]).
///
/// ```
/// use std::path::Path;
/// use floodgate_server::config::{parse, Unit};
/// let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 60}\n";
/// let c = parse(Path::new("limits.yaml"), yaml)?;
/// assert_eq!(c.rules.domains["edge"][0].limits[0].unit, Unit::Minute);
/// let e = parse(Path::new("limits.yaml"), "domain: edge\ndescriptors: [{key: user, rate_limit: {unit: minute}}]\n");
/// assert!(e.unwrap_err().to_string().contains("requests_per_unit is missing"));
/// # Ok::<(), floodgate_server::ConfigFileError>(())
/// ```
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigFileError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let mut file: FileConfig = match ext.as_deref() {
        Some("yaml" | "yml") if limitador::detect(text) => return limitador::parse(path, text),
        Some("yaml" | "yml") => floodgate_engine::config::from_yaml(path, text)?,
        Some("toml") => floodgate_engine::config::from_toml(path, text)?,
        _ => {
            return Err(ConfigFileError::Format {
                path: path.to_path_buf(),
            });
        }
    };
    settings::check_fleet(&file)
        .map_err(|m| floodgate_engine::config::ConfigError::in_section(path, text, "fleet", m))?;
    let mut renamed = std::mem::take(&mut file.store.renamed);
    renamed.append(&mut file.headers.renamed);
    let mut cfg = compile(file).map_err(|(at, message)| ConfigFileError::Invalid {
        path: path.to_path_buf(),
        at,
        message,
    })?;
    cfg.renamed = renamed;
    Ok(cfg)
}

/// The file `text` (read from `path`) as the admin API shows it: its fields as JSON,
/// secrets redacted by the engine (`null` when it does not parse).
pub fn shown(path: &Path, text: &str) -> serde_json::Value {
    floodgate_engine::config::shown(path, text)
}

pub(crate) type Invalid = (String, String);

pub(crate) fn invalid(at: impl Into<String>, message: impl Into<String>) -> Invalid {
    (at.into(), message.into())
}

pub(crate) fn positive(
    at: &str,
    field: &str,
    v: Option<u64>,
    default: u64,
) -> Result<usize, Invalid> {
    let v = v.unwrap_or(default);
    if v == 0 {
        return Err(invalid(at, format!("{field} must be at least 1, got 0")));
    }
    usize::try_from(v).map_err(|_| invalid(at, format!("{field} {v} is too large")))
}
/// Check a deserialized file.
pub fn compile(file: FileConfig) -> Result<Config, Invalid> {
    settings::check_fleet(&file).map_err(|m| invalid("fleet", m))?;
    let settings = settings::settings(&file)?;
    let rules = rules::rules(file)?;
    Ok(Config {
        settings,
        rules,
        renamed: Vec::new(),
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_core::Kind;
    use floodgate_engine::fleet::Strategy;
    use std::time::Duration;

    fn yaml(text: &str) -> Result<Config, ConfigFileError> {
        parse(Path::new("limits.yaml"), text)
    }

    fn err(text: &str) -> String {
        yaml(text).unwrap_err().to_string()
    }

    #[test]
    fn envoy_file_parses_as_is() {
        let c = yaml(
            "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n  - key: database\n    value: default\n    rate_limit:\n      unit: SECOND\n      requests_per_unit: 0\n    shadow_mode: true\n",
        )
        .unwrap();
        let d = &c.rules.domains["mongo_cps"];
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].value, ValueMatch::Exact("users".into()));
        let l = &d[0].limits[0];
        assert_eq!(
            (l.requests_per_unit, l.unit, l.name.as_str()),
            (500, Unit::Second, "database=users")
        );
        assert_eq!(l.spec.as_ref().unwrap().kind, Kind::Gcra);
        assert!(d[1].limits[0].spec.is_none(), "0 per unit blocks");
        assert!(d[1].shadow);
    }

    #[test]
    fn extensions_and_toml_give_the_same_rules() {
        let y = yaml(
            "domains:\n  - domain: edge\n    descriptors:\n      - key: user\n        rate_limits:\n          - {requests_per_unit: 100, window: 30s, algorithm: sliding-log, name: short}\n          - {rate: 1000/h, burst: 9}\n",
        )
        .unwrap();
        let t = parse(
            Path::new("limits.toml"),
            "[[domains]]\ndomain = \"edge\"\n[[domains.descriptors]]\nkey = \"user\"\nrate_limits = [\n  { requests_per_unit = 100, window = \"30s\", algorithm = \"sliding-log\", name = \"short\" },\n  { rate = \"1000/h\", burst = 9 },\n]\n",
        )
        .unwrap();
        let (a, b) = (
            &y.rules.domains["edge"][0].limits,
            &t.rules.domains["edge"][0].limits,
        );
        assert_eq!(a, b);
        assert_eq!(a[0].unit, Unit::Unknown);
        assert_eq!(a[0].window, Duration::from_secs(30));
        assert_eq!(a[1].name, "user#2");
        assert_eq!(a[1].unit, Unit::Hour);
        assert_eq!(a[1].spec.as_ref().unwrap().capacity, Some(10));
        // RateLimit-Policy: the sustained rate (and a bucket's capacity)
        let f = |l: &LimitDef| (l.fields.q, l.fields.w, l.fields.capacity);
        assert_eq!(f(&a[1]), (1000, 3600, Some(10)));
        assert_eq!(f(&a[0]), (100, 30, None));
    }

    #[test]
    fn a_rule_rate_reads_the_limits_notation() {
        let y = yaml(
            "domain: edge\ndescriptors:\n  - key: user\n    rate_limits:\n      - {rate: 100 per minute}\n      - {rate: 10 per 2 minutes, algorithm: sliding-log}\n      - {rate: 5/Hour}\n      - {rate: 2/months}\n",
        )
        .unwrap();
        let got: Vec<(u64, Duration)> = y.rules.domains["edge"][0]
            .limits
            .iter()
            .map(|l| (l.requests_per_unit, l.window))
            .collect();
        assert_eq!(
            got,
            vec![
                (100, Duration::from_secs(60)),
                (10, Duration::from_secs(120)),
                (5, Duration::from_secs(3600)),
                (2, Duration::from_secs(30 * 86_400)),
            ]
        );
        let e = err(
            "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {rate: 1/second; 100/minute}\n",
        );
        assert!(
            e.contains("domain \"edge\" > user > rate_limit") && e.contains("several limits"),
            "{e}"
        );
    }

    #[test]
    fn connection_caps_and_sizes_out_of_range_name_their_field() {
        let d = "domain: d\ndescriptors: [{key: k}]\n";
        let cases = [
            (
                "max_connections: 0",
                "connections.max_connections",
                "at least 1",
            ),
            ("max_connections: -1", "max_connections", "-1"),
            (
                "max_connections_per_client: 0",
                "connections.max_connections_per_client",
                "at least 1",
            ),
            (
                "max_connections: 2, max_connections_per_client: 3",
                "connections.max_connections_per_client",
                "above max_connections 2",
            ),
            (
                "max_command_bytes: 0",
                "connections.max_command_bytes",
                "at least 1",
            ),
            (
                "max_command_bytes: 18446744073709551616",
                "max_command_bytes",
                "18446744073709551616",
            ),
            (
                "grpc_connection_window: 1000",
                "connections.grpc_connection_window",
                "below the largest request",
            ),
            (
                "grpc_connection_window: 4294967296",
                "connections.grpc_connection_window",
                "above HTTP/2's largest window",
            ),
            ("head_timeout: 0s", "head_timeout", ""),
        ];
        for (fields, field, words) in cases {
            let e = err(&format!("{d}connections: {{{fields}}}\n"));
            assert!(e.contains(field) && e.contains(words), "{fields}: {e}");
        }
        let c = yaml(&format!("{d}connections: {{max_connections: 9, max_command_bytes: 100, grpc_connection_window: 1048581, head_timeout: 2s}}\n"))
            .unwrap()
            .settings
            .connections;
        assert_eq!(c.max_connections, Some(9));
        assert_eq!(c.max_command_bytes, 100);
        assert_eq!(c.grpc_connection_window, Some(1_048_581));
        assert_eq!(c.head_timeout, Duration::from_secs(2));
        // derived caps: the descriptor limit less a reserve, shared by the doors
        let c = ConnectionSettings::default();
        assert_eq!(c.caps(1024, 3), (320, 80));
        assert_eq!(c.caps(1_048_576, 3), (16_384, 1_024));
        assert_eq!(c.caps(10, 3), (1, 1));
        let set = ConnectionSettings {
            max_connections: Some(100),
            ..c
        };
        assert_eq!(set.caps(1024, 3), (100, 25));
    }

    #[test]
    fn errors_name_the_file_and_the_place() {
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
        );
        assert!(
            e.starts_with("limits.yaml: domain \"d\" > k > rate_limit: unit \"fortnight\""),
            "{e}"
        );
        let e = err("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n");
        assert!(e.contains("requests_per_unit is missing"), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n",
        );
        assert!(e.contains("unknown algorithm \"magic\""), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
        );
        // the shared form: FILE:LINE:COLUMN: FIELD: MESSAGE
        assert!(
            e.starts_with("limits.yaml:4:5: descriptors[0].rate_limt: ")
                && e.contains("unknown field `rate_limt`"),
            "{e}"
        );
        let e = err("domain: d\ndescriptors:\n  - key: k\n  - key: k\n");
        assert!(e.contains("duplicate descriptor"), "{e}");
        let e = err("domains: [{domain: a}, {domain: a}]\n");
        assert!(e.contains("defined twice"), "{e}");
        let e = err("listen: {resp: 127.0.0.1:6379}\n");
        assert!(e.contains("6379 is Redis's own port"), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 0s, requests_per_unit: 3}\n",
        );
        assert!(e.contains("longer than 0"), "{e}");
        let e = err(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3, burst: 1, capacity: 2}\n",
        );
        assert!(e.contains("either burst or capacity"), "{e}");
        let e = err("store: {type: redis, redis: {fault_policy: maybe}}\n");
        assert!(e.contains("fail-open or fail-closed"), "{e}");
        let e = parse(Path::new("limits.json"), "{}")
            .unwrap_err()
            .to_string();
        assert!(e.contains(".yaml, .yml or .toml"), "{e}");
        let e = parse(Path::new("l.toml"), "domain = 3")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("l.toml:1:10: domain: ") && e.contains("invalid type"),
            "{e}"
        );
        let e = load(Path::new("/nonexistent/limits.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/limits.yaml: cannot read"), "{e}");
    }

    #[test]
    fn fleet_strategies_are_checked_against_the_store() {
        let c = yaml("fleet: {strategy: local, nodes: 3}\n").unwrap();
        assert_eq!(
            (c.settings.fleet.strategy, c.settings.fleet.nodes),
            (Some(Strategy::Local), 3)
        );
        let c = yaml("store: {type: redis}\nfleet: {strategy: hybrid, nodes: 2, lease: 5, lease_ttl: 500ms}\n").unwrap();
        assert_eq!(
            c.settings.fleet,
            FleetSettings {
                strategy: Some(Strategy::Hybrid),
                nodes: 2,
                lease: 5,
                lease_ttl: Duration::from_millis(500)
            }
        );
        assert!(err("fleet: {strategy: shared}\n").contains("set store type redis"));
        assert!(
            err("store: {type: redis}\nfleet: {strategy: local, nodes: 2}\n")
                .contains("takes store type memory")
        );
        assert!(err("fleet: {strategy: local}\n").contains("needs nodes"));
        assert!(err("fleet: {strategy: local, nodes: 0}\n").contains("nodes must be at least 1"));
        // the nodes' addresses count as well as a count (the proxy's form)
        let c = yaml("fleet: {strategy: local, nodes: [\"10.0.0.1:8081\", \"10.0.0.2:8081\"], self: \"10.0.0.2:8081\"}\n").unwrap();
        assert_eq!(c.settings.fleet.nodes, 2);
        assert!(err("fleet: {strategy: sticky, nodes: 2}\n").contains("floodgate proxy"));
        assert!(
            err("fleet: {strategy: gossip}\n").contains("expected single, local, shared or hybrid")
        );
    }

    #[test]
    fn wildcards_unlimited_and_defaults() {
        let c = yaml(
            "defaults: {algorithm: fixed-window}\nunknown_domain: allow\ndomain: d\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: vip\n    rate_limit: {unlimited: true}\n",
        )
        .unwrap();
        let d = &c.rules.domains["d"];
        assert_eq!(d[0].value, ValueMatch::Prefix("/api/".into()));
        assert_eq!(
            d[0].limits[0].spec.as_ref().unwrap().kind,
            Kind::FixedWindow
        );
        assert!(d[1].unlimited && d[1].limits.is_empty());
        assert_eq!(c.rules.unknown_domain, UnknownDomain::Allow);
        assert_eq!(c.settings.grpc, Some("127.0.0.1:8081".parse().unwrap()));
        assert_eq!(c.settings.resp, Some("127.0.0.1:16379".parse().unwrap()));
        let e = err(
            "domain: d\ndescriptors:\n  - key: vip\n    rate_limit: {unlimited: true, unit: second, requests_per_unit: 1}\n",
        );
        assert!(e.contains("unlimited: true takes no unit"), "{e}");
    }
}
