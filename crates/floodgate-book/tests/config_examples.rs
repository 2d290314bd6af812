//! Every configuration example of the book parses, as the command that reads it would
//! parse it. A `toml` or `yaml` block names what it configures in its info string:
//! `proxy-config` (`floodgate proxy --config`), `server-config` (`floodgate server
//! --config`), `server-files` (a `floodgate server` file naming files of the machine it
//! runs on, certificates or secrets: its fields are checked, the files are not read),
//! `proxy-files` (the same for a `floodgate proxy` file: `[tls]` certificates and the
//! upstream's CA bundle),
//! `bad-example` (a file a transcript shows being refused; it must fail),
//! `peer-config` (another product's file, shown beside floodgate's for comparison),
//! `envoy-config` (Envoy's bootstrap file: tests/python/test_wiring.py parses it into
//! Envoy's own `Bootstrap` message and checks its descriptors against a real server) or
//! `cargo-dependencies` (a `[dependencies]` table of floodgate's library crates). A block
//! with `packaged=PATH` is the file PATH of the repository as the packages install it.

use std::path::Path;

use floodgate_book::{Block, blocks};

fn config_blocks() -> Vec<Block> {
    blocks()
        .unwrap()
        .into_iter()
        .filter(|b| matches!(b.lang(), "toml" | "yaml"))
        .collect()
}

