//! The config sections `floodgate proxy` and `floodgate server` share, defined once:
//! `[store]` with `[store.redis]` (and its `fault_policy`), `[fleet]` and `[headers]`
//! ([`StoreSection`], [`RedisSection`], [`FleetSection`], [`HeadersSection`]). Each surface
//! puts them in its own file type; the keys, defaults and error messages are these, in TOML
//! and YAML alike (the book's "Shared config sections" page is their reference).
//!
//! Values are checked while they are deserialized (a timeout above 0, a prefix without
//! braces, counts of at least 1, node addresses), so the format library knows where the
//! value is: [`from_toml`] and [`from_yaml`] turn every error into a [`ConfigError`] naming
//! the file, line, column and field:
//!
//! ```text
//! floodgate.toml:12:11: store.redis.timeout: a timeout of 0 would fail every request; give a duration above zero, e.g. "30s"
//! ```
//!
//! A renamed key is still read in its old spelling; the section notes a [`Renamed`] for
//! it, which the surface logs (and prints) when it loads the file.
//!
//! `[store]` resolves to one [`StoreSettings`] (defaults applied, compared on reload), and
//! both surfaces open their store through it ([`StoreSettings::open`]): in process, or on
//! Redis with the fleet's `hybrid` leases and the fault policy.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

mod fleet;
mod headers;
mod store;
mod store_settings;
#[cfg(test)]
mod tests;
#[cfg(feature = "watch")]
pub mod watch;
mod yaml_depth;

pub use fleet::{FleetNodes, FleetSection};
pub use headers::{HeadersSection, legacy_headers};
pub use store::{DEFAULT_MAX_KEYS, RedisSection, StoreKind, StoreSection, fault_policy_legacy};
pub use store_settings::{DEFAULT_RESP_MAX_KEYS, OpenedStore, StoreSettings};
pub use yaml_depth::MAX_YAML_FLOW_NESTING;

/// A config file that cannot be used: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("{path}: cannot read the config file: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A value (or the syntax) is wrong at a place in the file. Displayed as
    /// `FILE:LINE:COLUMN: FIELD: MESSAGE` (without `FIELD: ` when the error is not in one
    /// field, a syntax error say).
    #[error("{}:{line}:{column}: {}{message}", path.display(), field_prefix(field))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The field's path, `store.redis.timeout` or `policy[0].rate`; empty at the top.
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl ConfigError {
    /// An error at byte offset `at` of `src` (the file `path`), in `field`.
    pub fn at(path: &Path, src: &str, at: usize, field: &str, message: impl Into<String>) -> Self {
        let (line, column) = line_column(src, at);
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// An error in the top-level section `section` (`fleet`, `store`): located at its
    /// header (`[fleet]` in TOML, `fleet:` in YAML), or at 1:1 when the file has none.
    pub fn in_section(path: &Path, src: &str, section: &str, message: impl Into<String>) -> Self {
        ConfigError::at(
            path,
            src,
            section_offset(src, section).unwrap_or(0),
            section,
            message,
        )
    }

    /// The message without the place.
    pub fn message(&self) -> &str {
        match self {
            ConfigError::Read { message, .. } | ConfigError::Invalid { message, .. } => message,
        }
    }
}

/// The 1-based line and column of byte offset `at` in `src`.
pub fn line_column(src: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(src.len());
    while !src.is_char_boundary(at) {
        at -= 1;
    }
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(at, |i| at - i - 1) + 1;
    (line, column)
}

/// Where the top-level section `name` starts: a line `[name]`, `[name.…]` (TOML) or
/// `name:` (YAML), or a top-level `name = ` / `name.x = ` key.
fn section_offset(src: &str, name: &str) -> Option<usize> {
    let mut offset = 0;
    for line in src.split_inclusive('\n') {
        let l = line.trim_end();
        let header = l
            .strip_prefix('[')
            .map(|r| r.trim_start_matches('['))
            .and_then(|r| r.strip_prefix(name))
            .is_some_and(|r| r.starts_with(']') || r.starts_with('.'));
        let key = l.strip_prefix(name).is_some_and(|r| {
            let r = r.trim_start();
            r.starts_with(':') || r.starts_with('=') || r.starts_with('.')
        });
        if header || key {
            return Some(offset);
        }
        offset += line.len();
    }
    None
}

/// Every renamed key, `(old, new)`, as the book's renamed-keys table lists them: the old
/// spellings are still read (each noted as a [`Renamed`] when used).
pub const RENAMED_KEYS: &[(&str, &str)] = &[
    ("store = \"memory\"", "store.type = \"memory\""),
    (
        "store = \"redis://…\"",
        "store.type = \"redis\" and store.redis.url",
    ),
    ("max_keys", "store.max_keys"),
    ("redis", "store.redis"),
    ("deny.store_error", "store.redis.fault_policy"),
    ("deny.retry_after_jitter", "headers.retry_after_jitter"),
    ("headers.x_ratelimit", "headers.legacy"),
];

/// A key read in its old spelling: the file still works, and the load says what to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// The old key as written, e.g. `redis.timeout` or `headers.x_ratelimit`.
    pub old: String,
    /// What to write instead, e.g. `store.redis.timeout`.
    pub new: String,
}

