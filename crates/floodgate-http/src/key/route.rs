//! The key of [`KeyPart::Route`](super::KeyPart::Route): the request path as one bucket
//! per resource, whatever spelling of it a client sends.

use std::borrow::Cow;

/// The route key of `path`: the path without `;` parameters (RFC 3986 §3.3: `/r/item;x=1`
/// and `/r;v=2/item` are `/r/item`) and without trailing slashes (`/r/item/` is
/// `/r/item`); `/` (or a path of slashes only) stays `/`. Each `;` starts a segment's
/// parameters, which end at the next `/`. Case is kept (`/R/item` is another key), as
/// routes match paths case-sensitively. `Borrowed` when `path` needs neither change, the
/// common case: no allocation.
pub fn route_key(path: &str) -> Cow<'_, str> {
    let trimmed = path.trim_end_matches('/');
    if !trimmed.contains(';') {
        return match trimmed {
            "" if path.starts_with('/') => Cow::Borrowed("/"),
            "" => Cow::Borrowed(path),
            t => Cow::Borrowed(t),
        };
    }
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(segment.split(';').next().unwrap_or_default());
    }
    let kept = out.trim_end_matches('/').len();
    out.truncate(kept);
    if out.is_empty() && path.starts_with('/') {
        out.push('/');
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_a_path_share_a_key() {
        for (path, key) in [
            ("/", "/"),
            ("//", "/"),
            ("/r/item", "/r/item"),
            ("/r/item/", "/r/item"),
            ("/r/item//", "/r/item"),
            ("/r/item;x=1", "/r/item"),
            ("/r/item;x=1/", "/r/item"),
            ("/r/item;", "/r/item"),
            ("/r;v=2/item", "/r/item"),
            ("/r;a;b/item;c", "/r/item"),
            ("/;x", "/"),
            ("/R/item", "/R/item"),
            ("*", "*"),
            ("", ""),
        ] {
            assert_eq!(route_key(path), key, "{path:?}");
        }
        assert!(matches!(route_key("/r/item"), Cow::Borrowed(_)));
        assert!(matches!(route_key("/r/item/"), Cow::Borrowed(_)));
    }
}
