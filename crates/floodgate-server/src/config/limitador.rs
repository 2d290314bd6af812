//! Limitador's limits file, read as it is: a YAML list of limits, each with `namespace`,
//! `max_value`, `seconds`, `conditions`, `variables` and an optional `name`.
//!
//! A file whose top level is a list is Limitador's (floodgate's own file is a map). Each
//! limit becomes a [`SelectorDef`] of the domain named by its `namespace`:
//!
//! * a condition `descriptors[N]['KEY'] == 'VALUE'` (also `descriptors[N].KEY`, either
//!   quote, either side of `==`) requires the entry `KEY` with `VALUE` in the request's
//!   descriptor `N`; with `!=`, the entry `KEY` with another value (an absent entry
//!   fails both, as in Limitador); Limitador 1.x's form `KEY == "VALUE"` reads as
//!   descriptor 0;
//! * a variable `descriptors[N]['KEY']` (or `descriptors[N].KEY`, or 1.x's bare `KEY`)
//!   requires the entry `KEY`, and each distinct value has its own counter;
//! * `max_value` requests per `seconds` is a fixed window: the guarantee Limitador gives.
//!
//! Any other condition (a function, `&&`, `||`, an ordering, a comparison of two entries)
//! has no descriptor form: the error names the limit and the condition.

use std::collections::BTreeMap;
use std::path::Path;

use floodgate_core::Kind;
use serde::Deserialize;

use super::rules::{LimitDef, limit};
use super::{Config, ConfigFileError};
use crate::file::{DomainFile, FileConfig, RateLimitFile};

/// One limit as Limitador's file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitFile {
    namespace: String,
    max_value: u64,
    seconds: u64,
    #[serde(default)]
    name: Option<String>,
    /// Limitador keeps an optional `id` beside the name; it is read and not used.
    #[serde(default)]
    #[allow(dead_code)]
    id: Option<String>,
    /// `conditions:` left empty is YAML's null: no condition.
    #[serde(default)]
    conditions: Option<Vec<String>>,
    #[serde(default)]
    variables: Option<Vec<String>>,
}

/// One Limitador limit, checked: which request descriptor it reads, the entries that
/// select it, the entries whose values key its counters, and its fixed window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorDef {
    /// The position of the request descriptor the limit reads (Limitador's
    /// `descriptors[N]`). A request with fewer descriptors is not limited by it.
    pub descriptor: usize,
    /// Entries the descriptor must hold, with (or, for `!=`, without) a value.
    pub conditions: Vec<Condition>,
    /// Keys the descriptor must hold; each distinct tuple of their values (in this
    /// order) is counted on its own.
    pub variables: Vec<String>,
    /// `max_value` per `seconds`, a fixed window; `max_value: 0` blocks.
    pub limit: LimitDef,
    /// What the metrics and the limit's identity call it: `key=value` (`key!=value`) of
    /// each condition and each variable's key, joined by `.`, then `/SECONDSs` (`*` for
    /// none).
    pub label: String,
}

/// One condition of a selector: the entry `key` present, its value `value` (`equal`) or
/// not.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Condition {
    /// The entry's key.
    pub key: String,
    /// The value compared.
    pub value: String,
    /// `==` (true) or `!=` (false).
    pub equal: bool,
}

impl Condition {
    /// Whether an entry of `value` meets the condition.
    pub fn holds(&self, value: &str) -> bool {
        (value == self.value) == self.equal
    }
}

/// Whether `text` is a Limitador limits file: its YAML value is a list (of limits), where
/// floodgate's own file is a mapping.
pub fn detect(text: &str) -> bool {
    floodgate_engine::config::yaml_is_list(text)
}

/// A condition or variable of one descriptor entry: descriptor position and key.
type Ref = (usize, String);

