//! `max_in_flight` policies in the proxy's configuration: the fields, their defaults, and
//! bad values refused with the file, line and field.

use std::path::Path;

use floodgate_proxy::config::Config;

fn parse(policy: &str) -> Result<Config, String> {
    let src = format!(
        "listen = \"127.0.0.1:0\"\nupstream = \"http://127.0.0.1:9\"\n[[policy]]\nname = \"gpu\"\n{policy}"
    );
    Config::parse(&src, Path::new("f.toml")).map_err(|e| e.to_string())
}

#[test]
fn a_max_in_flight_policy_builds_with_its_defaults() {
    let cfg = parse("max_in_flight = 4\nkey = \"global\"\n").unwrap();
    let limiter = cfg.limiter_builder().build().unwrap();
    let lease = limiter.policies()[0].in_flight.as_ref().unwrap();
    assert_eq!(lease.spec.limit, 4);
    assert_eq!(lease.spec.ttl.get().as_secs(), 30);
    assert_eq!(lease.spec.queue, 0);
    assert_eq!(
        limiter.policies()[0].policy_member,
        "\"gpu\";q=4;qu=\"concurrent-requests\""
    );
    let cfg = parse("max_in_flight = 2\nlease_ttl = \"5s\"\nqueue = 10\n").unwrap();
    let limiter = cfg.limiter_builder().build().unwrap();
    let spec = limiter.policies()[0].in_flight.as_ref().unwrap().spec;
    assert_eq!((spec.queue, spec.queue_timeout.as_secs()), (10, 1));
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    for (policy, says) in [
        ("max_in_flight = 0\n", "max_in_flight"),
        ("max_in_flight = 2000000\n", "max_in_flight"),
        // the line and column of the value (5:17), the field and the type
        (
            "max_in_flight = -1\n",
            "f.toml:5:17: policy[0].max_in_flight: invalid value: integer `-1`, expected u64",
        ),
        ("max_in_flight = 2\nlease_ttl = \"0s\"\n", "lease ttl"),
        ("max_in_flight = 2\nlease_ttl = \"2d\"\n", "lease ttl"),
        (
            "max_in_flight = 2\nqueue = 5\nqueue_timeout = \"0s\"\n",
            "queue_timeout",
        ),
        ("max_in_flight = 2\nrate = \"10/s\"\n", "not a rate"),
        ("rate = \"10/s\"\nqueue = 3\n", "only with max_in_flight"),
        ("algorithm = \"gcra\"\n", "rate is required"),
    ] {
        let e = parse(policy).unwrap_err();
        assert!(e.contains(says), "{policy:?}: {e}");
        assert!(e.starts_with("f.toml:"), "{e}");
    }
}
