//! Hot reload: file changes apply new limits, unchanged rules keep their counters, a
//! broken file is rejected while the old config serves, and no request fails meanwhile.

mod common;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

const OK: i32 = Code::Ok as i32;

fn config(b_limit: u32, extra: &str) -> String {
    format!(
        r#"
domain: edge
descriptors:
  - key: a
    rate_limit: {{unit: minute, requests_per_unit: 3}}
  - key: b
    rate_limit: {{unit: minute, requests_per_unit: {b_limit}}}
{extra}"#
    )
}

fn generation(srv: &Srv) -> u64 {
    srv.running.engine.current().id
}

#[tokio::test]
async fn file_change_applies_new_limits_and_keeps_counters_of_unchanged_rules() {
    let srv = start_with(&config(3, ""), "limits.yaml", true).await;
    let mut c = srv.client().await;
    let hit = |k: &'static str| req("edge", vec![desc(&[(k, "x")])], 0);
    for _ in 0..2 {
        call(&mut c, hit("a")).await.unwrap();
        call(&mut c, hit("b")).await.unwrap();
    }
    let extra = "  - key: c\n    rate_limit: {unit: second, requests_per_unit: 7}\n";
    std::fs::write(&srv.path, config(10, extra)).unwrap();
    assert!(
        eventually(10, || generation(&srv) == 2).await,
        "the file watcher reloaded"
    );
    let r = call(&mut c, hit("a")).await.unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining, 0,
        "a kept its two hits: 3 - 2 - 1"
    );
    assert_eq!(
        call(&mut c, hit("a")).await.unwrap().overall_code,
        Code::OverLimit as i32
    );
    let r = call(&mut c, hit("b")).await.unwrap();
    let l = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(l.requests_per_unit, 10, "b's new limit applies");
    assert!(
        r.statuses[0].limit_remaining < 9,
        "b's state was kept, not reset: {:?}",
        r.statuses[0]
    );
    let r = call(&mut c, hit("c")).await.unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 6, "the new rule c serves");
    let m = srv.running.engine.metrics().render();
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"ok\"} 1"),
        "{m}"
    );
    assert!(m.contains("floodgate_config_generation 2"));
    srv.stop().await;
}

#[tokio::test]
async fn broken_file_is_rejected_and_reported_while_the_old_config_serves() {
    let srv = start_with(&config(3, ""), "limits.yaml", true).await;
    let mut c = srv.client().await;
    call(&mut c, req("edge", vec![desc(&[("a", "x")])], 0))
        .await
        .unwrap();
    std::fs::write(&srv.path, "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n").unwrap();
    let failed = || {
        srv.running
            .engine
            .metrics()
            .render()
            .contains("floodgate_config_last_reload_success 0")
    };
    assert!(eventually(10, failed).await, "the bad file was reported");
    let m = srv.running.engine.metrics().render();
    assert!(
        m.contains("floodgate_config_reloads_total{result=\"error\"} 1"),
        "{m}"
    );
    assert_eq!(generation(&srv), 1);
    let r = call(&mut c, req("edge", vec![desc(&[("a", "x")])], 0))
        .await
        .unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "the old config serves, counters intact"
    );
    let e = srv.running.reloader.reload().unwrap_err();
    assert!(
        e.contains("limits.yaml: domain \"edge\" > a > rate_limit: unit \"fortnight\""),
        "{e}"
    );
    std::fs::write(&srv.path, "not: [valid").unwrap();
    let e = srv.running.reloader.reload().unwrap_err();
    assert!(e.contains("limits.yaml:"), "{e}");
    // 200 KB of nested flow collections: refused at once, before the YAML parser
    std::fs::write(&srv.path, format!("domain: {}\n", "[".repeat(200_000))).unwrap();
    let t = std::time::Instant::now();
    let e = srv.running.reloader.reload().unwrap_err();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
    assert!(
        e.contains("limits.yaml:1:73: flow collections ([...] or {...}) nested deeper than 64"),
        "{e}"
    );
    // A good file again: accepted.
    std::fs::write(&srv.path, config(5, "")).unwrap();
    assert!(eventually(10, || generation(&srv) >= 2).await);
    assert!(
        srv.running
            .engine
            .metrics()
            .render()
            .contains("floodgate_config_last_reload_success 1")
    );
    let r = call(&mut c, req("edge", vec![desc(&[("a", "x")])], 0))
        .await
        .unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining, 0,
        "a still counts from before the bad file"
    );
    srv.stop().await;
}

