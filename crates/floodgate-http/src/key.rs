//! Which client a request counts against: the client IP (behind trusted proxies only),
//! a header such as an API key, the route, a constant, or a custom extractor.
//!
//! # Client IP
//! The connecting peer's address comes from the request extensions: [`PeerAddr`] (the
//! proxy inserts it; insert it yourself in a hyper server), or whatever a custom
//! [`PeerFn`] reads (axum's `ConnectInfo<SocketAddr>`, tonic's `TcpConnectInfo`).
//!
//! The forwarding header (`X-Forwarded-For` or `Forwarded`, one of them, chosen in
//! [`ClientIpConfig::header`]) is read **only when the peer is a trusted proxy**. The chain
//! is walked from the right, skipping trusted proxies, and the first untrusted hop is the
//! client. A client that writes its own `X-Forwarded-For: 1.2.3.4` gains nothing: its own
//! address is appended to the right by the trusted proxy and is what counts. Only one
//! header is read because a proxy that only writes `X-Forwarded-For` passes a client's own
//! `Forwarded` header through untouched.
//!
//! The address is then truncated to a prefix ([`ClientIpConfig::ipv4_prefix`], default 32;
//! [`ClientIpConfig::ipv6_prefix`], default 64): an IPv6 client usually owns a whole /64,
//! so per-address limits on IPv6 are no limit at all.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use http::{Extensions, HeaderMap, HeaderName, Method, Uri};
use ipnet::IpNet;

mod parse;
mod provided;
mod route;
pub use provided::ProvidedKeys;
pub use route::route_key;

/// The address of the connection a request arrived on. Insert it into the request
/// extensions when serving with hyper directly; the proxy does this for you.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Reads the peer address from a request's extensions.
pub type PeerFn = Arc<dyn Fn(&Extensions) -> Option<IpAddr> + Send + Sync>;

/// The default [`PeerFn`]: reads [`PeerAddr`].
pub fn peer_from_extension(ext: &Extensions) -> Option<IpAddr> {
    ext.get::<PeerAddr>().map(|p| p.0.ip())
}

/// Which forwarding header trusted proxies write (config form, feature `serde`:
/// `x-forwarded-for` or `forwarded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// How the client IP is found and truncated.
#[derive(Debug, Clone)]
pub struct ClientIpConfig {
    /// Peers whose forwarding header is believed. Empty: the header is never read.
    pub trusted_proxies: Vec<IpNet>,
    /// The header those proxies write.
    pub header: ForwardedHeader,
    /// IPv4 prefix length used as the key (32 = one address, 24 = a /24).
    pub ipv4_prefix: u8,
    /// IPv6 prefix length used as the key (64 by default; 128 = one address).
    pub ipv6_prefix: u8,
}

impl Default for ClientIpConfig {
    fn default() -> Self {
        ClientIpConfig {
            trusted_proxies: Vec::new(),
            header: ForwardedHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
        }
    }
}

/// What a request without a peer address lacks: the start of [`KeyError::NoPeer`]'s
/// text, which goes on with what to do about it.
pub const NO_PEER: &str = "no peer address on the request";

/// Why no key could be extracted from a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No peer address in the request extensions.
    #[error("{what} (insert floodgate_http::PeerAddr or set a peer extractor)", what = NO_PEER)]
    NoPeer,
    /// A trusted proxy sent a forwarding header with a hop that is not an IP address.
    #[error("malformed {header} hop {hop:?} from a trusted proxy")]
    MalformedForwarded {
        /// The header name.
        header: &'static str,
        /// The hop as received (lossy UTF-8, truncated).
        hop: String,
    },
    /// The key header is absent.
    #[error("missing header {0}")]
    MissingHeader(String),
    /// The key header is present but empty.
    #[error("empty header {0}")]
    EmptyHeader(String),
    /// The key is longer than the configured maximum.
    #[error("key of {len} bytes is longer than the maximum of {max}")]
    TooLong {
        /// The key's length in bytes.
        len: usize,
        /// The maximum in bytes.
        max: usize,
    },
    /// A custom extractor found nothing.
    #[error("custom key extractor: {0}")]
    Custom(String),
}

