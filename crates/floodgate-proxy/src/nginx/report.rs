//! What a conversion gives back: the TOML and its warnings, or the error naming the
//! directive floodgate cannot express.

use std::fmt;

use super::parse::{Directive, SyntaxError};

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
    pub(super) fn at(d: &Directive, message: impl Into<String>) -> Note {
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