/// Read a Limitador limits file: the config it makes (each namespace a domain whose
/// rules are selectors; every other setting at its default).
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigFileError> {
    let list: Vec<LimitFile> = floodgate_engine::config::from_yaml(path, text)?;
    let mut selectors: BTreeMap<String, Vec<SelectorDef>> = BTreeMap::new();
    for (i, l) in list.iter().enumerate() {
        let at = match &l.name {
            Some(n) => format!("limit {} ({n:?})", i + 1),
            None => format!("limit {}", i + 1),
        };
        let sel = selector(&at, l).map_err(|message| ConfigFileError::Invalid {
            path: path.to_path_buf(),
            at: at.clone(),
            message,
        })?;
        let domain = selectors.entry(l.namespace.clone()).or_default();
        if let Some(j) = domain.iter().position(|s| same_counter(s, &sel)) {
            return Err(ConfigFileError::Invalid {
                path: path.to_path_buf(),
                at,
                message: format!(
                    "the same namespace, seconds, conditions and variables as limit {}: Limitador counts them as one limit",
                    position_of(&list, &l.namespace, j) + 1
                ),
            });
        }
        domain.push(sel);
    }
    let file = FileConfig {
        domains: selectors
            .keys()
            .map(|d| DomainFile {
                domain: d.clone(),
                descriptors: Vec::new(),
            })
            .collect(),
        ..FileConfig::default()
    };
    let mut cfg = super::compile(file).map_err(|(at, message)| ConfigFileError::Invalid {
        path: path.to_path_buf(),
        at,
        message,
    })?;
    let windows = selectors.values().flatten().count();
    if windows > 0 {
        cfg.notes.push(format!(
            "{}: {windows} Limitador limits as fixed windows (max_value per seconds), the guarantee Limitador gives: a client may send up to twice max_value across a window boundary; floodgate's own format offers algorithm: sliding-counter or gcra for no boundary burst (docs/from-limitador.md)",
            path.display()
        ));
    }
    cfg.rules.selectors = selectors;
    Ok(cfg)
}

/// The index in `list` of the `j`th limit of `namespace`.
fn position_of(list: &[LimitFile], namespace: &str, j: usize) -> usize {
    list.iter()
        .enumerate()
        .filter(|(_, l)| l.namespace == namespace)
        .nth(j)
        .map_or(0, |(i, _)| i)
}

/// Limitador's identity of a limit: the same window, conditions and variables.
fn same_counter(a: &SelectorDef, b: &SelectorDef) -> bool {
    let mut ca = a.conditions.clone();
    let mut cb = b.conditions.clone();
    ca.sort();
    cb.sort();
    a.limit.window == b.limit.window
        && a.descriptor == b.descriptor
        && ca == cb
        && a.variables == b.variables
}

fn selector(at: &str, l: &LimitFile) -> Result<SelectorDef, String> {
    if l.namespace.trim().is_empty() {
        return Err("namespace must not be empty (it is the domain requests carry)".into());
    }
    if l.seconds == 0 {
        return Err("seconds must be at least 1, got 0".into());
    }
    let mut on: Option<usize> = None;
    let mut same_descriptor = |what: &str, n: usize| -> Result<(), String> {
        match on {
            Some(m) if m != n => Err(format!(
                "{what} reads descriptors[{n}] and another reads descriptors[{m}]: a limit across descriptors has no descriptor rule form; write one limit per descriptor"
            )),
            _ => {
                on = Some(n);
                Ok(())
            }
        }
    };
    let mut conditions = Vec::new();
    for c in l.conditions.iter().flatten() {
        let (n, cond) = condition(c).map_err(|why| format!("condition {c:?}: {why}"))?;
        same_descriptor(&format!("condition {c:?}"), n)?;
        conditions.push(cond);
    }
    let mut variables = Vec::new();
    for v in l.variables.iter().flatten() {
        let (n, key) = variable(v).map_err(|why| format!("variable {v:?}: {why}"))?;
        same_descriptor(&format!("variable {v:?}"), n)?;
        if variables.contains(&key) {
            return Err(format!("variable {v:?} is given twice"));
        }
        variables.push(key);
    }
    let mut parts: Vec<String> = conditions
        .iter()
        .map(|c| {
            let op = if c.equal { "=" } else { "!=" };
            format!("{}{op}{}", c.key, c.value)
        })
        .collect();
    parts.extend(variables.iter().cloned());
    let label = format!(
        "{}/{}s",
        if parts.is_empty() {
            "*".to_string()
        } else {
            parts.join(".")
        },
        l.seconds
    );
    let rl = RateLimitFile {
        name: l.name.clone(),
        requests_per_unit: Some(l.max_value),
        window: Some(format!("{}s", l.seconds)),
        algorithm: Some(Kind::FixedWindow.name().to_string()),
        ..RateLimitFile::default()
    };
    let limit = limit(at, &rl, Kind::FixedWindow, label.clone()).map_err(|(_, m)| m)?;
    Ok(SelectorDef {
        descriptor: on.unwrap_or(0),
        conditions,
        variables,
        limit,
        label,
    })
}

