//! Reloading the proxy's config file: on `SIGHUP` and when the file changes on disk
//! (the signal and the watch: [`floodgate_engine::config::watch`]).
//!
//! A reload reads and checks the whole file and builds its limiter before anything is
//! swapped. A file that does not load is logged with its error (file:line:column for a
//! parse error), counted (`floodgate_config_reloads_total{result="error"}`), recorded in
//! the admin page's reload history, and the running configuration keeps serving. A good
//! file becomes the next [`Generation`](crate::generation::Generation): policies of the
//! same name and algorithm kind keep their keys' state, open connections are kept, and
//! requests already in flight finish on the generation they started on.
//!
//! What a reload applies: `[[policy]]`, `[[route]]`, `[client_ip]`, `[deny]`,
//! `[headers]`, `[delay]` and `[allowlist]`, and which upstream group each route sends
//! to (`route.upstream`). What it cannot change ([`RESTART_ONLY`]): the listeners, the
//! upstream, the upstream groups (`[upstreams.NAME]`) and the timeouts, the connection
//! caps, the store, the fleet, the admin settings, the access log's file and format (its
//! file is reopened after every reload) and the worker count (a flag). A reload that
//! changes one of them applies the rest, keeps those as they run (the fleet as started,
//! its nodes and quota too), and names them in its log line as needing a restart; one
//! whose route names a group the running proxy does not have is refused, and so is one
//! whose policies the running fleet cannot run.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use floodgate_http::RateLimiter;

use crate::config::{Config, OpenedStore};
use crate::generation::Generations;

/// The top-level settings read at startup only, as the file names them.
pub const RESTART_ONLY: [&str; 20] = [
    "listen",
    "upstream",
    "upstreams",
    "admin",
    "admin_keys",
    "admin_allowed_hosts",
    "store",
    "upstream_timeout",
    "connect_timeout",
    "head_timeout",
    "send_timeout",
    "body_timeout",
    "max_connections",
    "max_connections_per_client",
    "upstream_max_idle",
    "shutdown_grace",
    "upstream_http2",
    "fleet",
    "log.access_log",
    "log.access_format",
];

/// The [`RESTART_ONLY`] settings whose values differ between `old` and `new`.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    // the fleet's section has no equality of its own: compared as validated
    let fleet = |c: &Config| format!("{:?} {:?}", c.fleet(), c.fleet.quota);
    let changed = [
        old.listen != new.listen,
        old.upstream != new.upstream,
        old.upstream_groups() != new.upstream_groups(),
        old.admin != new.admin,
        old.admin_keys != new.admin_keys,
        old.admin_allowed_hosts != new.admin_allowed_hosts,
        // as resolved: two spellings of one store are the same store
        old.store.settings() != new.store.settings(),
        old.upstream_timeout != new.upstream_timeout,
        old.connect_timeout != new.connect_timeout,
        old.head_timeout != new.head_timeout,
        old.send_timeout != new.send_timeout,
        old.body_timeout != new.body_timeout,
        old.max_connections != new.max_connections,
        old.max_connections_per_client != new.max_connections_per_client,
        old.upstream_max_idle != new.upstream_max_idle,
        old.shutdown_grace != new.shutdown_grace,
        old.upstream_http2 != new.upstream_http2,
        fleet(old) != fleet(new),
        old.log.access_log != new.log.access_log,
        old.log.access_format != new.log.access_format,
    ];
    RESTART_ONLY
        .iter()
        .zip(changed)
        .filter_map(|(name, c)| c.then_some(*name))
        .collect()
}

/// Reloads a config file into a running proxy's [`Generations`].
pub struct Reloader {
    path: PathBuf,
    generations: Arc<Generations>,
    /// The file as read at startup (what the restart-only settings are compared with).
    startup: Config,
    /// The text last read (the watch reloads only when it changes); the lock also
    /// serializes reloads.
    last_text: Mutex<Option<String>>,
    /// The store opened at startup: every reload's limiter decides on it.
    store: OpenedStore,
    /// The runtime the store's background tasks run on.
    runtime: tokio::runtime::Handle,
    /// Called after each reload attempt with its outcome (the access log reopens its
    /// file there).
    after: Box<dyn Fn(bool) + Send + Sync>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader of `path` (read at startup as `startup`, its store opened as `store`)
    /// into `generations`; `runtime` runs the store's background tasks.
    pub fn new(
        path: PathBuf,
        startup: Config,
        store: OpenedStore,
        generations: Arc<Generations>,
        runtime: tokio::runtime::Handle,
    ) -> Reloader {
        let text = std::fs::read_to_string(&path).ok();
        Reloader {
            path,
            generations,
            startup,
            last_text: Mutex::new(text),
            store,
            runtime,
            after: Box::new(|_| {}),
        }
    }

