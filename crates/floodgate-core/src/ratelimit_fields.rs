//! The RateLimit header fields (draft-ietf-httpapi-ratelimit-headers) of a policy and its
//! [`Decision`]s: the numbers and their text. Every HTTP surface renders them here (the
//! proxy and tower layer, the server's Envoy `response_headers_to_add` and HTTP API), so a
//! client reads the same thing from all of them.
//!
//! What the numbers mean (the reasoning is in `docs/ratelimit-fields.md`):
//!
//! * `RateLimit-Policy: "name";q=Q;w=W`: the **sustained rate**, `Q` units per `W` whole
//!   seconds (`W >= 1`): what a steady client gets in the long run. For the bucket
//!   algorithms (token bucket, GCRA, leaky bucket) that is the refill rate, not the
//!   capacity (the draft's own example of a leaky bucket is `12;w=1;burst=1000`); the
//!   capacity, what a key at rest admits at once, is the extension parameter
//!   `floodgate-capacity`. A sliding counter sustains one unit less per window than its
//!   limit (see [`sustained_per_period`]). A limit of 0 (block everything) is `q=0`.
//! * `RateLimit: "name";r=R;t=T`: over the next `T` seconds the key can take `R` more
//!   units sent at no more than the sustained rate. When the request was admitted, `T` is
//!   the policy's `W` and `R = Q - ahead`, where `ahead` is how many units the key has
//!   taken beyond what a client at the sustained rate would have (a fixed window used
//!   faster than its time has run, a bucket below full by more than the unit just sent;
//!   taking `R` over the next `T` brings it back in line). `R` is never above `Q`: never an
//!   invitation above the sustained rate, so never the fixed window's boundary burst. A
//!   sliding log or counter does not tell from a decision how its uses are spread:
//!   `ahead = 0`. When it was denied, `T` is the retry time rounded up, at least 1 (so
//!   `Retry-After`, never earlier, is never before the end of `T`) and `R = 0`: nothing
//!   before `T`; except when the retry time is within one sustained interval (`W / Q`, a
//!   bucket refilling faster than a second): a client keeping the sustained pace comes
//!   back no earlier anyway, so `R` is what that pace fits in `T` after the retry.
//!
//! So a client that sends at most one unit every `max(W / Q, T / R)` seconds, and waits
//! `T` after `R = 0`, runs at the sustained rate and is never told to come back early.

use std::time::Duration;

use crate::any::{Kind, Spec};
use crate::decision::{Decision, ceil_secs};

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The largest Structured Fields Integer (15 digits); larger values are capped.
pub const SF_INT_MAX: u64 = 999_999_999_999_999;

/// The extension parameter carrying a bucket algorithm's capacity in `RateLimit-Policy`.
pub const CAPACITY_PARAM: &str = "floodgate-capacity";

/// What one policy advertises, computed once from its [`Spec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertised {
    /// `q`: units per `w` seconds in the long run.
    pub q: u64,
    /// `w`: whole seconds, at least 1 (0 for an in-flight limit, which has no window).
    pub w: u64,
    /// Bucket algorithms: what a key at rest admits at once.
    pub capacity: Option<u64>,
    shape: Shape,
}

/// How the state (`r`) is derived from a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Blocks everything.
    Blocked,
    /// A fixed window of `count` units per `window_ns`: ahead when more of the window is
    /// used than of its time has run.
    FixedWindow { count: u64, window_ns: u64 },
    /// A bucket refilling `count` units per `period_ns`: ahead by what it misses from
    /// full (the time back to full at the rate), beyond the unit just sent.
    Bucket { count: u64, period_ns: u64 },
    /// A sliding log or counter: `r = q` while admitted.
    Steady,
    /// An in-flight limit of `q` requests at once (`qu="concurrent-requests"`).
    Concurrent,
}

