//! The bounds of the module's commands, checked before anything is written: how many
//! checks a call carries, how long a policy word is, how far a key's expiry is padded,
//! how long a sliding log is, and the expiry every write is given. A call outside them
//! is answered with an error naming the bound, and writes nothing.

/// The most checks in one `FG.DECIDE`, and policies in one `FG.MULTI`.
pub const MAX_CHECKS: usize = 1024;

/// The largest expiry padding (`pad_ms`) of `FG.DECIDE`, `FG.RESERVE`, `FG.SETTLE`,
/// `FG.ACQUIRE` and `FG.RENEW`: ten years (of 365 days), in ms.
pub const MAX_PAD_MS: u64 = 315_360_000_000;

/// The longest algorithm or rate word of `FG.THROTTLE` and `FG.MULTI`, in bytes
/// (surrounding spaces included).
pub const MAX_WORD: usize = 64;

/// The largest sliding-log limit (its value holds up to that many entries).
pub const MAX_LOG: u64 = 10_000;

/// The most bytes of a word an error message shows.
const SHOWN: usize = 32;

/// The latest absolute expiry Redis holds, in ms since the epoch.
const LATEST_MS: u64 = i64::MAX as u64;

/// `n` checks (`what`: checks, policies) in one call of `command`: at most
/// [`MAX_CHECKS`].
pub fn checks(command: &str, what: &str, n: usize) -> Result<(), String> {
    if n > MAX_CHECKS {
        return Err(format!(
            "ERR {command} takes at most {MAX_CHECKS} {what} per call, got {n}"
        ));
    }
    Ok(())
}

/// The error for a sliding log whose limit is above [`MAX_LOG`].
pub fn log_too_long(limit: u64) -> String {
    format!(
        "ERR sliding-log keeps an entry per admitted instant: its limit must be at most {MAX_LOG}, got {limit} (sliding-counter approximates it in 25 bytes)"
    )
}

/// An expiry padding: at most [`MAX_PAD_MS`].
pub fn pad_ms(pad_ms: u64) -> Result<u64, String> {
    if pad_ms > MAX_PAD_MS {
        return Err(format!(
            "ERR pad_ms must be at most {MAX_PAD_MS} (ten years), got {pad_ms}"
        ));
    }
    Ok(pad_ms)
}

/// A policy word (`what`: algorithm, rate) of `len` bytes: at most [`MAX_WORD`].
pub fn word(what: &str, len: usize) -> Result<(), String> {
    if len > MAX_WORD {
        return Err(format!(
            "ERR {what} must be at most {MAX_WORD} bytes, got {len}"
        ));
    }
    Ok(())
}

/// The absolute expiry `ttl_ms` after `anchor_ms`, in ms since the epoch, when Redis can
/// hold it.
pub fn expire_at(anchor_ms: u64, ttl_ms: u64) -> Result<u64, String> {
    anchor_ms
        .checked_add(ttl_ms)
        .filter(|&at| at <= LATEST_MS)
        .ok_or_else(|| format!("ERR a key's expiry, {ttl_ms} ms from now, is out of range"))
}

/// A word as an error message shows it: quoted, its first bytes only when it is long.
pub fn shown(w: &[u8]) -> String {
    if w.len() <= SHOWN {
        return format!("{:?}", String::from_utf8_lossy(w));
    }
    format!(
        "{:?}... ({} bytes)",
        String::from_utf8_lossy(&w[..SHOWN]),
        w.len()
    )
}

// Bounded inputs cannot overflow an expiry: the longest time to live a command computes
// (a window of 2^64 ns, or a lease 2^64 us ahead, in ms) plus the largest padding, from
// any instant before the year 2^40 ms, is within what Redis holds.
const _: () = assert!((1u64 << 40) + u64::MAX / 1_000 + 1 + MAX_PAD_MS <= LATEST_MS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_name_what_was_wrong() {
        assert!(checks("FG.DECIDE", "checks", MAX_CHECKS).is_ok());
        assert_eq!(
            checks("FG.DECIDE", "checks", 4000).unwrap_err(),
            "ERR FG.DECIDE takes at most 1024 checks per call, got 4000"
        );
        assert_eq!(pad_ms(MAX_PAD_MS), Ok(MAX_PAD_MS));
        assert!(
            pad_ms(u64::MAX)
                .unwrap_err()
                .contains("at most 315360000000")
        );
        assert!(word("rate", MAX_WORD).is_ok());
        assert!(
            word("rate", 65)
                .unwrap_err()
                .contains("at most 64 bytes, got 65")
        );
        assert_eq!(expire_at(1_000, 5), Ok(1_005));
        assert!(expire_at(1_000, u64::MAX).is_err());
        assert!(expire_at(0, LATEST_MS + 1).is_err());
        assert_eq!(shown(b"x"), "\"x\"");
        let long = shown(&[b' '; 1 << 20]);
        assert!(
            long.len() < 64 && long.ends_with("(1048576 bytes)"),
            "{long}"
        );
    }
}
