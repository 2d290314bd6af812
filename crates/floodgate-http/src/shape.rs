//! The shape of a rate policy in nginx's words (`burst` or `capacity`, `nodelay` or
//! `delay`), turned into a validated [`Spec`]: the meaning of the proxy's `[[policy]]`
//! fields and flags, and of every surface that takes the same fields (the Python
//! module's `Policy`).

use floodgate_core::algorithms::DelayMode;
use floodgate_core::{Kind, Rate, Spec};

/// How much a rate policy admits at once, in nginx's words: a `[[policy]]` table's
/// fields and `floodgate proxy`'s flags alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateShape {
    /// nginx's `burst`: the excess admitted above one request (capacity - 1).
    pub burst: Option<u64>,
    /// Units admitted at once from rest (instead of `burst`).
    pub capacity: Option<u64>,
    /// leaky-queue: never delay.
    pub nodelay: bool,
    /// leaky-queue: delay only beyond this many excess requests.
    pub delay: Option<u64>,
}

/// The capacity of a policy that sets neither `burst` nor `capacity`: nginx's `burst`
/// 0, one unit at once. The same `10/s` admits the same from `--rate` as from a file.
pub const DEFAULT_CAPACITY: u64 = 1;

/// The validated spec of a rate policy: `kind` at `rate`, shaped by `shape` (capacity
/// [`DEFAULT_CAPACITY`] unless `burst` or `capacity` says otherwise). The error names the
/// field that is wrong.
pub fn rate_spec(kind: Kind, rate: Rate, shape: RateShape) -> Result<Spec, String> {
    let mut spec = Spec::new(kind, rate);
    spec.capacity = Some(match (shape.burst, shape.capacity) {
        (Some(_), Some(_)) => {
            return Err("set burst or capacity, not both (capacity = burst + 1)".into());
        }
        (Some(b), None) => b
            .checked_add(1)
            .ok_or_else(|| format!("burst {b} is too large"))?,
        (None, Some(0)) => return Err("capacity must be at least 1".into()),
        (None, Some(c)) => c,
        (None, None) => DEFAULT_CAPACITY,
    });
    let queue = kind == Kind::LeakyQueue;
    spec.delay = match (shape.nodelay, shape.delay) {
        (true, Some(_)) => return Err("set nodelay or delay, not both".into()),
        _ if !queue && (shape.nodelay || shape.delay.is_some()) => {
            return Err(format!(
                "nodelay and delay apply only to algorithm = \"leaky-queue\", not {:?}",
                kind.name()
            ));
        }
        (true, None) => DelayMode::NoDelay,
        (false, Some(n)) => DelayMode::After(n),
        (false, None) => DelayMode::After(0),
    };
    spec.build().map_err(|e| e.to_string())?;
    Ok(spec)
}
