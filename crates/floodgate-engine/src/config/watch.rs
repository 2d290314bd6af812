//! Noticing that a config file should be read again: `SIGHUP` ([`sighup`], [`on_sighup`])
//! and a watch of the file ([`watch_file`]). What a reload does is the caller's: the
//! server swaps its descriptor rules, the proxy its limiter.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

/// Start listening for `SIGHUP` (call before announcing readiness: until then the
/// signal's default action would end the process).
pub fn sighup() -> std::io::Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
}

/// Call `reload` (on the blocking pool) for every `SIGHUP` received by `hup` until
/// `shutdown` changes.
pub async fn on_sighup<F>(
    reload: Arc<F>,
    mut hup: tokio::signal::unix::Signal,
    mut shutdown: watch::Receiver<bool>,
) where
    F: Fn() + Send + Sync + 'static,
{
    loop {
        tokio::select! {
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                let r = reload.clone();
                let _ = tokio::task::spawn_blocking(move || r()).await;
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Watch the directory of `path` and call `changed` (on the blocking pool) when the file
/// may have changed, at most once per `debounce` (events come in bursts, and for
/// neighbouring files: `changed` compares the content itself). Returns the watcher, which
/// must be kept alive, and the task, which ends when `shutdown` changes.
pub fn watch_file<F>(
    path: &Path,
    debounce: Duration,
    changed: Arc<F>,
    shutdown: watch::Receiver<bool>,
) -> notify::Result<(notify::RecommendedWatcher, tokio::task::JoinHandle<()>)>
where
    F: Fn() + Send + Sync + 'static,
{
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let name = path.file_name().map(|n| n.to_os_string());
    watch_in(&dir, name, debounce, changed, shutdown)
}

/// As [`watch_file`], for every file of the directory `dir` (a configuration kept as
/// several files, as Envoy's rate limit service keeps its domains): any change among them
/// calls `changed` once per burst.
pub fn watch_dir<F>(
    dir: &Path,
    debounce: Duration,
    changed: Arc<F>,
    shutdown: watch::Receiver<bool>,
) -> notify::Result<(notify::RecommendedWatcher, tokio::task::JoinHandle<()>)>
where
    F: Fn() + Send + Sync + 'static,
{
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    watch_in(&dir, None, debounce, changed, shutdown)
}

/// Watch `dir`; an event on the file `name` (any file: `None`) calls `changed`.
fn watch_in<F>(
    dir: &Path,
    name: Option<std::ffi::OsString>,
    debounce: Duration,
    changed: Arc<F>,
    mut shutdown: watch::Receiver<bool>,
) -> notify::Result<(notify::RecommendedWatcher, tokio::task::JoinHandle<()>)>
where
    F: Fn() + Send + Sync + 'static,
{
    let any = name.is_none();
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(ev) = res else { return };
        if matches!(ev.kind, EventKind::Access(_)) {
            return;
        }
        if any
            || ev
                .paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
        {
            let _ = tx.try_send(());
        }
    })?;
    // Watch the directory, not the file: editors and config managers replace files by
    // renaming a new one over them, which a watch on the old inode would miss.
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                got = rx.recv() => {
                    if got.is_none() { return; }
                    tokio::time::sleep(debounce).await;
                    while rx.try_recv().is_ok() {}
                    let r = changed.clone();
                    let _ = tokio::task::spawn_blocking(move || r()).await;
                }
                _ = shutdown.changed() => return,
            }
        }
    });
    Ok((watcher, task))
}