#[tokio::test]
async fn reloads_under_load_drop_no_request_and_reset_no_counter() {
    let hot = "  - key: hot\n    rate_limit: {requests_per_unit: 100000, unit: hour, algorithm: sliding-log}\n";
    let srv = start_with(&config(3, hot), "limits.yaml", false).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut c = srv.client().await;
        tasks.push(tokio::spawn(async move {
            let mut ok = 0u64;
            for _ in 0..250 {
                let r = call(&mut c, req("edge", vec![desc(&[("hot", "k")])], 0)).await;
                assert_eq!(r.unwrap().overall_code, OK);
                ok += 1;
            }
            ok
        }));
    }
    for i in 0..10 {
        std::fs::write(&srv.path, config(4 + i, hot)).unwrap();
        srv.running.reloader.reload().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(15)).await;
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 1000);
    assert_eq!(generation(&srv), 11);
    let mut c = srv.client().await;
    let mut peek = desc(&[("hot", "k")]);
    peek.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
    let r = call(&mut c, req("edge", vec![peek], 0)).await.unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining,
        100_000 - 1000,
        "every hit counted across 10 reloads"
    );
    srv.stop().await;
}

#[tokio::test]
async fn toml_config_serves_the_same() {
    let toml = "[[domains]]\ndomain = \"edge\"\n[[domains.descriptors]]\nkey = \"a\"\nrate_limit = { unit = \"minute\", requests_per_unit = 2 }\n";
    let srv = start_with(toml, "limits.toml", true).await;
    let mut c = srv.client().await;
    let r = call(&mut c, req("edge", vec![desc(&[("a", "x")])], 0))
        .await
        .unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 1);
    std::fs::write(
        &srv.path,
        toml.replace("requests_per_unit = 2", "requests_per_unit = 9"),
    )
    .unwrap();
    assert!(eventually(10, || generation(&srv) == 2).await);
    let r = call(&mut c, req("edge", vec![desc(&[("a", "x")])], 0))
        .await
        .unwrap();
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        9
    );
    srv.stop().await;
}

/// A file truncated and not yet written (the first event of a writer that rewrites it in
/// place, as `fs::write` and `echo >` do) is not loaded by the watcher's check: the rules
/// keep serving; the content written after it reloads; SIGHUP's reload loads an empty
/// file as it is.
#[tokio::test]
async fn a_file_being_rewritten_in_place_is_not_loaded_empty() {
    let srv = start_with(&config(3, ""), "limits.yaml", false).await;
    let mut c = srv.client().await;
    std::fs::write(&srv.path, "").unwrap();
    assert!(srv.running.reloader.reload_if_changed().is_none());
    assert_eq!(generation(&srv), 1);
    call(&mut c, req("edge", vec![desc(&[("a", "x")])], 0))
        .await
        .expect("the rules still serve");
    std::fs::write(&srv.path, config(10, "")).unwrap();
    assert_eq!(srv.running.reloader.reload_if_changed(), Some(Ok(2)));
    std::fs::write(&srv.path, "\n  \n").unwrap();
    assert!(srv.running.reloader.reload_if_changed().is_none());
    assert_eq!(
        srv.running.reloader.reload(),
        Ok(3),
        "SIGHUP's reload takes it"
    );
    srv.stop().await;
}

#[tokio::test]
async fn an_envoy_layout_directory_reloads_when_one_of_its_files_changes() {
    use floodgate_server::{config, server};
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("config");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("edge.yaml"), config(3, "")).unwrap();
    let auth = |n: u32| {
        format!(
            "domain: auth\ndescriptors:\n  - key: u\n    rate_limit: {{unit: minute, requests_per_unit: {n}}}\n"
        )
    };
    std::fs::write(files.join("auth.yaml"), auth(2)).unwrap();
    let cfg = config::load(dir.path()).unwrap();
    let mut settings = cfg.settings.clone();
    let any = Some("127.0.0.1:0".parse().unwrap());
    (settings.grpc, settings.http, settings.resp) = (any, any, any);
    let path = dir.path().to_path_buf();
    let running = server::start(
        cfg,
        settings,
        server::Options {
            path: path.clone(),
            watch: true,
            sighup: false,
            debounce: std::time::Duration::from_millis(30),
        },
    )
    .await
    .unwrap();
    let srv = Srv { running, dir, path };
    let mut c = srv.client().await;
    let hit = || req("auth", vec![desc(&[("u", "x")])], 0);
    let r = call(&mut c, hit()).await.unwrap();
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "auth.yaml's domain serves"
    );
    assert_eq!(
        call(&mut c, req("edge", vec![desc(&[("a", "x")])], 0))
            .await
            .unwrap()
            .overall_code,
        OK,
        "edge.yaml's domain serves"
    );
    std::fs::write(files.join("auth.yaml"), auth(9)).unwrap();
    assert!(
        eventually(10, || generation(&srv) == 2).await,
        "a change of one file of the layout reloaded it"
    );
    let r = call(&mut c, hit()).await.unwrap();
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        9
    );
    // a domain in two files: rejected, the running rules keep serving
    std::fs::write(files.join("more.yaml"), auth(1)).unwrap();
    let rejected = || {
        srv.running
            .engine
            .metrics()
            .render()
            .contains("floodgate_config_reloads_total{result=\"error\"} 1")
    };
    assert!(
        eventually(10, rejected).await,
        "the duplicate domain is rejected"
    );
    assert_eq!(generation(&srv), 2);
    srv.stop().await;
}
