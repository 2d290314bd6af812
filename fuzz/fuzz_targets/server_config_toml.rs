//! `floodgate server`'s TOML config file: never a panic; an error names the file and a
//! place inside it; and a file that parses reads the same written as YAML (the two
//! formats are one vocabulary). Not the other way: YAML reads a plain `true` or `5` as a
//! string where one is expected, so a TOML type error may be none in YAML.
//!
//! Files whose listen addresses are host names are left out: checking them resolves the
//! name, and a fuzzer does not send DNS queries.
#![no_main]
use std::path::Path;

use floodgate_server::config::parse;
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("limits.toml");
    if common::server::resolves_a_name(floodgate_engine::config::from_toml(path, src)) {
        return;
    }
    let parsed = parse(path, src);
    common::server::check_error(&parsed, path, src, common::Lines::Toml);
    let Ok(table) = toml::from_str::<toml::Table>(src) else {
        return;
    };
    if has_datetime(&toml::Value::Table(table.clone())) {
        // TOML's own type, no YAML counterpart
        return;
    }
    let yaml = serde_norway::to_string(&table).expect("TOML tables render as YAML");
    let as_yaml = parse(Path::new("limits.yaml"), &yaml);
    if parsed.is_ok() {
        common::server::same(&parsed, &as_yaml, src, &yaml);
    }
});

fn has_datetime(v: &toml::Value) -> bool {
    match v {
        toml::Value::Datetime(_) => true,
        toml::Value::Array(a) => a.iter().any(has_datetime),
        toml::Value::Table(t) => t.values().any(has_datetime),
        _ => false,
    }
}
