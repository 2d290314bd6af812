//! The arguments of nginx's rate limit directives, checked: rates, sizes, numbers,
//! flags, statuses and `*_zone` definitions. A bad value is an error naming the
//! directive and its line.

use super::keys::key;
use super::model::Zone;
use super::parse::Directive;
use super::report::{ConvertError, Note};

/// nginx's rate: `Nr/s` or `Nr/m`, N a whole number.
fn rate(d: &Directive, v: &str) -> Result<String, ConvertError> {
    let bad = || {
        ConvertError::Directive(Note::at(
            d,
            format!("rate={v}: expected Nr/s or Nr/m with N a whole number"),
        ))
    };
    let (n, unit) = if let Some(n) = v.strip_suffix("r/s") {
        (n, "s")
    } else if let Some(n) = v.strip_suffix("r/m") {
        (n, "min")
    } else {
        return Err(bad());
    };
    let n: u64 = n.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    Ok(format!("{n}/{unit}"))
}

/// A size (`10m`, `64k`, `1048576`) in bytes.
fn size(d: &Directive, v: &str) -> Result<u64, ConvertError> {
    let (n, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1024),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1024 * 1024),
        Some(b'g' | b'G') => (&v[..v.len() - 1], 1024 * 1024 * 1024),
        _ => (v, 1),
    };
    n.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| {
            ConvertError::Directive(Note::at(
                d,
                format!("zone size {v:?}: expected a size such as 10m or 64k"),
            ))
        })
}

pub(super) fn err(d: &Directive, m: impl Into<String>) -> ConvertError {
    ConvertError::Directive(Note::at(d, m))
}

pub(super) fn number(d: &Directive, what: &str, v: &str) -> Result<u64, ConvertError> {
    v.parse()
        .map_err(|_| err(d, format!("{what}={v}: expected a whole number")))
}

/// `on` or `off`.
pub(super) fn flag(d: &Directive) -> Result<bool, ConvertError> {
    match d.args.as_slice() {
        [v] if v == "on" => Ok(true),
        [v] if v == "off" => Ok(false),
        _ => Err(err(d, "expected on or off")),
    }
}

pub(super) fn status(d: &Directive) -> Result<u16, ConvertError> {
    match d.args.as_slice() {
        [v] => v
            .parse::<u16>()
            .ok()
            .filter(|s| (400..=599).contains(s))
            .ok_or_else(|| err(d, format!("{v}: expected a status from 400 to 599"))),
        _ => Err(err(d, "expected one status code")),
    }
}

/// A zone directive: `KEY zone=NAME:SIZE [rate=R]`.
pub(super) fn zone(d: &Directive, with_rate: bool) -> Result<(String, Zone), ConvertError> {
    let Some(key_text) = d.args.first() else {
        return Err(err(d, "expected a key, zone=NAME:SIZE and rate=R"));
    };
    let key = key(key_text).map_err(|m| err(d, m))?;
    let mut name = None;
    let mut bytes = 0;
    let mut r = None;
    for a in &d.args[1..] {
        if let Some(z) = a.strip_prefix("zone=") {
            let Some((n, s)) = z.split_once(':') else {
                return Err(err(d, format!("{a}: expected zone=NAME:SIZE")));
            };
            name = Some(n.to_string());
            bytes = size(d, s)?;
        } else if let Some(v) = a.strip_prefix("rate=").filter(|_| with_rate) {
            r = Some(rate(d, v)?);
        } else if a == "sync" {
            // nginx Plus' zone synchronisation: the store is the way to share
        } else {
            return Err(err(d, format!("unknown parameter {a:?}")));
        }
    }
    let Some(name) = name else {
        return Err(err(d, "no zone=NAME:SIZE"));
    };
    if with_rate && r.is_none() {
        return Err(err(d, "no rate=Nr/s or rate=Nr/m"));
    }
    Ok((
        name,
        Zone {
            key,
            key_text: key_text.clone(),
            rate: r,
            size: bytes,
        },
    ))
}
