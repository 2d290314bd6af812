use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::*;
use crate::StoreFailure;
use crate::fleet::Strategy;
use crate::headers::ResetFormat;

/// The shared sections as a file holds them.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Shared {
    #[serde(default)]
    store: StoreSection,
    #[serde(default)]
    fleet: FleetSection,
    #[serde(default)]
    headers: HeadersSection,
}

const TOML: &str = r#"[store]
type = "redis"
max_keys = 5000
[store.redis]
url = "redis://127.0.0.1:6379/2"
prefix = "fg:"
timeout = "20ms"
connect_timeout = "2s"
breaker_open_for = "0s"
deny_cache_keys = 0
time = "caller"
module = "never"
fault_policy = "fail-closed"
[fleet]
strategy = "hybrid"
nodes = 3
lease = 5
lease_ttl = "500ms"
[headers]
ratelimit = false
legacy = "epoch"
delay = false
retry_after_jitter = "0s"
"#;

const YAML: &str = r#"store:
  type: redis
  max_keys: 5000
  redis:
    url: redis://127.0.0.1:6379/2
    prefix: "fg:"
    timeout: 20ms
    connect_timeout: 2s
    breaker_open_for: 0s
    deny_cache_keys: 0
    time: caller
    module: never
    fault_policy: fail-closed
fleet:
  strategy: hybrid
  nodes: 3
  lease: 5
  lease_ttl: 500ms
headers:
  ratelimit: false
  legacy: epoch
  delay: false
  retry_after_jitter: 0s
"#;

#[test]
fn toml_and_yaml_give_equal_sections() {
    let t: Shared = from_toml(Path::new("f.toml"), TOML).unwrap();
    let y: Shared = from_yaml(Path::new("f.yaml"), YAML).unwrap();
    assert_eq!(t, y);
    let r = t.store.redis();
    assert_eq!(r.timeout, Duration::from_millis(20));
    assert_eq!(r.fault_policy, StoreFailure::Deny);
    assert_eq!(r.store_config().time, floodgate_redis::TimeSource::Caller);
    assert_eq!(r.store_config().module, floodgate_redis::ModuleUse::Never);
    assert_eq!(t.store.max_keys(), 5000);
    assert_eq!(t.fleet.strategy, Some(Strategy::Hybrid));
    assert_eq!(t.fleet.count(), 3);
    assert_eq!(t.headers.legacy, Some(ResetFormat::Epoch));
    // nothing given: the same defaults in both
    let t: Shared = from_toml(Path::new("f.toml"), "").unwrap();
    let y: Shared = from_yaml(Path::new("f.yaml"), "").unwrap();
    assert_eq!(t, y);
    assert_eq!(t.store.max_keys(), DEFAULT_MAX_KEYS);
    assert_eq!(
        t.store.redis().store_config().timeout,
        Duration::from_millis(50)
    );
    assert_eq!(
        t.store.redis().store_config().module,
        floodgate_redis::ModuleUse::Auto
    );
    assert!(t.headers.ratelimit && t.headers.delay && t.headers.legacy.is_none());
    assert_eq!(t.fleet, FleetSection::default());
}

/// A bad value gets one message in both formats, naming the file, line, column and field.
#[test]
fn a_bad_value_gets_the_same_message_in_toml_and_yaml() {
    let cases = [
        (
            "timeout = \"20ms\"",
            "timeout: 20ms",
            "timeout = \"0s\"",
            "store.redis.timeout: a timeout of 0 would fail every request",
        ),
        (
            "prefix = \"fg:\"",
            "prefix: \"fg:\"",
            "prefix = \"{fg}\"",
            "store.redis.prefix: \"{fg}\": a prefix must not contain",
        ),
        (
            "fault_policy = \"fail-closed\"",
            "fault_policy: fail-closed",
            "fault_policy = \"maybe\"",
            "store.redis.fault_policy: \"maybe\": expected fail-open or fail-closed",
        ),
        (
            "module = \"never\"",
            "module: never",
            "module = \"sometimes\"",
            "store.redis.module: \"sometimes\": expected auto, always or never",
        ),
    ];
    for (toml_line, yaml_line, bad_toml, want) in cases {
        let bad_yaml = bad_toml.replace(" = ", ": ");
        let t = from_toml::<Shared>(Path::new("f.toml"), &TOML.replace(toml_line, bad_toml))
            .unwrap_err();
        let y = from_yaml::<Shared>(Path::new("f.yaml"), &YAML.replace(yaml_line, &bad_yaml))
            .unwrap_err();
        let (
            ConfigError::Invalid {
                line: tl,
                field: tf,
                message: tm,
                ..
            },
            ConfigError::Invalid {
                line: yl,
                field: yf,
                message: ym,
                ..
            },
        ) = (&t, &y)
        else {
            panic!("{t} / {y}");
        };
        assert_eq!((tf, tm), (yf, ym), "{t} / {y}");
        assert!(t.to_string().contains(want), "{t}");
        // the value's line in each file
        let tline = TOML.lines().position(|l| l == toml_line).unwrap() + 1;
        let yline = YAML.lines().position(|l| l.trim() == yaml_line).unwrap() + 1;
        assert_eq!((*tl, *yl), (tline, yline), "{t} / {y}");
        assert!(
            t.to_string().starts_with(&format!("f.toml:{tline}:")),
            "{t}"
        );
        assert!(
            y.to_string().starts_with(&format!("f.yaml:{yline}:")),
            "{y}"
        );
    }
}