impl Renamed {
    /// `old` is now written `new`.
    pub fn new(old: impl Into<String>, new: impl Into<String>) -> Renamed {
        Renamed {
            old: old.into(),
            new: new.into(),
        }
    }
}

impl fmt::Display for Renamed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is renamed: write {} (the old spelling still works)",
            self.old, self.new
        )
    }
}

/// Log each renamed key of `path` as a warning (`tracing`), and return them as lines for
/// a command to print: `FILE: OLD is renamed: write NEW (...)`.
pub fn warn_renamed(path: &Path, renamed: &[Renamed]) -> Vec<String> {
    renamed
        .iter()
        .map(|r| {
            let line = format!("{}: {r}", path.display());
            tracing::warn!(file = %path.display(), old = %r.old, new = %r.new, "{line}");
            line
        })
        .collect()
}

/// The field path of a `serde_path_to_error` path: `a.b[0].c`, leaving out the markers
/// `toml::Spanned` deserializes through.
fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if key.starts_with("$__") {
                    continue;
                }
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// Deserialize `src`, the TOML file `path`.
pub fn from_toml<T: DeserializeOwned>(path: &Path, src: &str) -> Result<T, ConfigError> {
    let located = |e: &toml::de::Error, field: &str| {
        let at = e.span().map_or(0, |s: Range<usize>| s.start);
        ConfigError::at(path, src, at, field, e.message().trim_end())
    };
    let de = toml::Deserializer::parse(src).map_err(|e| located(&e, ""))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = field_path(e.path());
        located(e.inner(), &field)
    })
}

/// Deserialize `src`, the YAML file `path` (an empty file is an empty mapping). Flow
/// collections (`[...]`, `{...}`) nested deeper than [`MAX_YAML_FLOW_NESTING`] are
/// refused before the parser runs (its cost grows with the square of that nesting),
/// with the line and column of the bracket one level too deep.
pub fn from_yaml<T: DeserializeOwned>(path: &Path, src: &str) -> Result<T, ConfigError> {
    if let Some(at) = yaml_depth::too_deep(src, MAX_YAML_FLOW_NESTING) {
        // placed as the YAML reader places its errors: characters, YAML's line breaks
        let (line, column) = yaml_place(src, at);
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            field: String::new(),
            message: format!(
                "flow collections ([...] or {{...}}) nested deeper than {MAX_YAML_FLOW_NESTING} levels are refused"
            ),
        });
    }
    // empty is only YAML's white space (space, tab, line breaks): `str::trim` would also
    // take a no-break space, which YAML reads as a value
    let blank = src.chars().all(|c| matches!(c, ' ' | '\t' | '\r' | '\n'));
    let src_or_empty = if blank { "{}" } else { src };
    let de = serde_norway::Deserializer::from_str(src_or_empty);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = field_path(e.path());
        let inner = e.inner();
        // serde_norway places an error raised after a scalar was read (a value checked
        // while deserialized) at the mapping holding it: find the value itself
        let (line, column) = yaml_value_place(src, e.path())
            .or_else(|| inner.location().map(|l| (l.line(), l.column())))
            .map_or((1, 1), |place| place.min(yaml_end(src)));
        let mut message = inner.to_string();
        if let Some(i) = message.rfind(" at line ") {
            message.truncate(i);
        }
        // serde_norway puts its own path first: ours is the one shown
        if let Some((p, rest)) = message.split_once(": ")
            && p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '[')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.[]".contains(c))
        {
            message = rest.to_string();
        }
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            field,
            message,
        }
    })
}

