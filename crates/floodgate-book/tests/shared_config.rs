//! The sections floodgate proxy and floodgate server share (docs/shared-config.md) read
//! the same from the proxy's TOML, the server's TOML and the server's YAML, and a bad
//! value in any of them gets one message naming the file, line, column and field.

use std::path::Path;

use floodgate_engine::config::{FleetSection, HeadersSection, StoreSection};

const SHARED_TOML: &str = r#"[store]
type = "redis"
max_keys = 5000
[store.redis]
url = "redis://127.0.0.1:6379/3"
prefix = "shared:"
timeout = "25ms"
connect_timeout = "2s"
breaker_open_for = "100ms"
deny_cache_keys = 10
time = "caller"
module = "always"
fault_policy = "fail-closed"
[fleet]
strategy = "hybrid"
nodes = ["10.0.0.1:8080", "10.0.0.2:8080"]
self = "10.0.0.1:8080"
lease = 4
lease_ttl = "2s"
[headers]
ratelimit = true
legacy = "epoch"
delay = false
retry_after_jitter = "0s"
"#;

const SHARED_YAML: &str = r#"store:
  type: redis
  max_keys: 5000
  redis:
    url: redis://127.0.0.1:6379/3
    prefix: "shared:"
    timeout: 25ms
    connect_timeout: 2s
    breaker_open_for: 100ms
    deny_cache_keys: 10
    time: caller
    module: always
    fault_policy: fail-closed
fleet:
  strategy: hybrid
  nodes: ["10.0.0.1:8080", "10.0.0.2:8080"]
  self: "10.0.0.1:8080"
  lease: 4
  lease_ttl: 2s
headers:
  ratelimit: true
  legacy: epoch
  delay: false
  retry_after_jitter: 0s
"#;

const PROXY_REST: &str = "[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"10/s\"\n";
const SERVER_TOML_REST: &str = "[[domains]]\ndomain = \"edge\"\n";
const SERVER_YAML_REST: &str = "domain: edge\n";

type Sections = (StoreSection, FleetSection, HeadersSection);

fn proxy(shared: &str) -> Result<Sections, String> {
    let src = format!("{shared}{PROXY_REST}");
    let c = floodgate_proxy::config::Config::parse(&src, Path::new("floodgate.toml"))
        .map_err(|e| e.to_string())?;
    Ok((c.store, c.fleet, c.headers))
}

fn server(shared: &str, file: &str, rest: &str) -> Result<Sections, String> {
    let src = format!("{shared}{rest}");
    let path = Path::new(file);
    // the server accepts the file as it is ...
    floodgate_server::config::parse(path, &src).map_err(|e| e.to_string())?;
    // ... and its file type holds the shared sections
    let f: floodgate_server::file::FileConfig = if file.ends_with(".yaml") {
        floodgate_engine::config::from_yaml(path, &src)
    } else {
        floodgate_engine::config::from_toml(path, &src)
    }
    .map_err(|e| e.to_string())?;
    Ok((f.store, f.fleet, f.headers))
}

#[test]
fn proxy_toml_server_toml_and_server_yaml_read_equal_sections() {
    let p = proxy(SHARED_TOML).unwrap();
    let st = server(SHARED_TOML, "limits.toml", SERVER_TOML_REST).unwrap();
    let sy = server(SHARED_YAML, "limits.yaml", SERVER_YAML_REST).unwrap();
    assert_eq!(p, st);
    assert_eq!(st, sy);
    assert_eq!(p.0.redis().timeout, std::time::Duration::from_millis(25));
    assert_eq!(p.1.count(), 2);
    assert_eq!(
        p.0.redis().store_config().module,
        floodgate_redis::ModuleUse::Always
    );
    // one store: the server's startup settings hold the value the proxy opens its store from
    let yaml = format!("{SHARED_YAML}{SERVER_YAML_REST}");
    let server_cfg = floodgate_server::config::parse(Path::new("limits.yaml"), &yaml).unwrap();
    assert_eq!(server_cfg.settings.store, p.0.settings());
    assert_eq!(p.0.settings().max_keys(), 5000);
}

#[test]
fn a_bad_value_gets_one_message_in_all_three() {
    for (good_toml, bad_toml, field, message) in [
        (
            "timeout = \"25ms\"",
            "timeout = \"0s\"",
            "store.redis.timeout",
            "a timeout of 0 would fail every request; give a duration above zero, e.g. \"30s\"",
        ),
        (
            "lease = 4",
            "lease = 0",
            "fleet.lease",
            "lease must be at least 1 (hybrid leases)",
        ),
        (
            "legacy = \"epoch\"",
            "legacy = \"sometimes\"",
            "headers.legacy",
            "\"sometimes\": expected off, delta or epoch",
        ),
    ] {
        // the same key and value in YAML, unquoted
        let yaml_form = |t: &str| t.replace(" = ", ": ").replace('"', "");
        let (good_yaml, bad_yaml) = (yaml_form(good_toml), yaml_form(bad_toml));
        let toml = SHARED_TOML.replace(good_toml, bad_toml);
        let yaml = SHARED_YAML.replace(&good_yaml, &bad_yaml);
        let toml_line = SHARED_TOML.lines().position(|l| l == good_toml).unwrap() + 1;
        let yaml_line = SHARED_YAML
            .lines()
            .position(|l| l.trim() == good_yaml)
            .unwrap()
            + 1;
        let p = proxy(&toml).unwrap_err();
        let st = server(&toml, "limits.toml", SERVER_TOML_REST).unwrap_err();
        let sy = server(&yaml, "limits.yaml", SERVER_YAML_REST).unwrap_err();
        let tail = format!(": {field}: {message}");
        assert!(
            p.starts_with(&format!("floodgate.toml:{toml_line}:")) && p.ends_with(&tail),
            "{p}"
        );
        assert!(
            st.starts_with(&format!("limits.toml:{toml_line}:")) && st.ends_with(&tail),
            "{st}"
        );
        assert!(
            sy.starts_with(&format!("limits.yaml:{yaml_line}:")) && sy.ends_with(&tail),
            "{sy}"
        );
        // the same place in the two TOML files
        assert_eq!(
            p.trim_start_matches("floodgate.toml"),
            st.trim_start_matches("limits.toml")
        );
    }
}
