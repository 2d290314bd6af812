//! The walk over an nginx configuration: zones from `http`, the inherited limits of each
//! `server` and `location` level, and the floodgate TOML written from them.
//!
//! nginx inherits `limit_req` (and `limit_conn`) from the enclosing level only when a
//! level has none of its own; `limit_req_status` and `limit_req_dry_run` are inherited
//! one by one. Each `location` becomes a `[[route]]` (its prefix) listing the policies in
//! effect there; a server without `location /` gets a `/` route with the server's own.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use super::keys::{Key, key};
use super::parse::{Directive, SyntaxError, parse};

/// A warning or an error about one directive, at its line and column (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Line, 1-based.
    pub line: usize,
    /// Column, 1-based.
    pub column: usize,
    /// The directive's name.
    pub directive: String,
    /// What is not converted, or how.
    pub message: String,
}

impl Note {
    fn at(d: &Directive, message: impl Into<String>) -> Note {
        Note {
            line: d.line,
            column: d.column,
            directive: d.name.clone(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.line, self.column, self.directive, self.message
        )
    }
}

/// Why a file could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// Not nginx syntax.
    #[error("{0}")]
    Syntax(#[from] SyntaxError),
    /// A directive floodgate cannot express.
    #[error("{0}")]
    Directive(Note),
}

/// A converted file: the TOML for `floodgate proxy --config`, and what was converted
/// approximately or left out.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The floodgate configuration.
    pub toml: String,
    /// Warnings, in file order.
    pub warnings: Vec<Note>,
}

/// A `limit_req_zone` or `limit_conn_zone`.
#[derive(Debug, Clone)]
struct Zone {
    key: Key,
    key_text: String,
    /// nginx's rate as floodgate writes it (`10/s`, `30/min`); none for a conn zone.
    rate: Option<String>,
    /// Shared memory size, bytes.
    size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delay {
    /// Every admitted excess request is held (nginx's default, `delay=0`).
    All,
    /// `nodelay`.
    None,
    /// `delay=N`.
    After(u64),
}

/// One `limit_req` or `limit_conn` as written at a level.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Use {
    Req {
        zone: String,
        burst: u64,
        delay: Delay,
    },
    Conn {
        zone: String,
        max: u64,
    },
}

/// What a level has in effect, its own or inherited.
#[derive(Debug, Clone, Default)]
struct Level {
    /// Each `limit_req` with the directive that wrote it.
    req: Vec<(Use, Directive)>,
    /// Each `limit_conn` with the directive that wrote it.
    conn: Vec<(Use, Directive)>,
    req_status: Option<u16>,
    conn_status: Option<u16>,
    req_dry_run: bool,
    conn_dry_run: bool,
}

/// One policy of the output, the key of its identity being `(use, dry_run)`.
#[derive(Debug)]
struct PolicyOut {
    name: String,
    what: Use,
    dry_run: bool,
    source: String,
}

struct RouteOut {
    prefix: String,
    policies: Vec<String>,
    source: String,
}

#[derive(Default)]
struct Conv {
    req_zones: BTreeMap<String, Zone>,
    conn_zones: BTreeMap<String, Zone>,
    groups: BTreeMap<String, Vec<String>>,
    warnings: Vec<Note>,
    policies: Vec<PolicyOut>,
    routes: Vec<RouteOut>,
    /// The denial status of each route with limits, the directive naming it, and the
    /// route's directive.
    statuses: Vec<(u16, &'static str, Directive)>,
    listen: Option<String>,
    upstream: Option<String>,
    trusted: Vec<String>,
    real_ip_header: Option<String>,
}

/// nginx's rate: `Nr/s` or `Nr/m`, N a whole number.
fn rate(d: &Directive, v: &str) -> Result<String, ConvertError> {
    let bad = || {
        ConvertError::Directive(Note::at(
            d,
            format!("rate={v}: expected Nr/s or Nr/m with N a whole number"),
        ))
    };
    let (n, unit) = if let Some(n) = v.strip_suffix("r/s") {
        (n, "s")
    } else if let Some(n) = v.strip_suffix("r/m") {
        (n, "min")
    } else {
        return Err(bad());
    };
    let n: u64 = n.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    Ok(format!("{n}/{unit}"))
}

/// A size (`10m`, `64k`, `1048576`) in bytes.
fn size(d: &Directive, v: &str) -> Result<u64, ConvertError> {
    let (n, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1024),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1024 * 1024),
        Some(b'g' | b'G') => (&v[..v.len() - 1], 1024 * 1024 * 1024),
        _ => (v, 1),
    };
    n.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| {
            ConvertError::Directive(Note::at(
                d,
                format!("zone size {v:?}: expected a size such as 10m or 64k"),
            ))
        })
}

fn err(d: &Directive, m: impl Into<String>) -> ConvertError {
    ConvertError::Directive(Note::at(d, m))
}

fn number(d: &Directive, what: &str, v: &str) -> Result<u64, ConvertError> {
    v.parse()
        .map_err(|_| err(d, format!("{what}={v}: expected a whole number")))
}

/// `on` or `off`.
fn flag(d: &Directive) -> Result<bool, ConvertError> {
    match d.args.as_slice() {
        [v] if v == "on" => Ok(true),
        [v] if v == "off" => Ok(false),
        _ => Err(err(d, "expected on or off")),
    }
}

fn status(d: &Directive) -> Result<u16, ConvertError> {
    match d.args.as_slice() {
        [v] => v
            .parse::<u16>()
            .ok()
            .filter(|s| (400..=599).contains(s))
            .ok_or_else(|| err(d, format!("{v}: expected a status from 400 to 599"))),
        _ => Err(err(d, "expected one status code")),
    }
}

/// A zone directive: `KEY zone=NAME:SIZE [rate=R]`.
fn zone(d: &Directive, with_rate: bool) -> Result<(String, Zone), ConvertError> {
    let Some(key_text) = d.args.first() else {
        return Err(err(d, "expected a key, zone=NAME:SIZE and rate=R"));
    };
    let key = key(key_text).map_err(|m| err(d, m))?;
    let mut name = None;
    let mut bytes = 0;
    let mut r = None;
    for a in &d.args[1..] {
        if let Some(z) = a.strip_prefix("zone=") {
            let Some((n, s)) = z.split_once(':') else {
                return Err(err(d, format!("{a}: expected zone=NAME:SIZE")));
            };
            name = Some(n.to_string());
            bytes = size(d, s)?;
        } else if let Some(v) = a.strip_prefix("rate=").filter(|_| with_rate) {
            r = Some(rate(d, v)?);
        } else if a == "sync" {
            // nginx Plus' zone synchronisation: the store is the way to share
        } else {
            return Err(err(d, format!("unknown parameter {a:?}")));
        }
    }
    let Some(name) = name else {
        return Err(err(d, "no zone=NAME:SIZE"));
    };
    if with_rate && r.is_none() {
        return Err(err(d, "no rate=Nr/s or rate=Nr/m"));
    }
    Ok((
        name,
        Zone {
            key,
            key_text: key_text.clone(),
            rate: r,
            size: bytes,
        },
    ))
}

impl Conv {
    fn warn(&mut self, d: &Directive, m: impl Into<String>) {
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

    fn listen(&mut self, d: &Directive) {
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

    fn proxy_pass(&mut self, d: &Directive) {
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

fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

impl Conv {
    fn zone_of(&self, u: &Use) -> &Zone {
        match u {
            Use::Req { zone, .. } => &self.req_zones[zone],
            Use::Conn { zone, .. } => &self.conn_zones[zone],
        }
    }

    fn write(&mut self) -> String {
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
