//! The `floodgate proxy` TOML written from what the walk collected: listen address,
//! upstream, client address rules, denial status, store size, one `[[policy]]` per limit
//! and one `[[route]]` per location, each with a comment naming its nginx line.

use std::fmt::Write as _;

use super::model::{Conv, Delay, Use, Zone};

fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

impl Conv {
    pub(super) fn zone_of(&self, u: &Use) -> &Zone {
        match u {
            Use::Req { zone, .. } => &self.req_zones[zone],
            Use::Conn { zone, .. } => &self.conn_zones[zone],
        }
    }

    pub(super) fn write(&mut self) -> String {
        let mut o = String::new();
        let w = &mut o;
        if let Some(l) = &self.listen {
            let _ = writeln!(w, "listen = {}", q(l));
        }
        match &self.upstream {
            Some(u) => {
                let _ = writeln!(w, "upstream = {}", q(u));
            }
            None => {
                let _ = writeln!(
                    w,
                    "# no proxy_pass http://... was found: give --upstream or set upstream here"
                );
            }
        }
        let used: Vec<&Zone> = self
            .policies
            .iter()
            .map(|p| self.zone_of(&p.what))
            .collect();
        let by_ip = used.iter().any(|z| z.key.by_ip);
        if by_ip || self.real_ip_header.is_some() || !self.trusted.is_empty() {
            let _ = writeln!(w, "\n[client_ip]");
            if !self.trusted.is_empty() {
                let list: Vec<String> = self.trusted.iter().map(|t| q(t)).collect();
                let _ = writeln!(w, "# set_real_ip_from");
                let _ = writeln!(w, "trusted_proxies = [{}]", list.join(", "));
                let h = self.real_ip_header.as_deref().unwrap_or("x-forwarded-for");
                let _ = writeln!(w, "# real_ip_header");
                let _ = writeln!(w, "header = {}", q(h));
            }
            if by_ip {
                let _ = writeln!(
                    w,
                    "# $binary_remote_addr: one key per IPv6 address, as nginx"
                );
                let _ = writeln!(w, "ipv6_prefix = 128");
            }
        }
        let status = self.statuses.first().map_or(503, |s| s.0);
        let _ = writeln!(w, "\n[deny]");
        let _ = writeln!(
            w,
            "# limit_req_status / limit_conn_status (nginx's default: 503)"
        );
        let _ = writeln!(w, "status = {status}");
        if used.iter().any(|z| z.key.may_be_missing) {
            let _ = writeln!(
                w,
                "# nginx does not count a request whose key is empty (a missing header)"
            );
            let _ = writeln!(w, "missing_key = \"allow\"");
        }
        let states = used.iter().map(|z| z.size / 128).max().unwrap_or(1).max(1);
        let _ = writeln!(w, "\n[store]");
        let _ = writeln!(
            w,
            "# the largest zone's states (about 128 bytes each in nginx)"
        );
        let _ = writeln!(w, "max_keys = {states}");
        for p in &self.policies {
            let z = self.zone_of(&p.what);
            let _ = writeln!(w, "\n# {}", p.source);
            let _ = writeln!(w, "[[policy]]");
            let _ = writeln!(w, "name = {}", q(&p.name));
            match &p.what {
                Use::Req { burst, delay, .. } => {
                    let _ = writeln!(w, "algorithm = \"leaky-queue\"");
                    let _ = writeln!(w, "rate = {}", q(z.rate.as_deref().unwrap_or("")));
                    let _ = writeln!(w, "burst = {burst}");
                    match delay {
                        Delay::None => {
                            let _ = writeln!(w, "nodelay = true");
                        }
                        Delay::After(n) => {
                            let _ = writeln!(w, "delay = {n}");
                        }
                        Delay::All => {}
                    }
                }
                Use::Conn { max, .. } => {
                    let _ = writeln!(w, "max_in_flight = {max}");
                }
            }
            let key = match z.key.parts.as_slice() {
                [one] => q(one),
                many => format!(
                    "[{}]",
                    many.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ")
                ),
            };
            let _ = writeln!(w, "# {}", z.key_text);
            let _ = writeln!(w, "key = {key}");
            if p.dry_run {
                let _ = writeln!(w, "dry_run = true");
            }
        }
        for r in &self.routes {
            let list: Vec<String> = r.policies.iter().map(|s| q(s)).collect();
            let _ = writeln!(w, "\n# {}", r.source);
            let _ = writeln!(w, "[[route]]");
            let _ = writeln!(w, "prefix = {}", q(&r.prefix));
            let _ = writeln!(w, "policies = [{}]", list.join(", "));
        }
        o
    }
}
