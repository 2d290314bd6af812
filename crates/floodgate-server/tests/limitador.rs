//! Limitador's limits files as they are: every example file of Limitador's repository
//! (tests/limitador/, copied unchanged) loads, conditions without a descriptor form are
//! errors naming the limit and the condition, and Envoy RLS v3 calls over real gRPC are
//! counted as Limitador counts them.

mod common;

use std::path::Path;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use floodgate_core::Kind;
use floodgate_server::config::{self, Condition};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const EXAMPLES: &str = include_str!("limitador/examples-limits.yaml");
const SANDBOX: &str = include_str!("limitador/sandbox-limits.yaml");

fn parse(text: &str) -> Result<config::Config, String> {
    config::parse(Path::new("limits.yaml"), text).map_err(|e| e.to_string())
}

fn cond(key: &str, value: &str, equal: bool) -> Condition {
    Condition {
        key: key.into(),
        value: value.into(),
        equal,
    }
}

#[test]
fn every_example_file_of_limitador_loads() {
    let files = [
        ("examples-limits.yaml", EXAMPLES, "test_namespace", 2),
        ("sandbox-limits.yaml", SANDBOX, "test_namespace", 3),
        (
            "kubernetes-limits.yaml",
            include_str!("limitador/kubernetes-limits.yaml"),
            "kuard",
            1,
        ),
        (
            "file-watcher-limits.yaml",
            include_str!("limitador/file-watcher-limits.yaml"),
            "test",
            1,
        ),
        (
            "file-watcher-updated-limits.yaml",
            include_str!("limitador/file-watcher-updated-limits.yaml"),
            "test",
            1,
        ),
        (
            "configuration-md.yaml",
            include_str!("limitador/configuration-md.yaml"),
            "example.org",
            1,
        ),
    ];
    for (name, text, namespace, count) in files {
        let c = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(c.rules.domains.contains_key(namespace), "{name}");
        let sel = &c.rules.selectors[namespace];
        assert_eq!(sel.len(), count, "{name}");
        for s in sel {
            let spec = s.limit.spec.as_ref().unwrap();
            assert_eq!(spec.kind, Kind::FixedWindow, "{name}");
        }
        assert!(
            c.notes[0].contains("fixed windows") && c.notes[0].contains("twice max_value"),
            "{name}: {:?}",
            c.notes
        );
    }
    let c = parse(EXAMPLES).unwrap();
    let s = &c.rules.selectors["test_namespace"];
    assert!(s[0].conditions.is_empty() && s[0].variables.is_empty());
    assert_eq!(s[0].limit.requests_per_unit, 1_000_000);
    assert_eq!(s[1].conditions, [cond("req.method", "POST", true)]);
    assert_eq!(s[1].variables, ["user_id"]);
    assert_eq!(
        (s[1].limit.requests_per_unit, s[1].limit.window.as_secs()),
        (5, 60)
    );
    let c = parse(SANDBOX).unwrap();
    let s = &c.rules.selectors["test_namespace"];
    assert_eq!(
        s[0].conditions,
        [
            cond("req.method", "GET", true),
            cond("req.path", "/json", false)
        ]
    );
    assert_eq!(s[2].limit.window.as_secs(), 10);
    // Limitador 1.x's form: the bare key of descriptor 0
    let c = parse("- {namespace: n, max_value: 1, seconds: 1, conditions: ['m == \"GET\"'], variables: [u]}\n").unwrap();
    let s = &c.rules.selectors["n"][0];
    assert_eq!(
        (s.descriptor, &s.conditions, &s.variables),
        (0, &vec![cond("m", "GET", true)], &vec!["u".to_string()])
    );
}

