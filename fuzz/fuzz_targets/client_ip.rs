//! The client IP a request counts against (`floodgate_http::key`): the forwarding header
//! (`X-Forwarded-For` or RFC 7239 `Forwarded`) read behind trusted proxies, and the key
//! an address gives under the IPv4/IPv6 prefixes.
//!
//! * Any header lines: never a panic; an untrusted peer is the client whatever the
//!   header says; the client is a canonical address (an IPv4-mapped IPv6 one counts as
//!   IPv4); a malformed hop is a typed error.
//! * A chain of hops written in either header, in any of their spellings (ports,
//!   brackets, quotes, other parameters, several lines): both give the client the
//!   documented walk gives (from the right, past trusted proxies, the first untrusted hop).
//! * The key of an address is the address as `Display` writes it at full length, else the
//!   network of that prefix length holding it, in CIDR form.
#![no_main]
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::Arbitrary;
use floodgate_http::key::{ip_key, ip_text, push_ip_text, resolve_client_ip};
use floodgate_http::{ClientIpConfig, ForwardedHeader, KeyError};
use http::{HeaderMap, HeaderValue};
use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Ip {
    V4(u32),
    V6(u128),
    Mapped(u32),
}

impl Ip {
    fn addr(self) -> IpAddr {
        match self {
            Ip::V4(a) => IpAddr::V4(Ipv4Addr::from(a)),
            Ip::V6(a) => IpAddr::V6(Ipv6Addr::from(a)),
            Ip::Mapped(a) => IpAddr::V6(Ipv4Addr::from(a).to_ipv6_mapped()),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    peer: Ip,
    trusted: Vec<(Ip, u8)>,
    forwarded: bool,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    lines: Vec<&'a [u8]>,
    chain: Vec<(Ip, u8, u16)>,
}

fuzz_target!(|input: Input<'_>| {
    let trusted_proxies: Vec<IpNet> = input
        .trusted
        .iter()
        .take(8)
        .map(|(ip, len)| {
            let ip = ip.addr();
            let max = if ip.is_ipv4() { 32 } else { 128 };
            IpNet::new(ip, len % (max + 1)).expect("a prefix length in range")
        })
        .collect();
    let cfg = |header| ClientIpConfig {
        trusted_proxies: trusted_proxies.clone(),
        header,
        ipv4_prefix: input.ipv4_prefix,
        ipv6_prefix: input.ipv6_prefix,
    };
    let header = if input.forwarded {
        ForwardedHeader::Forwarded
    } else {
        ForwardedHeader::XForwardedFor
    };
    let peer = input.peer.addr();
    let trusted = |ip: IpAddr| {
        trusted_proxies
            .iter()
            .any(|n| n.contains(&ip.to_canonical()) || n.contains(&ip))
    };

    // any header lines
    let mut h = HeaderMap::new();
    let name = if input.forwarded {
        "forwarded"
    } else {
        "x-forwarded-for"
    };
    for l in input.lines.iter().take(8) {
        if let Ok(v) = HeaderValue::from_bytes(l) {
            h.append(name, v);
        }
    }
    assert_eq!(
        resolve_client_ip(None, &h, &cfg(header)),
        Err(KeyError::NoPeer)
    );
    match resolve_client_ip(Some(peer), &h, &cfg(header)) {
        Ok(ip) => {
            assert_eq!(ip, ip.to_canonical());
            if !trusted(peer) {
                assert_eq!(ip, peer.to_canonical(), "an untrusted peer is the client");
            }
        }
        Err(KeyError::MalformedForwarded { header: n, hop }) => {
            assert!(
                trusted(peer),
                "the header of an untrusted peer is never read"
            );
            assert!(n.eq_ignore_ascii_case(name));
            assert!(hop.chars().count() <= 64, "{hop:?}");
        }
        Err(e) => panic!("{e}"),
    }

    // one chain, both headers, several spellings
    let chain = &input.chain[..input.chain.len().min(16)];
    let mut expected = peer.to_canonical();
    if trusted(expected) {
        for (hop, _, _) in chain.iter().rev() {
            if !trusted(expected) {
                break;
            }
            expected = hop.addr().to_canonical();
        }
    }
    let (mut xff, mut fwd) = (HeaderMap::new(), HeaderMap::new());
    let (mut xff_line, mut fwd_line) = (String::new(), String::new());
    for (i, (hop, spelling, port)) in chain.iter().enumerate() {
        if i > 0 && spelling & 0x80 != 0 {
            // the rest on another line
            xff.append("x-forwarded-for", xff_line.parse().expect("ASCII"));
            fwd.append("forwarded", fwd_line.parse().expect("ASCII"));
            xff_line.clear();
            fwd_line.clear();
        }
        if !xff_line.is_empty() {
            xff_line.push_str(if spelling & 0x40 != 0 { "," } else { ", " });
            fwd_line.push_str(if spelling & 0x40 != 0 { ",  " } else { ", " });
        }
        let ip = hop.addr();
        let with_port = spelling & 1 != 0;
        let text = match (ip, with_port) {
            (IpAddr::V4(a), false) => a.to_string(),
            (IpAddr::V4(a), true) => format!("{a}:{port}"),
            (IpAddr::V6(a), false) if spelling & 2 != 0 => format!("[{a}]"),
            (IpAddr::V6(a), false) => a.to_string(),
            (IpAddr::V6(a), true) => format!("[{a}]:{port}"),
        };
        xff_line.push_str(&text);
        let quoted = ip.is_ipv6() || with_port || spelling & 4 != 0;
        let mut for_ = String::from(if spelling & 8 != 0 { "For=" } else { "for=" });
        if quoted {
            for_.push_str(&format!("\"{text}\""));
        } else {
            for_.push_str(&text);
        }
        match (spelling >> 4) & 3 {
            0 => fwd_line.push_str(&for_),
            1 => fwd_line.push_str(&format!("{for_};proto=https")),
            2 => fwd_line.push_str(&format!("by=\"[::1]:80\"; {for_}")),
            _ => fwd_line.push_str(&format!("proto=http;host=\"a.example\";{for_}")),
        }
    }
    if !xff_line.is_empty() {
        xff.append("x-forwarded-for", xff_line.parse().expect("ASCII"));
        fwd.append("forwarded", fwd_line.parse().expect("ASCII"));
    }
    let by_xff = resolve_client_ip(Some(peer), &xff, &cfg(ForwardedHeader::XForwardedFor));
    let by_fwd = resolve_client_ip(Some(peer), &fwd, &cfg(ForwardedHeader::Forwarded));
    assert_eq!(by_xff, Ok(expected), "X-Forwarded-For: {xff:?}");
    assert_eq!(by_fwd, Ok(expected), "Forwarded: {fwd:?}");

    // the key of an address
    let key = ip_key(peer, &cfg(header));
    let canon = peer.to_canonical();
    let (prefix, full) = match canon {
        IpAddr::V4(_) => (input.ipv4_prefix.min(32), 32),
        IpAddr::V6(_) => (input.ipv6_prefix.min(128), 128),
    };
    if prefix == full {
        assert_eq!(key, canon.to_string());
    } else {
        let net: IpNet = key.parse().unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!(net.prefix_len(), prefix, "{key}");
        assert_eq!(net, net.trunc(), "{key}");
        assert!(net.contains(&canon), "{key} holds {canon}");
    }
    assert_eq!(ip_text(peer), peer.to_string());
    let mut out = b"k:".to_vec();
    push_ip_text(&mut out, peer);
    assert_eq!(out, format!("k:{peer}").into_bytes());
});
