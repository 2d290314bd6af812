//! The top-keys table as text, from `/admin/api/top`'s JSON: what `floodgate top`
//! prints. Every string from the answer (keys, policy names) goes through [`printable`]
//! first: a key is the client's bytes, and a terminal would act on the escape sequences
//! one may hold.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

/// `s` safe to print on a terminal: control characters (C0, DEL, C1) and the bidi
/// controls that reorder what follows (U+200E, U+200F, U+202A to U+202E, U+2066 to
/// U+2069) written as `\u{1b}`-style escapes (`\t`, `\n`, `\r` as such), and `\` as
/// `\\`, so an escape in the output is always one the key held. `Borrowed` when there
/// is nothing to escape.
pub fn printable(s: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        c.is_control()
            || c == '\\'
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Render `/admin/api/top`'s answer as one table per policy: rank, key, denials and
/// their error, then the keys by admitted cost. Errors name what the JSON lacks.
pub fn top_table(top: &Value) -> Result<String, String> {
    let text = |v: &Value| printable(v.as_str().unwrap_or("?")).into_owned();
    let policies = top["policies"]
        .as_array()
        .ok_or("the answer has no \"policies\" list: is this a floodgate admin API?")?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "floodgate {} · top keys over the last {} minutes · keys {} · counts over by at most the error",
        text(&top["surface"]),
        num(&top["minutes"]),
        text(&top["key_display"]),
    );
    for p in policies {
        let name = printable(p["name"].as_str().ok_or("a policy without a name")?);
        for (which, label) in [("denied", "denials"), ("admitted", "admitted cost")] {
            let l = &p[which];
            let _ = writeln!(
                out,
                "\npolicy {name}: {label} ({} in view, error bound {})",
                num(&l["total"]),
                num(&l["bound"])
            );
            let keys = l["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
            if keys.is_empty() {
                let _ = writeln!(out, "  (none)");
                continue;
            }
            let shown: Vec<Cow<'_, str>> = keys
                .iter()
                .map(|k| printable(k["key"].as_str().unwrap_or("")))
                .collect();
            let width = shown
                .iter()
                .map(|k| k.chars().count())
                .max()
                .unwrap_or(3)
                .clamp(3, 48);
            let _ = writeln!(
                out,
                "  {:>3}  {:<width$}  {:>10}  {:>8}",
                "#",
                "key",
                label.split(' ').next().unwrap_or(label),
                "error"
            );
            for (i, (k, key)) in keys.iter().zip(&shown).enumerate() {
                let key: String = key.chars().take(48).collect();
                let _ = writeln!(
                    out,
                    "  {:>3}  {key:<width$}  {:>10}  {:>8}",
                    i + 1,
                    num(&k["count"]),
                    format!("±{}", num(&k["error"]))
                );
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn one_table_per_policy_and_kind() {
        let v = json!({"surface": "proxy", "minutes": 5, "key_display": "plain", "policies": [
            {"name": "api", "denied": {"total": 12, "bound": 0, "keys": [
                {"key": "mallory", "count": 10, "error": 0}, {"key": "bob", "count": 2, "error": 0}]},
             "admitted": {"total": 0, "bound": 0, "keys": []}}]});
        let t = super::top_table(&v).unwrap();
        assert!(t.contains("policy api: denials (12 in view"), "{t}");
        let first = t.lines().position(|l| l.contains("mallory")).unwrap();
        let second = t.lines().position(|l| l.contains("bob")).unwrap();
        assert!(first < second);
        assert!(t.contains("(none)"));
        assert!(
            super::top_table(&json!({"error": "x"}))
                .unwrap_err()
                .contains("policies")
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        use super::printable;
        assert_eq!(printable("alice@example.com"), "alice@example.com");
        assert_eq!(printable("naïve ключ 鍵"), "naïve ключ 鍵");
        assert_eq!(
            printable("\u{1b}[2J\u{1b}]0;x\u{7}"),
            "\\u{1b}[2J\\u{1b}]0;x\\u{7}"
        );
        assert_eq!(printable("a\tb\nc\rd"), "a\\tb\\nc\\rd");
        assert_eq!(printable("\u{9b}31m\u{7f}"), "\\u{9b}31m\\u{7f}");
        assert_eq!(printable("\u{202e}gnp.exe"), "\\u{202e}gnp.exe");
        // a backslash is doubled: an escape shown is always one the key held
        assert_eq!(printable("\\u{1b}"), "\\\\u{1b}");
        let v = json!({"surface": "server", "minutes": 5, "key_display": "plain", "policies": [
            {"name": "p\u{1b}[31m", "denied": {"total": 1, "bound": 0, "keys": [
                {"key": "\u{1b}[2J\u{1b}[31mevil", "count": 1, "error": 0}]},
             "admitted": {"total": 0, "bound": 0, "keys": []}}]});
        let t = super::top_table(&v).unwrap();
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
        assert!(t.contains("\\u{1b}[2J\\u{1b}[31mevil"), "{t}");
        assert!(t.contains("policy p\\u{1b}[31m"), "{t}");
    }
}
