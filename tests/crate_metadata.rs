//! Every library crate carries what crates.io asks for (`cargo metadata`): description,
//! license and its texts, repository, readme, keywords, categories, an `include` list, and
//! a version on each path dependency. `scripts/test-packages.sh` runs `cargo package`.

use std::path::Path;
use std::process::Command;

fn metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn publishable_crates_carry_crates_io_metadata() {
    let meta = metadata();
    let mut checked = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let publish_off = p["publish"].as_array().is_some_and(|a| a.is_empty());
        if publish_off {
            continue;
        }
        let dir = Path::new(p["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap()
            .to_path_buf();
        for field in ["description", "license", "repository", "readme"] {
            assert!(
                p[field].as_str().is_some_and(|s| !s.is_empty()),
                "{name}: no {field}"
            );
        }
        assert_eq!(p["license"], "MIT OR Apache-2.0", "{name}");
        assert!(
            p["repository"].as_str().unwrap().starts_with("https://"),
            "{name}"
        );
        assert!(
            dir.join(p["readme"].as_str().unwrap()).is_file(),
            "{name}: readme"
        );
        let keywords = p["keywords"].as_array().unwrap();
        assert!(
            (1..=5).contains(&keywords.len()),
            "{name}: 1 to 5 keywords, crates.io's limit"
        );
        for k in keywords {
            let k = k.as_str().unwrap();
            assert!(k.len() <= 20 && k.is_ascii(), "{name}: keyword {k:?}");
        }
        let categories = p["categories"].as_array().unwrap();
        assert!((1..=5).contains(&categories.len()), "{name}: categories");
        for dep in p["dependencies"].as_array().unwrap() {
            let is_path = dep["path"].is_string();
            let normal_or_build = dep["kind"].is_null() || dep["kind"] == "build";
            if is_path && normal_or_build {
                assert_ne!(
                    dep["req"], "*",
                    "{name}: path dependency {} without a version",
                    dep["name"]
                );
            }
        }
        if p["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["kind"][0] == "lib")
        {
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            assert!(
                manifest.contains("\ninclude = ["),
                "{name}: no include list"
            );
            for text in ["LICENSE-MIT", "LICENSE-APACHE"] {
                let license = std::fs::read_to_string(dir.join(text))
                    .unwrap_or_else(|e| panic!("{name}: {text}: {e}"));
                assert!(license.contains("Permission") || license.contains("Apache License"));
            }
            checked.push(name.to_string());
        }
    }
    checked.sort();
    for want in [
        "floodgate-client",
        "floodgate-core",
        "floodgate-dist",
        "floodgate-engine",
        "floodgate-http",
        "floodgate-net",
        "floodgate-proxy",
        "floodgate-redis",
        "floodgate-server",
    ] {
        assert!(
            checked.iter().any(|c| c == want),
            "{want} not checked: {checked:?}"
        );
    }
}