/// What an extractor sees of a request.
#[derive(Debug)]
pub struct RequestInfo<'a> {
    /// Method.
    pub method: &'a Method,
    /// URI (path and query; absolute form on HTTP/2).
    pub uri: &'a Uri,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// Request extensions.
    pub extensions: &'a Extensions,
    /// The resolved client IP (after trusted proxies), before prefix truncation.
    pub client_ip: Result<IpAddr, KeyError>,
}

impl<'a> RequestInfo<'a> {
    /// What an extractor sees of `req`, its client IP resolved as `client_ip`.
    pub fn of<B>(req: &'a http::Request<B>, client_ip: Result<IpAddr, KeyError>) -> Self {
        RequestInfo {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            client_ip,
        }
    }
}

/// A custom key extractor. Closures `Fn(&RequestInfo) -> Result<Vec<u8>, KeyError>`
/// implement it.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key bytes for this request.
    fn extract(&self, req: &RequestInfo<'_>) -> Result<Vec<u8>, KeyError>;
}

impl<F> KeyExtractor for F
where
    F: Fn(&RequestInfo<'_>) -> Result<Vec<u8>, KeyError> + Send + Sync + 'static,
{
    fn extract(&self, req: &RequestInfo<'_>) -> Result<Vec<u8>, KeyError> {
        self(req)
    }
}

/// One component of a key.
#[derive(Clone)]
pub enum KeyPart {
    /// The client IP, truncated to the configured prefix (e.g. `203.0.113.0/24`).
    Ip,
    /// One key for everyone (a global limit).
    Global,
    /// The request path without the query, `;` parameters or trailing slashes (one
    /// bucket per path: [`route_key`]).
    Route,
    /// The value of a header, as raw bytes (an API key). Invalid UTF-8 is fine.
    Header(HeaderName),
    /// A custom extractor.
    Custom(Arc<dyn KeyExtractor>),
}

impl fmt::Debug for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Ip => f.write_str("ip"),
            KeyPart::Global => f.write_str("global"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Header(h) => write!(f, "header:{h}"),
            KeyPart::Custom(_) => f.write_str("custom"),
        }
    }
}

/// A policy's key: one or more parts, joined with the byte `0x1f`.
#[derive(Debug, Clone)]
pub struct KeySource(pub Vec<KeyPart>);

impl KeySource {
    /// The client IP.
    pub fn ip() -> Self {
        KeySource(vec![KeyPart::Ip])
    }
    /// One shared key.
    pub fn global() -> Self {
        KeySource(vec![KeyPart::Global])
    }
    /// The request path.
    pub fn route() -> Self {
        KeySource(vec![KeyPart::Route])
    }
    /// A header's value.
    pub fn header(name: HeaderName) -> Self {
        KeySource(vec![KeyPart::Header(name)])
    }
    /// A custom extractor.
    pub fn custom(f: impl KeyExtractor) -> Self {
        KeySource(vec![KeyPart::Custom(Arc::new(f))])
    }

    /// Whether the key depends on the request's headers (an API key), so that an
    /// allowlisted key can match it.
    pub(crate) fn is_header(&self) -> bool {
        self.0
            .iter()
            .any(|p| matches!(p, KeyPart::Header(_) | KeyPart::Custom(_)))
    }