/// The sustained rate of `spec`, as `(count, period_ns)`: the rate's count per period,
/// except the sliding counter. Its estimate weighs the previous window as if its requests
/// were spread evenly, so a stream at exactly `L` per window always finds it one unit short:
/// it sustains `L - 1` per window, and one per two windows when `L = 1`.
pub fn sustained_per_period(spec: &Spec) -> (u64, u64) {
    let (count, period) = (spec.rate.count(), spec.rate.period_nanos());
    match spec.kind {
        Kind::SlidingCounter if count == 1 => (1, period.saturating_mul(2)),
        Kind::SlidingCounter => (count - 1, period),
        _ => (count, period),
    }
}

/// `count` per `period_ns` as `(q, w)` with `w` whole seconds: exact when some `w` up to a
/// thousand seconds past the period makes it so, else the closest `q / w` not above the rate.
fn per_whole_seconds(count: u64, period_ns: u64) -> (u64, u64) {
    let first = period_ns.div_ceil(NANOS_PER_SEC).max(1);
    let q_at = |w: u64| {
        let q =
            u128::from(count) * u128::from(w) * u128::from(NANOS_PER_SEC) / u128::from(period_ns);
        (
            u64::try_from(q).unwrap_or(u64::MAX),
            u128::from(count) * u128::from(w) * u128::from(NANOS_PER_SEC) % u128::from(period_ns)
                == 0,
        )
    };
    let mut best = (q_at(first).0, first);
    for w in first..first.saturating_add(1000) {
        let (q, exact) = q_at(w);
        if exact {
            return (q, w);
        }
        // keep the largest q / w (all are <= the rate): compare q / w > best.q / best.w
        if u128::from(q) * u128::from(best.1) > u128::from(best.0) * u128::from(w) {
            best = (q, w);
        }
    }
    best
}

impl Advertised {
    /// What a policy with `spec` advertises.
    ///
    /// ```
    /// use floodgate_core::ratelimit_fields::Advertised;
    /// use floodgate_core::{Kind, Spec};
    ///
    /// let mut spec = Spec::new(Kind::LeakyMeter, "100/s".parse()?);
    /// spec.capacity = Some(21); // nginx burst=20
    /// let a = Advertised::of(&spec);
    /// assert_eq!((a.q, a.w, a.capacity), (100, 1, Some(21)));
    /// assert_eq!(a.policy_member("\"default\""), r#""default";q=100;w=1;floodgate-capacity=21"#);
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn of(spec: &Spec) -> Advertised {
        let (count, period) = sustained_per_period(spec);
        let (q, w) = per_whole_seconds(count, period);
        let (capacity, shape) = match spec.kind {
            Kind::FixedWindow => (
                None,
                Shape::FixedWindow {
                    count: spec.rate.count(),
                    window_ns: spec.rate.period_nanos(),
                },
            ),
            Kind::SlidingLog | Kind::SlidingCounter => (None, Shape::Steady),
            _ => (
                Some(spec.capacity.unwrap_or(spec.rate.count())),
                Shape::Bucket {
                    count: spec.rate.count(),
                    period_ns: spec.rate.period_nanos(),
                },
            ),
        };
        Advertised {
            q,
            w,
            capacity,
            shape,
        }
    }

    /// What a limit that blocks every request advertises: `q=0` over `window` (whole
    /// seconds rounded up, at least 1).
    pub fn blocked(window: Duration) -> Advertised {
        Advertised {
            q: 0,
            w: ceil_secs(window).max(1),
            capacity: None,
            shape: Shape::Blocked,
        }
    }

    /// What an in-flight limit of `n` requests at once advertises:
    /// `q=n;qu="concurrent-requests"`, no window; its `RateLimit` member is `r` = places
    /// free and `t` = 0 when admitted, `r=0` and `t` = seconds until the earliest lease
    /// expires (rounded up) when denied.
    ///
    /// ```
    /// use floodgate_core::ratelimit_fields::Advertised;
    /// use floodgate_core::Decision;
    /// use std::time::Duration;
    ///
    /// let a = Advertised::concurrent(4);
    /// assert_eq!(a.policy_member("\"gpu\""), r#""gpu";q=4;qu="concurrent-requests""#);
    /// assert_eq!(a.state(&Decision::allow(4, 3, Duration::from_secs(30))), (3, 0));
    /// let d = Decision::deny(4, 0, Duration::from_millis(1500), Duration::from_secs(30));
    /// assert_eq!(a.state(&d), (0, 2));
    /// ```
    pub fn concurrent(n: u64) -> Advertised {
        Advertised {
            q: n,
            w: 0,
            capacity: None,
            shape: Shape::Concurrent,
        }
    }

