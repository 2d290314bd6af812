//! Config hot reload: on `SIGHUP` and when the file changes on disk.
//!
//! A reload reads and checks the whole file first; a file that does not load is logged
//! with its error, counted (`floodgate_config_reloads_total{result="error"}`,
//! `floodgate_config_last_reload_success 0`), and the running config keeps serving. A
//! good file replaces the rules atomically: requests already in flight finish on the old
//! rules, the next ones see the new rules, and limits whose identity did not change keep
//! their counters (see [`crate::descriptors`]). Listen addresses and the store are read at
//! startup only: a reload that changes them is applied for its rules and the rest is
//! reported as needing a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::{self, Settings};
use crate::descriptors::Engine;
use crate::metrics::ResultLabels;

/// Reloads the config file into an [`Engine`].
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    engine: Arc<Engine>,
    startup: Settings,
    last_text: std::sync::Mutex<Option<String>>,
}

impl Reloader {
    /// A reloader of `path` into `engine`; `startup` are the file's settings at startup.
    pub fn new(path: PathBuf, engine: Arc<Engine>, startup: Settings) -> Reloader {
        let text = config::text(&path);
        if let Some(t) = &text {
            let insight = &engine.metrics().insight;
            insight.set_config(config::shown(&path, t));
        }
        Reloader {
            path,
            engine,
            startup,
            last_text: std::sync::Mutex::new(text),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reload now. Returns the new generation, or the error (already logged and counted).
    pub fn reload(&self) -> Result<u64, String> {
        let metrics = self.engine.metrics().clone();
        let insight = metrics.insight.clone();
        let fail = |message: String| {
            tracing::error!(file = %self.path.display(), error = %message, "config reload rejected; the previous config keeps serving");
            insight.reloaded(self.engine.current().id, false, message.clone());
            metrics
                .reloads
                .get_or_create(&ResultLabels { result: "error" })
                .inc();
            metrics.last_reload_success.set(0);
            Err(message)
        };
        *self.last_text.lock().unwrap_or_else(|p| p.into_inner()) = config::text(&self.path);
        let (cfg, text) = match config::read(&self.path) {
            Ok(c) => c,
            Err(e) => return fail(e.to_string()),
        };
        if cfg.settings != self.startup {
            tracing::warn!(file = %self.path.display(), "settings read at startup changed (listen, store, fleet, admin_keys, connections, resp, tls): they take effect after a restart; the new rules are applied now");
        }
        match self.engine.reload(cfg.rules) {
            Ok(id) => {
                tracing::info!(file = %self.path.display(), generation = id, "config reloaded");
                insight.set_config(config::shown(&self.path, &text));
                insight.reloaded(id, true, format!("reloaded from {}", self.path.display()));
                metrics
                    .reloads
                    .get_or_create(&ResultLabels { result: "ok" })
                    .inc();
                metrics.last_reload_success.set(1);
                Ok(id)
            }
            Err(e) => fail(format!("{}: {e}", self.path.display())),
        }
    }

    /// Reload if the file's content differs from the last one read (file watcher events
    /// come in bursts and for neighbouring files). A file that is empty (or only white
    /// space) is taken as one being rewritten in place (truncated, not yet written: a
    /// writer's first event) and skipped; the write that follows reloads it. `SIGHUP`
    /// ([`Reloader::reload`]) loads an empty file as it is: no rules.
    pub fn reload_if_changed(&self) -> Option<Result<u64, String>> {
        let now = config::text(&self.path);
        if now.as_deref().is_some_and(|t| t.trim().is_empty()) {
            tracing::info!(
                file = %self.path.display(),
                "config file is empty: taken as being rewritten; the current config keeps serving (SIGHUP loads an empty file)"
            );
            return None;
        }
        let same = *self.last_text.lock().unwrap_or_else(|p| p.into_inner()) == now;
        if same { None } else { Some(self.reload()) }
    }
}

pub use floodgate_engine::config::watch::sighup;

/// Reload on every `SIGHUP` received by `hup` until `shutdown` fires.
pub async fn on_sighup(
    reloader: Arc<Reloader>,
    hup: tokio::signal::unix::Signal,
    shutdown: watch::Receiver<bool>,
) {
    let reload = Arc::new(move || {
        let _ = reloader.reload();
    });
    floodgate_engine::config::watch::on_sighup(reload, hup, shutdown).await;
}

/// Watch the config file's directory and reload when the file changes (debounced by
/// `debounce`). Returns the watcher, which must be kept alive, and the task.
pub fn watch_file(
    reloader: Arc<Reloader>,
    debounce: Duration,
    shutdown: watch::Receiver<bool>,
) -> notify::Result<(notify::RecommendedWatcher, tokio::task::JoinHandle<()>)> {
    let path =
        std::path::absolute(reloader.path()).unwrap_or_else(|_| reloader.path().to_path_buf());
    let layout = path.is_dir();
    let changed = Arc::new(move || {
        let _ = reloader.reload_if_changed();
    });
    if layout {
        // an Envoy layout directory: any change among its files
        let dir = config::layout_root(&path);
        floodgate_engine::config::watch::watch_dir(&dir, debounce, changed, shutdown)
    } else {
        floodgate_engine::config::watch::watch_file(&path, debounce, changed, shutdown)
    }
}