    /// Call `after` with each reload's outcome (`true`: applied).
    pub fn after(mut self, after: impl Fn(bool) + Send + Sync + 'static) -> Reloader {
        self.after = Box::new(after);
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reload now (blocking: call it off the runtime's threads, as
    /// [`floodgate_engine::config::watch`] does). Returns the new generation's id, or the
    /// error (already logged, counted and recorded).
    pub fn reload(&self) -> Result<u64, String> {
        let mut last = self.last_text.lock().unwrap_or_else(|p| p.into_inner());
        let r = self.reload_locked(&mut last);
        (self.after)(r.is_ok());
        r
    }

    fn reload_locked(&self, last: &mut Option<String>) -> Result<u64, String> {
        let current = self.generations.load();
        let prev: &RateLimiter = &current.limiter;
        let metrics = prev.metrics();
        let insight = prev.insight();
        let fail = |message: String| {
            tracing::error!(file = %self.path.display(), error = %message, "config reload refused; the previous config keeps serving");
            insight.reloaded(current.id, false, message.clone());
            metrics.config_reload(false);
            Err(message)
        };
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) => {
                return fail(format!(
                    "{}: cannot read the config file: {e}",
                    self.path.display()
                ));
            }
        };
        *last = Some(text.clone());
        let mut cfg = match Config::parse(&text, &self.path) {
            Ok(c) => c,
            Err(e) => return fail(e.to_string()),
        };
        // the groups are the running proxy's: a route may name only those
        if let Err(e) = cfg.check_route_upstreams(&self.startup, &self.path, &text) {
            return fail(e.to_string());
        }
        let restart = restart_only_changes(&self.startup, &cfg);
        // the fleet runs as started ("fleet" is restart-only): a changed [fleet] is named
        // in the log line as needing a restart, and the policies must suit the running one
        if let Err(e) = cfg.keep_running_fleet(&self.startup, &self.path, &text) {
            return fail(e.to_string());
        }
        // the access log runs as started: its decisions keep being recorded
        cfg.log.access_log.clone_from(&self.startup.log.access_log);
        cfg.log.access_format = self.startup.log.access_format;
        // the store is the one opened at startup ("store" is restart-only)
        let built = {
            let _in_runtime = self.runtime.enter();
            cfg.build_on(&self.store, Some(prev))
        };
        let limiter = match built {
            Ok(l) => l,
            Err(e) => return fail(format!("{}: {e}", self.path.display())),
        };
        // a sticky fleet's nodes must resolve before the workers are handed the limiter
        if let Err(e) = crate::sticky::Sticky::new(
            &limiter,
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(1),
        ) {
            return fail(format!("{}: {e}", self.path.display()));
        }
        let id = self.generations.swap(limiter, cfg.route_upstreams());
        if restart.is_empty() {
            tracing::info!(file = %self.path.display(), generation = id, "config reloaded");
        } else {
            tracing::warn!(
                file = %self.path.display(),
                generation = id,
                needs_restart = %restart.join(", "),
                "config reloaded; these settings are read at startup only and take effect after a restart"
            );
        }
        insight.set_config(Config::shown(&text));
        let message = if restart.is_empty() {
            format!("reloaded from {}", self.path.display())
        } else {
            format!(
                "reloaded from {}; needs a restart: {}",
                self.path.display(),
                restart.join(", ")
            )
        };
        insight.reloaded(id, true, message);
        metrics.config_reload(true);
        Ok(id)
    }

    /// Reload if the file's content differs from the last one read. A file that is empty
    /// (or only white space) is taken as one being rewritten in place and skipped; the
    /// write that follows reloads it.
    pub fn reload_if_changed(&self) -> Option<Result<u64, String>> {
        let now = std::fs::read_to_string(&self.path).ok();
        if now.as_deref().is_some_and(|t| t.trim().is_empty()) {
            tracing::info!(file = %self.path.display(), "config file is empty: taken as being rewritten; the current config keeps serving");
            return None;
        }
        {
            let last = self.last_text.lock().unwrap_or_else(|p| p.into_inner());
            if *last == now {
                return None;
            }
        }
        Some(self.reload())
    }
}
