//! Secrets out of what the admin API shows: credentials in URLs, values of fields whose
//! name says they are secret, and the keys of an allowlist (which bypass every limit).

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

/// Hex digits of SHA-256 an allowlisted key is shown as.
pub const KEY_FINGERPRINT_HEX: usize = 8;

/// The list of keys `allowlist.keys` as the admin API shows it: their count and, for
/// each, the first [`KEY_FINGERPRINT_HEX`] hex digits of its SHA-256 (enough to tell
/// which key is which, not to use one): `{"count": 2, "sha256": ["ba7816bf", ...]}`.
pub fn redact_keys(keys: &[serde_json::Value]) -> serde_json::Value {
    let prints: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| {
            let bytes = match k {
                serde_json::Value::String(s) => s.clone().into_bytes(),
                other => other.to_string().into_bytes(),
            };
            crate::insight::sha256::sha256_hex(&bytes, KEY_FINGERPRINT_HEX).into()
        })
        .collect();
    serde_json::json!({ "count": keys.len(), "sha256": prints })
}

/// Redact `v` in place: every string holding a URL with credentials ([`redact_url`]),
/// every value of a field named like a secret (`password`, `token`...), and the `keys`
/// list of a field named `allowlist` ([`redact_keys`]).
pub fn redact(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) if s.contains("://") => *s = redact_url(s),
        Value::Array(a) => a.iter_mut().for_each(redact),
        Value::Object(o) => {
            for (k, v) in o.iter_mut() {
                let k = k.to_ascii_lowercase();
                if k == "allowlist"
                    && let Some(Value::Array(keys)) = v.get("keys")
                {
                    let shown = redact_keys(keys);
                    v["keys"] = shown;
                }
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

    #[test]
    fn allowlisted_keys_are_counted_and_fingerprinted() {
        let mut v = json!({
            "allowlist": {"keys": ["abc", "internal-batch-key"], "ips": ["10.0.0.0/8"]},
            "policy": [{"name": "api", "key": "header:x-api-key"}]
        });
        redact(&mut v);
        let s = v.to_string();
        assert!(!s.contains("internal-batch-key"), "{s}");
        assert_eq!(v["allowlist"]["keys"]["count"], 2);
        assert_eq!(v["allowlist"]["keys"]["sha256"][0], "ba7816bf");
        assert_eq!(v["allowlist"]["ips"][0], "10.0.0.0/8");
        // an empty list is shown as a count of 0
        let mut v = json!({"allowlist": {"keys": []}});
        redact(&mut v);
        assert_eq!(v["allowlist"]["keys"], json!({"count": 0, "sha256": []}));
    }
}
