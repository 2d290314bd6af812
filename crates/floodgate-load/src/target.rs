//! The target: parse the URL, resolve it once, and enforce the contact policy.
//!
//! Policy: only the address the URL resolves to is ever contacted (redirects are not
//! followed, nothing else is resolved), and only if it is a loopback address
//! (127.0.0.0/8, `::1`) or the user named the URL's host explicitly in
//! [`crate::LoadConfig::allow_hosts`].

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::Uri;
use http::uri::{Authority, PathAndQuery};
use tokio::net::TcpStream;

use crate::error::LoadError;

/// A parsed, resolved and allowed target.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL as given.
    pub url: String,
    /// `host[:port]`, sent as the `Host` header.
    pub authority: Authority,
    /// The origin-form request target (`/path?query`).
    pub path: PathAndQuery,
    /// The one address every connection goes to.
    pub addr: SocketAddr,
}

/// A URL split into its parts, before resolution.
#[derive(Debug, Clone)]
pub struct ParsedUrl {
    /// Host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// Port (default 80).
    pub port: u16,
    /// `host[:port]`.
    pub authority: Authority,
    /// `/path?query` (`/` when empty).
    pub path: PathAndQuery,
}

/// Split `url` into host, port and path; only `http://` is accepted.
///
/// ```
/// let p = floodgate_load::target::parse_url("http://127.0.0.1:8080/a?b=1").unwrap();
/// assert_eq!((p.host.as_str(), p.port, p.path.as_str()), ("127.0.0.1", 8080, "/a?b=1"));
/// assert!(floodgate_load::target::parse_url("127.0.0.1:8080").is_err());
/// assert!(floodgate_load::target::parse_url("https://127.0.0.1/").is_err());
/// ```
pub fn parse_url(url: &str) -> Result<ParsedUrl, LoadError> {
    let bad = |reason: &str| LoadError::InvalidUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let uri: Uri = url.trim().parse().map_err(|e: http::uri::InvalidUri| {
        bad(&format!("{e}; expected http://host[:port]/path"))
    })?;
    let scheme = uri
        .scheme_str()
        .ok_or_else(|| bad("missing scheme; expected http://host[:port]/path"))?;
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(LoadError::UnsupportedScheme {
            url: url.to_string(),
            scheme: scheme.to_string(),
        });
    }
    let authority = uri
        .authority()
        .cloned()
        .ok_or_else(|| bad("missing host"))?;
    if authority.as_str().contains('@') {
        return Err(bad(
            "user info in the URL is not supported; use -H Authorization: ...",
        ));
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    let path = uri
        .path_and_query()
        .cloned()
        .filter(|p| !p.as_str().is_empty())
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    Ok(ParsedUrl {
        host: host.to_string(),
        port: authority.port_u16().unwrap_or(80),
        authority,
        path,
    })
}

/// Whether `ip` is in the loopback range (127.0.0.0/8, `::1`, or IPv4-mapped loopback).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Parse, resolve and check the policy, then make sure one address accepts a TCP
/// connection (within `timeout`), so that an unreachable target is a clear error rather
/// than a report full of refused connections.
pub async fn resolve(
    url: &str,
    allow_hosts: &[String],
    timeout: Duration,
) -> Result<Target, LoadError> {
    let p = parse_url(url)?;
    let addrs: Vec<SocketAddr> = match p.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, p.port)],
        Err(_) => tokio::net::lookup_host((p.host.as_str(), p.port))
            .await
            .map_err(|source| LoadError::Resolve {
                host: p.host.clone(),
                source,
            })?
            .collect(),
    };
    let named = allow_hosts.iter().any(|h| {
        h.trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .eq_ignore_ascii_case(&p.host)
    });
    if let Some(bad) = addrs.iter().find(|a| !is_loopback(a.ip()))
        && !named
    {
        return Err(LoadError::TargetNotAllowed {
            host: p.host.clone(),
            addr: bad.ip(),
        });
    }
    if addrs.is_empty() {
        return Err(LoadError::Resolve {
            host: p.host.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no addresses"),
        });
    }
    let mut last = None;
    for addr in &addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(_)) => {
                return Ok(Target {
                    url: url.to_string(),
                    authority: p.authority,
                    path: p.path,
                    addr: *addr,
                });
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => {
                last = Some(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {timeout:?}"),
                ))
            }
        }
    }
    Err(LoadError::Unreachable {
        addrs,
        source: last.expect("at least one address was tried"),
    })
}
