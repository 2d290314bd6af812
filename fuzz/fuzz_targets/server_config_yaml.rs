//! `floodgate server`'s YAML config file: never a panic; an error names the file and a
//! place inside it; and the file re-rendered from its YAML value (other layout, quoting,
//! flow or block style) reads the same: the same config, or an error again. Files with
//! YAML tags or empty values are left out of that check: serde_norway reads those
//! otherwise than the text it renders for them.
//!
//! Files with a number written otherwise than serde_norway renders it (`.0`, `0x10`) are
//! left out of it too: where a string is expected, floodgate reads the text as written.
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
    let path = Path::new("limits.yaml");
    if common::server::resolves_a_name(floodgate_engine::config::from_yaml(path, src)) {
        return;
    }
    let parsed = parse(path, src);
    common::server::check_error(&parsed, path, src, common::Lines::Yaml);
    if src.contains('!') {
        // YAML tags: serde_norway reads a tagged empty value as an empty mapping for the
        // file, as a string for a value, and renders neither as the file had it
        return;
    }
    let Ok(value) = serde_norway::from_str::<serde_norway::Value>(src) else {
        return;
    };
    if has_null(&value) {
        // serde_norway reads an empty value (`key:`) as an empty list or mapping and the
        // `null` it renders for it as a type error; an empty file is an empty mapping
        return;
    }
    if !numbers_as_written(&value, src) {
        // serde_norway renders a number in its own spelling (`.0` as `0.0`, `0x10` as
        // `16`), and where a string is expected (a domain) floodgate reads the text written
        return;
    }
    let again = serde_norway::to_string(&value).expect("a YAML value renders");
    common::server::same(&parsed, &parse(path, &again), src, &again);
});

fn has_null(v: &serde_norway::Value) -> bool {
    use serde_norway::Value;
    match v {
        Value::Null => true,
        Value::Sequence(s) => s.iter().any(has_null),
        Value::Mapping(m) => m.iter().any(|(k, v)| has_null(k) || has_null(v)),
        Value::Tagged(t) => has_null(&t.value),
        _ => false,
    }
}

/// Whether every number in `v` appears in `src` as serde_norway renders it (a crude check:
/// the rendered text occurs somewhere in the file).
fn numbers_as_written(v: &serde_norway::Value, src: &str) -> bool {
    use serde_norway::Value;
    match v {
        Value::Number(n) => src.contains(n.to_string().as_str()),
        Value::Sequence(s) => s.iter().all(|v| numbers_as_written(v, src)),
        Value::Mapping(m) => m
            .iter()
            .all(|(k, v)| numbers_as_written(k, src) && numbers_as_written(v, src)),
        Value::Tagged(t) => numbers_as_written(&t.value, src),
        _ => true,
    }
}
