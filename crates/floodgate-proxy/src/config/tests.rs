use super::*;

fn err(src: &str) -> String {
    Config::parse(src, Path::new("floodgate.toml"))
        .unwrap_err()
        .to_string()
}

#[test]
fn redis_section_sets_the_store() {
    let cfg = Config::parse(
        "store = \"redis://127.0.0.1:6379/\"\n[redis]\nprefix = \"p:\"\ntimeout = \"20ms\"\n\
         connect_timeout = \"2s\"\nbreaker_open_for = \"0s\"\ndeny_cache_keys = 0\ntime = \"caller\"\n\
         [[policy]]\nname = \"a\"\nrate = \"1/s\"\n",
        Path::new("x.toml"),
    )
    .unwrap();
    let rc = cfg.store.redis().store_config();
    assert_eq!(rc.prefix, "p:");
    assert_eq!(rc.timeout, Duration::from_millis(20));
    assert_eq!(rc.connect_timeout, Duration::from_secs(2));
    assert_eq!(rc.breaker_open_for, Duration::ZERO);
    assert_eq!(rc.deny_cache_keys, 0);
    assert_eq!(rc.time, floodgate_redis::TimeSource::Caller);
    // unset: the store's defaults
    let d = floodgate_redis::StoreConfig::default();
    let rc = RedisSection::default().store_config();
    assert_eq!(
        (rc.timeout, rc.breaker_open_for, rc.deny_cache_keys),
        (d.timeout, d.breaker_open_for, d.deny_cache_keys)
    );
    let e = err("[redis]\nconnect_timeout = \"0s\"\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
    assert!(
        e.starts_with("floodgate.toml:2:") && e.contains("redis.connect_timeout: a timeout of 0"),
        "{e}"
    );
    let e = err("[redis]\ndeny_cache_keys = -1\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
    assert!(e.starts_with("floodgate.toml:2:"), "{e}");
}

#[test]
fn connection_caps_parse_and_zero_is_refused() {
    let policy = "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n";
    let cfg = Config::parse(
        &format!(
            "max_connections = 10\nmax_connections_per_client = 2\nupstream_max_idle = 0\n{policy}"
        ),
        Path::new("floodgate.toml"),
    )
    .unwrap();
    assert_eq!(
        (
            cfg.max_connections,
            cfg.max_connections_per_client,
            cfg.upstream_max_idle
        ),
        (Some(10), Some(2), Some(0))
    );
    for field in ["max_connections", "max_connections_per_client"] {
        let e = err(&format!("{field} = 0\n{policy}"));
        assert!(
            e.starts_with("floodgate.toml:1:") && e.contains(field) && e.contains("a cap of 0"),
            "{e}"
        );
    }
}

#[test]
fn zero_timeouts_are_refused_with_the_field_and_line() {
    let policy = "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n";
    for (field, line) in [
        ("upstream_timeout", 1),
        ("connect_timeout", 1),
        ("head_timeout", 1),
        ("send_timeout", 1),
        ("body_timeout", 1),
    ] {
        let e = err(&format!("{field} = \"0s\"\n{policy}"));
        assert!(
            e.starts_with(&format!("floodgate.toml:{line}:"))
                && e.contains(field)
                && e.contains("a timeout of 0 would fail every request"),
            "{e}"
        );
    }
    let e = err(&format!("{policy}[redis]\ntimeout = \"0ms\"\n"));
    assert!(
        e.starts_with("floodgate.toml:5:") && e.contains("redis.timeout: a timeout of 0"),
        "{e}"
    );
    // above zero is fine, and a grace of 0 (do not wait) stays allowed
    let cfg = Config::parse(
        &format!("head_timeout = \"1ms\"\nshutdown_grace = \"0s\"\n{policy}"),
        Path::new("x.toml"),
    )
    .unwrap();
    assert_eq!(cfg.head_timeout, Some(Duration::from_millis(1)));
}

#[test]
fn errors_name_file_line_and_field() {
    let e = err("[[policy]]\nname = \"a\"\nrate = \"10/q\"\n");
    assert!(e.starts_with("floodgate.toml:3:8: "), "{e}");
    assert!(
        e.contains("unknown unit \"q\"") && e.contains("units: ns, us"),
        "{e}"
    );
    let e = err("[[policy]]\nname = \"a\"\nrate = \"10/s\"\nbrust = 3\n");
    assert!(
        e.starts_with("floodgate.toml:4:1: ") && e.contains("unknown field `brust`"),
        "{e}"
    );
    let e = err("listen = \"x\"\n");
    assert!(e.starts_with("floodgate.toml:1:10: "), "{e}");
    let e = err("[[policy]]\nname = \"a\"\nrate = \"10/s\"\nburst = 2\ndelay = 5\n");
    assert!(
        e.starts_with("floodgate.toml:1:1: ") && e.contains("delay=5 is above burst=2"),
        "{e}"
    );
    let e = err("[[policy]]\nname = \"a\"\nrate = \"0/s\"\n");
    assert!(
        e.contains("floodgate.toml:3:8") && e.contains("count must be at least 1"),
        "{e}"
    );
    let e = err("[[policy]]\nname = \"a\"\nrate = \"1/s\"\n[[route]]\npolicies = [\"a\", \"a\"]\n");
    assert!(
        e.starts_with("floodgate.toml:5:18: ") && e.contains("policy \"a\" is listed twice"),
        "{e}"
    );
    let e = err("[[policy]]\nname = \"a\"\nrate = \"1/s\"\n[[route]]\npolicies = [\"b\"]\n");
    assert!(
        e.starts_with("floodgate.toml:5:13: ") && e.contains("unknown policy \"b\""),
        "{e}"
    );
    let e = err("upstream = \"ftp://x:1\"\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
    assert!(
        e.contains("scheme \"ftp\" is not supported; use http:// or https://"),
        "{e}"
    );
    let e = err("[deny]\nstatus = 200\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n");
    assert!(e.contains("2:10") && e.contains("not a 4xx or 5xx"), "{e}");
    let e = err("[[policy]]\nname = \"a\"\nrate = \"1/s\"\nalgorithm = \"gcra\"\nnodelay = true\n");
    assert!(e.contains("only to algorithm = \"leaky-queue\""), "{e}");
    let e = err("[[policy]]\nname = \"a\\\"b\"\nrate = \"1/s\"\n");
    assert!(e.contains("printable ASCII"), "{e}");
    assert!(err("").contains("no [[policy]]"));
}

const POLICY: &str = "[[policy]]\nname = \"p\"\nalgorithm = \"gcra\"\nrate = \"10/s\"\n";

fn fleet_err(store: &str, fleet: &str) -> String {
    err(&format!("{store}{POLICY}[fleet]\n{fleet}"))
}

#[test]
fn fleet_errors_are_clear_and_located() {
    let nodes = "nodes = [\"127.0.0.1:8081\", \"127.0.0.1:8082\"]\n";
    let e = fleet_err(
        "",
        &format!("strategy = \"sticky\"\n{nodes}self = \"127.0.0.1:9999\"\n"),
    );
    assert!(
        e.starts_with("floodgate.toml:5:1: fleet: self \"127.0.0.1:9999\" is not in nodes [127.0.0.1:8081, 127.0.0.1:8082]"),
        "{e}"
    );
    let e = fleet_err("", "strategy = \"local\"\nnodes = []\nself = \"a:1\"\n");
    assert!(e.contains("fleet: nodes is empty"), "{e}");
    let e = fleet_err(
        "",
        &format!("strategy = \"round-robin\"\n{nodes}self = \"127.0.0.1:8081\"\n"),
    );
    assert!(
        e.starts_with("floodgate.toml:6:12: ") && e.contains("unknown strategy \"round-robin\""),
        "{e}"
    );
    for strategy in ["shared", "hybrid"] {
        let e = fleet_err(
            "",
            &format!("strategy = \"{strategy}\"\n{nodes}self = \"127.0.0.1:8081\"\n"),
        );
        assert!(
            e.contains(&format!(
                "strategy \"{strategy}\" needs a shared store: set store type redis"
            )),
            "{e}"
        );
    }
    let redis = "store = \"redis://127.0.0.1:6379/\"\n";
    for strategy in ["sticky", "local"] {
        let e = fleet_err(
            redis,
            &format!("strategy = \"{strategy}\"\n{nodes}self = \"127.0.0.1:8081\"\n"),
        );
        assert!(e.contains("counts in process on each node"), "{e}");
    }
    let e = fleet_err("", &format!("strategy = \"local\"\n{nodes}\n"));
    assert!(e.contains("missing field `self`"), "{e}");
    let e = fleet_err(
        "",
        "strategy = \"local\"\nnodes = [\"localhost\"]\nself = \"localhost\"\n",
    );
    assert!(e.contains("node \"localhost\" is not host:port"), "{e}");
    let e = fleet_err(
        redis,
        &format!("strategy = \"hybrid\"\n{nodes}self = \"127.0.0.1:8081\"\nlease = 0\n"),
    );
    assert!(e.contains("lease must be at least 1"), "{e}");
    let e = err(&format!(
        "{redis}[[policy]]\nname = \"q\"\nrate = \"10/s\"\n[fleet]\nstrategy = \"hybrid\"\n{nodes}self = \"127.0.0.1:8081\"\n"
    ));
    assert!(e.contains("a delaying leaky-queue cannot be leased"), "{e}");
}

#[test]
fn fleet_quota_settings_are_read_and_bad_values_located() {
    use floodgate_engine::quota::QuotaFallback;
    let cfg = Config::parse(
        &format!(
            "{POLICY}[fleet]\nstrategy = \"quota\"\nquota_server = \"http://127.0.0.1:8081\"\nquota_domain = \"edge\"\nreport_interval = \"250ms\"\nno_assignment = \"local_share\"\nnodes = 3\n"
        ),
        Path::new("floodgate.toml"),
    )
    .unwrap();
    let q = cfg.fleet.quota.clone().unwrap();
    assert_eq!(q.server, "http://127.0.0.1:8081");
    assert_eq!(q.domain, "edge");
    assert_eq!(q.report_interval, std::time::Duration::from_millis(250));
    assert_eq!(q.fallback, QuotaFallback::LocalShare { nodes: 3 });
    // the quota strategy has no node-addressed fleet
    assert!(cfg.fleet().is_none());
    let quota = "strategy = \"quota\"\nquota_server = \"http://127.0.0.1:8081\"\n";
    for (extra, at, want) in [
        (
            "strategy = \"quota\"\n",
            "5:1",
            "strategy quota needs quota_server",
        ),
        (
            "strategy = \"quota\"\nquota_server = \"127.0.0.1:8081\"\n",
            "7:16",
            "quota_server \"127.0.0.1:8081\" is not a server address: expected http://host:port",
        ),
        (
            &format!("{quota}report_interval = \"0s\"\n"),
            "8:19",
            "report_interval",
        ),
        (
            &format!("{quota}no_assignment = \"maybe\"\n"),
            "8:17",
            "unknown no_assignment \"maybe\"; expected allow_all, deny_all or local_share",
        ),
        (
            &format!("{quota}quota_domain = \"\"\n"),
            "8:16",
            "quota_domain must not be empty",
        ),
        (
            &format!("{quota}quota_max_buckets = 0\n"),
            "8:21",
            "quota_max_buckets must be at least 1",
        ),
        (
            "strategy = \"local\"\nnodes = 2\nquota_server = \"http://a:1\"\n",
            "5:1",
            "quota_server is a setting of strategy quota (the strategy is local)",
        ),
    ] {
        let e = fleet_err("", extra);
        assert!(
            e.starts_with(&format!("floodgate.toml:{at}: ")) && e.contains(want),
            "{extra:?}: {e}"
        );
    }
    let e = fleet_err("store = \"redis://127.0.0.1:6379/\"\n", quota);
    assert!(
        e.contains("strategy \"quota\" counts in process on each node"),
        "{e}"
    );
}

#[test]
fn fleet_local_enforces_the_share_and_sticky_names_owners() {
    let nodes = "nodes = [\"127.0.0.1:8081\", \"127.0.0.1:8082\", \"127.0.0.1:8083\"]\n";
    let src = format!(
        "{POLICY}capacity = 10\n[fleet]\nstrategy = \"local\"\n{nodes}self = \"127.0.0.1:8082\"\n"
    );
    let cfg = Config::parse(&src, Path::new("x.toml")).unwrap();
    let l = cfg.limiter_builder().build().unwrap();
    // 10/s with capacity 10 over 3 nodes: ceil(10/3) = 4 at once, 10/3 per second
    assert_eq!(l.policies()[0].spec.capacity, Some(4));
    assert_eq!(
        l.policies()[0].spec.rate.emission_interval_nanos(),
        300_000_000
    );
    assert!(l.owner_of(&http::Request::new(())).is_none(), "not sticky");

    let src = format!(
        "[[policy]]\nname = \"k\"\nalgorithm = \"gcra\"\nrate = \"10/s\"\nkey = \"header:x-api-key\"\n[fleet]\nstrategy = \"sticky\"\n{nodes}self = \"127.0.0.1:8082\"\n"
    );
    let cfg = Config::parse(&src, Path::new("x.toml")).unwrap();
    let l = cfg.limiter_builder().build().unwrap();
    assert_eq!(
        l.policies()[0].spec.capacity,
        Some(1),
        "sticky keeps the policy's own capacity"
    );
    let fleet = cfg.fleet().unwrap();
    let mut owners = std::collections::BTreeMap::new();
    for i in 0..60 {
        let req = http::Request::builder()
            .header("x-api-key", format!("key-{i}"))
            .extension(floodgate_http::key::PeerAddr(([127, 0, 0, 1], 5000).into()))
            .body(())
            .unwrap();
        let owner = l.owner_of(&req).unwrap().to_string();
        let key = l.routing_key(&req).unwrap();
        assert_eq!(key, format!("k\x1fkey-{i}").into_bytes());
        assert_eq!(owner, fleet.owner(&key));
        *owners.entry(owner).or_insert(0) += 1;
    }
    assert_eq!(owners.len(), 3, "{owners:?}");
    // no key: decided where it arrives
    let req = http::Request::builder()
        .extension(floodgate_http::key::PeerAddr(([127, 0, 0, 1], 5000).into()))
        .body(())
        .unwrap();
    assert!(l.owner_of(&req).is_none());
}

/// The old spellings still work, give what the new ones give, and are listed as renamed.
#[test]
fn old_spellings_read_as_the_shared_sections_and_are_named() {
    let old = format!(
        "store = \"redis://127.0.0.1:6379/\"\nmax_keys = 10\n[deny]\nstore_error = \"deny\"\nretry_after_jitter = \"0s\"\n[redis]\ntimeout = \"20ms\"\n{POLICY}"
    );
    let new = format!(
        "[store]\ntype = \"redis\"\nmax_keys = 10\n[store.redis]\nurl = \"redis://127.0.0.1:6379/\"\ntimeout = \"20ms\"\nfault_policy = \"fail-closed\"\n[headers]\nretry_after_jitter = \"0s\"\n{POLICY}"
    );
    let old = Config::parse(&old, Path::new("old.toml")).unwrap();
    let new = Config::parse(&new, Path::new("new.toml")).unwrap();
    assert_eq!(old.store.redis(), new.store.redis());
    assert_eq!(
        (old.store.kind, old.store.max_keys()),
        (new.store.kind, new.store.max_keys())
    );
    assert_eq!(
        old.headers.retry_after_jitter,
        new.headers.retry_after_jitter
    );
    assert!(new.renamed.is_empty());
    let renamed: Vec<String> = old.renamed.iter().map(|r| r.to_string()).collect();
    for new_key in [
        "store.redis.url",
        "[store.redis]",
        "store.max_keys",
        "store.redis.fault_policy = \"fail-closed\"",
        "headers.retry_after_jitter",
    ] {
        assert!(
            renamed.iter().any(|r| r.contains(new_key)),
            "{new_key}: {renamed:?}"
        );
    }
    let e = err(&format!("max_keys = 5\n[store]\nmax_keys = 6\n{POLICY}"));
    assert!(
        e.starts_with("floodgate.toml:1:1: max_keys: set store.max_keys or its old spelling"),
        "{e}"
    );
    let e = err(&format!("[store]\nresp_max_keys = 6\n{POLICY}"));
    assert!(e.contains("floodgate proxy has none"), "{e}");
    let e = err(&format!(
        "[store]\ntype = \"redis\"\n[store.redis]\ntimeout = \"0s\"\n{POLICY}"
    ));
    assert!(
        e.starts_with("floodgate.toml:4:11: store.redis.timeout: a timeout of 0"),
        "{e}"
    );
}

#[test]
fn client_ip_header_reads_as_the_layers_type() {
    let cfg = Config::parse(
        &format!("[client_ip]\nheader = \"forwarded\"\n{POLICY}"),
        Path::new("x.toml"),
    )
    .unwrap();
    assert_eq!(cfg.client_ip.header, ForwardedHeader::Forwarded);
    let e = err(&format!("[client_ip]\nheader = \"via\"\n{POLICY}"));
    assert!(
        e.starts_with("floodgate.toml:2:10: client_ip.header: unknown variant `via`"),
        "{e}"
    );
}

#[test]
fn admin_listener_binds_loopback_for_a_bare_port_and_keys_display() {
    let parse = |admin: &str| {
        Config::parse(
            &format!("admin = {admin}\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n"),
            Path::new("x.toml"),
        )
    };
    let lo = |p| Some(SocketAddr::from(([127, 0, 0, 1], p)));
    assert_eq!(parse("9090").unwrap().admin, lo(9090));
    assert_eq!(parse("\"9091\"").unwrap().admin, lo(9091));
    assert_eq!(
        parse("\"0.0.0.0:9092\"").unwrap().admin,
        Some(SocketAddr::from(([0, 0, 0, 0], 9092)))
    );
    assert!(
        parse("\"nine\"")
            .unwrap_err()
            .to_string()
            .contains("a port alone, which binds 127.0.0.1")
    );
    assert_eq!(parse_admin("9093"), Ok(lo(9093).unwrap()));
    assert!(
        err("admin_keys = \"secret\"\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n")
            .contains("plain, truncated or hashed")
    );
}

#[test]
fn abort_options_default_parse_and_bad_values_name_the_field() {
    let route = |extra: &str| {
        format!(
            "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n[[route]]\nprefix = \"/v1\"\n\
             policies = [\"a\"]\ncost_trailer = \"x-cost\"\n{extra}"
        )
    };
    let spec = |src: &str| {
        Config::parse(src, Path::new("floodgate.toml"))
            .unwrap()
            .routes[0]
            .settle()
            .unwrap()
    };
    // unset: the estimate on abort, 60 s and 16 MiB of drain
    let d = spec(&route(""));
    assert_eq!(d.abort_cost, None);
    assert_eq!(d.abort_cost_for(7), 7);
    assert_eq!(d.abort_drain_timeout, Duration::from_secs(60));
    assert_eq!(d.abort_drain_bytes, 16 << 20);
    let s = spec(&route(
        "abort_cost = 4000\nabort_drain_timeout = \"2.5s\"\nabort_drain_bytes = 1024\n",
    ));
    assert_eq!(
        (s.abort_cost, s.abort_drain_timeout, s.abort_drain_bytes),
        (Some(4000), Duration::from_millis(2500), 1024)
    );
    // the longest duration the parser takes is no trouble for the drain's timer
    assert!(
        spec(&route("abort_drain_timeout = \"100000d\"\n")).abort_drain_timeout > Duration::ZERO
    );
    for (extra, line, says) in [
        ("abort_drain_timeout = \"0s\"\n", 8, "a timeout of 0"),
        ("abort_drain_timeout = \"NaN\"\n", 8, "missing number"),
        ("abort_drain_timeout = \"1e400s\"\n", 8, "unknown unit"),
        ("abort_drain_timeout = \"99999999999d\"\n", 8, "too large"),
        ("abort_drain_timeout = 5\n", 8, "invalid type"),
        (
            "abort_drain_bytes = 0\n",
            8,
            "0 octets would never reach a trailer",
        ),
        ("abort_drain_bytes = -1\n", 8, "invalid value"),
        ("abort_cost = -5\n", 8, "invalid value"),
        ("abort_cost = 1.5\n", 8, "invalid type"),
        ("abort_cost = 99999999999999999999\n", 8, ""),
    ] {
        let e = err(&route(extra));
        let field = extra.split(' ').next().unwrap();
        assert!(
            e.starts_with(&format!("floodgate.toml:{line}:"))
                && e.contains(field)
                && e.contains(says),
            "{extra}: {e}"
        );
    }
    // the options need what they apply to
    let e = err(
        "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n[[route]]\npolicies = [\"a\"]\nabort_cost = 5\n",
    );
    assert!(
        e.contains("route \"/\": abort_cost applies to a route that settles its cost"),
        "{e}"
    );
    let e = err(
        "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n[[route]]\npolicies = [\"a\"]\n\
         cost_header = \"x-cost\"\nabort_drain_bytes = 5\n",
    );
    assert!(
        e.contains("route \"/\": abort_drain_bytes bounds the reading of an abandoned body for its cost trailer, which needs cost_trailer"),
        "{e}"
    );
}

#[test]
fn admin_allowed_hosts_are_names_or_addresses() {
    let parse = |hosts: &str| {
        Config::parse(
            &format!("admin_allowed_hosts = {hosts}\n[[policy]]\nname = \"a\"\nrate = \"1/s\"\n"),
            Path::new("f.toml"),
        )
    };
    let c = parse(r#"["admin.example", "10.0.0.5", "[::2]"]"#).unwrap();
    assert_eq!(
        c.admin_allowed_hosts.names(),
        ["admin.example", "10.0.0.5", "::2"]
    );
    let e = parse(r#"["ok", "admin.example:9090"]"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("admin_allowed_hosts") && e.contains("entry 1 (\"admin.example:9090\")"),
        "{e}"
    );
    assert!(parse(r#""admin.example""#).is_err());
}

#[test]
fn upstream_groups_read_with_their_defaults_and_bad_ones_are_placed() {
    const P: &str = "[[policy]]\nname = \"a\"\nrate = \"1/s\"\n";
    let cfg = Config::parse(
        &format!(
            "[upstreams.api]\nservers = [\"http://10.0.0.1:80\", {{ url = \"http://10.0.0.2:80\", weight = 3 }}]\n\
             balance = \"hash\"\n[upstreams.api.probe]\npath = \"/up\"\n{P}\
             [[route]]\nprefix = \"/\"\npolicies = [\"a\"]\nupstream = \"api\"\n"
        ),
        Path::new("x.toml"),
    )
    .unwrap();
    let mut s = crate::ProxySettings::new(Uri::default());
    cfg.apply_to(&mut s);
    let g = &s.upstream_groups[0];
    assert_eq!(
        (g.name.as_str(), g.balance),
        ("api", crate::upstreams::Balance::Hash)
    );
    assert_eq!(g.servers[1].weight, 3);
    assert_eq!((g.max_fails, g.fail_timeout), (3, Duration::from_secs(10)));
    let probe = g.probe.as_ref().unwrap();
    assert_eq!(
        (probe.path.as_str(), probe.interval, probe.timeout),
        ("/up", Duration::from_secs(5), Duration::from_secs(1))
    );
    assert_eq!(s.route_upstreams, vec![Some("api".to_string())]);
    for (src, at, says) in [
        (
            "[upstreams.api]\nservers = [\"10.0.0.1:80\"]\n",
            "floodgate.toml:2:",
            "needs a scheme",
        ),
        (
            "[upstreams.api]\nservers = [{ url = \"http://a:1\", weight = 0 }]\n",
            "floodgate.toml:2:",
            "weight 0 of http://a:1: must be 1..=100",
        ),
        (
            "[upstreams.api]\nservers = []\n",
            "floodgate.toml:1:1:",
            "lists no servers",
        ),
        (
            "[upstreams.api]\nservers = [\"http://a:1\", \"http://a:1\"]\n",
            "floodgate.toml:1:1:",
            "server[1] http://a:1/ is listed twice",
        ),
        (
            "[upstreams.api]\nservers = [\"http://a:1\"]\nbalance = \"random\"\n",
            "floodgate.toml:3:",
            "unknown variant `random`",
        ),
        (
            "[upstreams.api]\nservers = [\"http://a:1\"]\n[upstreams.api.probe]\npath = \"up\"\n",
            "floodgate.toml:1:1:",
            "probe.path \"up\" must start with /",
        ),
        (
            "upstream = \"http://a:1\"\n[upstreams.default]\nservers = [\"http://b:1\"]\n",
            "floodgate.toml:2:1:",
            "not both",
        ),
    ] {
        let e = err(&format!("{src}{P}"));
        assert!(e.starts_with(at) && e.contains(says), "{src}: {e}");
    }
}

#[test]
fn a_policy_without_burst_or_capacity_admits_one_at_once() {
    use floodgate_core::Algorithm;
    for algorithm in ["leaky-queue", "leaky-meter", "token-bucket", "gcra"] {
        let src =
            format!("[[policy]]\nname = \"p\"\nalgorithm = \"{algorithm}\"\nrate = \"10/s\"\n");
        let cfg = Config::parse(&src, Path::new("x.toml")).unwrap();
        let l = cfg.limiter_builder().build().unwrap();
        assert_eq!(
            l.policies()[0].spec.capacity,
            Some(DEFAULT_CAPACITY),
            "{algorithm}"
        );
        assert_eq!(l.policies()[0].algorithm.limit(), 1, "{algorithm}");
    }
    let rate: Rate = "10/s".parse().unwrap();
    for (shape, want) in [
        (RateShape::default(), Ok(1)),
        (
            RateShape {
                burst: Some(20),
                ..RateShape::default()
            },
            Ok(21),
        ),
        (
            RateShape {
                capacity: Some(7),
                ..RateShape::default()
            },
            Ok(7),
        ),
        (
            RateShape {
                capacity: Some(0),
                ..RateShape::default()
            },
            Err("capacity must be at least 1"),
        ),
        (
            RateShape {
                burst: Some(u64::MAX),
                ..RateShape::default()
            },
            Err("is too large"),
        ),
        (
            RateShape {
                burst: Some(1),
                capacity: Some(2),
                ..RateShape::default()
            },
            Err("set burst or capacity, not both"),
        ),
        (
            RateShape {
                delay: Some(3),
                ..RateShape::default()
            },
            Err("delay=3 is above burst=0"),
        ),
    ] {
        match (rate_spec(Kind::LeakyQueue, rate, shape), want) {
            (Ok(s), Ok(c)) => assert_eq!(s.capacity, Some(c), "{shape:?}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{shape:?}: {e}"),
            (got, want) => panic!("{shape:?}: {got:?}, want {want:?}"),
        }
    }
    let e = rate_spec(
        Kind::Gcra,
        rate,
        RateShape {
            nodelay: true,
            ..RateShape::default()
        },
    )
    .unwrap_err();
    assert!(
        e.contains("apply only to algorithm = \"leaky-queue\""),
        "{e}"
    );
}

#[test]
fn a_policy_rate_reads_the_limits_notation() {
    for (text, count, secs) in [
        ("100 per minute", 100, 60),
        ("10/2 minutes", 10, 120),
        ("10 per 2 minutes", 10, 120),
        ("5 per Hour", 5, 3600),
        ("1/day", 1, 86_400),
        ("3/month", 3, 30 * 86_400),
    ] {
        let src =
            format!("[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nrate = \"{text}\"\n");
        let cfg = Config::parse(&src, Path::new("x.toml")).unwrap();
        let l = cfg.limiter_builder().build().unwrap();
        let rate = l.policies()[0].spec.rate;
        assert_eq!(
            (rate.count(), rate.period()),
            (count, Duration::from_secs(secs)),
            "{text}"
        );
    }
    let e = err("[[policy]]\nname = \"a\"\nrate = \"1/second; 100/minute\"\n");
    assert!(
        e.starts_with("floodgate.toml:3:8: ") && e.contains("several limits"),
        "{e}"
    );
    let e = err("[[policy]]\nname = \"a\"\nrate = \"10 per fortnight\"\n");
    assert!(
        e.starts_with("floodgate.toml:3:8: ") && e.contains("unknown unit \"fortnight\""),
        "{e}"
    );
}