    /// The `RateLimit` numbers `(r, t)` for a decision of this policy.
    ///
    /// ```
    /// use floodgate_core::ratelimit_fields::Advertised;
    /// use floodgate_core::{Decision, Kind, Spec};
    /// use std::time::Duration;
    ///
    /// let a = Advertised::of(&Spec::new(Kind::Gcra, "100/s".parse()?));
    /// // a steady client: full but for the unit just sent, 10 ms back to full
    /// assert_eq!(a.state(&Decision::allow(100, 99, Duration::from_millis(10))), (100, 1));
    /// // 40 units taken beyond that: 60 over the next second bring the key back to full
    /// assert_eq!(a.state(&Decision::allow(100, 59, Duration::from_millis(410))), (60, 1));
    /// // denied for longer than a steady client waits: nothing before the retry time,
    /// // rounded up
    /// let d = Decision::deny(100, 0, Duration::from_millis(1200), Duration::from_secs(1));
    /// assert_eq!(a.state(&d), (0, 2));
    /// // capacity 1 (nginx burst=0) denied for 4 ms, less than the 10 ms a steady client
    /// // waits anyway: keep the pace over the rest of the second
    /// let mut spec = Spec::new(Kind::Gcra, "100/s".parse()?);
    /// spec.capacity = Some(1);
    /// let d = Decision::deny(1, 0, Duration::from_millis(4), Duration::from_millis(4));
    /// assert_eq!(Advertised::of(&spec).state(&d), (99, 1));
    /// # Ok::<(), floodgate_core::ConfigError>(())
    /// ```
    pub fn state(&self, d: &Decision) -> (u64, u64) {
        if self.shape == Shape::Blocked {
            return (0, self.w);
        }
        if self.shape == Shape::Concurrent {
            return match d.retry_after {
                Some(r) if !d.allowed => (0, ceil_secs(r).max(1)),
                _ => (d.remaining, 0),
            };
        }
        let in_line = self.in_line(d);
        if !d.allowed
            && let Some(retry) = d.retry_after
        {
            // nothing before the retry time, rounded up: t, so that Retry-After (never
            // earlier) is never before the end of t. A retry within one sustained interval
            // (a bucket refilling faster than a second) is no wait for a client keeping the
            // sustained pace: r counts what that pace fits in t after the retry, so such a
            // client is not stopped for a whole second; a longer retry: r = 0.
            let t = ceil_secs(retry).max(1);
            let (t_ns, w_ns, q) = (
                u128::from(t) * u128::from(NANOS_PER_SEC),
                u128::from(self.w) * u128::from(NANOS_PER_SEC),
                u128::from(self.q),
            );
            let retry_ns = retry.as_nanos();
            let r = if retry_ns.saturating_mul(q) <= w_ns {
                (t_ns.saturating_sub(retry_ns) * q / w_ns).min(in_line)
            } else {
                0
            };
            return (u64::try_from(r).unwrap_or(u64::MAX), t);
        }
        (u64::try_from(in_line).unwrap_or(u64::MAX), self.w)
    }

