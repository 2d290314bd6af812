//! The walk over an nginx configuration: zones from `http`, the inherited limits of each
//! `server` and `location` level, and the floodgate TOML written from them.
//!
//! nginx inherits `limit_req` (and `limit_conn`) from the enclosing level only when a
//! level has none of its own; `limit_req_status` and `limit_req_dry_run` are inherited
//! one by one. Each `location` becomes a `[[route]]` (its prefix) listing the policies in
//! effect there; a server without `location /` gets a `/` route with the server's own.
//!
//! The other jobs are their own modules: [`super::args`] checks directive arguments,
//! [`super::model`] holds what the walk collects, [`super::site`] reads `listen` and
//! `proxy_pass`, [`super::emit`] writes the TOML.

use super::args::{err, flag, number, status, zone};
use super::model::{Conv, Delay, Level, PolicyOut, RouteOut, Use};
use super::parse::{Directive, parse};
use super::report::{ConvertError, Converted, Note};

impl Conv {
    pub(super) fn warn(&mut self, d: &Directive, m: impl Into<String>) {
        self.warnings.push(Note::at(d, m));
    }

    /// The zones and upstream groups of the `http` block (nginx lets a zone be defined
    /// after its use, so they are read first).
    fn read_zones(&mut self, http: &[Directive]) -> Result<(), ConvertError> {
        for d in http {
            match d.name.as_str() {
                "limit_req_zone" => {
                    let (n, z) = zone(d, true)?;
                    if let Some(m) = &z.key.approximate {
                        self.warn(d, m.clone());
                    }
                    if self.req_zones.insert(n.clone(), z).is_some() {
                        return Err(err(d, format!("zone {n:?} is defined twice")));
                    }
                }
                "limit_conn_zone" => {
                    let (n, z) = zone(d, false)?;
                    if let Some(m) = &z.key.approximate {
                        self.warn(d, m.clone());
                    }
                    if self.conn_zones.insert(n.clone(), z).is_some() {
                        return Err(err(d, format!("zone {n:?} is defined twice")));
                    }
                }
                "upstream" => {
                    let servers = d
                        .block
                        .iter()
                        .flatten()
                        .filter(|s| s.name == "server")
                        .filter_map(|s| s.args.first().cloned())
                        .collect();
                    if let Some(name) = d.args.first() {
                        self.groups.insert(name.clone(), servers);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The level `dirs` opens, inside `parent`.
    fn level(&mut self, dirs: &[Directive], parent: &Level) -> Result<Level, ConvertError> {
        let mut l = parent.clone();
        let mut own_req = Vec::new();
        let mut own_conn = Vec::new();
        for d in dirs {
            match d.name.as_str() {
                "limit_req" => own_req.push((self.limit_req(d)?, d.clone())),
                "limit_conn" => own_conn.push((self.limit_conn(d)?, d.clone())),
                "limit_req_status" => l.req_status = Some(status(d)?),
                "limit_conn_status" => l.conn_status = Some(status(d)?),
                "limit_req_dry_run" => l.req_dry_run = flag(d)?,
                "limit_conn_dry_run" => l.conn_dry_run = flag(d)?,
                "limit_req_log_level" | "limit_conn_log_level" => self.warn(
                    d,
                    "not converted: floodgate logs a rejection at debug and a dry run's would-reject at info (RUST_LOG sets the level)",
                ),
                "limit_rate" | "limit_rate_after" => self.warn(
                    d,
                    "not converted: floodgate limits requests, not the bytes per second of a response",
                ),
                "limit_zone" => {
                    return Err(err(
                        d,
                        "nginx removed limit_zone in 1.7.6; write limit_conn_zone",
                    ));
                }
                "include" => self.warn(
                    d,
                    "not followed: convert the output of `nginx -T`, which has every included file inlined, or the included file itself",
                ),
                "real_ip_header" => match d.args.as_slice() {
                    [h] if h.eq_ignore_ascii_case("x-forwarded-for") => {
                        self.real_ip_header = Some("x-forwarded-for".into())
                    }
                    [h] if h.eq_ignore_ascii_case("forwarded") => {
                        self.real_ip_header = Some("forwarded".into())
                    }
                    [h] => {
                        return Err(err(
                            d,
                            format!(
                                "{h}: floodgate reads the client address from X-Forwarded-For or Forwarded (RFC 7239) only"
                            ),
                        ));
                    }
                    _ => return Err(err(d, "expected one header name")),
                },
                "set_real_ip_from" => match d.args.as_slice() {
                    [net] if net.starts_with("unix:") => self.warn(
                        d,
                        "not converted: floodgate listens on TCP only",
                    ),
                    [net] => {
                        if net.parse::<ipnet::IpNet>().is_err() && net.parse::<std::net::IpAddr>().is_err() {
                            return Err(err(
                                d,
                                format!("{net:?}: floodgate takes an address or CIDR here, not a host name"),
                            ));
                        }
                        self.trusted.push(net.clone());
                    }
                    _ => return Err(err(d, "expected one address or CIDR")),
                },
                "real_ip_recursive" if !flag(d)? => self.warn(
                    d,
                    "floodgate always takes the right-most address that is not a trusted proxy (nginx's real_ip_recursive on); with off, nginx takes the last address whatever it is",
                ),
                "listen" => self.listen(d),
                "proxy_pass" => self.proxy_pass(d),
                _ => {}
            }
        }
        if !own_req.is_empty() {
            l.req = own_req;
        }
        if !own_conn.is_empty() {
            l.conn = own_conn;
        }
        Ok(l)
    }

    fn limit_req(&mut self, d: &Directive) -> Result<Use, ConvertError> {
        let (mut zone, mut burst, mut delay) = (None, 0, Delay::All);
        for a in &d.args {
            if let Some(z) = a.strip_prefix("zone=") {
                zone = Some(z.to_string());
            } else if let Some(b) = a.strip_prefix("burst=") {
                burst = number(d, "burst", b)?;
            } else if a == "nodelay" {
                delay = Delay::None;
            } else if let Some(n) = a.strip_prefix("delay=") {
                delay = Delay::After(number(d, "delay", n)?);
            } else {
                return Err(err(d, format!("unknown parameter {a:?}")));
            }
        }
        let Some(zone) = zone else {
            return Err(err(d, "no zone=NAME"));
        };
        if !self.req_zones.contains_key(&zone) {
            return Err(err(
                d,
                format!("zone {zone:?} is not defined by a limit_req_zone in the http block"),
            ));
        }
        Ok(Use::Req { zone, burst, delay })
    }

    fn limit_conn(&mut self, d: &Directive) -> Result<Use, ConvertError> {
        let [zone, n] = d.args.as_slice() else {
            return Err(err(d, "expected a zone name and a number"));
        };
        if !self.conn_zones.contains_key(zone) {
            return Err(err(
                d,
                format!("zone {zone:?} is not defined by a limit_conn_zone in the http block"),
            ));
        }
        let max = number(d, "limit_conn", n)?;
        if max == 0 {
            return Err(err(d, "0 would refuse every request"));
        }
        Ok(Use::Conn {
            zone: zone.clone(),
            max,
        })
    }

    /// The policy for `u` in dry-run mode or not, defined on first use.
    fn policy(&mut self, u: &Use, dry_run: bool, d: &Directive) -> String {
        if let Some(p) = self
            .policies
            .iter()
            .find(|p| p.what == *u && p.dry_run == dry_run)
        {
            return p.name.clone();
        }
        let (zone, conn) = match u {
            Use::Req { zone, .. } => (zone, false),
            Use::Conn { zone, .. } => (zone, true),
        };
        let base = match (conn, self.req_zones.contains_key(zone) && conn) {
            (true, true) => format!("conn-{zone}"),
            _ => zone.clone(),
        };
        let same_zone = self.policies.iter().filter(|p| match (&p.what, u) {
            (Use::Req { zone: a, .. }, Use::Req { zone: b, .. }) => a == b,
            (Use::Conn { zone: a, .. }, Use::Conn { zone: b, .. }) => a == b,
            _ => false,
        });
        let n = same_zone.count();
        let name = if n == 0 {
            base
        } else {
            self.warn(
                d,
                format!(
                    "zone {zone:?} is used with other settings elsewhere: floodgate counts these requests apart, as policy \"{base}-{}\"",
                    n + 1
                ),
            );
            format!("{base}-{}", n + 1)
        };
        self.policies.push(PolicyOut {
            name: name.clone(),
            what: u.clone(),
            dry_run,
            source: format!("line {}: {} {}", d.line, d.name, d.args.join(" ")),
        });
        name
    }

    /// A route at `prefix` with what `l` has in effect.
    fn route(&mut self, prefix: &str, l: &Level, d: &Directive, source: String) {
        let here = Directive {
            block: None,
            ..d.clone()
        };
        let mut names = Vec::new();
        for (u, at) in &l.req {
            names.push(self.policy(u, l.req_dry_run, at));
        }
        for (u, at) in &l.conn {
            names.push(self.policy(u, l.conn_dry_run, at));
        }
        if !l.req.is_empty() {
            let s = l.req_status.unwrap_or(503);
            self.statuses.push((s, "limit_req_status", here.clone()));
        }
        if !l.conn.is_empty() {
            let s = l.conn_status.unwrap_or(503);
            self.statuses.push((s, "limit_conn_status", here.clone()));
        }
        self.routes.push(RouteOut {
            prefix: prefix.to_string(),
            policies: names,
            source,
        });
    }

    fn locations(&mut self, dirs: &[Directive], parent: &Level) -> Result<(), ConvertError> {
        for d in dirs.iter().filter(|d| d.name == "location") {
            let inner = d.block.as_deref().unwrap_or(&[]);
            let (modifier, path) = match d.args.as_slice() {
                [p] => ("", p.as_str()),
                [m, p] => (m.as_str(), p.as_str()),
                _ => return Err(err(d, "expected [modifier] path")),
            };
            if path.starts_with('@') {
                continue; // a named location: reached only by internal redirects
            }
            let has_limits = inner
                .iter()
                .any(|x| x.name == "limit_req" || x.name == "limit_conn");
            match modifier {
                "" | "^~" => {}
                "=" => self.warn(
                    d,
                    format!("= {path}: converted as the prefix {path} (floodgate routes match path prefixes)"),
                ),
                "~" | "~*" if has_limits => {
                    return Err(err(
                        d,
                        format!("{modifier} {path}: a regular-expression location with its own limits cannot be converted (floodgate routes match path prefixes)"),
                    ));
                }
                "~" | "~*" => {
                    self.warn(
                        d,
                        format!("{modifier} {path}: a regular-expression location is not converted; the requests it takes fall to the prefix routes"),
                    );
                    continue;
                }
                m => return Err(err(d, format!("unknown location modifier {m:?}"))),
            }
            let l = self.level(inner, parent)?;
            let source = format!("line {}: location {}", d.line, d.args.join(" "));
            self.route(path, &l, d, source);
            self.locations(inner, &l)?;
        }
        Ok(())
    }

    fn server(&mut self, s: &Directive, http: &Level) -> Result<(), ConvertError> {
        let dirs = s.block.as_deref().unwrap_or(&[]);
        let l = self.level(dirs, http)?;
        self.locations(dirs, &l)?;
        // requests no location takes are limited by the server level's own, if any
        let limited = !l.req.is_empty() || !l.conn.is_empty();
        if limited && !self.routes.iter().any(|r| r.prefix == "/") {
            let source = format!("line {}: server (no location /)", s.line);
            self.route("/", &l, s, source);
        }
        Ok(())
    }
}

/// Convert the nginx configuration `text` (one file: `include` is not followed).
pub fn convert(text: &str) -> Result<Converted, ConvertError> {
    let top = parse(text)?;
    let mut c = Conv::default();
    let Some(http) = top.iter().find(|d| d.name == "http") else {
        // a file that is an http block's content (a conf.d file)
        return convert_http(&mut c, &top, None);
    };
    if let Some(second) = top.iter().filter(|d| d.name == "http").nth(1) {
        return Err(err(second, "a second http block"));
    }
    convert_http(&mut c, http.block.as_deref().unwrap_or(&[]), Some(http))
}

fn convert_http(
    c: &mut Conv,
    http: &[Directive],
    at: Option<&Directive>,
) -> Result<Converted, ConvertError> {
    c.read_zones(http)?;
    let base = c.level(http, &Level::default())?;
    let mut servers = http.iter().filter(|d| d.name == "server");
    match servers.next() {
        Some(s) => c.server(s, &base)?,
        None => {
            let line = at.map_or(1, |d| d.line);
            return Err(ConvertError::Directive(Note {
                line,
                column: at.map_or(1, |d| d.column),
                directive: "http".into(),
                message: "no server block: nothing is proxied".into(),
            }));
        }
    }
    for s in servers {
        c.warn(
            s,
            "floodgate proxy serves one site: only the first server block is converted",
        );
    }
    if let Some((first, _, _)) = c.statuses.first().cloned() {
        let other: Vec<_> = c
            .statuses
            .iter()
            .filter(|(s, _, _)| *s != first)
            .cloned()
            .collect();
        for (s, which, d) in other {
            c.warn(
                &d,
                format!("floodgate proxy denies with one status: {first} is kept, {s} ({which} here, 503 when unset) is not"),
            );
        }
    }
    if c.policies.is_empty() {
        return Err(ConvertError::Directive(Note {
            line: at.map_or(1, |d| d.line),
            column: at.map_or(1, |d| d.column),
            directive: "http".into(),
            message: "no limit_req or limit_conn applies to the server: nothing to convert".into(),
        }));
    }
    let toml = c.write();
    Ok(Converted {
        toml,
        warnings: std::mem::take(&mut c.warnings),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml_of(t: &str) -> (crate::config::Config, Vec<String>) {
        let c = convert(t).unwrap();
        let cfg = crate::config::Config::parse(&c.toml, std::path::Path::new("out.toml"))
            .unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
        (cfg, c.warnings.iter().map(|w| w.to_string()).collect())
    }

    #[test]
    fn levels_inherit_only_without_their_own_limits() {
        let (cfg, _) = toml_of(
            "http {\n limit_req_zone $binary_remote_addr zone=a:1m rate=2r/s;\n limit_req_zone $http_x_key zone=b:1m rate=60r/m;\n limit_req zone=a;\n limit_req_dry_run on;\n server {\n  location /x { limit_req zone=b burst=3 nodelay; limit_req_dry_run off; }\n  location /y { }\n }\n}\n",
        );
        let routes: Vec<(String, Vec<String>)> = cfg
            .routes
            .iter()
            .map(|r| {
                (
                    r.prefix.clone(),
                    r.policies.iter().map(|p| p.get_ref().clone()).collect(),
                )
            })
            .collect();
        assert_eq!(
            routes,
            [
                ("/x".to_string(), vec!["b".to_string()]),
                ("/y".to_string(), vec!["a".to_string()]),
                ("/".to_string(), vec!["a".to_string()]),
            ]
        );
        let a = cfg
            .policies
            .iter()
            .find(|p| p.get_ref().name == "a")
            .unwrap();
        assert!(a.get_ref().dry_run);
        let b = cfg
            .policies
            .iter()
            .find(|p| p.get_ref().name == "b")
            .unwrap();
        assert!(!b.get_ref().dry_run && b.get_ref().nodelay);
        assert_eq!(b.get_ref().burst, Some(3));
        assert_eq!(cfg.deny.missing_key, crate::config::MissingKeyChoice::Allow);
        assert_eq!(cfg.deny.status.map(|s| s.as_u16()), Some(503));
    }

    #[test]
    fn real_ip_limit_conn_and_upstream_groups_convert() {
        let (cfg, warnings) = toml_of(
            "http {\n upstream app { server 127.0.0.1:9001; server 127.0.0.1:9002; }\n limit_conn_zone $binary_remote_addr zone=c:1m;\n set_real_ip_from 10.0.0.0/8;\n real_ip_header X-Forwarded-For;\n server {\n  listen 8081;\n  limit_conn c 3;\n  limit_conn_status 429;\n  location / { proxy_pass http://app; }\n }\n}\n",
        );
        assert_eq!(
            cfg.listen.map(|l| l.to_string()).as_deref(),
            Some("0.0.0.0:8081")
        );
        assert_eq!(
            cfg.upstream.as_ref().map(|u| u.to_string()).as_deref(),
            Some("http://127.0.0.1:9001/")
        );
        assert_eq!(cfg.policies[0].get_ref().max_in_flight, Some(3));
        assert_eq!(cfg.client_ip.trusted_proxies.len(), 1);
        assert_eq!(cfg.deny.status.map(|s| s.as_u16()), Some(429));
        assert_eq!(
            warnings,
            ["10:16: proxy_pass: upstream \"app\" has 2 servers: the first is converted"]
        );
    }

    #[test]
    fn what_cannot_be_converted_names_the_directive_and_its_line() {
        let e = |t: &str| convert(t).unwrap_err().to_string();
        assert_eq!(
            e("http {\n server {\n  limit_req zone=nope;\n }\n}\n"),
            "3:3: limit_req: zone \"nope\" is not defined by a limit_req_zone in the http block"
        );
        assert_eq!(
            e(
                "http {\n limit_req_zone $cookie_id zone=a:1m rate=1r/s;\n server { limit_req zone=a; }\n}\n"
            ),
            "2:2: limit_req_zone: variable $cookie_id has no floodgate key (keys are the client IP, the path, a request header or a constant; a map or geo variable that empties the key for some clients is an [allowlist] in floodgate)"
        );
        assert_eq!(
            e("http {\n limit_req_zone $binary_remote_addr zone=a:1m rate=1r/h;\n}\n"),
            "2:2: limit_req_zone: rate=1r/h: expected Nr/s or Nr/m with N a whole number"
        );
        assert_eq!(
            e("http {\n real_ip_header X-Real-IP;\n server { }\n}\n"),
            "2:2: real_ip_header: X-Real-IP: floodgate reads the client address from X-Forwarded-For or Forwarded (RFC 7239) only"
        );
        assert_eq!(
            e("http {\n server { listen 80; }\n}\n"),
            "1:1: http: no limit_req or limit_conn applies to the server: nothing to convert"
        );
    }

    #[test]
    fn approximations_are_warnings_with_their_lines() {
        let c = convert(
            "http {\n limit_req_zone $binary_remote_addr zone=a:1m rate=1r/s;\n limit_req_log_level warn;\n server {\n  location = /login { limit_req zone=a; }\n  limit_rate 10k;\n }\n server { }\n}\n",
        )
        .unwrap();
        let w: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(
            w,
            [
                "3:2: limit_req_log_level: not converted: floodgate logs a rejection at debug and a dry run's would-reject at info (RUST_LOG sets the level)",
                "6:3: limit_rate: not converted: floodgate limits requests, not the bytes per second of a response",
                "5:3: location: = /login: converted as the prefix /login (floodgate routes match path prefixes)",
                "8:2: server: floodgate proxy serves one site: only the first server block is converted",
            ]
        );
    }
}
