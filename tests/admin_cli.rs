//! Who is being limited, through the real `floodgate proxy` process: three keys at
//! different rates and one flooding, then the admin API, `floodgate top` and bad input.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

mod common;
use common::{Proc, free_ports, http_get, http_post_json, ok_backend, wait_child_listening};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// Start `floodgate proxy` with one fixed-window policy of 20/s keyed on `x-api-key`
/// (on other ports, up to three times, when the process exits before listening: a port
/// chosen free can be taken by another test before the proxy binds it).
async fn proxy(dir: &std::path::Path) -> (Proc, SocketAddr, SocketAddr) {
    proxy_with(dir, "", "").await
}

/// [`proxy`], with `top` among the top-level fields of its config and `tables` after its
/// policy.
async fn proxy_with(
    dir: &std::path::Path,
    top: &str,
    tables: &str,
) -> (Proc, SocketAddr, SocketAddr) {
    let upstream = ok_backend().await;
    let mut last = String::new();
    for _ in 0..3 {
        let [listen, admin] = free_ports();
        let cfg = dir.join("floodgate.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"{listen}\"\nupstream = \"http://{upstream}\"\nadmin = \"{admin}\"\n\
                 store = \"memory\"\n{top}\n\
                 [[policy]]\nname = \"api\"\nalgorithm = \"fixed-window\"\nrate = \"20/s\"\nkey = \"header:x-api-key\"\n{tables}"
            ),
        )
        .unwrap();
        let err = dir.join("proxy.stderr");
        let child = Command::new(BIN)
            .args(["proxy", "--threads", "1", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let mut p = Proc(child);
        match wait_child_listening(&mut p, &[listen, admin]).await {
            Ok(()) => return (p, listen, admin),
            Err(e) => last = format!("{e}; stderr: {}", std::fs::read_to_string(&err).unwrap()),
        }
    }
    panic!("floodgate proxy did not start: {last}");
}

/// Send `n` requests for `key`, `gap` apart (zero: back to back on `par` tasks); the
/// 429s counted.
async fn send(listen: SocketAddr, key: &'static str, n: usize, gap: Duration, par: usize) -> u64 {
    let c = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let tasks: Vec<_> = (0..par)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                let mut denied = 0;
                for _ in 0..n / par {
                    let req = http::Request::get(format!("http://{listen}/"))
                        .header("x-api-key", key)
                        .body(Empty::new())
                        .unwrap();
                    let r = c.request(req).await.unwrap();
                    denied += u64::from(r.status() == 429);
                    tokio::time::sleep(gap).await;
                }
                denied
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total
}

/// `floodgate top http://ADMIN --once --policy POLICY`.
fn top_once(admin: SocketAddr, policy: &str) -> std::process::Output {
    Command::new(BIN)
        .args([
            "top",
            &format!("http://{admin}"),
            "--once",
            "--policy",
            policy,
        ])
        .output()
        .unwrap()
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flooding_key_leads_the_top_keys_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, listen, admin) = proxy(dir.path()).await;
    let start = Instant::now();
    // three keys under the limit at different rates, one flooding (bounded: 600 requests)
    let (a, b, c, flood) = tokio::join!(
        send(listen, "alice", 6, Duration::from_millis(200), 1),
        send(listen, "bob", 12, Duration::from_millis(100), 1),
        send(listen, "carol", 18, Duration::from_millis(66), 1),
        send(listen, "mallory", 600, Duration::ZERO, 4),
    );
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(flood > 100, "the flood was denied only {flood} times");
    let observed: HashMap<&str, u64> =
        [("alice", a), ("bob", b), ("carol", c), ("mallory", flood)].into();

    let (status, body) = http_get(admin, "/admin/api/top?policy=api&n=5").await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    let denied = &v["policies"][0]["denied"];
    let first = &denied["keys"][0];
    assert_eq!(first["key"], "mallory", "{body}");
    let (count, error, bound) = (
        first["count"].as_u64().unwrap(),
        first["error"].as_u64().unwrap(),
        denied["bound"].as_u64().unwrap(),
    );
    // the stated bound: true <= count <= true + error, error <= N / k
    assert!(
        count >= flood && count - flood <= error && error <= bound,
        "{body}"
    );
    assert_eq!(
        denied["total"].as_u64().unwrap(),
        observed.values().sum::<u64>()
    );
    let admitted = &v["policies"][0]["admitted"]["keys"];
    assert_eq!(admitted.as_array().unwrap().len(), 4, "{body}");

    // the overview: per-second decisions add up, window boundaries are 1 s apart
    let (status, body) = http_get(admin, "/admin/api/overview?seconds=60").await;
    assert_eq!(status, 200);
    let v = json(&body);
    let p = &v["policies"][0];
    let sum = |k: &str| -> u64 {
        p["timeline"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum("rejected"), observed.values().sum::<u64>());
    assert_eq!(sum("passed") + sum("rejected"), 6 + 12 + 18 + 600);
    let b = p["boundaries_ms"].as_array().unwrap();
    assert!(
        b.len() >= 59
            && b.windows(2)
                .all(|w| w[1].as_u64().unwrap() - w[0].as_u64().unwrap() == 1_000)
    );
    // the config file's tables, and the startup load
    assert_eq!(v["config"]["policy"][0]["rate"], "20/s", "{}", v["config"]);
    assert_eq!(v["reloads"][0]["generation"], 1);

    // one key's state, as a peek reports it, consuming nothing: a key never seen has
    // its whole limit
    let (status, body) = http_get(admin, "/admin/api/key?policy=api&key=nobody").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["remaining"], 20);
    let (_, again) = http_get(admin, "/admin/api/key?policy=api&key=nobody").await;
    assert_eq!(json(&again)["remaining"], 20);

    // the page
    let (status, page) = http_get(admin, "/admin").await;
    assert_eq!(status, 200);
    assert!(page.contains("<title>floodgate admin</title>"));

    // floodgate top prints the same table, the flooding key first
    let out = top_once(admin, "api");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rank1 = text
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap();
    assert!(rank1.contains("mallory"), "{text}");
    assert!(text.contains("policy api: denials"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_admin_input_is_a_400_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, _listen, admin) = proxy(dir.path()).await;
    let huge_key = format!("/admin/api/key?policy=api&key={}", "k".repeat(2_000));
    let huge_query = format!("/admin/api/top?x={}", "q".repeat(5_000));
    for (path, words) in [
        ("/admin/api/top?policy=nope", "unknown policy"),
        ("/admin/api/key?policy=api", "key is required"),
        ("/admin/api/key?policy=api&key=%zz", "percent-escape"),
        (huge_key.as_str(), "longer"),
        (huge_query.as_str(), "longer"),
        ("/admin/api/overview?seconds=-1", "from 1 to 180"),
    ] {
        let (status, body) = http_get(admin, path).await;
        assert_eq!(status, 400, "{path}: {body}");
        let e = json(&body)["error"].as_str().unwrap().to_string();
        assert!(e.contains(words), "{path}: {e}");
    }
    let (status, _) = http_get(admin, "/admin/api/elsewhere").await;
    assert_eq!(status, 404);
    // still serving
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    // floodgate top against an unknown policy: the API's message, exit status 1 (a
    // runtime failure: the listener refused the query)
    let out = top_once(admin, "nope");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy"));
}

/// `floodgate server` with one descriptor limit of 5/s (fixed window) named `per_user`;
/// its HTTP listener's address.
fn server(dir: &std::path::Path) -> (Proc, SocketAddr) {
    server_with(dir, "")
}

/// [`server`], with `top` (YAML) at the start of its config.
fn server_with(dir: &std::path::Path, top: &str) -> (Proc, SocketAddr) {
    let (p, http, _) = server_doors(dir, top);
    (p, http)
}

/// [`server_with`], and the address of its gRPC door.
fn server_doors(dir: &std::path::Path, top: &str) -> (Proc, SocketAddr, SocketAddr) {
    use std::io::{BufRead, BufReader};
    let cfg = dir.join("limits.yaml");
    std::fs::write(
        &cfg,
        top.to_string()
            + "admin_keys: plain\nstore:\n  type: memory\n  redis: {url: \"redis://admin:hunter2@127.0.0.1:6379\"}\n\
         domains:\n  - domain: edge\n    descriptors:\n      - key: user\n        \
         rate_limit: {name: per_user, rate: 5/s, algorithm: fixed-window}\n",
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["server", "--config"])
        .arg(&cfg)
        .args([
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--resp",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let door = |name: &str| -> SocketAddr {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .parse()
            .unwrap()
    };
    (Proc(child), door("http="), door("grpc="))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_serves_the_same_api_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, http) = server(dir.path());
    let check = |user: &str| {
        format!(r#"{{"domain": "edge", "descriptors": [[{{"key": "user", "value": "{user}"}}]]}}"#)
    };
    let mut flood_denied = 0;
    for i in 0..30 {
        flood_denied += u64::from(http_post_json(http, "/v1/check", check("mallory")).await == 429);
        if i % 10 == 0 {
            assert_eq!(http_post_json(http, "/v1/check", check("alice")).await, 200);
        }
    }
    assert!(flood_denied >= 20, "{flood_denied}");
    let (status, body) = http_get(http, "/admin/api/top?policy=per_user").await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["surface"], "server");
    let first = &v["policies"][0]["denied"]["keys"][0];
    // a descriptor's key is its values, each after its length
    assert_eq!(first["key"], "7:mallory", "{body}");
    assert_eq!(first["count"].as_u64().unwrap(), flood_denied);
    // the lookup reads the limit's in-process state for the same key
    let (status, body) = http_get(http, "/admin/api/key?policy=per_user&key=5:alice").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["limit"], 5);
    let (status, body) = http_get(http, "/admin/api/overview").await;
    assert_eq!(status, 200);
    let v = json(&body);
    assert_eq!(v["policies"][0]["name"], "per_user");
    assert_eq!(
        v["config"]["store"]["redis"]["url"],
        "redis://***@127.0.0.1:6379"
    );
    assert!(!body.contains("hunter2"));
    assert_eq!(v["reloads"][0]["generation"], 1);
    let (status, page) = http_get(http, "/admin").await;
    assert_eq!(status, 200);
    assert!(page.contains("/admin/api/overview"));
    let (status, body) = http_get(http, "/admin/api/key?policy=nope&key=x").await;
    assert_eq!(status, 400);
    assert!(
        json(&body)["error"].as_str().unwrap().contains("per_user"),
        "{body}"
    );
    // floodgate top against the server
    let out = Command::new(BIN)
        .args(["top", &format!("http://{http}"), "--count", "1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("7:mallory"));

    // reloads, refused and taken, are listed (SIGHUP; the file watcher may also see them)
    let cfg = dir.path().join("limits.yaml");
    let good = std::fs::read_to_string(&cfg).unwrap().replace("5/s", "7/s");
    for (text, ok) in [
        ("domains: [{domain: edge, descriptors: 3}]\n", false),
        (good.as_str(), true),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let hup = Command::new("kill")
            .args(["-HUP", &srv.0.id().to_string()])
            .status()
            .unwrap();
        assert!(hup.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, body) = http_get(http, "/admin/api/config").await;
            let v = json(&body);
            let last = v["reloads"].as_array().unwrap().last().cloned().unwrap();
            if last["ok"] == ok
                && (ok || last["generation"] == 1)
                && (!ok || last["generation"] == 2)
            {
                if ok {
                    assert_eq!(v["policies"][0]["rate"], "7/s", "{body}");
                } else {
                    assert!(
                        last["message"].as_str().unwrap().contains("descriptors"),
                        "{body}"
                    );
                }
                break;
            }
            assert!(Instant::now() < deadline, "reload not listed: {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Debian's `chromium` (scripts/setup.sh installs it); the test fails without it.
fn chromium() -> &'static str {
    let found = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return "chromium";
    }
    panic!("no chromium on PATH (Debian package chromium; scripts/setup.sh installs it)");
}

/// Run headless chromium on `url` for `virtual_ms` of page time and return the DOM it
/// rendered (killed after 60 s of real time).
fn dump_dom(browser: &str, url: &str, profile: &std::path::Path, virtual_ms: u64) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={virtual_ms}"))
        .args(["--dump-dom", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.wait();
    reader.join().unwrap()
}

/// The part of `dom` from the element with `id` to the end of its `close` tag.
fn element<'a>(dom: &'a str, id: &str, close: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no element {id} in the page: {dom}"));
    let end = dom[start..].find(close).map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_shows_the_flooding_key_in_a_browser() {
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let (_p, listen, admin) = proxy(dir.path()).await;
    // under load: a bounded flood and two keys under the limit
    let (flood, _, _) = tokio::join!(
        send(listen, "mallory", 300, Duration::ZERO, 3),
        send(listen, "alice", 4, Duration::from_millis(100), 1),
        send(listen, "bob", 4, Duration::from_millis(100), 1),
    );
    assert!(flood > 0);
    let url = format!("http://{admin}/admin");
    let profile = dir.path().join("chromium");
    let dom = tokio::task::spawn_blocking(move || dump_dom(browser, &url, &profile, 3_000))
        .await
        .unwrap();
    // the page polled the API and drew the policy: its charts and its top-keys table
    let rates = element(&dom, "chart-api", "</svg>");
    assert!(rates.contains("decisions/s"), "{rates}");
    assert!(rates.contains("<polyline"), "{rates}");
    let denials = element(&dom, "denials-api", "</svg>");
    assert!(denials.contains("most denied: mallory"), "{denials}");
    assert!(denials.contains("data-boundary"), "{denials}");
    let top = element(&dom, "top-api", "</table>");
    let first_row = top.split("<tr>").nth(2).unwrap_or_default();
    assert!(first_row.contains("<code>mallory</code>"), "{top}");
    assert!(first_row.contains(&format!(">{flood}<")), "{top}");
    // and showed no error
    assert!(dom.contains(r#"id="status"></span>"#), "{dom}");
}

/// An adaptive policy of a fixed limit of 3 with two classes.
const ADAPTIVE: &str = "\n[[policy]]\nname = \"backend\"\nadaptive = \"aimd\"\nmin_limit = 3\nmax_limit = 3\ninitial_limit = 3\n\n[[policy.class]]\nname = \"critical\"\nshare = 1.0\nmatch = { header = \"x-priority\", value = \"critical\" }\n\n[[policy.class]]\nname = \"sheddable\"\nshare = 0.0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_shows_adaptive_policies_and_upstream_servers_in_a_browser() {
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let (_p, listen, admin) = proxy_with(dir.path(), "", ADAPTIVE).await;
    // 4 requests, one at a time: sheddable (no x-priority) borrows the idle limit
    assert_eq!(send(listen, "alice", 4, Duration::ZERO, 1).await, 0);
    // the upstream server's JSON: one server of the group "default", 4 answers
    let (status, body) = http_get(admin, "/admin/upstreams").await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    let server = &v["default"]["servers"][0];
    let url = server["url"].as_str().unwrap().to_string();
    for (field, want) in [
        ("up", serde_json::json!(true)),
        ("in_flight", 0.into()),
        ("requests_total", 4.into()),
        ("failures", 0.into()),
        ("ejections", 0.into()),
        ("ejected_for_seconds", serde_json::Value::Null),
    ] {
        assert_eq!(server[field], want, "{field}: {v}");
    }
    assert_eq!(server["requests"]["2xx"], 4, "{v}");
    let page = format!("http://{admin}/admin");
    let profile = dir.path().join("chromium");
    let dom = tokio::task::spawn_blocking(move || dump_dom(browser, &page, &profile, 3_000))
        .await
        .unwrap();
    // the adaptive panel: the limit, the samples, a row per class
    let head = element(&dom, "adaptive-head-backend", "</h3>");
    assert!(
        head.contains("aimd, limit 3 (3 to 3), in flight 0"),
        "{head}"
    );
    assert!(head.contains("over 4 samples"), "{head}");
    let classes = element(&dom, "adaptive-backend", "</table>");
    let rows: Vec<&str> = classes.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{classes}");
    assert!(rows[0].starts_with("<td>critical</td>"), "{classes}");
    assert!(rows[1].starts_with("<td>sheddable</td>"), "{classes}");
    // the upstream panel: the server, up, its 4 requests
    let servers = element(&dom, "upstream-default", "</table>");
    let row = servers.split("<tr>").nth(2).unwrap_or_default();
    assert!(
        row.starts_with(&format!("<td>{url}</td><td class=\"ok\">up</td>")),
        "{servers}"
    );
    assert!(row.contains("<td class=\"n\">4</td>"), "{servers}");
    // a proxy has no quota buckets of its own to divide: no quota panel
    assert!(dom.contains(r#"<section id="quota" hidden="">"#), "{dom}");
    // and showed no error
    assert!(dom.contains(r#"id="status"></span>"#), "{dom}");
}

/// The sum of a metric's samples in an OpenMetrics text.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_admin_page_shows_each_quota_clients_demand_and_share_in_a_browser() {
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let (_srv, http, grpc) = server_doors(
        dir.path(),
        "quota:\n  domains:\n    - domain: admin\n      buckets:\n        - match: {policy: api}\n          \
         rate: 100/s\n          report_interval: 250ms\n          assignment_ttl: 5s\n",
    );
    // two real proxies as quota clients of the server, one busy and one quiet
    let fleet = format!(
        "\n[fleet]\nstrategy = \"quota\"\nquota_server = \"http://{grpc}\"\nquota_domain = \"admin\"\n\
         report_interval = \"250ms\"\nno_assignment = \"allow_all\"\n"
    );
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let (_a, busy, _) = proxy_with(&a_dir, "", &fleet).await;
    let (_b, quiet, _) = proxy_with(&b_dir, "", &fleet).await;
    // traffic on both until the page is read: the division stays live
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let done = done.clone();
        tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::join!(
                    send(busy, "tenant-1", 8, Duration::ZERO, 2),
                    send(quiet, "tenant-1", 1, Duration::ZERO, 1),
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let bucket = "admin|key=tenant-1,policy=api";
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = http_get(http, "/admin/api/quota").await;
        assert_eq!(status, 200, "{body}");
        let v = json(&body);
        if v[bucket]["clients"]
            .as_array()
            .is_some_and(|c| c.len() == 2)
        {
            assert_eq!(v[bucket]["limit"], 100.0, "{body}");
            let shares: f64 = (0..2)
                .map(|i| v[bucket]["clients"][i]["share"].as_f64().unwrap())
                .sum();
            assert!((shares - 100.0).abs() < 1e-6, "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no division of two clients: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // the metrics: the limit, each client's demand and share, the reports received
    let (status, metrics) = http_get(http, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        metric_sum(&metrics, "floodgate_quota_limit"),
        100.0,
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("floodgate_quota_assigned{").count(),
        2,
        "{metrics}"
    );
    assert!(
        metric_sum(&metrics, "floodgate_quota_reports_total") >= 2.0,
        "{metrics}"
    );
    assert!(
        metrics.contains("floodgate_quota_pushes_total"),
        "{metrics}"
    );
    let page = format!("http://{http}/admin");
    let profile = dir.path().join("chromium");
    let dom = tokio::task::spawn_blocking(move || dump_dom(browser, &page, &profile, 3_000))
        .await
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    traffic.await.unwrap();
    // the quota panel: the bucket's limit, its two clients, their shares summing to it
    let head = element(&dom, &format!("quota-head-{bucket}"), "</h3>");
    assert!(
        head.contains("(rule admin|policy=api): limit 100.0/s"),
        "{head}"
    );
    assert!(head.contains("assigned 100.0/s over 2 clients"), "{head}");
    let clients = element(&dom, &format!("quota-{bucket}"), "</table>");
    let rows: Vec<&str> = clients.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{clients}");
    for r in rows {
        assert_eq!(r.matches("<td class=\"n\">").count(), 3, "{clients}");
    }
    // and showed no error
    assert!(dom.contains(r#"id="status"></span>"#), "{dom}");
}

/// `GET path` with `Host: host` (none when `None`) on a new connection: the status, the
/// head (lower-case) and the body.
async fn get_as(addr: SocketAddr, path: &str, host: Option<&str>) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let host = host.map_or_else(String::new, |h| format!("Host: {h}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\n{host}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// DNS rebinding: a page of another site whose name resolves to the loopback listener
/// sends its own name in `Host`; the admin API answers only loopback names and the
/// configured ones. The config it shows hides allowlisted keys (a count and a short
/// SHA-256 each), and every admin answer carries nosniff and a CSP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_answers_loopback_hosts_only_and_hides_allowlisted_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, _listen, admin) = proxy_with(
        dir.path(),
        "admin_allowed_hosts = [\"ops.example\"]\n",
        "\n[allowlist]\nkeys = [\"abc\", \"internal-batch-key\"]\n",
    )
    .await;
    let port = admin.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "ops.example:8443".to_string(),
    ] {
        let (status, head, body) = get_as(admin, "/admin/api/config", Some(&host)).await;
        assert_eq!(status, 200, "{host}: {body}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        assert!(
            head.contains("content-security-policy: default-src 'none'"),
            "{head}"
        );
        assert!(!body.contains("internal-batch-key"), "{body}");
        let keys = &json(&body)["config"]["allowlist"]["keys"];
        assert_eq!(keys["count"], 2, "{body}");
        // SHA-256("abc") begins ba7816bf
        assert_eq!(keys["sha256"][0], "ba7816bf", "{body}");
    }
    let (status, _, body) = get_as(admin, "/admin/api/overview", Some("127.0.0.1")).await;
    assert_eq!(status, 200);
    assert!(!body.contains("internal-batch-key"), "{body}");
    for host in [
        format!("rebind.example:{port}"),
        "127.0.0.1.rebind.example".to_string(),
    ] {
        for path in ["/admin", "/admin/api/config", "/admin/api/top"] {
            let (status, head, body) = get_as(admin, path, Some(&host)).await;
            assert_eq!(status, 421, "{host} {path}: {body}");
            assert!(head.contains("nosniff"), "{head}");
            assert!(
                json(&body)["error"]
                    .as_str()
                    .unwrap()
                    .contains("admin_allowed_hosts")
            );
        }
    }
    // a scraper's name is its own business: /metrics answers any Host
    assert_eq!(get_as(admin, "/metrics", Some("prom.example")).await.0, 200);

    // the server's HTTP door: /admin and /v1 alike
    let (srv, http) = server_with(dir.path(), "http:\n  allowed_hosts: [ops.example]\n");
    let (status, head, _) = get_as(http, "/admin", Some(&http.to_string())).await;
    assert_eq!(status, 200);
    assert!(head.contains("content-security-policy: default-src 'none'; script-src 'sha256-"));
    assert_eq!(get_as(http, "/admin", Some("ops.example")).await.0, 200);
    for path in ["/admin", "/admin/api/config"] {
        let (status, _, body) = get_as(http, path, Some("rebind.example")).await;
        assert_eq!(status, 421, "{path}: {body}");
        assert!(body.contains("http.allowed_hosts"), "{body}");
    }
    let check = |host: &str| {
        let body = r#"{"domain": "edge", "descriptors": [[{"key": "user", "value": "u"}]]}"#;
        format!(
            "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    for (host, want) in [
        (http.to_string(), "200"),
        ("ops.example".to_string(), "200"),
        ("rebind.example".to_string(), "421"),
    ] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
        s.write_all(check(&host).as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf);
        assert!(
            text.starts_with(&format!("HTTP/1.1 {want}")),
            "{host}: {text}"
        );
    }
    assert_eq!(
        get_as(http, "/healthz", Some("rebind.example")).await.0,
        200
    );
    drop(srv);
}

/// A key is the client's bytes: `floodgate top` escapes the control characters one holds
/// (an ESC sequence would clear the operator's terminal or recolour it) rather than
/// printing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_escapes_control_characters_in_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, http) = server(dir.path());
    let check = r#"{"domain": "edge", "descriptors": [[{"key": "user", "value": "\u001b[2J\u001b[31mevil\u009b0m"}]]}"#;
    // 5 per fixed window of 1 s: ten checks in a row that straddle a window's end see
    // fewer than five denials; checks go on (at most 200) until five are denied
    let mut denied = 0;
    for _ in 0..200 {
        denied += u64::from(http_post_json(http, "/v1/check", check.to_string()).await == 429);
        if denied >= 5 {
            break;
        }
    }
    assert!(denied >= 5, "{denied}");
    let out = top_once(http, "per_user");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        !stdout.chars().any(|c| c.is_control() && c != '\n'),
        "{stdout:?}"
    );
    assert!(
        stdout.contains(r"\u{1b}[2J\u{1b}[31mevil\u{9b}0m"),
        "{stdout}"
    );
    drop(srv);
}