    /// Extract the key bytes; `ip` is the resolved client IP.
    pub(crate) fn extract(
        &self,
        req: &RequestInfo<'_>,
        ipcfg: &ClientIpConfig,
        max_len: usize,
    ) -> Result<Vec<u8>, KeyError> {
        // room for the usual key (an address, an API key) in the first allocation
        let mut out = Vec::with_capacity(max_len.min(64));
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(0x1f);
            }
            match part {
                KeyPart::Ip => {
                    let ip = req.client_ip.clone()?;
                    push_ip_key(ip, ipcfg, &mut out);
                }
                KeyPart::Global => out.push(b'*'),
                KeyPart::Route => out.extend_from_slice(route_key(req.uri.path()).as_bytes()),
                KeyPart::Header(name) => {
                    let v = req
                        .headers
                        .get(name)
                        .ok_or_else(|| KeyError::MissingHeader(name.to_string()))?;
                    if v.is_empty() {
                        return Err(KeyError::EmptyHeader(name.to_string()));
                    }
                    out.extend_from_slice(v.as_bytes());
                }
                KeyPart::Custom(f) => out.extend_from_slice(&f.extract(req)?),
            }
            if out.len() > max_len {
                return Err(KeyError::TooLong {
                    len: out.len(),
                    max: max_len,
                });
            }
        }
        Ok(out)
    }
}

/// The key text of a client IP under the configured prefixes: the bare address at full
/// length, else the network in CIDR form (`2001:db8:1:2::/64`).
pub fn ip_key(ip: IpAddr, cfg: &ClientIpConfig) -> String {
    let ip = ip.to_canonical();
    let (prefix, full) = match ip {
        IpAddr::V4(_) => (cfg.ipv4_prefix.min(32), 32),
        IpAddr::V6(_) => (cfg.ipv6_prefix.min(128), 128),
    };
    if prefix == full {
        return ip_text(ip);
    }
    IpNet::new(ip, prefix)
        .map(|n| n.trunc().to_string())
        .unwrap_or_else(|_| ip.to_string())
}

/// [`ip_key`]'s bytes appended to `out`; a full-length IPv4 address (the usual key) is
/// written without an intermediate `String`.
fn push_ip_key(ip: IpAddr, cfg: &ClientIpConfig, out: &mut Vec<u8>) {
    if let IpAddr::V4(v4) = ip.to_canonical()
        && cfg.ipv4_prefix >= 32
    {
        out.extend_from_slice(V4Text::new(v4).as_bytes());
        return;
    }
    out.extend_from_slice(ip_key(ip, cfg).as_bytes());
}

/// An IPv4 address in dotted-quad form (as `Display` writes it) in a stack buffer: at
/// most 15 bytes, all ASCII.
struct V4Text {
    buf: [u8; 15],
    len: usize,
}

impl V4Text {
    fn new(v4: Ipv4Addr) -> V4Text {
        let mut t = V4Text {
            buf: [0; 15],
            len: 0,
        };
        for (i, o) in v4.octets().into_iter().enumerate() {
            if i > 0 {
                t.push(b'.');
            }
            if o >= 100 {
                t.push(b'0' + o / 100);
            }
            if o >= 10 {
                t.push(b'0' + o / 10 % 10);
            }
            t.push(b'0' + o % 10);
        }
        t
    }

    /// Appends one byte; 4 octets of at most 3 digits and 3 dots fit in the 15 bytes.
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// `ip` as text, exactly as its `Display` writes it (dotted quad, or RFC 5952 for IPv6),
/// but without the formatting machinery for IPv4: it runs for every request.
pub fn ip_text(ip: IpAddr) -> String {
    let IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let text = V4Text::new(v4);
    // ASCII digits and dots: always UTF-8
    String::from_utf8_lossy(text.as_bytes()).into_owned()
}

/// Append `ip` as text (as [`ip_text`] writes it) to `out`, without a `String` for IPv4.
pub fn push_ip_text(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => out.extend_from_slice(V4Text::new(v4).as_bytes()),
        IpAddr::V6(_) => out.extend_from_slice(ip.to_string().as_bytes()),
    }
}

/// Whether `ip` is in any of `nets` (IPv4-mapped IPv6 addresses match IPv4 networks).
pub fn in_nets(ip: IpAddr, nets: &[IpNet]) -> bool {
    let canon = ip.to_canonical();
    nets.iter().any(|n| n.contains(&canon) || n.contains(&ip))
}