    /// `q - ahead`: what the key can take over the next `w` at the sustained rate to be back
    /// where a steady client keeps it.
    fn in_line(&self, d: &Decision) -> u128 {
        let q = u128::from(self.q);
        match self.shape {
            Shape::FixedWindow { count, window_ns } => {
                let used = count.saturating_sub(d.remaining);
                let ahead = if used == 0 {
                    0
                } else {
                    // a steady client has used one unit per count-th of the window so far,
                    // the one at the window's start included
                    let elapsed = u128::from(window_ns).saturating_sub(d.reset_after.as_nanos());
                    let steady = elapsed * u128::from(count) / u128::from(window_ns) + 1;
                    u128::from(used).saturating_sub(steady)
                };
                // in the policy's units: q per w for count per window
                q * u128::from(count).saturating_sub(ahead) / u128::from(count)
            }
            Shape::Bucket { count, period_ns } => {
                // units missing from full (the time back to full at the rate, to the
                // nearest unit: a call a few microseconds after the last is not a unit
                // less ahead), beyond the one just sent
                let period = u128::from(period_ns);
                let missing = (d.reset_after.as_nanos().saturating_mul(u128::from(count))
                    + period / 2)
                    / period;
                q.saturating_sub(missing.saturating_sub(1))
            }
            Shape::Steady | Shape::Blocked | Shape::Concurrent => q,
        }
    }

    /// This policy's member of `RateLimit-Policy`, after its name already serialized as a
    /// Structured Fields String (see [`sf_string`]): `"name";q=100;w=1` plus
    /// `;floodgate-capacity=21` for the bucket algorithms.
    pub fn policy_member(&self, sf_name: &str) -> String {
        let mut s = String::with_capacity(sf_name.len() + 48);
        s.push_str(sf_name);
        s.push_str(";q=");
        push_int(&mut s, self.q);
        if self.shape == Shape::Concurrent {
            s.push_str(";qu=\"concurrent-requests\"");
            return s;
        }
        s.push_str(";w=");
        push_int(&mut s, self.w);
        if let Some(c) = self.capacity {
            s.push(';');
            s.push_str(CAPACITY_PARAM);
            s.push('=');
            push_int(&mut s, c);
        }
        s
    }
}

/// Append a policy's member of `RateLimit`: its serialized name, then `;r=R;t=T`.
pub fn push_state(out: &mut String, sf_name: &str, (r, t): (u64, u64)) {
    out.push_str(sf_name);
    out.push_str(";r=");
    push_int(out, r);
    out.push_str(";t=");
    push_int(out, t);
}

/// Append `v` in decimal, capped at [`SF_INT_MAX`] (a Structured Fields Integer).
pub fn push_int(out: &mut String, v: u64) {
    // two digits per division, from a table of "00" to "99"
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut n = v.min(SF_INT_MAX);
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    // ASCII digits, pushed as chars: no UTF-8 check of the buffer
    out.reserve(buf.len() - i);
    for &b in &buf[i..] {
        out.push(char::from(b));
    }
}

/// A policy name as a Structured Fields String: quoted, `"` and `\` escaped, anything but
/// printable ASCII replaced by `?` (names checked at configuration never contain any).
///
/// ```
/// use floodgate_core::ratelimit_fields::sf_string;
/// assert_eq!(sf_string("per-ip"), r#""per-ip""#);
/// assert_eq!(sf_string("a\"b\\c\u{e9}"), r#""a\"b\\c?""#);
/// ```
pub fn sf_string(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            ' '..='~' => s.push(c),
            _ => s.push('?'),
        }
    }
    s.push('"');
    s
}

/// `Retry-After` in whole seconds for a true retry time and a jitter span: the true time
/// plus `uniform(span_ns)`, a uniform draw in `[0, span_ns]` the caller makes with its own
/// generator, rounded up. Never below `ceil_secs(retry)`: never tells a client to come back
/// early.
///
/// ```
/// use floodgate_core::ratelimit_fields::retry_after_secs;
/// use std::time::Duration;
/// let retry = Duration::from_millis(2_300);
/// assert_eq!(retry_after_secs(retry, Duration::ZERO, |_| unreachable!()), 3);
/// assert_eq!(retry_after_secs(retry, Duration::from_secs(2), |span| span), 5);
/// ```
pub fn retry_after_secs(
    retry: Duration,
    jitter: Duration,
    uniform: impl FnOnce(u64) -> u64,
) -> u64 {
    let span = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    let extra = if span == 0 {
        0
    } else {
        uniform(span).min(span)
    };
    ceil_secs(retry.saturating_add(Duration::from_nanos(extra)))
}

