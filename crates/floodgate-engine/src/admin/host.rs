//! Which `Host` the admin API and page (and the server's `/v1` calls) answer: a guard
//! against DNS rebinding. A page on an attacker's site whose name is made to resolve to
//! `127.0.0.1` reaches a loopback listener from the victim's browser as the same origin,
//! and could read the admin API; its requests carry the attacker's name in `Host`. So
//! only loopback names and addresses (`localhost`, `127.0.0.0/8`, `[::1]`), with any
//! port, and the names a config lists ([`AllowedHosts::new`]) are answered; any other
//! `Host` (or none) gets `421 Misdirected Request` ([`misdirected`]).

use std::net::{IpAddr, Ipv6Addr};

use super::AdminReply;

/// The status a request with another `Host` gets: `421 Misdirected Request` (RFC 9110
/// §15.5.20: this listener does not serve that name).
pub const MISDIRECTED: u16 = 421;

/// An entry of an allowed-hosts list that is not a host name or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "entry {index} ({value:?}) is not a host name or an IP address (give the name alone, as in \"admin.example.com\" or \"10.0.0.5\": any port is accepted)"
)]
pub struct HostListError {
    /// The entry's index in the list (from 0).
    pub index: usize,
    /// The entry.
    pub value: String,
}

/// The `Host` names answered besides loopback ones: lower-case, without a port or a
/// trailing dot; IPv6 addresses without brackets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    /// Loopback names and addresses only.
    pub fn loopback() -> AllowedHosts {
        AllowedHosts::default()
    }

    /// Loopback ones and `names` (host names, IPv4 or IPv6 addresses, without a port).
    pub fn new<S: AsRef<str>>(names: &[S]) -> Result<AllowedHosts, HostListError> {
        let mut out = Vec::with_capacity(names.len());
        for (index, n) in names.iter().enumerate() {
            let raw = n.as_ref();
            let bare = raw
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .unwrap_or(raw);
            let name = normalize(bare);
            let ok = name.parse::<IpAddr>().is_ok() || is_dns_name(&name);
            if !ok {
                return Err(HostListError {
                    index,
                    value: raw.to_string(),
                });
            }
            out.push(name);
        }
        Ok(AllowedHosts { names: out })
    }

    /// The configured names (loopback ones are always answered besides).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether a request whose `Host` (or HTTP/2 `:authority`) is `host` is answered:
    /// a loopback name or address, or a configured name, with any port. `None` (no
    /// `Host`) and a malformed value are not.
    pub fn allows(&self, host: Option<&[u8]>) -> bool {
        let Some(name) = host.and_then(host_name) else {
            return false;
        };
        if name == "localhost" {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>()
            && ip.to_canonical().is_loopback()
        {
            return true;
        }
        self.names.contains(&name)
    }
}

/// The host of a `Host` value without its port, lower-case, without a trailing dot and,
/// for IPv6, without brackets; `None` when the value is not a `host[:port]`.
fn host_name(v: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(v).ok()?.trim_ascii();
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        h.parse::<Ipv6Addr>().ok()?;
        (h, after.strip_prefix(':').unwrap_or(after))
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (s, ""),
        }
    };
    if !port.bytes().all(|b| b.is_ascii_digit()) || host.is_empty() {
        return None;
    }
    Some(normalize(host))
}

fn normalize(host: &str) -> String {
    let h = host.to_ascii_lowercase();
    match h.strip_suffix('.') {
        Some(stripped) if !stripped.is_empty() => stripped.to_string(),
        _ => h,
    }
}

/// Letters, digits and `-` in dot-separated labels of 1 to 63 characters (and `_`,
/// which some internal names use).
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The answer to a request with a `Host` the listener does not answer: `421` with
/// `{"error": ...}` naming the host and the config field that would allow it.
pub fn misdirected(host: Option<&[u8]>, field: &str) -> AdminReply {
    let shown = host.map_or_else(
        || "none".to_string(),
        |h| format!("{:?}", String::from_utf8_lossy(&h[..h.len().min(128)])),
    );
    AdminReply::error(
        MISDIRECTED,
        format!(
            "Host {shown} is not answered here: only localhost, 127.0.0.0/8, [::1] and the names in {field} are (a guard against DNS rebinding)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_addresses_with_any_port() {
        let a = AllowedHosts::loopback();
        for h in [
            "localhost",
            "LOCALHOST:9090",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:9090",
            "127.9.8.7:1",
            "[::1]",
            "[::1]:9090",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(a.allows(Some(h.as_bytes())), "{h}");
        }
        for h in [
            "",
            "evil.example",
            "evil.example:9090",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.5:9090",
            "[::2]",
            "[::1",
            "localhost:x",
            "0.0.0.0",
        ] {
            assert!(!a.allows(Some(h.as_bytes())), "{h}");
        }
        assert!(!a.allows(None));
    }

    #[test]
    fn configured_names() {
        let a = AllowedHosts::new(&["Admin.Example.com", "10.0.0.5", "[2001:db8::1]"]).unwrap();
        for h in [
            "admin.example.com",
            "admin.example.com:443",
            "10.0.0.5:9090",
            "[2001:db8::1]:9090",
            "localhost",
        ] {
            assert!(a.allows(Some(h.as_bytes())), "{h}");
        }
        assert!(!a.allows(Some(b"example.com")));
        let e = AllowedHosts::new(&["ok", "a b:80"]).unwrap_err();
        assert_eq!(e.index, 1);
        assert!(e.to_string().starts_with("entry 1 (\"a b:80\")"), "{e}");
        assert!(AllowedHosts::new(&["host:80"]).is_err());
        assert!(AllowedHosts::new(&[""]).is_err());
    }

    #[test]
    fn the_refusal_names_the_host_and_the_field() {
        let r = misdirected(Some(b"evil.example"), "admin_allowed_hosts");
        assert_eq!(r.status, 421);
        assert!(r.body.contains("evil.example") && r.body.contains("admin_allowed_hosts"));
    }
}