/// Why a condition has no descriptor form, from the operators it uses.
fn unmappable(text: &str) -> Option<&'static str> {
    let outside = outside_quotes(text);
    if outside.contains("&&") {
        Some(
            "`&&` inside one condition: give each equality as its own condition (conditions are all required)",
        )
    } else if outside.contains("||") {
        Some("`||` has no descriptor rule form: write one limit per alternative")
    } else if outside.contains('(') {
        Some(
            "a function call has no descriptor rule form: only KEY == 'VALUE' and KEY != 'VALUE' map",
        )
    } else if [">=", "<=", ">", "<"].iter().any(|op| outside.contains(op)) {
        Some("an ordering comparison has no descriptor rule form: only == and != map")
    } else if outside.contains(" in ") || outside.trim_start().starts_with('!') {
        Some("only KEY == 'VALUE' and KEY != 'VALUE' map onto a descriptor rule")
    } else {
        None
    }
}

/// `text` with every quoted literal emptied, so operators inside values are not seen.
fn outside_quotes(text: &str) -> String {
    let mut out = String::new();
    let mut quote = None;
    for ch in text.chars() {
        match quote {
            Some(q) if ch == q => {
                quote = None;
                out.push(ch);
            }
            Some(_) => {}
            None => {
                if ch == '\'' || ch == '"' {
                    quote = Some(ch);
                }
                out.push(ch);
            }
        }
    }
    out
}

/// `KEY == 'VALUE'` or `KEY != 'VALUE'` in either form: the descriptor it reads and the
/// condition.
fn condition(text: &str) -> Result<(usize, Condition), String> {
    if let Some(why) = unmappable(text) {
        return Err(why.into());
    }
    let outside = outside_quotes(text);
    if outside.matches("==").count() + outside.matches("!=").count() != 1 {
        return Err("expected one KEY == 'VALUE' (or !=) comparison".into());
    }
    let (at, equal) = op_outside_quotes(text).ok_or("expected KEY == 'VALUE'")?;
    let (left, right) = (text[..at].trim(), text[at + 2..].trim());
    let cond = |(n, key): Ref, value: String| Ok((n, Condition { key, value, equal }));
    match (literal(left), literal(right)) {
        (None, Some(v)) => cond(entry(left, true)?, v?),
        (Some(v), None) => cond(entry(right, true)?, v?),
        (Some(_), Some(_)) => Err("compares two literals: no entry to match".into()),
        (None, None) => Err(
            "compares two entries (or an unquoted value): descriptor rules match an entry against a quoted value"
                .into(),
        ),
    }
}

/// The byte offset of the first `==` or `!=` outside quotes, and whether it is `==`.
fn op_outside_quotes(text: &str) -> Option<(usize, bool)> {
    let bytes = text.as_bytes();
    let mut quote = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if (b == b'=' || b == b'!') && bytes.get(i + 1) == Some(&b'=') => {
                return Some((i, b == b'='));
            }
            None => {}
        }
        i += 1;
    }
    None
}

/// A quoted string: `Some(Ok(value))`; `None` when `s` is not quoted.
fn literal(s: &str) -> Option<Result<String, String>> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = s.strip_prefix(q)?;
    Some(match inner.strip_suffix(q) {
        Some(v) if !v.contains(q) && !v.contains('\\') => Ok(v.to_string()),
        Some(_) => Err("escape sequences and embedded quotes in a value are not supported".into()),
        None => Err(format!("the value {s} has no closing quote")),
    })
}

/// A variable: the entry it reads.
fn variable(text: &str) -> Result<Ref, String> {
    if outside_quotes(text).contains('(') {
        return Err("a function call has no descriptor form: a variable names one entry".into());
    }
    entry(text.trim(), false)
}

