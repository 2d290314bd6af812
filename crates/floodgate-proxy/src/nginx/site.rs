//! The site's own directives: `listen` (the one address floodgate proxy listens on) and
//! `proxy_pass` (the one upstream it forwards to), with a warning for what is not
//! converted.

use super::model::Conv;
use super::parse::Directive;

impl Conv {
    /// `listen`: the first address floodgate can listen on.
    pub(super) fn listen(&mut self, d: &Directive) {
        if self.listen.is_some() {
            self.warn(
                d,
                "floodgate proxy listens on one address: the first listen is converted",
            );
            return;
        }
        let Some(a) = d.args.first() else { return };
        if d.args[1..].iter().any(|p| p == "ssl" || p == "quic") {
            self.warn(
                d,
                "TLS is not converted: the address is, give the certificate in floodgate's own settings",
            );
        }
        let addr = if a.parse::<u16>().is_ok() {
            format!("0.0.0.0:{a}")
        } else if let Some(p) = a.strip_prefix("*:") {
            format!("0.0.0.0:{p}")
        } else if let Some(p) = a.strip_prefix("localhost:") {
            format!("127.0.0.1:{p}")
        } else if !a.contains(':') && a.parse::<std::net::IpAddr>().is_ok() {
            format!("{a}:80")
        } else {
            a.clone()
        };
        if addr.parse::<std::net::SocketAddr>().is_err() {
            self.warn(
                d,
                format!("{a}: not an ip:port floodgate can listen on; set listen yourself"),
            );
            return;
        }
        self.listen = Some(addr);
    }

    /// `proxy_pass`: the `http://` upstream (an `upstream` group's first server).
    pub(super) fn proxy_pass(&mut self, d: &Directive) {
        let Some(url) = d.args.first() else { return };
        let Some(rest) = url.strip_prefix("http://") else {
            self.warn(
                d,
                format!("{url}: floodgate proxy forwards to http:// upstreams only"),
            );
            return;
        };
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if host.contains('$') {
            self.warn(
                d,
                format!("{url}: an upstream chosen by a variable is not converted"),
            );
            return;
        }
        if !path.is_empty() && path != "/" {
            self.warn(
                d,
                format!("the URI part {path:?} is not converted: floodgate forwards the request's own path"),
            );
        }
        let host = match self.groups.get(host).cloned() {
            Some(servers) => {
                if servers.len() > 1 {
                    self.warn(
                        d,
                        format!(
                            "upstream {host:?} has {} servers: the first is converted",
                            servers.len()
                        ),
                    );
                }
                match servers.first() {
                    Some(s) if s.contains(':') => s.clone(),
                    Some(s) => format!("{s}:80"),
                    None => return,
                }
            }
            None => host.to_string(),
        };
        let upstream = format!("http://{host}");
        match &self.upstream {
            Some(u) if *u != upstream => self.warn(
                d,
                format!("floodgate proxy forwards to one upstream: {u} is kept, {upstream} is not"),
            ),
            Some(_) => {}
            None => self.upstream = Some(upstream),
        }
    }
}