fn parse_proxy(b: &Block) -> Result<floodgate_proxy::config::Config, String> {
    let cfg = floodgate_proxy::config::Config::parse(&b.body, Path::new(&b.place()))
        .map_err(|e| e.to_string())?;
    cfg.limiter_builder().build().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// A `[dependencies]` table names only floodgate's publishable library crates, each at
/// the workspace's version (`"0.1"` for 0.1.x).
fn check_dependencies(b: &Block) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let version = workspace
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("the workspace's version");
    let mut lines = b.body.lines().filter(|l| !l.trim().is_empty());
    assert_eq!(lines.next(), Some("[dependencies]"), "{}", b.place());
    let mut named = 0;
    for line in lines {
        let (name, rest) = line
            .split_once(" = ")
            .unwrap_or_else(|| panic!("{}: {line:?} is not NAME = \"VERSION\"", b.place()));
        let name = name.trim();
        let req = rest.split('#').next().unwrap().trim().trim_matches('"');
        assert!(
            version.starts_with(&format!("{req}.")) || version == req,
            "{}: {name} = {req:?} does not match the crates' version {version}",
            b.place()
        );
        let manifest = std::fs::read_to_string(root.join("crates").join(name).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{}: {name} is not a crate of crates/: {e}", b.place()));
        assert!(
            !manifest.contains("\npublish = false"),
            "{}: {name} is not published",
            b.place()
        );
        named += 1;
    }
    assert!(named > 0, "{}: no dependency", b.place());
}

fn parse_server(b: &Block) -> Result<(), String> {
    // the server picks YAML or TOML by the file's extension
    let path = format!("{}.{}", b.place(), b.lang());
    floodgate_server::config::parse(Path::new(&path), &b.body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn every_config_example_names_what_it_configures_and_parses() {
    let blocks = config_blocks();
    assert!(blocks.len() >= 4, "{blocks:?}");
    for b in &blocks {
        if let Some(path) = b.attr("packaged") {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let file = std::fs::read_to_string(root.join(path))
                .unwrap_or_else(|e| panic!("{}: {path}: {e}", b.place()));
            assert_eq!(b.body, file, "{}: differs from {path}", b.place());
        }
        if b.has("proxy-config") {
            parse_proxy(b).unwrap_or_else(|e| panic!("{}: {e}", b.place()));
        } else if b.has("server-config") {
            parse_server(b).unwrap_or_else(|e| panic!("{}: {e}", b.place()));
        } else if b.has("server-files") {
            let path = format!("{}.{}", b.place(), b.lang());
            floodgate_engine::config::from_yaml::<floodgate_server::file::FileConfig>(
                Path::new(&path),
                &b.body,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", b.place()));
        } else if b.has("proxy-files") {
            floodgate_engine::config::from_toml::<floodgate_proxy::config::Config>(
                Path::new(&b.place()),
                &b.body,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", b.place()));
        } else if b.has("cargo-dependencies") {
            check_dependencies(b);
        } else if b.has("peer-config") {
            // a peer's file shown for comparison (Limitador's limits): not floodgate's
        } else if b.has("envoy-config") {
            // Envoy's file: parsed with Envoy's protos by tests/python/test_wiring.py
        } else if b.has("bad-example") {
            let proxy = parse_proxy(b);
            assert!(proxy.is_err(), "{}: a bad example parses", b.place());
        } else {
            panic!(
                "{}: a {} block must say what it configures (proxy-config, proxy-files, server-config, server-files, bad-example, cargo-dependencies, peer-config or envoy-config)",
                b.place(),
                b.lang()
            );
        }
    }
}

/// The proxy page's reference example builds its two policies (the first with the
/// capacity its nginx burst says), and every `[store.redis]` setting it shows reaches the
/// store's settings.
#[test]
fn the_proxy_reference_example_is_complete() {
    let block = config_blocks()
        .into_iter()
        .find(|b| b.page == "proxy.md" && b.has("proxy-config"))
        .expect("proxy.md has its configuration example");
    let cfg = parse_proxy(&block).unwrap();
    assert_eq!(cfg.policies.len(), 2);
    let limiter = cfg.limiter_builder().build().unwrap();
    assert!(limiter.policies().len() >= 2);
    // per-ip: burst = 20, nginx's meaning: capacity 21
    assert_eq!(limiter.policies()[0].spec.capacity, Some(21));
    let rc = cfg.store.redis().store_config();
    assert_eq!(rc.breaker_open_for, std::time::Duration::from_millis(250));
}

/// The fields serde lists in an "unknown field" error: `expected one of `a`, `b``.
fn expected_fields(message: &str) -> Vec<String> {
    let Some((_, list)) = message.split_once("expected one of ") else {
        // a single expected field reads "expected `a`"
        return message
            .split_once("expected `")
            .and_then(|(_, rest)| rest.split_once('`'))
            .map(|(f, _)| vec![f.to_string()])
            .unwrap_or_default();
    };
    list.split(", ")
        .filter_map(|f| f.trim().strip_prefix('`')?.split_once('`'))
        .map(|(f, _)| f.to_string())
        .collect()
}

/// Whether the example sets (or shows, commented out) `field` somewhere.
fn shows_field(example: &str, field: &str) -> bool {
    example.lines().any(|line| {
        let line = line.trim_start().trim_start_matches('#').trim_start();
        line.starts_with(&format!("[{field}]"))
            || line.starts_with(&format!("[{field}."))
            || line.starts_with(&format!("[[{field}]]"))
            || line
                .strip_prefix(field)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
            || line.contains(&format!("{{ {field} ="))
            || line.contains(&format!(", {field} ="))
    })
}

/// Whether the example has (or shows, commented out) the array of tables `[[path]]`.
fn shows_array_table(example: &str, path: &str) -> bool {
    example.lines().any(|line| {
        let line = line.trim_start().trim_start_matches('#').trim_start();
        line.starts_with(&format!("[[{path}]]"))
    })
}

/// Whether `section.field` is the old spelling of a renamed key (read, with a warning, but
/// shown in the book only in the renamed-keys table, which
/// `the_renamed_keys_table_lists_every_old_spelling` checks).
fn is_renamed(section: &str, field: &str) -> bool {
    let key = if section.is_empty() {
        field.to_string()
    } else {
        format!("{section}.{field}")
    };
    floodgate_engine::config::RENAMED_KEYS
        .iter()
        .any(|(old, _)| *old == key)
}

/// The shared sections' page lists every renamed key, old and new.
#[test]
fn the_renamed_keys_table_lists_every_old_spelling() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/shared-config.md"),
    )
    .unwrap();
    for (old, new) in floodgate_engine::config::RENAMED_KEYS {
        let row = format!("| `{old}` | `{new}` |");
        assert!(
            page.contains(&row),
            "docs/shared-config.md lacks the row {row}"
        );
    }
}

/// The proxy page's example is the configuration reference: it shows every field the
/// config types accept, at the top level and in every section, so the reference cannot
/// fall behind the types (serde names the accepted fields when it refuses an unknown one).
#[test]
fn the_proxy_reference_shows_every_field_the_types_accept() {
    let block = config_blocks()
        .into_iter()
        .find(|b| b.page == "proxy.md" && b.has("proxy-config"))
        .expect("proxy.md has its configuration example");
    let refuse = |src: &str| -> String {
        match floodgate_proxy::config::Config::parse(src, Path::new("probe.toml")) {
            Ok(_) => panic!("an unknown field was accepted in:\n{src}"),
            Err(e) => e.to_string(),
        }
    };
    let top = expected_fields(&refuse("zz_unknown = 1\n"));
    assert!(top.len() > 10, "{top:?}");
    let mut missing = Vec::new();
    for field in &top {
        if !is_renamed("", field) && !shows_field(&block.body, field) {
            missing.push(field.clone());
        }
    }
    for section in [
        "store",
        "store.redis",
        "headers",
        "deny",
        "delay",
        "allowlist",
        "client_ip",
        "fleet",
        "tls",
        "upstream_tls",
        "log",
        "upstreams.api",
        "upstreams.api.probe",
    ] {
        if !top
            .iter()
            .any(|f| section.split('.').next() == Some(f.as_str()))
        {
            continue;
        }
        for field in expected_fields(&refuse(&format!("[{section}]\nzz_unknown = 1\n"))) {
            let qualified = format!("{section}.{field}");
            if !is_renamed(section, &field)
                && !shows_field(&block.body, &field)
                && !shows_field(&block.body, &qualified)
            {
                missing.push(qualified);
            }
        }
    }
    for (table, probe) in [
        ("policy", "[[policy]]\nname = \"a\"\nzz_unknown = 1\n"),
        (
            "policy.class",
            "[[policy]]\nname = \"a\"\nadaptive = \"aimd\"\n[[policy.class]]\nname = \"c\"\nshare = 1.0\nzz_unknown = 1\n",
        ),
    ] {
        let fields = expected_fields(&refuse(probe));
        assert!(fields.len() > 1, "{table}: {fields:?}");
        for field in fields {
            let qualified = format!("{table}.{field}");
            if !shows_field(&block.body, &field) && !shows_array_table(&block.body, &qualified) {
                missing.push(qualified);
            }
        }
    }
    let route = expected_fields(&refuse("[[route]]\nzz_unknown = 1\n"));
    assert!(route.iter().any(|f| f == "cost_trailer"), "{route:?}");
    for field in route {
        if !shows_field(&block.body, &field) {
            missing.push(format!("route.{field}"));
        }
    }
    assert!(
        missing.is_empty(),
        "{}: the reference does not show {missing:?}",
        block.place()
    );
}

/// Whether a YAML example sets (or shows, commented out) `field`.
fn shows_yaml_field(example: &str, field: &str) -> bool {
    example.lines().any(|line| {
        let line = line.trim_start().trim_start_matches('#').trim_start();
        let line = line.strip_prefix("- ").unwrap_or(line);
        line.starts_with(&format!("{field}:"))
            || line.contains(&format!("{{{field}:"))
            || line.contains(&format!("{{ {field}:"))
            || line.contains(&format!(", {field}:"))
    })
}

/// The server page's YAML example is the server's configuration reference: it shows every
/// field the config types accept at the top level and in each section of settings (the
/// rules, `domains` and their descriptors, are described field by field in the page's
/// text and by Envoy's format).
#[test]
fn the_server_reference_shows_every_field_the_types_accept() {
    let block = config_blocks()
        .into_iter()
        .find(|b| b.page == "server.md" && b.lang() == "yaml" && b.has("server-config"))
        .expect("server.md has its YAML configuration example");
    let refuse = |src: &str| -> String {
        match floodgate_server::config::parse(Path::new("probe.yaml"), src) {
            Ok(_) => panic!("an unknown field was accepted in:\n{src}"),
            Err(e) => e.to_string(),
        }
    };
    let mut missing = Vec::new();
    let sections: [(&str, &str); 11] = [
        ("", "zz_unknown: 1\n"),
        ("listen", "listen:\n  zz_unknown: 1\n"),
        ("store", "store:\n  zz_unknown: 1\n"),
        ("store.redis", "store:\n  redis:\n    zz_unknown: 1\n"),
        ("fleet", "fleet:\n  zz_unknown: 1\n"),
        ("headers", "headers:\n  zz_unknown: 1\n"),
        ("limits", "limits:\n  zz_unknown: 1\n"),
        ("defaults", "defaults:\n  zz_unknown: 1\n"),
        ("resp", "resp:\n  zz_unknown: 1\n"),
        ("tls", "tls:\n  zz_unknown: 1\n"),
        ("http", "http:\n  zz_unknown: 1\n"),
    ];
    for (section, probe) in sections {
        let fields = expected_fields(&refuse(probe));
        assert!(
            !fields.is_empty(),
            "{section}: no field list in {}",
            refuse(probe)
        );
        for field in fields {
            if !is_renamed(section, &field) && !shows_yaml_field(&block.body, &field) {
                missing.push(format!("{section}.{field}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{}: the reference does not show {missing:?}",
        block.place()
    );
}