#[test]
fn fleet_nodes_are_a_count_or_addresses() {
    let f: Shared = from_toml(
        Path::new("f.toml"),
        "[fleet]\nstrategy = \"sticky\"\nnodes = [\"10.0.0.1:80\", \"10.0.0.2:80\"]\nself = \"10.0.0.2:80\"\n",
    )
    .unwrap();
    assert_eq!(f.fleet.count(), 2);
    let fleet = f.fleet.fleet().unwrap().unwrap();
    assert_eq!(fleet.self_node(), "10.0.0.2:80");
    let bad = |src: &str| {
        from_yaml::<Shared>(Path::new("f.yaml"), src)
            .unwrap_err()
            .to_string()
    };
    let e = bad("fleet: {strategy: local, nodes: 0}\n");
    assert!(
        e.starts_with("f.yaml:1:") && e.contains("fleet.nodes: nodes must be at least 1"),
        "{e}"
    );
    let e = bad("fleet: {strategy: local}\n");
    assert!(e.contains("fleet: strategy local needs nodes"), "{e}");
    let e = bad("fleet: {strategy: sticky, nodes: 2}\n");
    assert!(e.contains("not a count"), "{e}");
    let e = bad("fleet: {strategy: local, nodes: [a]}\n");
    assert!(e.contains("node \"a\" is not host:port"), "{e}");
    let e = bad("fleet: {strategy: local, nodes: 2, self: \"a:1\"}\n");
    assert!(e.contains("give nodes as a list"), "{e}");
    let e = bad("fleet: {strategy: gossip}\n");
    assert!(
        e.contains("unknown strategy \"gossip\"; expected single, local, shared or hybrid"),
        "{e}"
    );
    // a count is enough to divide by, not to know the peers
    let f: Shared = from_yaml(Path::new("f.yaml"), "fleet: {strategy: local, nodes: 3}\n").unwrap();
    assert!(f.fleet.fleet().unwrap_err().contains("addresses"));
    let store = StoreSection::default();
    assert!(f.fleet.check_store(&store).is_ok());
    let redis = StoreSection {
        kind: StoreKind::Redis,
        ..StoreSection::default()
    };
    let e = f.fleet.check_store(&redis).unwrap_err().to_string();
    assert!(e.contains("it takes store type memory"), "{e}");
}

#[test]
fn old_spellings_are_read_and_named() {
    let s: Shared = from_toml(
        Path::new("f.toml"),
        "store = \"redis://h:1/\"\n[headers]\nx_ratelimit = true\n",
    )
    .unwrap();
    assert_eq!(s.store.kind, StoreKind::Redis);
    assert_eq!(s.store.redis().url, "redis://h:1/");
    assert_eq!(s.headers.legacy, Some(ResetFormat::Delta));
    let names: Vec<String> = s
        .store
        .renamed
        .iter()
        .chain(&s.headers.renamed)
        .map(|r| r.new.clone())
        .collect();
    assert!(
        names[0].contains("store.redis.url") && names[1].contains("headers.legacy = \"delta\""),
        "{names:?}"
    );
    let lines = warn_renamed(Path::new("f.toml"), &s.headers.renamed);
    assert_eq!(
        lines,
        [
            "f.toml: headers.x_ratelimit = true is renamed: write headers.legacy = \"delta\" (the old spelling still works)"
        ]
    );
    let e = from_toml::<Shared>(Path::new("f.toml"), "store = \"mem\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("f.toml:1:9: store: \"mem\": expected a store table"),
        "{e}"
    );
    let e = from_yaml::<Shared>(
        Path::new("f.yaml"),
        "headers: {legacy: delta, x_ratelimit: true}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("headers: set legacy"), "{e}");
}

