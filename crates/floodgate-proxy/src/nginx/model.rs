//! What the walk over an nginx configuration collects: its zones, the limits in effect at
//! each level, and the policies and routes the TOML is written from.

use std::collections::BTreeMap;

use super::keys::Key;
use super::parse::Directive;
use super::report::Note;

/// A `limit_req_zone` or `limit_conn_zone`.
#[derive(Debug, Clone)]
pub(super) struct Zone {
    pub(super) key: Key,
    pub(super) key_text: String,
    /// nginx's rate as floodgate writes it (`10/s`, `30/min`); none for a conn zone.
    pub(super) rate: Option<String>,
    /// Shared memory size, bytes.
    pub(super) size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delay {
    /// Every admitted excess request is held (nginx's default, `delay=0`).
    All,
    /// `nodelay`.
    None,
    /// `delay=N`.
    After(u64),
}

/// One `limit_req` or `limit_conn` as written at a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Use {
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
pub(super) struct Level {
    /// Each `limit_req` with the directive that wrote it.
    pub(super) req: Vec<(Use, Directive)>,
    /// Each `limit_conn` with the directive that wrote it.
    pub(super) conn: Vec<(Use, Directive)>,
    pub(super) req_status: Option<u16>,
    pub(super) conn_status: Option<u16>,
    pub(super) req_dry_run: bool,
    pub(super) conn_dry_run: bool,
}

/// One policy of the output, the key of its identity being `(use, dry_run)`.
#[derive(Debug)]
pub(super) struct PolicyOut {
    pub(super) name: String,
    pub(super) what: Use,
    pub(super) dry_run: bool,
    pub(super) source: String,
}

pub(super) struct RouteOut {
    pub(super) prefix: String,
    pub(super) policies: Vec<String>,
    pub(super) source: String,
}

#[derive(Default)]
pub(super) struct Conv {
    pub(super) req_zones: BTreeMap<String, Zone>,
    pub(super) conn_zones: BTreeMap<String, Zone>,
    pub(super) groups: BTreeMap<String, Vec<String>>,
    pub(super) warnings: Vec<Note>,
    pub(super) policies: Vec<PolicyOut>,
    pub(super) routes: Vec<RouteOut>,
    /// The denial status of each route with limits, the directive naming it, and the
    /// route's directive.
    pub(super) statuses: Vec<(u16, &'static str, Directive)>,
    pub(super) listen: Option<String>,
    pub(super) upstream: Option<String>,
    pub(super) trusted: Vec<String>,
    pub(super) real_ip_header: Option<String>,
}
