//! Secrets out of what the admin API shows: credentials in URLs, and values of fields
//! whose name says they are secret.

/// What a redacted value reads.
pub const REDACTED: &str = "***";

/// Field names (any case, anywhere in the name) whose values are replaced whole.
const SECRET_NAMES: [&str; 5] = ["password", "passwd", "secret", "token", "credential"];

/// `url` with its userinfo (`user:password@`) replaced: `redis://***@host:6379/0`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://{REDACTED}{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}

/// Redact `v` in place: every string holding a URL with credentials ([`redact_url`]),
/// every value of a field named like a secret (`password`, `token`...).
pub fn redact(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) if s.contains("://") => *s = redact_url(s),
        Value::Array(a) => a.iter_mut().for_each(redact),
        Value::Object(o) => {
            for (k, v) in o.iter_mut() {
                let k = k.to_ascii_lowercase();
                if SECRET_NAMES.iter().any(|s| k.contains(s)) && !v.is_null() {
                    *v = Value::String(REDACTED.into());
                } else {
                    redact(v);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn credentials_and_secret_fields_are_replaced() {
        let mut v = json!({
            "store": "redis://user:hunter2@db:6379/0",
            "redis": {"url": "rediss://:pw@h", "password": "hunter2", "auth_token": 42},
            "upstream": "http://127.0.0.1:9000",
            "nodes": ["redis://a:b@n1:1"],
            "policy": [{"name": "api"}]
        });
        redact(&mut v);
        let s = v.to_string();
        assert!(
            !s.contains("hunter2") && !s.contains("pw@") && !s.contains("a:b"),
            "{s}"
        );
        assert_eq!(v["store"], "redis://***@db:6379/0");
        assert_eq!(v["redis"]["auth_token"], "***");
        assert_eq!(v["upstream"], "http://127.0.0.1:9000");
        assert_eq!(v["policy"][0]["name"], "api");
    }
}
