//! The doors' security settings: the RESP door's password and command set (`resp:`), TLS
//! (`tls:`, [`crate::tls`]). Read once at startup, as the other [`Settings`](super::Settings).

use super::{Invalid, invalid};
use crate::file::{HttpFile, RespFile};

/// A password: never shown (`Debug` prints `***`), compared in constant time.
#[derive(Clone)]
pub struct Password(Vec<u8>);

impl Password {
    /// A password of these bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Password {
        Password(bytes.into())
    }

    /// Whether `given` is this password. The time taken depends on the lengths only,
    /// never on where the bytes differ.
    pub fn matches(&self, given: &[u8]) -> bool {
        constant_time_eq(given, &self.0)
    }
}

/// `a == b` in a time that depends on `a.len()` and `b.len()` only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in b.iter().enumerate() {
        let y = a.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(***)")
    }
}

impl PartialEq for Password {
    fn eq(&self, other: &Self) -> bool {
        self.matches(&other.0)
    }
}

/// Who may use the RESP door: `AUTH <password>` or `AUTH <username> <password>`.
#[derive(Debug, Clone, PartialEq)]
pub struct RespAuth {
    /// The user name of Redis 6's two-argument form (`default` unless configured).
    pub username: String,
    /// The password.
    pub password: Password,
}

impl RespAuth {
    /// Whether `username` (`None`: the one-argument form, the `default` user's) and
    /// `password` are these. Both are compared in constant time, whichever differs.
    pub fn accepts(&self, username: Option<&[u8]>, password: &[u8]) -> bool {
        let user = constant_time_eq(
            username.unwrap_or(DEFAULT_USER.as_bytes()),
            self.username.as_bytes(),
        );
        let pass = self.password.matches(password);
        user & pass
    }
}

/// Redis's user of the one-argument `AUTH`.
pub const DEFAULT_USER: &str = "default";

/// The RESP door's settings (`resp:`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RespSettings {
    /// `None`: no password, every client may send every command (Redis without
    /// `requirepass`). `Some`: every command but `AUTH`, `HELLO` and `QUIT` waits for
    /// `AUTH`.
    pub auth: Option<RespAuth>,
    /// Refuse `CL.THROTTLE` and `FG.ACQUIRE` (the caller's rate or limit): only the
    /// config's policies decide.
    pub policies_only: bool,
}

/// The HTTP door's settings (`http:`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HttpSettings {
    /// `None`: the `/v1` calls take any caller. `Some`: they need
    /// `Authorization: Bearer <token>`.
    pub token: Option<Password>,
}

/// Where a secret of section `section` may come from: its value, a file, a variable.
struct SecretSource<'a> {
    section: &'static str,
    /// `password` or `token`: the fields are `{name}`, `{name}_file`, `{name}_env`.
    name: &'static str,
    value: Option<&'a str>,
    file: Option<&'a std::path::Path>,
    env: Option<&'a str>,
}

/// The secret of `s` from exactly one of its value, its file (the content less one
/// trailing newline) and its environment variable; an empty one is an error.
fn secret(s: SecretSource<'_>) -> Result<Option<Password>, Invalid> {
    let (section, name) = (s.section, s.name);
    let given = [s.value.is_some(), s.file.is_some(), s.env.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(invalid(
            section,
            format!("set one of {name}, {name}_file and {name}_env"),
        ));
    }
    let (field, bytes) = if let Some(p) = s.value {
        (format!("{section}.{name}"), p.as_bytes().to_vec())
    } else if let Some(path) = s.file {
        let field = format!("{section}.{name}_file");
        let mut bytes = std::fs::read(path)
            .map_err(|e| invalid(&field, format!("cannot read {}: {e}", path.display())))?;
        if bytes.ends_with(b"\n") {
            bytes.pop();
            if bytes.ends_with(b"\r") {
                bytes.pop();
            }
        }
        (field, bytes)
    } else if let Some(var) = s.env {
        let field = format!("{section}.{name}_env");
        let value = std::env::var_os(var)
            .ok_or_else(|| invalid(&field, format!("the environment variable {var} is not set")))?;
        (field, value.into_encoded_bytes())
    } else {
        return Ok(None);
    };
    if bytes.is_empty() {
        return Err(invalid(field, format!("the {name} is empty")));
    }
    Ok(Some(Password(bytes)))
}