/// Whether the value of the YAML text `src` is a list (a sequence, tagged or not): read
/// as YAML, not by its first line, so that an anchor, a comment ended by a bare CR or
/// any other layout of one list is a list. False for a text that does not read, or whose
/// flow collections nest deeper than [`MAX_YAML_FLOW_NESTING`] (which
/// [`from_yaml`] refuses before reading).
pub fn yaml_is_list(src: &str) -> bool {
    use serde_norway::Value;
    fn list(v: &Value) -> bool {
        match v {
            Value::Sequence(_) => true,
            Value::Tagged(t) => list(&t.value),
            _ => false,
        }
    }
    yaml_depth::too_deep(src, MAX_YAML_FLOW_NESTING).is_none()
        && serde_norway::from_str::<Value>(src).is_ok_and(|v| list(&v))
}

/// The line and column of byte offset `at` in `src` as YAML counts them (see
/// [`yaml_end`]).
fn yaml_place(src: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(src.len());
    while !src.is_char_boundary(at) {
        at -= 1;
    }
    yaml_end(&src[..at])
}

/// The line and column just past the last character of `src`, counted as YAML counts
/// (a line ends at `\r\n`, `\r`, `\n`, NEL, LS or PS; columns count characters). The
/// parser places an error at the end of a file without a final line break one line
/// further, on a line the file does not have: the place shown is never past this one.
fn yaml_end(src: &str) -> (usize, usize) {
    let (mut line, mut column) = (1, 1);
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        if matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}') {
            (line, column) = (line + 1, 1);
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// The line and column of the value at `path` in a YAML file written in block style
/// (`key:` lines, nested by indentation); `None` for other shapes.
fn yaml_value_place(src: &str, path: &serde_path_to_error::Path) -> Option<(usize, usize)> {
    use serde_path_to_error::Segment;
    let keys: Vec<&str> = path
        .iter()
        .map(|s| match s {
            Segment::Map { key } => Some(key.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let mut lines = src.lines().enumerate();
    let mut parent_indent: Option<usize> = None;
    let mut found = None;
    for key in keys {
        found = None;
        for (n, line) in lines.by_ref() {
            let body = line.trim_start();
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            let indent = line.len() - body.len();
            if parent_indent.is_some_and(|p| indent <= p) {
                return None;
            }
            if let Some(rest) = body.strip_prefix(key)
                && let Some(value) = rest.strip_prefix(':')
            {
                // columns count characters, as the parser's do
                let value_at = line.len() - value.trim_start().len();
                let value_col = line[..value_at].chars().count();
                found = Some((n + 1, value_col + 1));
                parent_indent = Some(indent);
                break;
            }
        }
        found?;
    }
    found
}

/// Deserialize `src`, the text of `path`, as YAML (`.yaml`, `.yml`) or TOML (any other
/// name).
pub fn parse<T: DeserializeOwned>(path: &Path, src: &str) -> Result<T, ConfigError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml") => {
            from_yaml(path, src)
        }
        _ => from_toml(path, src),
    }
}

/// The file `src` (the text of `path`, YAML or TOML as [`parse`] reads it) as the admin
/// API shows it: its fields as JSON, secrets redacted
/// ([`crate::insight::redact`]); `null` when it does not parse.
#[cfg(feature = "admin")]
pub fn shown(path: &Path, src: &str) -> serde_json::Value {
    let mut v: serde_json::Value = parse(path, src).unwrap_or_default();
    crate::insight::redact::redact(&mut v);
    v
}
