//! What several targets share: a runtime, where a config error points, and a value's
//! `Debug` text without the source spans TOML records (a re-rendered file has other
//! spans).
#![allow(dead_code)]

use std::path::Path;
use std::sync::OnceLock;

use floodgate_engine::config::ConfigError;

/// One current-thread runtime for the whole run.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// How the format counts lines.
#[derive(Clone, Copy)]
pub enum Lines {
    /// TOML: lines end at `\n`; the column counts bytes.
    Toml,
    /// YAML (libyaml): `\r`, `\n`, NEL, LS and PS all break lines; the column counts
    /// characters.
    Yaml,
}

/// A config error is an `Invalid` one naming `path` and a line and column inside `src`,
/// and its text starts `FILE:LINE:COLUMN: `.
pub fn check_located(e: &ConfigError, path: &Path, src: &str, lines: Lines) {
    let ConfigError::Invalid {
        path: p,
        line,
        column,
        ..
    } = e
    else {
        panic!("parsing text gave a read error: {e}");
    };
    assert_eq!(p, path, "{e}");
    assert!(*line >= 1 && *column >= 1, "{e}");
    match lines {
        Lines::Toml => {
            let text: Vec<&str> = src.split('\n').collect();
            assert!(*line <= text.len(), "line past the end: {e}");
            assert!(
                *column <= text[*line - 1].len() + 1,
                "column past the end of line {line}: {e}"
            );
        }
        Lines::Yaml => {
            let breaks = src
                .chars()
                .filter(|c| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'))
                .count();
            assert!(*line <= breaks + 1, "line past the end: {e}");
            assert!(
                *column <= src.chars().count() + 1,
                "column past the end: {e}"
            );
        }
    }
    let place = format!("{}:{line}:{column}: ", path.display());
    assert!(e.to_string().starts_with(&place), "{e}");
}

/// `v`'s `Debug` text with every `span: A..B, ` (of `toml::Spanned`) left out.
pub fn unspanned(v: &impl std::fmt::Debug) -> String {
    let text = format!("{v:?}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find("span: ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "span: ".len()..];
        let len = after
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(after.len());
        if len > 0 && after[len..].starts_with(", ") {
            rest = &after[len + 2..];
        } else {
            out.push_str("span: ");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

pub mod server;