/// The client IP of a request: the peer, or, when the peer is a trusted proxy, the
/// right-most untrusted hop of the forwarding header.
pub fn resolve_client_ip(
    peer: Option<IpAddr>,
    headers: &HeaderMap,
    cfg: &ClientIpConfig,
) -> Result<IpAddr, KeyError> {
    let mut client = peer.ok_or(KeyError::NoPeer)?.to_canonical();
    if cfg.trusted_proxies.is_empty() || !in_nets(client, &cfg.trusted_proxies) {
        return Ok(client);
    }
    let (name, hops) = match cfg.header {
        ForwardedHeader::XForwardedFor => ("X-Forwarded-For", xff_hops(headers)),
        ForwardedHeader::Forwarded => ("Forwarded", forwarded_hops(headers)),
    };
    for hop in hops.iter().rev() {
        if !in_nets(client, &cfg.trusted_proxies) {
            break;
        }
        client = parse_hop(hop)
            .ok_or_else(|| KeyError::MalformedForwarded {
                header: name,
                hop: String::from_utf8_lossy(&hop[..hop.len().min(64)]).into_owned(),
            })?
            .to_canonical();
    }
    Ok(client)
}

fn split_list<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .get_all(name)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|s| s.trim_ascii())
        .filter(|s| !s.is_empty())
}

fn xff_hops(headers: &HeaderMap) -> Vec<&[u8]> {
    split_list(headers, "x-forwarded-for").collect()
}

fn forwarded_hops(headers: &HeaderMap) -> Vec<&[u8]> {
    split_list(headers, "forwarded")
        .map(|element| {
            element
                .split(|&b| b == b';')
                .map(|p| p.trim_ascii())
                .find(|p| p.len() > 4 && p[..4].eq_ignore_ascii_case(b"for="))
                .map(|p| {
                    let v = &p[4..];
                    v.strip_prefix(b"\"")
                        .and_then(|v| v.strip_suffix(b"\""))
                        .unwrap_or(v)
                })
                .unwrap_or(b"")
        })
        .collect()
}

/// An address with an optional port: `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]`, `[::1]:80`.
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(hop).ok()?;
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    s.strip_prefix('[')
        .and_then(|r| r.split(']').next())
        .and_then(|r| r.parse().ok())
}

