//! `[upstreams.NAME]`: named groups of upstream servers, and how they become the proxy's
//! [`GroupSpec`]s.

use std::collections::BTreeMap;

use crate::upstreams::{
    Balance, DEFAULT_FAIL_TIMEOUT, DEFAULT_MAX_FAILS, DEFAULT_PROBE_INTERVAL,
    DEFAULT_PROBE_TIMEOUT, GroupSpec, ProbeSpec, ServerSpec,
};

use super::*;

/// `[upstreams.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSection {
    /// The servers: `"http://host:port"` (or `https://`), or
    /// `{ url = "http://host:port", weight = 2 }`.
    pub servers: Vec<ServerEntry>,
    /// round-robin (default) | least-requests | hash (of the policy key).
    #[serde(default)]
    pub balance: Balance,
    /// Consecutive failures that eject a server (default 3; 0: never).
    pub max_fails: Option<u32>,
    /// The first ejection's length (default 10 s), doubled on each ejection in a row up
    /// to 8 times.
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub fail_timeout: Option<Duration>,
    /// An active health check.
    pub probe: Option<ProbeSection>,
}

/// `[upstreams.NAME.probe]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSection {
    /// The path asked with GET (2xx or 3xx passes).
    pub path: String,
    /// Time between probes of a server (default 5 s).
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub interval: Option<Duration>,
    /// Time allowed for the answer (default 1 s).
    #[serde(default, deserialize_with = "de_opt_timeout")]
    pub timeout: Option<Duration>,
}

/// A server of `servers`.
#[derive(Debug, Clone)]
pub struct ServerEntry(pub ServerSpec);

/// The table form of a server.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerTable {
    url: String,
    #[serde(default = "one")]
    weight: u32,
}

fn one() -> u32 {
    1
}

/// The most a server's weight may be.
pub const MAX_WEIGHT: u32 = 100;

impl<'de> Deserialize<'de> for ServerEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ServerTable;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a URL \"http://host:port\" or \"https://host:port\", or a table { url = \"http://host:port\", weight = N }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ServerTable, E> {
                Ok(ServerTable {
                    url: v.to_string(),
                    weight: 1,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ServerTable, A::Error> {
                ServerTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        let t = d.deserialize_any(V)?;
        let url = parse_upstream(&t.url).map_err(serde::de::Error::custom)?;
        if !(1..=MAX_WEIGHT).contains(&t.weight) {
            return Err(serde::de::Error::custom(format!(
                "weight {} of {}: must be 1..={MAX_WEIGHT}",
                t.weight, t.url
            )));
        }
        Ok(ServerEntry(ServerSpec {
            url,
            weight: t.weight,
        }))
    }
}

impl UpstreamSection {
    /// The group this table defines, named `name`.
    pub fn group(&self, name: &str) -> GroupSpec {
        GroupSpec {
            name: name.to_string(),
            servers: self.servers.iter().map(|s| s.0.clone()).collect(),
            balance: self.balance,
            max_fails: self.max_fails.unwrap_or(DEFAULT_MAX_FAILS),
            fail_timeout: self.fail_timeout.unwrap_or(DEFAULT_FAIL_TIMEOUT),
            probe: self.probe.as_ref().map(|p| ProbeSpec {
                path: p.path.clone(),
                interval: p.interval.unwrap_or(DEFAULT_PROBE_INTERVAL),
                timeout: p.timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT),
            }),
        }
    }

    /// What is wrong with the table as a whole, if anything.
    fn error(&self, name: &str) -> Option<String> {
        if self.servers.is_empty() {
            return Some(format!("upstream {name:?} lists no servers"));
        }
        if let Some((i, s)) = self
            .servers
            .iter()
            .enumerate()
            .find(|(i, s)| self.servers[..*i].iter().any(|o| o.0.url == s.0.url))
        {
            return Some(format!(
                "upstream {name:?}: server[{i}] {} is listed twice",
                s.0.url
            ));
        }
        if let Some(p) = &self.probe
            && !p.path.starts_with('/')
        {
            return Some(format!(
                "upstream {name:?}: probe.path {:?} must start with /",
                p.path
            ));
        }
        None
    }
}

/// Check the groups and the routes' `upstream` names; errors are located at the table or
/// the name. `has_upstream`: the top-level `upstream` is set.
pub(super) fn check(
    groups: &BTreeMap<String, Spanned<UpstreamSection>>,
    routes: &[RouteSection],
    has_upstream: bool,
    invalid: impl Fn(Option<std::ops::Range<usize>>, String) -> ConfigFileError,
) -> Result<(), ConfigFileError> {
    for (name, g) in groups {
        if let Some(m) = g.get_ref().error(name) {
            return Err(invalid(Some(g.span()), m));
        }
    }
    if has_upstream && let Some(g) = groups.get(crate::upstreams::DEFAULT_GROUP) {
        return Err(invalid(
            Some(g.span()),
            "set the top-level upstream or [upstreams.default], not both (the top-level upstream is the group \"default\")".into(),
        ));
    }
    let defined = || {
        let mut names: Vec<&str> = groups.keys().map(String::as_str).collect();
        if has_upstream {
            names.insert(0, crate::upstreams::DEFAULT_GROUP);
        }
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    for r in routes {
        if let Some(n) = &r.upstream {
            let known = groups.contains_key(n.get_ref())
                || (has_upstream && n.get_ref() == crate::upstreams::DEFAULT_GROUP);
            if !known {
                return Err(invalid(
                    Some(n.span()),
                    format!(
                        "route {:?}: unknown upstream {:?}; defined: {}",
                        r.prefix,
                        n.get_ref(),
                        defined()
                    ),
                ));
            }
        }
    }
    Ok(())
}
