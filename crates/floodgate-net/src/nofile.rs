//! The open-descriptor limit (`RLIMIT_NOFILE`): every accepted connection is a
//! descriptor, and a process past its soft limit cannot accept (`EMFILE`), so a listener
//! raises it to the hard limit at start and derives its connection caps from the result.

use thiserror::Error;

/// The descriptor limit before and after [`raise_nofile`]. Counts of descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nofile {
    /// The soft limit found at start.
    pub before: u64,
    /// The soft limit now (the hard limit when raising it succeeded).
    pub soft: u64,
    /// The hard limit (`u64::MAX` when unlimited).
    pub hard: u64,
}

/// The descriptor limit cannot be read or set.
#[derive(Debug, Error)]
pub enum NofileError {
    /// `getrlimit(RLIMIT_NOFILE)` failed.
    #[error("cannot read the open-descriptor limit (RLIMIT_NOFILE): {0}")]
    Read(#[source] std::io::Error),
    /// `setrlimit(RLIMIT_NOFILE)` failed.
    #[error("cannot raise the open-descriptor limit (RLIMIT_NOFILE) from {from} to {to}: {source}")]
    Raise {
        /// The soft limit kept.
        from: u64,
        /// The hard limit asked for.
        to: u64,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn get() -> Result<libc::rlimit, NofileError> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(NofileError::Read(std::io::Error::last_os_error()));
    }
    Ok(r)
}

fn figure(v: libc::rlim_t) -> u64 {
    if v == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        // rlim_t is u64 on Linux and macOS; wider or narrower elsewhere
        #[allow(clippy::useless_conversion)]
        u64::try_from(v).unwrap_or(u64::MAX)
    }
}

/// The soft descriptor limit of this process now (`u64::MAX` when unlimited).
pub fn descriptor_limit() -> Result<u64, NofileError> {
    Ok(figure(get()?.rlim_cur))
}

/// Raise the soft descriptor limit to the hard limit. A system that refuses it (macOS
/// with an unlimited hard limit, which caps the soft limit lower) gives
/// [`NofileError::Raise`] and keeps the soft limit it had.
pub fn raise_nofile() -> Result<Nofile, NofileError> {
    let r = get()?;
    let (before, hard) = (figure(r.rlim_cur), figure(r.rlim_max));
    if r.rlim_cur == r.rlim_max {
        return Ok(Nofile {
            before,
            soft: before,
            hard,
        });
    }
    let target = r.rlim_max;
    let want = libc::rlimit {
        rlim_cur: target,
        rlim_max: r.rlim_max,
    };
    // SAFETY: `want` is a valid rlimit for the call's duration.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
        return Err(NofileError::Raise {
            from: before,
            to: figure(target),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(Nofile {
        before,
        soft: figure(target),
        hard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit() {
        let n = raise_nofile().unwrap();
        assert!(n.before <= n.soft && n.soft <= n.hard, "{n:?}");
        assert_eq!(descriptor_limit().unwrap(), n.soft);
        // raising again changes nothing
        let again = raise_nofile().unwrap();
        assert_eq!((again.before, again.soft), (n.soft, n.soft));
    }
}