/// What to do with a request whose key cannot be extracted (no peer address, missing
/// API-key header, a key over the length limit, a malformed forwarding header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingKey {
    /// Reject with [`RateLimiterBuilder::missing_key_status`](crate::RateLimiterBuilder::missing_key_status) (400 by default).
    Deny,
    /// Let the request through, unlimited by the policies that need the key.
    Allow,
    /// Count it under this key instead (all keyless clients share one bucket).
    Fallback(Vec<u8>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_text_writes_what_display_writes() {
        // every octet value in every position, plus IPv6 and mapped forms
        for o in 0..=255u8 {
            for ip in [
                [o, 0, 0, 0],
                [1, o, 10, 100],
                [255, 99, o, 9],
                [0, 255, 100, o],
            ] {
                let ip = IpAddr::from(ip);
                assert_eq!(ip_text(ip), ip.to_string());
                let mut pushed = b"x".to_vec();
                push_ip_text(&mut pushed, ip);
                assert_eq!(pushed, format!("x{ip}").into_bytes());
            }
        }
        for s in ["::1", "2001:db8::7", "::ffff:192.0.2.1", "fe80::1:2:3:4"] {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(ip_text(ip), ip.to_string());
            let mut pushed = Vec::new();
            push_ip_text(&mut pushed, ip);
            assert_eq!(pushed, ip.to_string().into_bytes());
        }
    }

    #[test]
    fn pushed_ip_key_is_ip_key() {
        let mut c = ClientIpConfig::default();
        for prefixes in [(32, 64), (24, 128), (0, 0), (40, 200)] {
            (c.ipv4_prefix, c.ipv6_prefix) = prefixes;
            for s in [
                "203.0.113.7",
                "0.0.0.0",
                "255.255.255.255",
                "10.1.99.100",
                "::ffff:192.0.2.1",
                "2001:db8:1:2:3:4:5:6",
                "::1",
            ] {
                let ip: IpAddr = s.parse().unwrap();
                let mut out = b"x".to_vec();
                push_ip_key(ip, &c, &mut out);
                assert_eq!(out[1..], *ip_key(ip, &c).as_bytes(), "{s} {prefixes:?}");
            }
        }
    }

    fn cfg(trusted: &[&str]) -> ClientIpConfig {
        ClientIpConfig {
            trusted_proxies: trusted.iter().map(|s| s.parse().unwrap()).collect(),
            ..Default::default()
        }
    }

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn untrusted_peer_header_ignored() {
        let h = hm(&[("x-forwarded-for", "1.2.3.4")]);
        let peer = "198.51.100.7".parse().ok();
        assert_eq!(
            resolve_client_ip(peer, &h, &cfg(&["10.0.0.0/8"])).unwrap(),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            resolve_client_ip(peer, &h, &cfg(&[])).unwrap(),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn rightmost_untrusted_hop() {
        // client spoofs 1.2.3.4; the trusted proxies 10.0.0.2 and 10.0.0.1 append
        let h = hm(&[
            ("x-forwarded-for", "1.2.3.4, 203.0.113.9"),
            ("x-forwarded-for", "10.0.0.2"),
        ]);
        let peer = "10.0.0.1".parse().ok();
        assert_eq!(
            resolve_client_ip(peer, &h, &cfg(&["10.0.0.0/8"])).unwrap(),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        // all hops trusted: the left-most
        let h = hm(&[("x-forwarded-for", "10.1.1.1, 10.0.0.2")]);
        assert_eq!(
            resolve_client_ip(peer, &h, &cfg(&["10.0.0.0/8"])).unwrap(),
            "10.1.1.1".parse::<IpAddr>().unwrap()
        );
        // garbage from a trusted hop is an error, garbage left of the client is ignored
        let h = hm(&[("x-forwarded-for", "garbage, 203.0.113.9:4444")]);
        assert_eq!(
            resolve_client_ip(peer, &h, &cfg(&["10.0.0.0/8"])).unwrap(),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        let h = hm(&[("x-forwarded-for", "10.0.0.3, unknown")]);
        assert!(matches!(
            resolve_client_ip(peer, &h, &cfg(&["10.0.0.0/8"])),
            Err(KeyError::MalformedForwarded { .. })
        ));
    }

    #[test]
    fn forwarded_header() {
        let mut c = cfg(&["127.0.0.0/8"]);
        c.header = ForwardedHeader::Forwarded;
        let h = hm(&[(
            "forwarded",
            r#"for=1.1.1.1;proto=http, For="[2001:db8:cafe::17]:4711";by=x, for=127.0.0.2"#,
        )]);
        assert_eq!(
            resolve_client_ip("127.0.0.1".parse().ok(), &h, &c).unwrap(),
            "2001:db8:cafe::17".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn prefixes() {
        let mut c = ClientIpConfig::default();
        assert_eq!(
            ip_key("2001:db8:1:2:3:4:5:6".parse().unwrap(), &c),
            "2001:db8:1:2::/64"
        );
        assert_eq!(ip_key("203.0.113.7".parse().unwrap(), &c), "203.0.113.7");
        assert_eq!(
            ip_key("::ffff:203.0.113.7".parse().unwrap(), &c),
            "203.0.113.7"
        );
        c.ipv4_prefix = 24;
        c.ipv6_prefix = 128;
        assert_eq!(ip_key("203.0.113.7".parse().unwrap(), &c), "203.0.113.0/24");
        assert_eq!(ip_key("2001:db8::9".parse().unwrap(), &c), "2001:db8::9");
    }
}