#[test]
fn conditions_without_a_descriptor_form_name_the_limit_and_the_condition() {
    let cases = [
        (
            "descriptors[0]['a'] == 'x' && descriptors[0]['b'] == 'y'",
            "`&&` inside one condition",
        ),
        (
            "descriptors[0]['a'] == 'x' || descriptors[0]['a'] == 'y'",
            "`||` has no descriptor rule form",
        ),
        (
            "descriptors[0]['path'].startsWith('/api')",
            "a function call has no descriptor rule form",
        ),
        ("size(descriptors[0]) == 2", "a function call"),
        (
            "descriptors[0]['n'] > '5'",
            "an ordering comparison has no descriptor rule form",
        ),
        (
            "descriptors[0]['a'] == descriptors[0]['b']",
            "compares two entries",
        ),
        (
            "req.method == GET",
            "compares two entries (or an unquoted value)",
        ),
        ("'a' == 'a'", "compares two literals"),
        (
            "descriptors[0]['a']",
            "expected one KEY == 'VALUE' (or !=) comparison",
        ),
        (
            "descriptors[x]['a'] == 'b'",
            "the position must be a number",
        ),
        ("descriptors[0][a] == 'b'", "the key must be quoted"),
        (
            "descriptors[0].a-b == 'c'",
            "is written descriptors[0]['a-b']",
        ),
        ("descriptors[0]['a'] == 'b\\'c'", "escape sequences"),
        ("'x' in descriptors[0]", "only KEY == 'VALUE'"),
    ];
    for (condition, words) in cases {
        let text = format!(
            "- {{namespace: n, max_value: 1, seconds: 1, conditions: [], variables: []}}\n- name: checkout\n  namespace: n\n  max_value: 1\n  seconds: 1\n  conditions: [{:?}]\n  variables: []\n",
            condition
        );
        let e = parse(&text).unwrap_err();
        let at = format!("limits.yaml: limit 2 (\"checkout\"): condition {condition:?}: ");
        assert!(e.starts_with(&at) && e.contains(words), "{condition}: {e}");
    }
    let across = "- namespace: n\n  max_value: 1\n  seconds: 1\n  conditions: [\"descriptors[0].a == 'x'\"]\n  variables: [\"descriptors[1].u\"]\n";
    let e = parse(across).unwrap_err();
    assert!(
        e.starts_with("limits.yaml: limit 1: variable \"descriptors[1].u\" reads descriptors[1] and another reads descriptors[0]"),
        "{e}"
    );
    let others = [
        ("seconds: 0", "limit 1: seconds must be at least 1, got 0"),
        ("namespace: ' '", "limit 1: namespace must not be empty"),
        (
            "variables: ['size(x)']",
            "variable \"size(x)\": a function call",
        ),
        ("variables: [u, u]", "variable \"u\" is given twice"),
        ("max_value: -1", "limits.yaml:1:"),
        ("burst: 3", "unknown field `burst`"),
    ];
    for (field, words) in others {
        let mut fields = vec![
            ("namespace", "n"),
            ("max_value", "1"),
            ("seconds", "1"),
            ("conditions", "[]"),
            ("variables", "[]"),
        ];
        let (k, v) = field.split_once(": ").unwrap();
        fields.retain(|(f, _)| *f != k);
        fields.push((k, v));
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let e = parse(&format!("- {{{}}}\n", body.join(", "))).unwrap_err();
        assert!(e.contains(words), "{field}: {e}");
    }
    let twice = "- {namespace: n, max_value: 1, seconds: 5, conditions: [\"a == 'x'\", \"b == 'y'\"], variables: []}\n- {namespace: n, max_value: 2, seconds: 5, conditions: [\"b == 'y'\", \"a == 'x'\"], variables: []}\n";
    let e = parse(twice).unwrap_err();
    assert!(
        e.contains("limit 2: the same namespace, seconds, conditions and variables as limit 1"),
        "{e}"
    );
}

