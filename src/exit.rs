//! Exit statuses of `floodgate`, decided at the binary's edge from the error's type.
//!
//! - 0: the command did what it was asked.
//! - 1: a runtime failure: an unreachable Redis or upstream, an address already in use, an
//!   answer the command could not use, a file it could not write.
//! - 2: a usage error: bad flags or arguments (clap's own parse errors exit 2 as well), a
//!   config file that cannot be read or is invalid. Nothing was started; fix the command
//!   line or the file.
//!
//! A command marks what is the invocation's fault with [`usage`] or [`UsageContext`]; every
//! other error is a runtime failure. The man page's EXIT STATUS section is [`EXIT_STATUS`].

use std::fmt;

/// A runtime failure (Redis, network, files written).
pub const RUNTIME: i32 = 1;
/// A usage error: flags, arguments, config files.
pub const USAGE: i32 = 2;

/// The exit statuses as `floodgate --help` and the man pages state them.
pub const EXIT_STATUS: &str = "\
Exit status:
  0  success
  1  runtime failure: Redis or an upstream unreachable, an address in use, a file not written
  2  usage error: bad flags or arguments, a config file unreadable or invalid (nothing started)";

/// An error that is the invocation's fault (exit status 2). It displays as the error it
/// wraps and keeps that error's causes, so the message reads the same.
#[derive(Debug)]
pub struct Usage(anyhow::Error);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Usage {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Mark `e` as a usage error (exit status 2).
pub fn usage(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(Usage(e.into()))
}

/// `.context(..)` that also marks the error as a usage error.
pub trait UsageContext<T> {
    /// The error, with `ctx` in front, as a usage error.
    fn usage(self, ctx: &str) -> anyhow::Result<T>;
    /// The error as it is, as a usage error.
    fn usage_err(self) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> UsageContext<T> for Result<T, E> {
    fn usage(self, ctx: &str) -> anyhow::Result<T> {
        self.map_err(|e| usage(e.into().context(ctx.to_string())))
    }
    fn usage_err(self) -> anyhow::Result<T> {
        self.map_err(usage)
    }
}

/// The exit status for a command's error: 2 when any layer of it is a [`Usage`] error,
/// otherwise 1.
pub fn status_of(e: &anyhow::Error) -> i32 {
    if e.downcast_ref::<Usage>().is_some() {
        USAGE
    } else {
        RUNTIME
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn usage_errors_exit_2_and_read_as_the_error_they_wrap() {
        let parse: Result<u32, _> = "x".parse::<u32>();
        let e = parse.usage("--rate").unwrap_err();
        assert_eq!(status_of(&e), USAGE);
        assert_eq!(format!("{e:#}"), "--rate: invalid digit found in string");
        // context added above a usage error keeps it one
        let e = Err::<(), _>(e).context("starting").unwrap_err();
        assert_eq!(status_of(&e), USAGE);
        assert_eq!(
            status_of(&usage(anyhow::anyhow!("--threads 0"))),
            USAGE,
            "a plain message"
        );
    }

    #[test]
    fn other_errors_are_runtime_failures() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Err::<(), _>(io).context("cannot connect").unwrap_err();
        assert_eq!(status_of(&e), RUNTIME);
    }
}
