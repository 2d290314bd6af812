//! An adaptive policy in `floodgate proxy`, from its TOML: a critical request holding a
//! permit at the upstream keeps its class's guarantee, so a sheddable request is refused
//! with 503 and `Retry-After: 1` while another critical one passes; the proxy's admin
//! `/metrics` and `/admin/api/adaptive` show the limit, the permits and the refusal.

use std::time::Duration;

mod common;
use common::{Backend, RunningProxy, client, get};

const TOML: &str = r#"
[[policy]]
name = "backend"
adaptive = "aimd"
min_limit = 2
max_limit = 2
initial_limit = 2

[[policy.class]]
name = "critical"
share = 1.0
match = { header = "x-priority", value = "critical" }

[[policy.class]]
name = "sheddable"
share = 0.0
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_sheds_the_lowest_class_with_503() {
    let backend = Backend::start().await;
    let proxy = RunningProxy::start(TOML, backend.addr).await;
    let c = client();
    let critical = [("x-priority", "critical")];
    // a critical request held at the upstream (`/slow` answers after 2 s)
    let slow = {
        let (c, addr) = (c.clone(), proxy.addr);
        tokio::spawn(async move { get(&c, addr, "/slow", &critical).await })
    };
    let metrics = || async {
        get(&c, proxy.admin, "/metrics", &[])
            .await
            .body
            .iter()
            .map(|b| *b as char)
            .collect::<String>()
    };
    let held = "floodgate_adaptive_in_flight{policy=\"backend\",class=\"critical\"} 1";
    let mut seen = false;
    for _ in 0..200 {
        if metrics().await.contains(held) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen, "the slow request holds a permit");
    // critical is demanding and one under its guarantee of 2: sheddable cannot borrow
    let shed = get(&c, proxy.addr, "/", &[("x-priority", "batch")]).await;
    assert_eq!(shed.status, 503);
    assert_eq!(shed.headers["retry-after"], "1");
    assert!(
        String::from_utf8_lossy(&shed.body).contains("sheds class \"sheddable\""),
        "{:?}",
        shed.body
    );
    let ok = get(&c, proxy.addr, "/", &critical).await;
    assert_eq!(ok.status, 200);
    assert_eq!(slow.await.unwrap().status, 200);
    let text = metrics().await;
    for line in [
        "floodgate_adaptive_limit{policy=\"backend\"} 2",
        "floodgate_adaptive_shed_total{policy=\"backend\",class=\"sheddable\"} 1",
        "floodgate_adaptive_shed_total{policy=\"backend\",class=\"critical\"} 0",
        "floodgate_adaptive_in_flight{policy=\"backend\",class=\"critical\"} 0",
        "floodgate_adaptive_latency_seconds_count{policy=\"backend\"} 2",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    // the admin API shows the same, per class
    let api = get(&c, proxy.admin, "/admin/api/adaptive", &[]).await;
    assert_eq!(api.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&api.body).unwrap();
    let a = &v["adaptive"][0];
    let mean = a["mean_latency_ms"].as_f64().unwrap_or(0.0);
    assert!(mean > 0.0, "{v}");
    let mut a = a.clone();
    a["mean_latency_ms"] = serde_json::Value::Null;
    assert_eq!(
        a,
        serde_json::json!({
            "name": "backend",
            "algorithm": "aimd",
            "limit": 2,
            "min_limit": 2,
            "max_limit": 2,
            "in_flight": 0,
            "queued": 0,
            "queue": 0,
            "samples": 2,
            "mean_latency_ms": null,
            "classes": [
                { "name": "critical", "share": 1.0, "in_flight": 0, "queued": 0, "shed": 0 },
                { "name": "sheddable", "share": 0.0, "in_flight": 0, "queued": 0, "shed": 1 },
            ],
        })
    );
}
