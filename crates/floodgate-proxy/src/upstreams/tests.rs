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

fn owners(u: &Upstreams, keys: usize) -> Vec<String> {
    (0..keys)
        .map(|k| {
            let s = u
                .pick(0, Some(format!("per-user\x1fuser{k}").as_bytes()), &[])
                .unwrap();
            u.server(0, s).addr.clone()
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
    let (before, after) = (owners(&a, 10_000), owners(&b, 10_000));
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
    let a = Upstreams::new(s.config(), &m, None).unwrap();
    for _ in 0..DEFAULT_MAX_FAILS {
        a.record(0, 0, Err(true));
    }
    assert!(a.pick(0, None, &[1]).is_err(), "server 0 is ejected");
    s.upstream_groups[0].servers.push(ServerSpec {
        url: "http://10.0.0.3:80".parse().unwrap(),
        weight: 1,
    });
    let b = Upstreams::new(s.config(), &m, Some(&a)).unwrap();
    assert!(
        b.pick(0, None, &[1, 2]).is_err(),
        "still ejected after the replacement"
    );
    assert!(b.pick(0, None, &[0, 1]).is_ok(), "the new server is taken");
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
