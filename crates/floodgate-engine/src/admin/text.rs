//! The top-keys table as text, from `/admin/api/top`'s JSON: what `floodgate top`
//! prints.

use serde_json::Value;

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Render `/admin/api/top`'s answer as one table per policy: rank, key, denials and
/// their error, then the keys by admitted cost. Errors name what the JSON lacks.
pub fn top_table(top: &Value) -> Result<String, String> {
    use std::fmt::Write as _;
    let policies = top["policies"]
        .as_array()
        .ok_or("the answer has no \"policies\" list: is this a floodgate admin API?")?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "floodgate {} · top keys over the last {} minutes · keys {} · counts over by at most the error",
        top["surface"].as_str().unwrap_or("?"),
        num(&top["minutes"]),
        top["key_display"].as_str().unwrap_or("?"),
    );
    for p in policies {
        let name = p["name"].as_str().ok_or("a policy without a name")?;
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
            let width = keys
                .iter()
                .map(|k| k["key"].as_str().unwrap_or("").chars().count())
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
            for (i, k) in keys.iter().enumerate() {
                let key: String = k["key"].as_str().unwrap_or("").chars().take(48).collect();
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
}
