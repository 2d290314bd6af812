//! The process log of the long-running commands (`floodgate proxy`, `floodgate server`):
//! one filter variable, one format flag, colour only on a terminal.
//!
//! * Filter: `FLOODGATE_LOG` (tracing's `EnvFilter` syntax: `info`,
//!   `warn,floodgate_proxy=debug`); when it is unset, `RUST_LOG`; when both are unset,
//!   `info`. A value that does not parse is an error naming the variable.
//! * Format: `--log-format text` (the default: one human line per event) or `json` (one
//!   JSON object per line: `timestamp` (RFC 3339, UTC), `level`, `target`, `message` and
//!   the event's fields).
//! * ANSI colour codes only when standard error is a terminal: never in a file or a pipe.

use std::io::IsTerminal;

use anyhow::{Result, anyhow};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The log line format (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter variables, first found wins.
pub const FILTER_VARS: [&str; 2] = ["FLOODGATE_LOG", "RUST_LOG"];

/// The filter from [`FILTER_VARS`] (`info` when neither is set).
fn filter() -> Result<EnvFilter> {
    for var in FILTER_VARS {
        if let Ok(value) = std::env::var(var) {
            return EnvFilter::try_new(&value)
                .map_err(|e| anyhow!("{var}={value:?} is not a log filter ({e}); e.g. {var}=info or {var}=warn,floodgate_proxy=debug"));
        }
    }
    Ok(EnvFilter::new("info"))
}

/// Set up the process log on standard error.
pub fn init(format: LogFormat) -> Result<()> {
    let filter = filter()?;
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let r = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
    };
    r.map_err(|e| anyhow!("cannot set up the log: {e}"))
}

/// Events as JSON lines.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut obj = serde_json::Map::new();
        obj.insert("timestamp".into(), timestamp.into());
        obj.insert("level".into(), meta.level().as_str().into());
        obj.insert("target".into(), meta.target().into());
        event.record(&mut JsonFields(&mut obj));
        let line = serde_json::Value::Object(obj).to_string();
        writer.write_str(&line)?;
        writer.write_char('\n')
    }
}

/// Collects an event's fields into a JSON object (numbers and booleans as such, the
/// rest as strings).
struct JsonFields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Visit for JsonFields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_the_message_and_fields() {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || Sink(out.clone()))
            .with_ansi(false)
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(generation = 3u64, file = "a \"b\".toml", "config reloaded");
        });
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["message"], "config reloaded");
        assert_eq!(v["generation"], 3);
        assert_eq!(v["file"], "a \"b\".toml");
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'), "{v}");
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
