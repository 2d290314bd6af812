//! `FG.ACQUIRE`, `FG.RENEW` and `FG.RELEASE`, their words: floodgate-redis's in-flight
//! leases (`lua/inflight.lua`) answered by the module, on the script's sorted set (lease
//! ids scored by expiry in microseconds since the epoch, the key expiring with its latest
//! lease), so module and script share keys.
//!
//! ```text
//! FG.ACQUIRE key id limit ttl_us pad_ms now_us|redis
//! FG.RENEW key id ttl_us pad_ms now_us|redis
//! FG.RELEASE key id now_us|redis
//! ```
//!
//! The replies are the script's: acquire `admitted live earliest latest now` (`{-1}` when
//! the id is held already), renew and release `1` or `0`.

use crate::decide::int;
use crate::limits;

/// `FG.ACQUIRE`'s usage line.
pub const ACQUIRE_USAGE: &str =
    "Usage: FG.ACQUIRE <key> <id> <limit> <ttl_us> <pad_ms> <now_us|redis>";
/// `FG.RENEW`'s usage line.
pub const RENEW_USAGE: &str = "Usage: FG.RENEW <key> <id> <ttl_us> <pad_ms> <now_us|redis>";
/// `FG.RELEASE`'s usage line.
pub const RELEASE_USAGE: &str = "Usage: FG.RELEASE <key> <id> <now_us|redis>";

/// Scores are doubles: instants and expiries stay below 2^53 us (the year 2255).
const EXACT: u64 = 1 << 53;

/// A parsed lease command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseCall {
    /// At most this many live leases (acquire; 0 otherwise).
    pub limit: u64,
    /// The lease's time to live, us (acquire, renew).
    pub ttl_us: u64,
    /// Padding of the key's expiry, ms (acquire, renew).
    pub pad_ms: u64,
    /// The caller's instant, us since the epoch; `None`: the primary's clock.
    pub now_us: Option<u64>,
}

/// The lease id: a decimal integer below 2^64, the member as given.
fn id(w: &[u8]) -> Result<(), String> {
    if w.iter().all(u8::is_ascii_digit) {
        int::<u64>(w, "id").map(|_| ())
    } else {
        Err(format!(
            "ERR id must be an integer, got {:?}",
            String::from_utf8_lossy(w)
        ))
    }
}

fn now(w: &[u8]) -> Result<Option<u64>, String> {
    if w == b"redis" {
        return Ok(None);
    }
    let us: u64 = int(w, "now_us")?;
    if us >= EXACT {
        return Err(format!("ERR now_us {us} is out of range (at most 2^53)"));
    }
    Ok(Some(us))
}

fn ttl(w: &[u8]) -> Result<u64, String> {
    let us: u64 = int(w, "ttl_us")?;
    if us == 0 || us >= EXACT / 2 {
        return Err(format!("ERR ttl_us must be from 1 to 2^52, got {us}"));
    }
    Ok(us)
}

/// Parse `FG.ACQUIRE`'s words (after the command's name).
pub fn parse_acquire(words: &[&[u8]]) -> Result<LeaseCall, String> {
    let [_key, i, limit, t, pad, n] = words else {
        return Err(format!("ERR {ACQUIRE_USAGE}"));
    };
    id(i)?;
    let limit: u64 = int(limit, "limit")?;
    if limit == 0 {
        return Err("ERR limit must be at least 1".into());
    }
    Ok(LeaseCall {
        limit,
        ttl_us: ttl(t)?,
        pad_ms: limits::pad_ms(int(pad, "pad_ms")?)?,
        now_us: now(n)?,
    })
}

/// Parse `FG.RENEW`'s words (after the command's name).
pub fn parse_renew(words: &[&[u8]]) -> Result<LeaseCall, String> {
    let [_key, i, t, pad, n] = words else {
        return Err(format!("ERR {RENEW_USAGE}"));
    };
    id(i)?;
    Ok(LeaseCall {
        limit: 0,
        ttl_us: ttl(t)?,
        pad_ms: limits::pad_ms(int(pad, "pad_ms")?)?,
        now_us: now(n)?,
    })
}

/// Parse `FG.RELEASE`'s words (after the command's name).
pub fn parse_release(words: &[&[u8]]) -> Result<LeaseCall, String> {
    let [_key, i, n] = words else {
        return Err(format!("ERR {RELEASE_USAGE}"));
    };
    id(i)?;
    Ok(LeaseCall {
        limit: 0,
        ttl_us: 0,
        pad_ms: 0,
        now_us: now(n)?,
    })
}

/// Milliseconds from `now_us` to `latest_us`, rounded up, plus the padding: the script's
/// `PEXPIRE` at the latest lease.
pub fn expiry_ms(latest_us: u64, now_us: u64, pad_ms: u64) -> u64 {
    latest_us
        .saturating_sub(now_us)
        .div_ceil(1000)
        .saturating_add(pad_ms)
}

/// The absolute expiry (ms since the epoch, counted from `anchor_ms`) of a key whose
/// latest lease ends at `latest_us`, checked before anything is written; a later lease
/// gives a later expiry, so the expiry a call sets is in range once that of the latest
/// lease it can leave is.
pub fn expire_at(latest_us: u64, now_us: u64, pad_ms: u64, anchor_ms: u64) -> Result<u64, String> {
    limits::expire_at(anchor_ms, expiry_ms(latest_us, now_us, pad_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn words_are_read_and_bad_ones_named() {
        assert_eq!(
            parse_acquire(&w("k 12 3 5000000 1 redis")),
            Ok(LeaseCall {
                limit: 3,
                ttl_us: 5_000_000,
                pad_ms: 1,
                now_us: None
            })
        );
        assert_eq!(
            parse_release(&w("k 9223372036854775807 1700000000000000")).map(|c| c.now_us),
            Ok(Some(1_700_000_000_000_000))
        );
        let e = |r: Result<LeaseCall, String>| r.unwrap_err();
        assert!(e(parse_acquire(&w("k 1 3 5 1"))).starts_with("ERR Usage: FG.ACQUIRE"));
        assert!(e(parse_acquire(&w("k x 3 5 1 redis"))).starts_with("ERR id must be"));
        assert!(e(parse_acquire(&w("k +1 3 5 1 redis"))).starts_with("ERR id must be"));
        assert!(e(parse_acquire(&w("k 1 0 5 1 redis"))).contains("limit must be at least 1"));
        assert!(e(parse_acquire(&w("k 1 y 5 1 redis"))).starts_with("ERR limit must be"));
        assert!(e(parse_renew(&w("k 1 0 1 redis"))).contains("ttl_us must be"));
        assert!(e(parse_renew(&w("k 1 5 z redis"))).starts_with("ERR pad_ms must be"));
        assert!(
            e(parse_renew(&w("k 1 5 18446744073709551615 redis")))
                .starts_with("ERR pad_ms must be at most 315360000000")
        );
        assert!(e(parse_acquire(&w("k 1 3 5 315360000001 redis"))).contains("at most"));
        assert!(e(parse_release(&w("k 1 soon"))).starts_with("ERR now_us must be"));
        assert!(e(parse_release(&w("k 1 9007199254740992"))).contains("out of range"));
        assert!(e(parse_release(&w("k 1"))).starts_with("ERR Usage: FG.RELEASE"));
        assert!(e(parse_release(&w("k 18446744073709551616 1"))).starts_with("ERR id must"));
    }

    #[test]
    fn the_key_expires_at_its_latest_lease_rounded_up() {
        assert_eq!(expiry_ms(2_001, 1_000, 0), 2);
        assert_eq!(expiry_ms(2_000, 1_000, 5), 6);
    }
}