/// Limitador's doc/how-it-works.md: a descriptor `[KEY_A: VALUE_A, OTHER_KEY:
/// OTHER_VALUE]` activates the limit on KEY_A alone (other entries do not matter), and
/// none of the limits its examples list as not activated.
#[tokio::test]
async fn how_it_works_examples_activate_as_limitador_says() {
    let yaml = "\
- {namespace: example.org, max_value: 2, seconds: 60, conditions: [\"descriptors[0].KEY_A == 'VALUE_A'\"], variables: []}
- {namespace: example.org, max_value: 1, seconds: 60, conditions: [\"descriptors[0].KEY_B == 'VALUE_B'\"], variables: []}
- {namespace: example.org, max_value: 1, seconds: 60, conditions: [\"descriptors[0].KEY_A == 'VALUE_A'\", \"descriptors[0].OTHER_KEY == 'WRONG_VALUE'\"], variables: []}
- {namespace: example.org, max_value: 1, seconds: 60, conditions: [], variables: [\"descriptors[0].MY_VAR\"]}
- {namespace: example.org, max_value: 1, seconds: 60, conditions: [\"descriptors[0].KEY_B == 'VALUE_B'\"], variables: [\"descriptors[0].MY_VAR\"]}
";
    let srv = start(yaml).await;
    let mut c = srv.client().await;
    let r = || {
        req(
            "example.org",
            vec![desc(&[("KEY_A", "VALUE_A"), ("OTHER_KEY", "OTHER_VALUE")])],
            0,
        )
    };
    // max_value 2: a second call denied would mean a limit of 1 was activated too
    for code in [OK, OK, OVER] {
        assert_eq!(call(&mut c, r()).await.unwrap().overall_code, code);
    }
    // the same entries in another order: the same counter
    let swapped = req(
        "example.org",
        vec![desc(&[("OTHER_KEY", "OTHER_VALUE"), ("KEY_A", "VALUE_A")])],
        0,
    );
    assert_eq!(call(&mut c, swapped).await.unwrap().overall_code, OVER);
}

/// Limitador's example file: 5 POSTs a minute per user_id beside 1,000,000 requests a
/// minute in the namespace; GETs and other users are not limited by the first.
#[tokio::test]
async fn the_example_file_limits_posts_per_user() {
    let srv = start(EXAMPLES).await;
    let mut c = srv.client().await;
    let post = |user: &str| {
        req(
            "test_namespace",
            vec![desc(&[("req.method", "POST"), ("user_id", user)])],
            0,
        )
    };
    for _ in 0..5 {
        assert_eq!(call(&mut c, post("alice")).await.unwrap().overall_code, OK);
    }
    let r = call(&mut c, post("alice")).await.unwrap();
    assert_eq!(r.overall_code, OVER);
    let limit = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.name.as_str()),
        (5, "req.method=POST.user_id/60s")
    );
    assert_eq!(call(&mut c, post("bob")).await.unwrap().overall_code, OK);
    let get = req(
        "test_namespace",
        vec![desc(&[("user_id", "alice"), ("req.method", "GET")])],
        0,
    );
    assert_eq!(call(&mut c, get).await.unwrap().overall_code, OK);
}

/// The sandbox file's `!=`: GETs of another path than /json count 10 a minute, GETs of
/// /json 50,000 per 10 s; a descriptor without `req.path` meets neither condition.
#[tokio::test]
async fn not_equal_conditions_need_the_entry_with_another_value() {
    let srv = start(SANDBOX).await;
    let mut c = srv.client().await;
    let get = |path: &str| {
        req(
            "test_namespace",
            vec![desc(&[("req.method", "GET"), ("req.path", path)])],
            0,
        )
    };
    for _ in 0..10 {
        assert_eq!(call(&mut c, get("/")).await.unwrap().overall_code, OK);
    }
    assert_eq!(
        call(&mut c, get("/other")).await.unwrap().overall_code,
        OVER
    );
    assert_eq!(call(&mut c, get("/json")).await.unwrap().overall_code, OK);
    let no_path = req("test_namespace", vec![desc(&[("req.method", "GET")])], 0);
    let r = call(&mut c, no_path).await.unwrap();
    assert_eq!(r.overall_code, OK);
    assert!(r.statuses[0].current_limit.is_none(), "{r:?}");
}

/// A Limitador file is reloaded on change as any config file, and a limit whose
/// `max_value` alone changed keeps its counters (its identity is its namespace,
/// conditions, variables, window and name).
#[tokio::test]
async fn a_changed_max_value_reloads_and_keeps_the_count() {
    let file = |max: u32| {
        format!(
            "- {{namespace: n, max_value: {max}, seconds: 86400, conditions: [], variables: [user]}}\n"
        )
    };
    let srv = start_with(&file(3), "limits.yaml", true).await;
    let mut c = srv.client().await;
    let hit = || req("n", vec![desc(&[("user", "ann")])], 0);
    for _ in 0..2 {
        assert_eq!(call(&mut c, hit()).await.unwrap().overall_code, OK);
    }
    std::fs::write(&srv.path, file(10)).unwrap();
    assert!(
        eventually(10, || srv.running.engine.current().id == 2).await,
        "the file watcher reloaded"
    );
    let r = call(&mut c, hit()).await.unwrap();
    let s = &r.statuses[0];
    assert_eq!(s.current_limit.as_ref().unwrap().requests_per_unit, 10);
    assert_eq!(s.limit_remaining, 7, "two hits kept, one more: {s:?}");
    srv.stop().await;
}
