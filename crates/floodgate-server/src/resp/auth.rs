//! `AUTH` and `HELLO` on the RESP door, worded as Redis 6 and later answer them.
//!
//! With a password configured (`resp.password_file`, `password_env` or `password`), a
//! connection starts unauthenticated: every command but `AUTH`, `HELLO` and `QUIT` gets
//! [`NOAUTH`] until `AUTH <password>`, `AUTH <username> <password>` or
//! `HELLO <2|3> AUTH <username> <password>` succeeds; a wrong pair gets [`WRONGPASS`]
//! (both counted in `floodgate_auth_failures_total{front="resp"}`). Without one, every
//! connection is authenticated from the start, `AUTH <password>` gets Redis's
//! "without any password configured" error and `AUTH default <anything>` is accepted, as
//! Redis's `nopass` default user.

use super::{Conn, Reply, RespService};
use crate::config::DEFAULT_USER;
use crate::metrics::AuthFailure;

/// The answer to a command sent before authenticating (Redis's, to the byte).
pub const NOAUTH: &str = "NOAUTH Authentication required.";
/// The answer to a wrong user name or password (Redis 6's).
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// The answer to `HELLO <version>` without `AUTH` before authenticating (Redis's).
pub const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";
/// The answer to `AUTH <password>` on a server without a password (Redis's).
pub const NO_PASSWORD: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";

impl RespService {
    /// Whether `conn` may run commands other than `AUTH`, `HELLO`, `QUIT`.
    pub(super) fn authenticated(&self, conn: &Conn) -> bool {
        self.auth.is_none() || conn.authenticated
    }

    /// [`NOAUTH`] for `name` on an unauthenticated `conn` (counted), `None` to go on.
    pub(super) fn gate(&self, conn: &Conn, name: &str) -> Option<Reply> {
        if self.authenticated(conn) || matches!(name, "AUTH" | "HELLO" | "QUIT") {
            return None;
        }
        self.metrics.auth_failure("resp", AuthFailure::NoAuth);
        Some(Reply::Error(NOAUTH.into()))
    }

    /// Check a user name (`None`: the default user) and password; on success `conn` is
    /// authenticated, on failure it stays as it was and the failure is counted.
    fn login(&self, conn: &mut Conn, user: Option<&[u8]>, password: &[u8]) -> Result<(), Reply> {
        let ok = match &self.auth {
            Some(auth) => auth.accepts(user, password),
            // Redis's default user without a password takes any password
            None => user.is_none_or(|u| u == DEFAULT_USER.as_bytes()),
        };
        if ok {
            conn.authenticated = true;
            Ok(())
        } else {
            self.metrics
                .auth_failure("resp", AuthFailure::WrongPassword);
            Err(Reply::Error(WRONGPASS.into()))
        }
    }

    /// `AUTH <password>` or `AUTH <username> <password>`.
    pub(super) fn auth_command(&self, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
        let result = match args.len() {
            2 if self.auth.is_none() => return Reply::Error(NO_PASSWORD.into()),
            2 => self.login(conn, None, &args[1]),
            3 => self.login(conn, Some(&args[1]), &args[2]),
            1 => {
                return Reply::Error("ERR wrong number of arguments for 'auth' command".into());
            }
            _ => return Reply::Error("ERR syntax error".into()),
        };
        match result {
            Ok(()) => Reply::Simple("OK"),
            Err(e) => e,
        }
    }

    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
    pub(super) fn hello(&self, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
        let mut proto = None;
        if let Some(v) = args.get(1) {
            match std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(v @ (2 | 3)) => proto = Some(v == 3),
                Some(_) => return Reply::Error("NOPROTO unsupported protocol version".into()),
                None => {
                    return Reply::Error(
                        "ERR Protocol version is not an integer or out of range".into(),
                    );
                }
            }
        }
        let mut login = None;
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - 1 - j;
            let opt = String::from_utf8_lossy(&args[j]).to_ascii_uppercase();
            match opt.as_str() {
                "AUTH" if more >= 2 => {
                    login = Some((&args[j + 1], &args[j + 2]));
                    j += 3;
                }
                "SETNAME" if more >= 1 => j += 2,
                _ => {
                    return Reply::Error(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(&args[j][..args[j].len().min(128)])
                    ));
                }
            }
        }
        if let Some((user, password)) = login
            && let Err(e) = self.login(conn, Some(user), password)
        {
            return e;
        }
        if !self.authenticated(conn) {
            self.metrics.auth_failure("resp", AuthFailure::NoAuth);
            return Reply::Error(HELLO_NOAUTH.into());
        }
        if let Some(resp3) = proto {
            conn.resp3 = resp3;
        }
        Reply::Hello {
            resp3: conn.resp3,
            proto: if conn.resp3 { 3 } else { 2 },
        }
    }
}
