//! The string forms of the config's values (rates, durations, upstreams, stores, keys,
//! networks, methods, statuses), each parsed with an error naming the field.

use super::*;

pub(super) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    floodgate_core::de::duration(d).map(Some)
}

pub(super) fn de_opt_timeout<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    floodgate_core::de::timeout(d).map(Some)
}

pub(super) fn de_opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    floodgate_core::de::positive_count(d).map(Some)
}

/// A count of octets, at least 1 (`abort_drain_bytes`: 0 would never reach a trailer).
pub(super) fn de_opt_octets<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 {
        return Err(serde::de::Error::custom(
            "0 octets would never reach a trailer; give at least 1, e.g. 16777216 (16 MiB)",
        ));
    }
    Ok(Some(n))
}

/// A connection cap, at least 1 (0 would refuse every client).
pub(super) fn de_cap<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let n = usize::deserialize(d)?;
    if n == 0 {
        return Err(serde::de::Error::custom(
            "a cap of 0 would refuse every connection; give at least 1",
        ));
    }
    Ok(Some(n))
}

fn de_upstream<'de, D: Deserializer<'de>>(d: D) -> Result<Uri, D::Error> {
    let s = String::deserialize(d)?;
    parse_upstream(&s).map_err(serde::de::Error::custom)
}

pub(super) fn de_opt_upstream<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uri>, D::Error> {
    de_upstream(d).map(Some)
}

pub(super) fn de_key_display<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<floodgate_engine::insight::KeyDisplay, D::Error> {
    String::deserialize(d)?
        .parse()
        .map_err(|e: String| serde::de::Error::custom(format!("admin_keys: {e}")))
}

/// `log.keys`.
pub(super) fn de_opt_key_display<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<floodgate_engine::insight::KeyDisplay>, D::Error> {
    String::deserialize(d)?
        .parse()
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// `log.access_log`: `"stdout"` or a file path, not empty.
pub(super) fn de_opt_access_target<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::access_log::AccessTarget>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        return Err(serde::de::Error::custom(
            "access_log is empty: give a file path or \"stdout\" (or leave it out for no access log)",
        ));
    }
    Ok(Some(crate::access_log::AccessTarget::parse(&s)))
}

/// `log.rejection_level`: error, warn, info, debug or off.
pub(super) fn de_opt_level<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<super::RejectionLevel>, D::Error> {
    let s = String::deserialize(d)?;
    let level = match s.as_str() {
        "error" => Some(tracing::Level::ERROR),
        "warn" => Some(tracing::Level::WARN),
        "info" => Some(tracing::Level::INFO),
        "debug" => Some(tracing::Level::DEBUG),
        "off" => None,
        other => {
            return Err(serde::de::Error::custom(format!(
                "unknown level {other:?}; expected error, warn, info, debug or off"
            )));
        }
    };
    Ok(Some(super::RejectionLevel(level)))
}

/// `admin_allowed_hosts`: host names or IP addresses, without a port.
pub(super) fn de_allowed_hosts<'de, D: Deserializer<'de>>(d: D) -> Result<AllowedHosts, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    AllowedHosts::new(&names).map_err(serde::de::Error::custom)
}

/// An optional header name (`estimate_header`, `cost_header`, `cost_trailer`).
pub(super) fn de_opt_header<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<HeaderName>, D::Error> {
    let s = String::deserialize(d)?;
    HeaderName::from_bytes(s.trim().as_bytes())
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("{s:?} is not a valid header name")))
}

pub(super) fn de_status<'de, D: Deserializer<'de>>(d: D) -> Result<StatusCode, D::Error> {
    let n = u16::deserialize(d)?;
    StatusCode::from_u16(n)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error())
        .ok_or_else(|| serde::de::Error::custom(format!("status {n} is not a 4xx or 5xx code")))
}

pub(super) fn de_nets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| parse_net(s).map_err(serde::de::Error::custom))
        .collect()
}

pub(super) fn de_methods<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Method>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| {
            Method::from_bytes(s.to_ascii_uppercase().as_bytes())
                .map_err(|_| serde::de::Error::custom(format!("invalid HTTP method {s:?}")))
        })
        .collect()
}

pub(super) fn parse_net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s:?} is not an IP address or CIDR (e.g. 10.0.0.0/8, 2001:db8::/32)"))
}

/// The admin listener's address: `ip:port`, or a bare port (`9090`), which binds
/// loopback (`127.0.0.1:9090`): the admin page shows keys and the config.
pub fn parse_admin(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("admin {s:?}: give ip:port (127.0.0.1:9090) or a port alone, which binds 127.0.0.1")
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AdminValue {
    Port(u16),
    Text(String),
}

pub(super) fn de_admin<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::net::SocketAddr>, D::Error> {
    match AdminValue::deserialize(d)? {
        AdminValue::Port(p) => Ok(Some(std::net::SocketAddr::from(([127, 0, 0, 1], p)))),
        AdminValue::Text(s) => parse_admin(&s).map(Some).map_err(serde::de::Error::custom),
    }
}

/// `min_version`: "1.2" or "1.3".
pub(super) fn de_opt_tls_version<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<floodgate_net::tls::TlsVersion>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

/// An `http://host:port` or `https://host:port` upstream, without path or query.
pub fn parse_upstream(s: &str) -> Result<Uri, String> {
    let uri: Uri = s.parse().map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(format!(
                "{s:?}: scheme {other:?} is not supported; use http:// or https://"
            ));
        }
        None => return Err(format!("{s:?} needs a scheme, e.g. http://127.0.0.1:9000")),
    }
    if uri.authority().is_none() {
        return Err(format!("{s:?} has no host"));
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err(format!(
            "{s:?}: a path prefix on the upstream is not supported"
        ));
    }
    Ok(uri)
}

pub(super) use floodgate_engine::insight::redact::redact_url as redact;

/// A policy key in config form.
#[derive(Debug, Clone)]
pub struct KeySpec(pub KeySource);

impl<'de> Deserialize<'de> for KeySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeySpec, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        let parts = match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        };
        if parts.is_empty() {
            return Err(serde::de::Error::custom("key list is empty"));
        }
        parts
            .iter()
            .map(|p| KeyPart::parse(p).map_err(serde::de::Error::custom))
            .collect::<Result<Vec<_>, _>>()
            .map(|v| KeySpec(KeySource(v)))
    }
}

pub(super) fn de_opt_status<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<StatusCode>, D::Error> {
    de_status(d).map(Some)
}
