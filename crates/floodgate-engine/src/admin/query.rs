//! The admin API's query strings: `name=value` pairs joined by `&`, percent-decoded
//! (`+` is a space), each name at most once, within [`MAX_QUERY_BYTES`].

use super::{MAX_KEY_BYTES, MAX_QUERY_BYTES};

/// A parsed query string.
#[derive(Debug, Default)]
pub(super) struct Query {
    pairs: Vec<(String, Vec<u8>)>,
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decode `s` (`+` as a space).
fn decode(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let (Some(hi), Some(lo)) = (
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(format!(
                        "malformed percent-escape at byte {i} of {:?}",
                        s.chars().take(64).collect::<String>()
                    ));
                };
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

impl Query {
    /// Parse `q` (without the `?`).
    pub(super) fn parse(q: &str) -> Result<Query, String> {
        if q.len() > MAX_QUERY_BYTES {
            return Err(format!(
                "query string of {} bytes is longer than the {MAX_QUERY_BYTES} taken",
                q.len()
            ));
        }
        let mut pairs: Vec<(String, Vec<u8>)> = Vec::new();
        for part in q.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let name = String::from_utf8(decode(name)?)
                .map_err(|_| "a query parameter name is not UTF-8".to_string())?;
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(format!("query parameter {name:?} is given twice"));
            }
            pairs.push((name, decode(value)?));
        }
        Ok(Query { pairs })
    }

    /// Refuse parameters other than `allowed`.
    pub(super) fn only(&self, allowed: &[&str]) -> Result<(), String> {
        match self
            .pairs
            .iter()
            .find(|(n, _)| !allowed.contains(&n.as_str()))
        {
            Some((n, _)) => Err(format!(
                "unknown query parameter {:?}; this endpoint takes {}",
                n.chars().take(64).collect::<String>(),
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            )),
            None => Ok(()),
        }
    }

    /// The raw bytes of `name`.
    pub(super) fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// `name` as UTF-8 text.
    pub(super) fn text(&self, name: &str) -> Result<Option<&str>, String> {
        self.bytes(name)
            .map(|v| std::str::from_utf8(v).map_err(|_| format!("{name} is not UTF-8")))
            .transpose()
    }

    /// `name` as an integer in `range`, `default` when absent.
    pub(super) fn number(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<usize>,
        default: usize,
    ) -> Result<usize, String> {
        let Some(v) = self.text(name)? else {
            return Ok(default);
        };
        v.parse::<usize>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                format!(
                    "{name} must be a whole number from {} to {}, got {:?}",
                    range.start(),
                    range.end(),
                    v.chars().take(32).collect::<String>()
                )
            })
    }

    /// The lookup key: present, non-empty, at most [`MAX_KEY_BYTES`].
    pub(super) fn key(&self) -> Result<&[u8], String> {
        match self.bytes("key") {
            None => Err("key is required: /admin/api/key?policy=NAME&key=KEY".into()),
            Some([]) => Err("key is empty".into()),
            Some(k) if k.len() > MAX_KEY_BYTES => Err(format!(
                "key of {} bytes is longer than the {MAX_KEY_BYTES} taken",
                k.len()
            )),
            Some(k) => Ok(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_refuses_what_is_malformed() {
        let q = Query::parse("policy=api&key=a%20b+c%2F").unwrap();
        assert_eq!(q.text("policy").unwrap(), Some("api"));
        assert_eq!(q.bytes("key"), Some(&b"a b c/"[..]));
        assert!(
            Query::parse("key=%zz")
                .unwrap_err()
                .contains("percent-escape")
        );
        assert!(
            Query::parse("key=%4")
                .unwrap_err()
                .contains("percent-escape")
        );
        assert!(Query::parse("n=1&n=2").unwrap_err().contains("twice"));
        assert!(
            Query::parse(&"a".repeat(MAX_QUERY_BYTES + 1))
                .unwrap_err()
                .contains("longer")
        );
        let q = Query::parse("n=0&x=1&policy=%ff").unwrap();
        assert!(q.number("n", 1..=5, 3).unwrap_err().contains("from 1 to 5"));
        assert!(q.only(&["n"]).unwrap_err().contains("\"x\""));
        assert!(q.text("policy").unwrap_err().contains("UTF-8"));
        assert_eq!(Query::parse("").unwrap().number("n", 1..=5, 3), Ok(3));
        assert!(
            Query::parse("key=")
                .unwrap()
                .key()
                .unwrap_err()
                .contains("empty")
        );
    }
}
