use super::*;

/// The settings' parts [`Upstreams::new`] reads.
struct Settings {
    upstream: Uri,
    upstream_groups: Vec<GroupSpec>,
    route_upstreams: Vec<Option<String>>,
}

impl Settings {
    fn config(&self) -> UpstreamsConfig<'_> {
        UpstreamsConfig {
            upstream: &self.upstream,
            groups: &self.upstream_groups,
            routes: &self.route_upstreams,
        }
    }
}

fn settings(servers: &[&str], balance: Balance) -> Settings {
    let mut s = Settings {
        upstream: Uri::default(),
        upstream_groups: Vec::new(),
        route_upstreams: Vec::new(),
    };
    s.upstream_groups = vec![GroupSpec {
        servers: servers
            .iter()
            .map(|u| ServerSpec {
                url: u.parse().unwrap(),
                weight: 1,
            })
            .collect(),
        balance,
        ..GroupSpec::single(DEFAULT_GROUP, Uri::default())
    }];
    s
}

fn owners(u: Upstreams, keys: usize) -> Vec<String> {
    let b = Balancer::new(Arc::new(u));
    (0..keys)
        .map(|k| {
            let s = b
                .pick(0, Some(format!("per-user\x1fuser{k}").as_bytes()), &[])
                .unwrap();
            b.upstreams().server(0, s).addr.clone()
        })
        .collect()
}

#[test]
fn the_hash_moves_about_one_key_in_n_when_a_server_is_added() {
    let m = Metrics::new(&[]);
    let three = [
        "http://10.0.0.1:80",
        "http://10.0.0.2:80",
        "http://10.0.0.3:80",
    ];
    let four = [three[0], three[1], three[2], "http://10.0.0.4:80"];
    let (s3, s4) = (
        settings(&three, Balance::Hash),
        settings(&four, Balance::Hash),
    );
    let a = Upstreams::new(s3.config(), &m, None).unwrap();
    let b = Upstreams::new(s4.config(), &m, None).unwrap();
    let (before, after) = (owners(a, 10_000), owners(b, 10_000));
    let moved: Vec<_> = before.iter().zip(&after).filter(|(x, y)| x != y).collect();
    // every key that moved went to the new server; about a quarter moved
    assert!(moved.iter().all(|(_, y)| y.as_str() == "10.0.0.4:80"));
    assert!(
        (1_800..=3_200).contains(&moved.len()),
        "{} of 10000 moved",
        moved.len()
    );
    // each of the three held about a third before
    for s in ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"] {
        let n = before.iter().filter(|o| o.as_str() == s).count();
        assert!((2_800..=3_900).contains(&n), "{s}: {n}");
    }
}

#[test]
fn a_replacement_keeps_the_health_of_unchanged_servers() {
    let m = Metrics::new(&[]);
    let mut s = settings(
        &["http://10.0.0.1:80", "http://10.0.0.2:80"],
        Balance::RoundRobin,
    );
    let a = Arc::new(Upstreams::new(s.config(), &m, None).unwrap());
    for _ in 0..DEFAULT_MAX_FAILS {
        a.record(0, 0, Err(true));
    }
    let pick_a = Balancer::new(a.clone());
    assert!(pick_a.pick(0, None, &[1]).is_err(), "server 0 is ejected");
    s.upstream_groups[0].servers.push(ServerSpec {
        url: "http://10.0.0.3:80".parse().unwrap(),
        weight: 1,
    });
    let b = Balancer::new(Arc::new(Upstreams::new(s.config(), &m, Some(&a)).unwrap()));
    assert!(
        b.pick(0, None, &[1, 2]).is_err(),
        "still ejected after the replacement"
    );
    assert!(b.pick(0, None, &[0, 1]).is_ok(), "the new server is taken");
}

#[test]
fn the_workers_share_one_turn_and_skip_an_ejected_server() {
    let m = Metrics::new(&[]);
    let s = settings(
        &[
            "http://10.0.0.1:80",
            "http://10.0.0.2:80",
            "http://10.0.0.3:80",
        ],
        Balance::RoundRobin,
    );
    let u = Arc::new(Upstreams::new(s.config(), &m, None).unwrap());
    let (one, two) = (Balancer::new(u.clone()), Balancer::new(u.clone()));
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(one.pick(0, None, &[]).unwrap());
        seen.push(two.pick(0, None, &[]).unwrap());
    }
    assert_eq!(seen, vec![0, 1, 2, 0, 1, 2]);
    for _ in 0..DEFAULT_MAX_FAILS {
        u.record(0, 1, Err(true));
    }
    let picks: Vec<usize> = (0..4).map(|_| one.pick(0, None, &[]).unwrap()).collect();
    assert!(!picks.contains(&1), "{picks:?}");
}

#[test]
fn a_request_is_in_flight_until_its_guard_is_dropped_and_least_requests_sees_it() {
    let m = Metrics::new(&[]);
    let s = settings(
        &["http://10.0.0.1:80", "http://10.0.0.2:80"],
        Balance::LeastRequests,
    );
    let u = Arc::new(Upstreams::new(s.config(), &m, None).unwrap());
    let b = Arc::new(Balancer::new(u.clone()));
    let held: Vec<InFlight> = (0..3).map(|_| b.start(0, 0)).collect();
    assert_eq!(u.server(0, 0).in_flight(), 3);
    // on another thread (a body dropped elsewhere): the count is the same
    let other = b.start(0, 1);
    std::thread::spawn(move || drop(other)).join().unwrap();
    assert_eq!(u.server(0, 1).in_flight(), 0);
    // the two drawn are always both servers: the idle one wins
    for _ in 0..20 {
        assert_eq!(b.pick(0, None, &[]).unwrap(), 1);
    }
    drop(held);
    assert_eq!(u.server(0, 0).in_flight(), 0);
    assert_eq!(u.status()["default"]["servers"][0]["in_flight"], 0);
}

#[test]
fn an_unknown_route_upstream_and_a_default_twice_are_refused() {
    let m = Metrics::new(&[]);
    let mut s = settings(&["http://10.0.0.1:80"], Balance::RoundRobin);
    s.route_upstreams = vec![Some("nope".into())];
    let e = Upstreams::new(s.config(), &m, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"nope\""), "{e}");
    let mut s = settings(&["http://10.0.0.1:80"], Balance::RoundRobin);
    s.upstream = "http://127.0.0.1:9".parse().unwrap();
    let e = Upstreams::new(s.config(), &m, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
}
