//! Keys the caller gives with a request: a surface that knows the client better than the
//! request shows it (a Python app passing its user id) puts a [`ProvidedKeys`] in the
//! request's extensions, and a policy keyed by [`KeySource::provided`] counts under it.

use super::{KeyError, KeyExtractor, KeyPart, KeySource, RequestInfo};

/// The keys a caller gives with one request (a request extension): one for every policy
/// keyed by [`KeySource::provided`], and keys by policy name that take precedence over it.
/// Keys are arbitrary bytes, at least one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProvidedKeys {
    /// The key of every provided-key policy without a key of its own below.
    pub any: Option<Vec<u8>>,
    /// `(policy name, key)` pairs.
    pub by_policy: Vec<(String, Vec<u8>)>,
}

impl ProvidedKeys {
    /// The key given for the policy named `name`: its own, else the common one.
    pub fn for_policy(&self, name: &str) -> Option<&[u8]> {
        self.by_policy
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, k)| k.as_slice())
            .or(self.any.as_deref())
    }
}

/// The extractor of [`KeySource::provided`]: reads the policy's key from the request's
/// [`ProvidedKeys`].
struct Provided {
    policy: String,
}

impl KeyExtractor for Provided {
    fn extract(&self, req: &RequestInfo<'_>) -> Result<Vec<u8>, KeyError> {
        let key = req
            .extensions
            .get::<ProvidedKeys>()
            .and_then(|k| k.for_policy(&self.policy))
            .ok_or_else(|| {
                KeyError::Custom(format!("no key provided for policy {:?}", self.policy))
            })?;
        if key.is_empty() {
            return Err(KeyError::Custom(format!(
                "the key provided for policy {:?} is empty",
                self.policy
            )));
        }
        Ok(key.to_vec())
    }
}

impl KeySource {
    /// The key the caller provides for the policy named `policy` in the request's
    /// [`ProvidedKeys`]; a request without one has no key (the limiter's `missing_key`
    /// decides it).
    pub fn provided(policy: impl Into<String>) -> KeySource {
        KeySource(vec![KeyPart::provided(policy)])
    }
}

impl KeyPart {
    /// The part of [`KeySource::provided`], to join with others (`["provided", "ip"]`).
    pub fn provided(policy: impl Into<String>) -> KeyPart {
        KeyPart::Custom(std::sync::Arc::new(Provided {
            policy: policy.into(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Extensions, HeaderMap, Method, Uri};

    fn extract(ext: &Extensions, policy: &str) -> Result<Vec<u8>, KeyError> {
        let (m, u, h) = (Method::GET, Uri::from_static("/"), HeaderMap::new());
        let info = RequestInfo {
            method: &m,
            uri: &u,
            headers: &h,
            extensions: ext,
            client_ip: Err(KeyError::NoPeer),
        };
        KeySource::provided(policy).extract(&info, &Default::default(), 256)
    }

    #[test]
    fn own_key_first_then_the_common_one_then_an_error() {
        let mut ext = Extensions::new();
        assert!(matches!(extract(&ext, "p"), Err(KeyError::Custom(m)) if m.contains("\"p\"")));
        ext.insert(ProvidedKeys {
            any: Some(b"alice".to_vec()),
            by_policy: vec![("q".into(), b"team-7".to_vec()), ("e".into(), Vec::new())],
        });
        assert_eq!(extract(&ext, "p").unwrap(), b"alice");
        assert_eq!(extract(&ext, "q").unwrap(), b"team-7");
        assert!(matches!(extract(&ext, "e"), Err(KeyError::Custom(m)) if m.contains("empty")));
    }
}