/// Check `http:`.
pub(super) fn http(h: &HttpFile) -> Result<HttpSettings, Invalid> {
    Ok(HttpSettings {
        token: secret(SecretSource {
            section: "http",
            name: "token",
            value: h.token.as_deref(),
            file: h.token_file.as_deref(),
            env: h.token_env.as_deref(),
        })?,
    })
}

/// Check `resp:`.
pub(super) fn resp(r: &RespFile) -> Result<RespSettings, Invalid> {
    let password = secret(SecretSource {
        section: "resp",
        name: "password",
        value: r.password.as_deref(),
        file: r.password_file.as_deref(),
        env: r.password_env.as_deref(),
    })?;
    let username = match &r.username {
        Some(u) if password.is_none() => {
            return Err(invalid(
                "resp.username",
                format!("user {u:?} has no password: set password_file, password_env or password"),
            ));
        }
        Some(u) if u.is_empty() || u.bytes().any(|b| b.is_ascii_whitespace()) => {
            return Err(invalid(
                "resp.username",
                "a user name is one word, not empty",
            ));
        }
        Some(u) => u.clone(),
        None => DEFAULT_USER.to_string(),
    };
    Ok(RespSettings {
        auth: password.map(|password| RespAuth { username, password }),
        policies_only: r.policies_only,
    })
}

/// What `settings` leaves open to anyone who reaches a door bound beyond loopback: one
/// sentence per door (logged as a warning at startup).
pub fn exposure_warnings(settings: &super::Settings) -> Vec<String> {
    use crate::tls::Door;
    let tls = |door| {
        settings
            .tls
            .as_ref()
            .is_some_and(|t| t.acceptor(door).is_some())
    };
    let mtls = settings
        .tls
        .as_ref()
        .is_some_and(|t| t.client_ca_file.is_some());
    let open = |a: Option<std::net::SocketAddr>| a.filter(|a| !a.ip().is_loopback());
    let mut out = Vec::new();
    if let Some(a) = open(settings.resp)
        && settings.resp_door.auth.is_none()
        && !(tls(Door::Resp) && mtls)
    {
        out.push(format!(
            "the RESP door listens on {a} without resp.password_file or client certificates: anyone who reaches it can run any command{}",
            if settings.resp_door.policies_only {
                ""
            } else {
                ", including CL.THROTTLE with a rate of their choosing (resp.policies_only refuses it)"
            }
        ));
    }
    let token = settings.http_door.token.is_some();
    for (door, addr) in [(Door::Grpc, settings.grpc), (Door::Http, settings.http)] {
        if let Some(a) = open(addr)
            && !(tls(door) && mtls)
            && !(door == Door::Http && token)
        {
            out.push(format!(
                "the {} door listens on {a} without client certificates (tls.client_ca_file): anyone who reaches it can spend any limit",
                door.label()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_takes_every_byte_and_the_length() {
        assert!(constant_time_eq(b"hunter2", b"hunter2"));
        assert!(!constant_time_eq(b"hunter3", b"hunter2"));
        assert!(!constant_time_eq(b"hunter", b"hunter2"));
        assert!(!constant_time_eq(b"hunter2x", b"hunter2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
        let auth = RespAuth {
            username: "app".into(),
            password: Password::new("pw"),
        };
        assert!(auth.accepts(Some(b"app"), b"pw"));
        assert!(!auth.accepts(None, b"pw"));
        assert!(!auth.accepts(Some(b"app"), b"pW"));
        assert_eq!(format!("{:?}", auth.password), "Password(***)");
    }

    #[test]
    fn doors_beyond_loopback_without_a_password_or_client_certificates_are_reported() {
        let warnings = |yaml: &str| {
            let c = super::super::parse(std::path::Path::new("l.yaml"), yaml).unwrap();
            exposure_warnings(&c.settings)
        };
        assert!(warnings("").is_empty());
        let w = warnings("listen: {resp: 0.0.0.0:16379, grpc: \"off\", http: \"off\"}\n");
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("the RESP door listens on 0.0.0.0:16379 without resp.password_file")
                && w[0].contains("CL.THROTTLE with a rate of their choosing"),
            "{w:?}"
        );
        let w = warnings(
            "listen: {resp: 0.0.0.0:16379, grpc: 0.0.0.0:8081, http: \"off\"}\nresp: {password: x}\n",
        );
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("the grpc door listens on 0.0.0.0:8081 without client certificates"),
            "{w:?}"
        );
    }
}