/// The `RateLimit-Policy` and `RateLimit` values for several policies at once, members
/// joined by `", "`: `(sf_name, advertised, decision)` per policy, in order.
pub fn render<'a>(
    items: impl IntoIterator<Item = (&'a str, &'a Advertised, &'a Decision)>,
) -> (String, String) {
    let mut policy = String::new();
    let mut state = String::new();
    for (name, adv, d) in items {
        if !policy.is_empty() {
            policy.push_str(", ");
            state.push_str(", ");
        }
        policy.push_str(&adv.policy_member(name));
        push_state(&mut state, name, adv.state(d));
    }
    (policy, state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    fn spec(kind: Kind, rate: &str, cap: Option<u64>) -> Spec {
        let mut s = Spec::new(kind, rate.parse::<Rate>().unwrap());
        s.capacity = cap;
        s
    }

    #[test]
    fn whole_seconds() {
        assert_eq!(per_whole_seconds(100, NANOS_PER_SEC), (100, 1));
        assert_eq!(per_whole_seconds(30, 60 * NANOS_PER_SEC), (30, 60));
        assert_eq!(per_whole_seconds(10, NANOS_PER_SEC / 10), (100, 1));
        assert_eq!(per_whole_seconds(1, 1_500_000_000), (2, 3));
        assert_eq!(per_whole_seconds(7, 333_000_000), (7000, 333));
        // no exact w within reach: the closest below the rate
        let (q, w) = per_whole_seconds(1, 1_000_000_007);
        assert!(u128::from(q) * 1_000_000_007 <= u128::from(w) * 1_000_000_000);
        assert!(q as f64 / w as f64 > 0.998 / 1.000_000_007);
        assert_eq!(per_whole_seconds(u64::MAX, 1), (u64::MAX, 1));
    }

    #[test]
    fn every_kind_advertises_its_sustained_rate() {
        let a = |k, r, c| {
            let a = Advertised::of(&spec(k, r, c));
            (a.q, a.w, a.capacity)
        };
        assert_eq!(a(Kind::FixedWindow, "100/min", None), (100, 60, None));
        assert_eq!(a(Kind::SlidingLog, "100/s", Some(5)), (100, 1, None));
        assert_eq!(a(Kind::SlidingCounter, "100/min", None), (99, 60, None));
        assert_eq!(a(Kind::SlidingCounter, "1/s", None), (1, 2, None));
        assert_eq!(a(Kind::TokenBucket, "100/s", Some(21)), (100, 1, Some(21)));
        assert_eq!(a(Kind::Gcra, "30/min", Some(16)), (30, 60, Some(16)));
        assert_eq!(a(Kind::LeakyQueue, "10/s", None), (10, 1, Some(10)));
        assert_eq!(a(Kind::LeakyMeter, "1/h", Some(3)), (1, 3600, Some(3)));
        assert_eq!(Advertised::blocked(Duration::from_millis(1500)).w, 2);
    }

    #[test]
    fn fixed_window_state_follows_the_steady_pace() {
        let a = Advertised::of(&spec(Kind::FixedWindow, "100/s", None));
        let at = |remaining, to_end_ms| {
            a.state(&Decision::allow(
                100,
                remaining,
                Duration::from_millis(to_end_ms),
            ))
        };
        // a steady client: one unit per 10 ms, the first at the window's start
        assert_eq!(at(99, 1000), (100, 1));
        assert_eq!(at(49, 500), (100, 1));
        assert_eq!(at(0, 10), (100, 1));
        // one early (or one extra): one fewer
        assert_eq!(at(49, 505), (99, 1));
        // 40 ahead of the pace halfway through: 40 fewer over the next second
        assert_eq!(at(9, 500), (60, 1));
        // a fresh key (nothing used) is never ahead
        assert_eq!(at(100, 0), (100, 1));
        // denied until the window ends
        let d = Decision::deny(
            100,
            0,
            Duration::from_millis(300),
            Duration::from_millis(300),
        );
        assert_eq!(a.state(&d), (0, 1));
    }

    #[test]
    fn denied_and_never_and_blocked() {
        let a = Advertised::of(&spec(Kind::TokenBucket, "30/min", Some(16)));
        let d = Decision::deny(16, 0, Duration::from_millis(2_001), Duration::from_secs(32));
        assert_eq!(a.state(&d), (0, 3));
        // within the 2 s a steady client waits anyway, but the pace fits nothing in the
        // 1 ms of t after it
        let d = Decision::deny(16, 0, Duration::from_millis(1_999), Duration::from_secs(32));
        assert_eq!(a.state(&d), (0, 2));
        // 100/s: 4 ms is within the 10 ms a steady client waits: 99 fit in the second
        // after it, unless the bucket misses more than that (capacity 50, empty: 49 ahead)
        let mut fast = spec(Kind::TokenBucket, "100/s", Some(1));
        let d = Decision::deny(1, 0, Duration::from_millis(4), Duration::from_millis(4));
        assert_eq!(Advertised::of(&fast).state(&d), (99, 1));
        fast.capacity = Some(50);
        let d = Decision::deny(50, 0, Duration::from_millis(4), Duration::from_millis(500));
        assert_eq!(Advertised::of(&fast).state(&d), (51, 1));
        // 100/s but 0.5 s to wait: more than one interval, nothing before t
        let d = Decision::deny(
            50,
            0,
            Duration::from_millis(500),
            Duration::from_millis(500),
        );
        assert_eq!(Advertised::of(&fast).state(&d), (0, 1));
        // 1/s: the pace leaves nothing in the second after the retry
        let one = Advertised::of(&spec(Kind::Gcra, "1/s", None));
        let d = Decision::deny(1, 0, Duration::from_millis(10), Duration::from_secs(1));
        assert_eq!(one.state(&d), (0, 1));
        // a cost above the capacity can never pass; the key itself is as an admitted one
        assert_eq!(
            a.state(&Decision::never(16, 20, 16, Duration::ZERO)),
            (30, 60)
        );
        let b = Advertised::blocked(Duration::from_secs(60));
        assert_eq!(b.state(&Decision::never(0, 1, 0, Duration::ZERO)), (0, 60));
        assert_eq!(b.policy_member("\"x\""), "\"x\";q=0;w=60");
    }

    #[test]
    fn text() {
        let a = Advertised::of(&spec(Kind::FixedWindow, "100/min", None));
        let b = Advertised::of(&spec(Kind::Gcra, "10/s", Some(20)));
        let d1 = Decision::allow(100, 99, Duration::from_secs(60));
        let d2 = Decision::deny(20, 0, Duration::from_millis(100), Duration::from_secs(2));
        let (p, s) = render([("\"default\"", &a, &d1), ("\"burst\"", &b, &d2)]);
        assert_eq!(
            p,
            r#""default";q=100;w=60, "burst";q=10;w=1;floodgate-capacity=20"#
        );
        // the empty bucket misses 20: nothing until the retry
        assert_eq!(s, r#""default";r=100;t=60, "burst";r=0;t=1"#);
        let mut big = String::new();
        push_int(&mut big, u64::MAX);
        assert_eq!(big, "999999999999999");
        let mut zero = String::new();
        push_int(&mut zero, 0);
        assert_eq!(zero, "0");
    }

    use proptest::strategy::Strategy;

    proptest::proptest! {
        /// `push_int` writes what `to_string` does, capped at `SF_INT_MAX`, after what
        /// the string held.
        #[test]
        fn push_int_is_decimal(v in proptest::prop_oneof![
            0u64..1000,
            proptest::num::u64::ANY,
            (0u32..20).prop_map(|e| 10u64.pow(e)),
            (1u32..20).prop_map(|e| 10u64.pow(e) - 1),
        ]) {
            let mut s = String::from("x=");
            push_int(&mut s, v);
            proptest::prop_assert_eq!(s, format!("x={}", v.min(SF_INT_MAX)));
        }
    }
}
