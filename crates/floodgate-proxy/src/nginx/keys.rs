//! nginx key expressions (`$binary_remote_addr`, `$http_x_api_key$uri`, ...) as
//! floodgate policy keys.

/// What a key expression counts by, in the config's spelling (`ip`, `global`, `route`,
/// `header:NAME`), and a note when the mapping is close but not exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The key parts, in order; one part is written as a string, several as a list.
    pub parts: Vec<String>,
    /// Whether a request may lack the key (a header variable): nginx does not count a
    /// request whose key is empty.
    pub may_be_missing: bool,
    /// Per-address IP keys (nginx counts each IPv6 address apart).
    pub by_ip: bool,
    /// Why the mapping is approximate, if it is.
    pub approximate: Option<String>,
}

/// The variables of `expr` in order (`$name` or `${name}`); literal text between them
/// is dropped (it only separates the parts of one key).
fn variables(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let name: String = if let Some(inner) = rest.strip_prefix('{') {
            let end = inner.find('}').unwrap_or(inner.len());
            rest = inner.get(end + 1..).unwrap_or("");
            inner[..end].to_string()
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let n = rest[..end].to_string();
            rest = &rest[end..];
            n
        };
        out.push(name);
    }
    out
}

/// Map an nginx key expression, or say which variable has no floodgate key.
pub fn key(expr: &str) -> Result<Key, String> {
    let vars = variables(expr);
    let mut k = Key {
        parts: Vec::new(),
        may_be_missing: false,
        by_ip: false,
        approximate: None,
    };
    if vars.is_empty() {
        // a constant: one key for every request
        k.parts.push("global".into());
        return Ok(k);
    }
    for v in vars {
        let part = match v.as_str() {
            "binary_remote_addr" | "remote_addr" | "realip_remote_addr" => {
                k.by_ip = true;
                "ip".to_string()
            }
            "uri" | "document_uri" => "route".to_string(),
            "request_uri" => {
                k.approximate = Some(
                    "$request_uri is counted as the path without its query (floodgate's route key)"
                        .into(),
                );
                "route".to_string()
            }
            "host" | "server_name" | "http_host" => {
                k.may_be_missing = true;
                "header:host".to_string()
            }
            other => match other.strip_prefix("http_") {
                Some(h) if !h.is_empty() => {
                    k.may_be_missing = true;
                    format!("header:{}", h.replace('_', "-"))
                }
                _ => {
                    return Err(format!(
                        "variable ${other} has no floodgate key (keys are the client IP, the path, a request header or a constant; a map or geo variable that empties the key for some clients is an [allowlist] in floodgate)"
                    ));
                }
            },
        };
        if !k.parts.contains(&part) {
            k.parts.push(part);
        }
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_map_to_key_parts() {
        assert_eq!(key("$binary_remote_addr").unwrap().parts, ["ip"]);
        assert_eq!(
            key("$http_x_api_key$uri").unwrap().parts,
            ["header:x-api-key", "route"]
        );
        assert_eq!(
            key("${binary_remote_addr}:${uri}").unwrap().parts,
            ["ip", "route"]
        );
        assert_eq!(key("all").unwrap().parts, ["global"]);
        assert!(key("$http_x_api_key").unwrap().may_be_missing);
        assert!(key("$request_uri").unwrap().approximate.is_some());
        let e = key("$limit_key").unwrap_err();
        assert!(
            e.starts_with("variable $limit_key has no floodgate key"),
            "{e}"
        );
    }
}
