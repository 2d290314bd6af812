//! A key part in its config form (`ip`, `global`, `route`, `header:NAME`): the syntax of
//! the proxy's `key = ...` and of every surface that takes the same field.

use http::HeaderName;

use super::KeyPart;

impl KeyPart {
    /// A part in its config form: `ip`, `global`, `route` or `header:NAME` (the form of
    /// the proxy's `key = ...` and of the Python `Policy(key=...)`). The error names the
    /// part and what was expected.
    pub fn parse(s: &str) -> Result<KeyPart, String> {
        match s {
            "ip" => Ok(KeyPart::Ip),
            "global" => Ok(KeyPart::Global),
            "route" => Ok(KeyPart::Route),
            _ => match s.strip_prefix("header:") {
                Some(h) => HeaderName::from_bytes(h.trim().as_bytes())
                    .map(KeyPart::Header)
                    .map_err(|_| format!("key {s:?}: {h:?} is not a valid header name")),
                None => Err(format!(
                    "key {s:?}: expected ip, global, route or header:NAME"
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_and_errors() {
        assert!(matches!(KeyPart::parse("ip"), Ok(KeyPart::Ip)));
        assert!(matches!(KeyPart::parse("global"), Ok(KeyPart::Global)));
        assert!(matches!(KeyPart::parse("route"), Ok(KeyPart::Route)));
        assert!(
            matches!(KeyPart::parse("header:X-Api-Key"), Ok(KeyPart::Header(h)) if h == "x-api-key")
        );
        let e = KeyPart::parse("header:a b").unwrap_err();
        assert!(e.contains("not a valid header name"), "{e}");
        let e = KeyPart::parse("cookie").unwrap_err();
        assert!(
            e.contains("expected ip, global, route or header:NAME"),
            "{e}"
        );
    }
}
