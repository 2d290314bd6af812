//! Traffic classes: a header (e.g. `x-priority`) whose value each request draws from a mix
//! (`critical=0.2,default=0.5,sheddable=0.3`), so that a limiter with priority classes
//! can be judged per class. Request `i`'s class is a pure function of the seed and `i`
//! ([`ClassMix::class_of`]), whatever order the workers take requests in.

use http::{HeaderName, HeaderValue};

use crate::error::LoadError;

/// Most classes in a mix (a class index is a `u8` in every record).
pub const MAX_CLASSES: usize = 16;

/// One class: its header value and its share of the requests.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    /// The class name, sent as the header's value.
    pub name: String,
    /// The name as a header value.
    pub value: HeaderValue,
    /// Its share of the requests, from 0 to 1 (the shares of a mix sum to 1).
    pub share: f64,
}

/// The header and the classes a run's requests are spread over.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassMix {
    /// The header carrying the class.
    pub header: HeaderName,
    /// The classes in the order given; shares sum to 1.
    pub classes: Vec<Class>,
    /// Upper ends of the classes' intervals in `[0, 1)`, the last one exactly 1.
    cumulative: Vec<f64>,
}

impl ClassMix {
    /// Parse `header` (`x-priority`) and `mix` (`NAME=WEIGHT,...`). Weights are
    /// non-negative numbers, normalised by their sum (`a=1,b=3` is `a=0.25,b=0.75`).
    ///
    /// ```
    /// let m = floodgate_load::ClassMix::parse("x-priority", "critical=0.2,default=0.5,sheddable=0.3").unwrap();
    /// assert_eq!(m.classes.len(), 3);
    /// assert_eq!(m.classes[1].name, "default");
    /// assert!(floodgate_load::ClassMix::parse("x-priority", "a=0").is_err());
    /// ```
    pub fn parse(header: &str, mix: &str) -> Result<ClassMix, LoadError> {
        let bad = |reason: String| LoadError::InvalidClassMix {
            mix: mix.to_string(),
            reason,
        };
        let header = HeaderName::from_bytes(header.trim().as_bytes()).map_err(|_| {
            LoadError::InvalidClassMix {
                mix: mix.to_string(),
                reason: format!("{header:?} is not a valid header name (--class-header)"),
            }
        })?;
        let mut named: Vec<(String, HeaderValue, f64)> = Vec::new();
        for part in mix.split(',') {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?}: expected NAME=WEIGHT")))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(bad(format!("{part:?}: the class name is empty")));
            }
            let value = HeaderValue::from_str(name).map_err(|_| {
                bad(format!(
                    "{name:?}: a class name is sent as a header value; it has characters not allowed there"
                ))
            })?;
            let w: f64 = weight
                .trim()
                .parse()
                .map_err(|_| bad(format!("{part:?}: the weight is not a number")))?;
            if !(w.is_finite() && w >= 0.0) {
                return Err(bad(format!(
                    "{part:?}: the weight must be a finite number, 0 or more"
                )));
            }
            if named.iter().any(|(n, _, _)| n == name) {
                return Err(bad(format!("class {name:?} is listed twice")));
            }
            named.push((name.to_string(), value, w));
        }
        if named.len() > MAX_CLASSES {
            return Err(bad(format!(
                "{} classes; at most {MAX_CLASSES}",
                named.len()
            )));
        }
        let total: f64 = named.iter().map(|c| c.2).sum();
        if !(total.is_finite() && total > 0.0) {
            return Err(bad(
                "the weights sum to 0; at least one must be above 0".into()
            ));
        }
        let classes: Vec<Class> = named
            .into_iter()
            .map(|(name, value, w)| Class {
                name,
                value,
                share: w / total,
            })
            .collect();
        let mut acc = 0.0;
        let mut cumulative: Vec<f64> = classes
            .iter()
            .map(|c| {
                acc += c.share;
                acc
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        Ok(ClassMix {
            header,
            classes,
            cumulative,
        })
    }

    /// The class (index into [`ClassMix::classes`]) of request `i` of a run seeded with
    /// `seed`: a uniform draw from a generator seeded by both, mapped through the shares.
    pub fn class_of(&self, seed: u64, i: u64) -> u8 {
        let u = fastrand::Rng::with_seed(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).f64();
        self.pick(u)
    }

    /// The class whose interval holds `u` (in `[0, 1)`); a class of share 0 is never
    /// picked.
    pub fn pick(&self, u: f64) -> u8 {
        let k = self
            .cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.cumulative.len().saturating_sub(1));
        k as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix() -> ClassMix {
        ClassMix::parse("x-priority", "critical=0.2,default=0.5,sheddable=0.3").unwrap()
    }

    #[test]
    fn shares_are_normalised_and_picked_by_interval() {
        let m = ClassMix::parse("X-Priority", "a=1, b=3").unwrap();
        assert_eq!(m.header.as_str(), "x-priority");
        assert_eq!((m.classes[0].share, m.classes[1].share), (0.25, 0.75));
        assert_eq!(
            (m.pick(0.0), m.pick(0.2499), m.pick(0.25), m.pick(0.9999)),
            (0, 0, 1, 1)
        );
        let z = ClassMix::parse("x-p", "never=0,always=2").unwrap();
        assert_eq!((z.pick(0.0), z.pick(0.5)), (1, 1));
    }

    #[test]
    fn requests_spread_over_the_classes_as_the_shares_say() {
        let m = mix();
        let n = 100_000;
        let mut counts = [0u64; 3];
        for i in 0..n {
            counts[usize::from(m.class_of(42, i))] += 1;
        }
        for (c, want) in counts.iter().zip([0.2, 0.5, 0.3]) {
            let got = *c as f64 / n as f64;
            assert!((got - want).abs() < 0.01, "{counts:?}");
        }
        // a pure function of (seed, i); another seed deals differently
        assert_eq!(m.class_of(42, 17), m.class_of(42, 17));
        assert!((0..100).any(|i| m.class_of(42, i) != m.class_of(43, i)));
    }

    #[test]
    fn bad_mixes_name_what_is_wrong() {
        for (header, text, part) in [
            ("x-p", "critical", "expected NAME=WEIGHT"),
            ("x-p", "=1", "name is empty"),
            ("x-p", "a=x", "not a number"),
            ("x-p", "a=-1", "0 or more"),
            ("x-p", "a=NaN", "finite"),
            ("x-p", "a=inf", "finite"),
            ("x-p", "a=0,b=0", "sum to 0"),
            ("x-p", "a=1,a=2", "listed twice"),
            ("x-p", "a\u{7f}=1", "not allowed"),
            ("bad header", "a=1", "not a valid header name"),
            ("x-p", "", "expected NAME=WEIGHT"),
        ] {
            let e = ClassMix::parse(header, text).unwrap_err().to_string();
            assert!(e.contains(part), "{text}: {e}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("c{i}=1")).collect();
        let e = ClassMix::parse("x-p", &many.join(","))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 16"), "{e}");
    }
}
