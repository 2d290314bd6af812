//! Redis key names: `PREFIX{TAG}KIND:USERKEY`.
//!
//! * `TAG` is 16 hex digits of the SHA-1 of the user key. Redis Cluster hashes only the
//!   text between the first `{` and the next `}`; the prefix may not contain braces and
//!   the tag is hex, so whatever bytes the user key holds (binary, `{`, `}`, spaces) it
//!   cannot move the tag. Every key of one user key lands in one slot.
//! * `KIND` is the algorithm's name, so two algorithms on one user key never share state.
//! * `USERKEY` is the raw user key: the name is injective (fixed prefix, fixed-length tag,
//!   a kind without `:`, then the key), so two user keys can never collide even when their
//!   tags do.

use crate::error::Error;

/// Builds key names; validates the prefix once and the length of every key.
#[derive(Debug, Clone)]
pub struct KeySpace {
    prefix: Vec<u8>,
    max_len: usize,
}

impl KeySpace {
    /// A key space under `prefix` accepting user keys of up to `max_len` bytes.
    pub fn new(prefix: &str, max_len: usize) -> Result<KeySpace, Error> {
        if prefix.contains(['{', '}']) {
            return Err(Error::InvalidPrefix {
                prefix: prefix.to_string(),
            });
        }
        Ok(KeySpace {
            prefix: prefix.as_bytes().to_vec(),
            max_len,
        })
    }

    /// The prefix.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The hash tag of a user key (16 lowercase hex digits).
    pub fn tag(user: &[u8]) -> [u8; 16] {
        let digest = sha1_smol::Sha1::from(user).digest().bytes();
        let mut out = [0u8; 16];
        for (i, b) in digest[..8].iter().enumerate() {
            out[2 * i] = HEX[(b >> 4) as usize];
            out[2 * i + 1] = HEX[(b & 15) as usize];
        }
        out
    }

    /// The Redis key holding `kind`'s state for `user`.
    pub fn key(&self, kind: &str, user: &[u8]) -> Result<Vec<u8>, Error> {
        if user.len() > self.max_len {
            return Err(Error::KeyTooLong {
                len: user.len(),
                max: self.max_len,
            });
        }
        let mut k = Vec::with_capacity(self.prefix.len() + 20 + kind.len() + user.len());
        k.extend_from_slice(&self.prefix);
        k.push(b'{');
        k.extend_from_slice(&Self::tag(user));
        k.push(b'}');
        k.extend_from_slice(kind.as_bytes());
        k.push(b':');
        k.extend_from_slice(user);
        Ok(k)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The text Redis Cluster hashes for `key`: between the first `{` and the next `}`, when
/// that is non-empty; else the whole key.
pub fn hash_tag_of(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_keys_keep_the_tag_and_never_collide() {
        let ks = KeySpace::new("fg:", 4096).unwrap();
        let users: Vec<Vec<u8>> = vec![
            b"alice".to_vec(),
            b"{alice}".to_vec(),
            b"}{".to_vec(),
            b"a b c".to_vec(),
            vec![0, 255, b'{', b'}', 10],
            vec![b'x'; 4096],
            Vec::new(),
        ];
        let mut seen = std::collections::HashSet::new();
        for u in &users {
            let k = ks.key("gcra", u).unwrap();
            assert_eq!(hash_tag_of(&k), &KeySpace::tag(u), "{u:?}");
            assert!(seen.insert(k));
            assert_ne!(
                ks.key("fixed-window", u).unwrap(),
                ks.key("gcra", u).unwrap()
            );
        }
        let err = ks.key("gcra", &[b'x'; 4097]).unwrap_err().to_string();
        assert!(err.contains("4097 bytes") && err.contains("4096"), "{err}");
        assert!(KeySpace::new("a{b", 10).is_err());
        assert!(KeySpace::new("a}b", 10).is_err());
    }
}