/// `descriptors[N]['KEY']`, `descriptors[N]["KEY"]`, `descriptors[N].KEY`, or Limitador
/// 1.x's bare `KEY` (descriptor 0).
fn entry(s: &str, in_condition: bool) -> Result<Ref, String> {
    let Some(rest) = s.strip_prefix("descriptors") else {
        // 1.x: the whole identifier is the key
        let bare = !s.is_empty()
            && !s.contains(['[', ']', '\'', '"', ' ', '\t', '=', '!'])
            && !s.starts_with('.');
        return if bare {
            Ok((0, s.to_string()))
        } else if in_condition {
            Err(format!(
                "{s:?} is not an entry: expected descriptors[N]['KEY'] or descriptors[N].KEY"
            ))
        } else {
            Err("expected descriptors[N]['KEY'] or descriptors[N].KEY".into())
        };
    };
    let rest = rest.trim_start();
    let rest = rest
        .strip_prefix('[')
        .ok_or("expected descriptors[N] with N a descriptor position")?;
    let (n, rest) = rest
        .split_once(']')
        .ok_or("expected descriptors[N] with N a descriptor position")?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| format!("descriptors[{n}]: the position must be a number such as 0"))?;
    let rest = rest.trim();
    let key = if let Some(k) = rest.strip_prefix('.') {
        let ok = !k.is_empty()
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !k.starts_with(|c: char| c.is_ascii_digit());
        if !ok {
            return Err(format!(
                "descriptors[{n}].{k}: a key with other characters than letters, digits and _ is written descriptors[{n}]['{k}']"
            ));
        }
        k.to_string()
    } else if let Some(inner) = rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        match literal(inner.trim()) {
            Some(k) => k?,
            None => return Err(format!("descriptors[{n}][{inner}]: the key must be quoted")),
        }
    } else {
        return Err(format!(
            "descriptors[{n}] must be followed by ['KEY'] or .KEY"
        ));
    };
    if key.is_empty() {
        return Err("the key must not be empty".into());
    }
    Ok((n, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_in_each_form_name_their_entry() {
        let ok = [
            (
                "descriptors[0]['req.method'] == 'POST'",
                0,
                "req.method",
                "POST",
                true,
            ),
            (
                "descriptors[0][\"req.method\"] == \"GET\"",
                0,
                "req.method",
                "GET",
                true,
            ),
            (
                "descriptors[1].req_method == 'GET'",
                1,
                "req_method",
                "GET",
                true,
            ),
            ("'GET' == descriptors[0].m", 0, "m", "GET", true),
            ("req.method == \"GET\"", 0, "req.method", "GET", true),
            ("x == 'a != b && c'", 0, "x", "a != b && c", true),
            ("descriptors[0]['k'] == ''", 0, "k", "", true),
            (
                "descriptors[0]['req.path'] != '/json'",
                0,
                "req.path",
                "/json",
                false,
            ),
            ("req.path != \"/json\"", 0, "req.path", "/json", false),
        ];
        for (c, n, key, value, equal) in ok {
            let cond = Condition {
                key: key.into(),
                value: value.into(),
                equal,
            };
            assert_eq!(condition(c), Ok((n, cond)), "{c}");
        }
        let vars = [
            ("descriptors[0]['user_id']", 0, "user_id"),
            ("descriptors[2].user_id", 2, "user_id"),
            ("user_id", 0, "user_id"),
            (
                "per_hostname_per_second_burst",
                0,
                "per_hostname_per_second_burst",
            ),
        ];
        for (v, n, k) in vars {
            assert_eq!(variable(v), Ok((n, k.to_string())), "{v}");
        }
    }

    #[test]
    fn detection_reads_the_yaml_value() {
        assert!(detect("---\n- namespace: a\n"));
        assert!(detect("# limits\n\n-\n  namespace: a\n"));
        assert!(detect("[]\n"));
        assert!(!detect("domain: a\n"));
        assert!(!detect("---\ndomains: []\n"));
        assert!(!detect(""));
        // a bare CR ends a comment line, as in YAML: the list after it is the content
        assert!(detect("    # limits\r\r[]\n"));
        assert!(detect("# limits\r\n- namespace: a\r\n"));
        // an anchor on the list is still the list
        assert!(detect("&limits []\n"));
        assert!(detect("--- &limits\n- namespace: a\n"));
        // a no-break space before a list is content, not indentation
        assert!(!detect("\u{a0}- namespace: a\n"));
        // too deep to read: not read as a list (from_yaml refuses it with its place)
        assert!(!detect(&"[".repeat(100)));
    }
}
