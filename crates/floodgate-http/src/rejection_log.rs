//! The rejection log: one line per request a policy rejected (or, dry run, would have
//! rejected), at a chosen level (nginx's `limit_req_log_level`), at most
//! [`RejectionLog::per_second`] lines a second so that a flood cannot fill a disk; the
//! lines left out are counted and told in one summary line when the next second starts
//! (`N rejection lines suppressed`). Keys are shown as [`KeyDisplay`] says.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use floodgate_engine::insight::{Insight, KeyDisplay};
use tracing::Level;

/// How rejections are logged: the level (`None`: not at all), the most lines a second,
/// and how keys are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejectionLogConfig {
    /// The level of the lines; `None` writes none.
    pub level: Option<Level>,
    /// Most lines a second; beyond, lines are counted and summarized.
    pub per_second: u32,
    /// How a key is shown: as it is, truncated, or a keyed hash.
    pub keys: KeyDisplay,
}

impl Default for RejectionLogConfig {
    /// At DEBUG, at most 10 lines a second, keys as they are.
    fn default() -> Self {
        RejectionLogConfig {
            level: Some(Level::DEBUG),
            per_second: 10,
            keys: KeyDisplay::Plain,
        }
    }
}

/// What was rejected, for the line's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// A rate policy rejected the request.
    Rejected,
    /// A dry-run rate policy would have.
    WouldReject,
    /// A `max_in_flight` policy rejected it (its queue full or timed out).
    InFlight,
    /// A dry-run `max_in_flight` policy would have.
    WouldRejectInFlight,
}

/// The rejection log of one limiter (see the module's documentation).
pub struct RejectionLog {
    config: RejectionLogConfig,
    /// Shows keys (its hash key is drawn when the first log is made, and kept by its
    /// successors: a hashed key reads the same across reloads).
    shown: Arc<Insight>,
    start: Instant,
    /// The second (since `start`) the counts are of.
    second: AtomicU64,
    written: AtomicU32,
    suppressed: AtomicU64,
}

impl std::fmt::Debug for RejectionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RejectionLog")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Emit an event at a level chosen at run time (tracing's macros take a constant one).
macro_rules! event_at {
    ($level:expr, $($rest:tt)+) => {
        match $level {
            Level::ERROR => tracing::error!($($rest)+),
            Level::WARN => tracing::warn!($($rest)+),
            Level::INFO => tracing::info!($($rest)+),
            Level::DEBUG => tracing::debug!($($rest)+),
            Level::TRACE => tracing::trace!($($rest)+),
        }
    };
}

impl RejectionLog {
    /// A log as `config` says.
    pub fn new(config: RejectionLogConfig) -> RejectionLog {
        RejectionLog {
            config,
            shown: Arc::new(Insight::new("log", config.keys)),
            start: Instant::now(),
            second: AtomicU64::new(0),
            written: AtomicU32::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// A log as `config` says, replacing `prev` (a reloaded configuration): with the
    /// same key display it shows keys as `prev` did.
    pub fn succeeding(config: RejectionLogConfig, prev: &RejectionLog) -> RejectionLog {
        let mut log = RejectionLog::new(config);
        if prev.config.keys == config.keys {
            log.shown = prev.shown.clone();
        }
        log
    }

    /// `key` as this log shows keys (plain, truncated or its keyed hash).
    pub(crate) fn show_key(&self, key: &[u8]) -> String {
        self.shown.show_key(key)
    }

    /// Most lines a second.
    pub fn per_second(&self) -> u32 {
        self.config.per_second
    }

    /// Log one rejection of `key` by `policy` (or count it as suppressed).
    pub(crate) fn log(&self, what: Rejection, policy: &str, key: &[u8]) {
        let Some(level) = self.config.level else {
            return;
        };
        if !enabled_at(level) {
            return;
        }
        let now = self.start.elapsed().as_secs();
        let seen = self.second.load(Ordering::Relaxed);
        if now != seen
            && self
                .second
                .compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.written.store(0, Ordering::Relaxed);
            let n = self.suppressed.swap(0, Ordering::Relaxed);
            if n > 0 {
                event_at!(
                    level,
                    suppressed = n,
                    per_second = self.config.per_second,
                    "{n} rejection lines suppressed (over the rejection log's lines per second)"
                );
            }
        }
        if self.written.fetch_add(1, Ordering::Relaxed) >= self.config.per_second {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let key = self.shown.show_key(key);
        match what {
            Rejection::Rejected => event_at!(level, policy, key = %key, "rejected"),
            Rejection::WouldReject => event_at!(level, policy, key = %key, "dry run: would reject"),
            Rejection::InFlight => event_at!(level, policy, key = %key, "rejected: in flight"),
            Rejection::WouldRejectInFlight => {
                event_at!(level, policy, key = %key, "dry run: would reject (in flight)")
            }
        }
    }
}

/// Whether an event at `level` from this module would be recorded (the subscriber's
/// filter), so that filtered-out lines are not counted as written.
fn enabled_at(level: Level) -> bool {
    match level {
        Level::ERROR => tracing::enabled!(Level::ERROR),
        Level::WARN => tracing::enabled!(Level::WARN),
        Level::INFO => tracing::enabled!(Level::INFO),
        Level::DEBUG => tracing::enabled!(Level::DEBUG),
        Level::TRACE => tracing::enabled!(Level::TRACE),
    }
}