#[test]
fn cross_section_errors_are_located_at_the_section() {
    let e = ConfigError::in_section(
        Path::new("f.toml"),
        "a = 1\n\n[fleet]\nx = 1\n",
        "fleet",
        "boom",
    );
    assert_eq!(e.to_string(), "f.toml:3:1: fleet: boom");
    let e = ConfigError::in_section(
        Path::new("f.yaml"),
        "a: 1\nfleet:\n  x: 1\n",
        "fleet",
        "boom",
    );
    assert_eq!(e.to_string(), "f.yaml:2:1: fleet: boom");
    let e = from_toml::<Shared>(Path::new("f.toml"), "[store\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("f.toml:1:"), "{e}");
    let e = from_yaml::<Shared>(Path::new("f.yaml"), "store: [\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("f.yaml:"), "{e}");
}

/// Found by the `server_config_yaml` fuzz target: an error at the end of a YAML file
/// without a final newline was placed on the line after the last, which the file does not
/// have.
#[test]
fn a_yaml_error_at_the_end_of_the_file_is_placed_inside_it() {
    for (src, place) in [
        ("store: {type:   # no value, no newline", "f.yaml:1:39: "),
        ("fleet: {}\nstore: {type:", "f.yaml:2:14: "),
        ("fleet: {}\r\nstore: {type:", "f.yaml:2:14: "),
    ] {
        let e = from_yaml::<Shared>(Path::new("f.yaml"), src)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(place), "{src:?}: {e}");
    }
    // an error inside the file keeps its place
    let e = from_yaml::<Shared>(Path::new("f.yaml"), "fleet: {}\nstore: {type:\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("f.yaml:3:1: "), "{e}");
}

/// Found by the `server_config_yaml` fuzz target: a key holding multi-byte characters
/// placed its value by bytes, past the end of the line; columns count characters.
#[test]
fn a_yaml_place_counts_characters() {
    let e = from_yaml::<Shared>(Path::new("f.yaml"), "\u{496}{t \u{496}{t ::\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("f.yaml:1:11: "), "{e}");
    let e = from_yaml::<Shared>(Path::new("f.yaml"), "fleet:\n  \u{e9}t\u{e9}: 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("f.yaml:2:8: "), "{e}");
}

/// YAML reads `off` as a string (YAML 1.2), so `legacy: off` needs no quotes.
#[test]
fn yaml_off_is_the_legacy_mode_off() {
    let s: Shared = from_yaml(Path::new("f.yaml"), "headers: {legacy: off}\n").unwrap();
    assert_eq!(s.headers.legacy, None);
    let s: Shared = from_yaml(Path::new("f.yaml"), "headers:\n  legacy: delta\n").unwrap();
    assert_eq!(s.headers.legacy, Some(ResetFormat::Delta));
}

#[test]
fn the_store_section_resolves_to_settings_equal_by_value() {
    let parse = |src: &str| -> StoreSettings {
        from_toml::<Shared>(Path::new("f.toml"), src)
            .unwrap()
            .store
            .settings()
    };
    let a = parse(TOML);
    let StoreSettings::Redis { redis, max_keys } = &a else {
        panic!("{a:?}")
    };
    assert_eq!(*max_keys, 5000);
    assert_eq!(redis.url, "redis://127.0.0.1:6379/2");
    assert_eq!(redis.timeout, Duration::from_millis(20));
    assert_eq!(
        a.fault_policy(),
        crate::decide::FaultPolicy {
            failure: StoreFailure::Deny,
            retry: Duration::ZERO,
        }
    );
    assert_eq!(a, parse(TOML));
    // each value that opens another store makes the settings differ
    for (from, to) in [
        ("timeout = \"20ms\"", "timeout = \"21ms\""),
        ("prefix = \"fg:\"", "prefix = \"fh:\""),
        ("deny_cache_keys = 0", "deny_cache_keys = 1"),
        ("module = \"never\"", "module = \"auto\""),
        ("time = \"caller\"", "time = \"redis\""),
        (
            "fault_policy = \"fail-closed\"",
            "fault_policy = \"fail-open\"",
        ),
        ("max_keys = 5000", "max_keys = 5001"),
        ("/2\"", "/3\""),
    ] {
        assert!(TOML.contains(from), "{from}");
        assert_ne!(a, parse(&TOML.replacen(from, to, 1)), "{from} -> {to}");
    }
    // the defaults, in process
    let m = parse("");
    assert_eq!(
        m,
        StoreSettings::Memory {
            max_keys: DEFAULT_MAX_KEYS,
            resp_max_keys: DEFAULT_RESP_MAX_KEYS,
        }
    );
    assert_eq!(m.fault_policy(), crate::decide::FaultPolicy::default());
    assert_ne!(m, parse("[store]\nresp_max_keys = 7\n"));
    // the old string form and the table resolve alike
    assert_eq!(
        parse("store = \"redis://h:1/\"\n"),
        parse("[store]\ntype = \"redis\"\n[store.redis]\nurl = \"redis://h:1/\"\n")
    );
    assert_ne!(
        parse("store = \"redis://h:1/\"\n"),
        parse("store = \"redis://h:2/\"\n")
    );
}

#[tokio::test]
async fn opening_the_store_in_process_and_on_a_redis_that_does_not_answer() {
    use crate::store::PolicyInfo;
    use floodgate_core::{Kind, Spec};
    let spec = Spec::new(Kind::Gcra, "10/s".parse().unwrap());
    let policies = [PolicyInfo::new(
        0,
        "p".into(),
        spec.clone(),
        spec.build().unwrap(),
    )];
    let memory = StoreSettings::Memory {
        max_keys: 9,
        resp_max_keys: 1,
    };
    let opened = memory.open(None, "test").await.unwrap();
    assert_eq!(opened.max_keys(), Some(9));
    assert!(opened.decision_store(&policies).unwrap().is_none());

    // a port nothing listens on: the store opens, and decides under the fault policy
    let redis = RedisSection {
        url: "redis://127.0.0.1:1".into(),
        connect_timeout: Duration::from_millis(100),
        ..RedisSection::default()
    };
    let on_redis = StoreSettings::Redis {
        redis: redis.clone(),
        max_keys: 7,
    };
    let opened = on_redis.open(None, "test").await.unwrap();
    let shared = opened.shared().unwrap();
    assert!(!shared.reachable());
    assert!(shared.hybrid().is_none());
    let (_, name) = opened.decision_store(&policies).unwrap().unwrap();
    assert_eq!(name, "redis");
    assert_eq!(opened.fault_policy(), on_redis.fault_policy());
    assert_eq!(opened.max_keys(), None);
    // the hybrid strategy's leases are capped by store.max_keys, whatever the caller gave
    let leases = crate::HybridLeases {
        nodes: 3,
        lease: 5,
        lease_ttl: Duration::from_secs(1),
        max_leases: 1_000_000,
    };
    let opened = on_redis.open(Some(leases), "test").await.unwrap();
    let h = opened.shared().unwrap().hybrid().copied().unwrap();
    assert_eq!((h.nodes, h.lease, h.max_leases), (3, 5, 7));
    let (_, name) = opened.decision_store(&policies).unwrap().unwrap();
    assert_eq!(name, "hybrid");

    // a URL that cannot work is an error
    let bad = StoreSettings::Redis {
        redis: RedisSection {
            url: "redis://[::1".into(),
            ..redis
        },
        max_keys: 7,
    };
    assert!(bad.open(None, "test").await.is_err());
}

#[test]
fn a_yaml_file_of_white_space_is_empty_and_one_of_a_no_break_space_is_not() {
    // YAML's white space only: the defaults, as an empty file
    let y: Shared = from_yaml(Path::new("f.yaml"), " \n\t\r\n").unwrap();
    assert_eq!(y, from_yaml(Path::new("f.yaml"), "").unwrap());
    // a no-break space is a value to YAML (a string where the file's mapping belongs):
    // refused as the YAML reader reads it, with or without the document's end marker
    for src in ["\u{a0}\n", "\u{a0}\n...\n"] {
        let e = from_yaml::<Shared>(Path::new("f.yaml"), src).unwrap_err();
        assert!(
            e.to_string().contains("invalid type: string"),
            "{src:?}: {e}"
        );
    }
}

#[test]
fn a_too_deep_yaml_file_is_placed_in_characters_as_the_yaml_reader_places() {
    // 66 brackets after a two-character line of 6 bytes and a bare CR: line 2, and the
    // 65th bracket is the 65th character of its line
    let src = format!("é✓\r{}\n", "[".repeat(66));
    let e = from_yaml::<Shared>(Path::new("f.yaml"), &src).unwrap_err();
    assert!(
        e.to_string().starts_with("f.yaml:2:65: flow collections"),
        "{e}"
    );
    // in a flow: the first bracket at column 4, a quoted scalar of two three-byte
    // characters, the 65th level at column 74 (byte 78)
    let src = format!("a: [\"✓✓\", {}\n", "[".repeat(70));
    let e = from_yaml::<Shared>(Path::new("f.yaml"), &src).unwrap_err();
    assert!(
        e.to_string().starts_with("f.yaml:1:74: flow collections"),
        "{e}"
    );
}
