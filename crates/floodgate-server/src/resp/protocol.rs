//! The Redis protocol (RESP2, and RESP3's `HELLO` reply) as the RESP door speaks it:
//! parsing commands (arrays of bulk strings, inline commands, pipelined) under caps, and
//! encoding replies. Pure functions of bytes; never panics on any input (property-tested).

use thiserror::Error;

/// Caps on what one command may carry.
#[derive(Debug, Clone, Copy)]
pub struct RespLimits {
    /// Most elements in one command array.
    pub max_args: usize,
    /// Longest bulk string, bytes.
    pub max_bulk: usize,
    /// Longest inline command or header line, bytes.
    pub max_line: usize,
    /// Largest command, bytes from its first to its last (`connections.max_command_bytes`):
    /// an array is refused as soon as a bulk string's header says it would end past it,
    /// before its octets arrive, so a connection never buffers more than this of one
    /// command.
    pub max_command: usize,
}

impl Default for RespLimits {
    fn default() -> Self {
        RespLimits {
            max_args: 64,
            max_bulk: 64 * 1024,
            max_line: 64 * 1024,
            max_command: crate::config::DEFAULT_MAX_COMMAND_BYTES,
        }
    }
}

/// Input that is not RESP, or above a cap. The connection is closed after replying.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// `*N` with N not an integer or above the cap.
    #[error("Protocol error: invalid multibulk length")]
    BadArrayLength,
    /// `$N` with N not an integer or above the cap.
    #[error("Protocol error: invalid bulk length")]
    BadBulkLength,
    /// An array element that is not a bulk string.
    #[error("Protocol error: expected '$', got '{0}'")]
    ExpectedBulk(char),
    /// A bulk string not followed by CRLF.
    #[error("Protocol error: bulk string not terminated by CRLF")]
    MissingCrlf,
    /// A line longer than the cap without CRLF.
    #[error("Protocol error: too big inline request")]
    LineTooLong,
    /// An array with more elements than the cap.
    #[error("Protocol error: {0} arguments is more than the maximum of {1}")]
    TooManyArgs(usize, usize),
    /// A bulk string above the cap.
    #[error("Protocol error: bulk of {0} bytes is more than the maximum of {1}")]
    BulkTooLong(usize, usize),
    /// A command that would end past the cap on a command's size (bytes).
    #[error("Protocol error: command of more than {0} bytes")]
    CommandTooLong(usize),
}

/// A parsed command (its arguments; empty for a line to ignore) and the bytes it used.
pub type Parsed = Option<(Vec<Vec<u8>>, usize)>;

fn find_crlf(buf: &[u8], from: usize, max_line: usize) -> Result<Option<usize>, ProtocolError> {
    let end = buf
        .len()
        .min(from.saturating_add(max_line).saturating_add(2));
    match buf[from..end].windows(2).position(|w| w == b"\r\n") {
        Some(p) => Ok(Some(from + p)),
        None if buf.len() - from > max_line + 1 => Err(ProtocolError::LineTooLong),
        None => Ok(None),
    }
}

fn parse_int(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Parse one command from the front of `buf`. `Ok(None)`: more bytes are needed.
/// `Ok(Some((args, used)))`: a command (empty `args` for an empty line or `*0`, which
/// get no reply) and how many bytes it took.
///
/// ```
/// use floodgate_server::resp::{parse_command, ProtocolError, RespLimits};
/// let l = RespLimits::default();
/// let (args, used) = parse_command(b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\nnext", &l).unwrap().unwrap();
/// assert_eq!((args, used), (vec![b"PING".to_vec(), b"hi".to_vec()], 22));
/// assert_eq!(parse_command(b"*2\r\n$4\r\nPI", &l), Ok(None)); // incomplete
/// assert_eq!(parse_command(b"*1\r\n$99999999\r\n", &l), Err(ProtocolError::BulkTooLong(99_999_999, 65_536)));
/// ```
pub fn parse_command(buf: &[u8], limits: &RespLimits) -> Result<Parsed, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return parse_inline(buf, limits);
    }
    let Some(end) = find_crlf(buf, 1, 32)? else {
        return Ok(None);
    };
    let n = parse_int(&buf[1..end]).ok_or(ProtocolError::BadArrayLength)?;
    if n <= 0 {
        return Ok(Some((Vec::new(), end + 2)));
    }
    let n = n as usize;
    if n > limits.max_args {
        return Err(ProtocolError::TooManyArgs(n, limits.max_args));
    }
    let mut pos = end + 2;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        if pos >= buf.len() {
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return Err(ProtocolError::ExpectedBulk(char::from(buf[pos])));
        }
        let Some(end) = find_crlf(buf, pos + 1, 32)? else {
            return Ok(None);
        };
        let len = parse_int(&buf[pos + 1..end]).ok_or(ProtocolError::BadBulkLength)?;
        if len < 0 {
            return Err(ProtocolError::BadBulkLength);
        }
        let len = len as usize;
        if len > limits.max_bulk {
            return Err(ProtocolError::BulkTooLong(len, limits.max_bulk));
        }
        let start = end + 2;
        if start + len + 2 > limits.max_command {
            return Err(ProtocolError::CommandTooLong(limits.max_command));
        }
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        if &buf[start + len..start + len + 2] != b"\r\n" {
            return Err(ProtocolError::MissingCrlf);
        }
        args.push(buf[start..start + len].to_vec());
        pos = start + len + 2;
    }
    Ok(Some((args, pos)))
}

/// An inline command: one line ended by the first `\n` (a `\r` before it is dropped, so
/// `\r\n` and a bare `\n` from telnet or nc both end it), of at most `max_line` bytes,
/// split on spaces and tabs. The first `\n` ends it whatever follows, so the answer does
/// not depend on how the bytes arrive: `PING\nPING\r\n` is two commands in one read as
/// in two.
fn parse_inline(buf: &[u8], limits: &RespLimits) -> Result<Parsed, ProtocolError> {
    let limits = &RespLimits {
        max_line: limits.max_line.min(limits.max_command),
        ..*limits
    };
    // a line of max_line bytes, its '\r' and its '\n'
    let window = &buf[..buf.len().min(limits.max_line.saturating_add(2))];
    let Some(p) = window.iter().position(|&b| b == b'\n') else {
        // only a '\r' more may still end a line of max_line bytes
        return if buf.len() > limits.max_line.saturating_add(1) {
            Err(ProtocolError::LineTooLong)
        } else {
            Ok(None)
        };
    };
    let line = &buf[..p];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > limits.max_line {
        return Err(ProtocolError::LineTooLong);
    }
    Ok(Some((split_inline(line, limits)?, p + 1)))
}

fn split_inline(line: &[u8], limits: &RespLimits) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let args: Vec<Vec<u8>> = line
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if args.len() > limits.max_args {
        return Err(ProtocolError::TooManyArgs(args.len(), limits.max_args));
    }
    Ok(args)
}

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(&'static str),
    /// `-ERR ...`.
    Error(String),
    /// `$n ...`.
    Bulk(Vec<u8>),
    /// `*n` of integers.
    Ints(Vec<i64>),
    /// `:n`, one integer.
    Int(i64),
    /// `*0`.
    EmptyArray,
    /// The `HELLO` reply: a map in RESP3 (`%n`), a flat array in RESP2.
    Hello {
        /// Reply as RESP3.
        resp3: bool,
        /// The protocol now spoken.
        proto: i64,
    },
}

impl Reply {
    /// Append the RESP encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(e) => {
                out.push(b'-');
                // An error line must not contain CR or LF.
                out.extend(
                    e.bytes()
                        .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
                );
                out.extend_from_slice(b"\r\n");
            }
            Reply::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Ints(v) => {
                out.extend_from_slice(format!("*{}\r\n", v.len()).as_bytes());
                for i in v {
                    out.extend_from_slice(format!(":{i}\r\n").as_bytes());
                }
            }
            Reply::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Reply::EmptyArray => out.extend_from_slice(b"*0\r\n"),
            Reply::Hello { resp3, proto } => {
                let fields: [(&str, Option<&str>, i64); 7] = [
                    ("server", Some("floodgate"), 0),
                    ("version", Some(env!("CARGO_PKG_VERSION")), 0),
                    ("proto", None, *proto),
                    ("id", None, 1),
                    ("mode", Some("standalone"), 0),
                    ("role", Some("master"), 0),
                    ("modules", None, -1),
                ];
                let head = if *resp3 {
                    format!("%{}\r\n", fields.len())
                } else {
                    format!("*{}\r\n", fields.len() * 2)
                };
                out.extend_from_slice(head.as_bytes());
                for (k, s, i) in fields {
                    Reply::Bulk(k.as_bytes().to_vec()).encode(out);
                    match (s, i) {
                        (Some(s), _) => Reply::Bulk(s.as_bytes().to_vec()).encode(out),
                        (None, -1) => out.extend_from_slice(b"*0\r\n"),
                        (None, i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8]) -> Result<Parsed, ProtocolError> {
        parse_command(s, &RespLimits::default())
    }

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn arrays_inline_and_partial_input() {
        let cmd = b"*3\r\n$4\r\nPING\r\n$0\r\n\r\n$3\r\na b\r\n";
        assert_eq!(
            parse(cmd).unwrap(),
            Some((args(&["PING", "", "a b"]), cmd.len()))
        );
        for cut in 0..cmd.len() {
            assert_eq!(parse(&cmd[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(
            parse(b"PING  x\r\nrest").unwrap(),
            Some((args(&["PING", "x"]), 9))
        );
        assert_eq!(parse(b"PING\n").unwrap(), Some((args(&["PING"]), 5)));
        assert_eq!(parse(b"\r\n").unwrap(), Some((vec![], 2)));
        assert_eq!(parse(b"*0\r\n").unwrap(), Some((vec![], 4)));
        assert_eq!(parse(b"*-1\r\n").unwrap(), Some((vec![], 5)));
    }

    #[test]
    fn malformed_and_oversized_input_is_an_error() {
        assert_eq!(parse(b"*x\r\n"), Err(ProtocolError::BadArrayLength));
        assert_eq!(
            parse(b"*1\r\n:1\r\n"),
            Err(ProtocolError::ExpectedBulk(':'))
        );
        assert_eq!(parse(b"*1\r\n$-1\r\n"), Err(ProtocolError::BadBulkLength));
        assert_eq!(
            parse(b"*1\r\n$2\r\nabc\r\n"),
            Err(ProtocolError::MissingCrlf)
        );
        assert_eq!(parse(b"*65\r\n"), Err(ProtocolError::TooManyArgs(65, 64)));
        assert_eq!(
            parse(b"*1\r\n$99999999999\r\n"),
            Err(ProtocolError::BulkTooLong(99_999_999_999, 64 * 1024))
        );
        assert_eq!(
            parse(b"*1\r\n$9999999999999999999999\r\n"),
            Err(ProtocolError::BadBulkLength)
        );
        assert_eq!(parse(&[b'*'; 100]), Err(ProtocolError::LineTooLong));
        // a command past max_command is refused on its bulk's header, before its octets
        let small = RespLimits {
            max_command: 40,
            ..RespLimits::default()
        };
        assert_eq!(
            parse_command(b"*2\r\n$4\r\nPING\r\n$20\r\n", &small),
            Err(ProtocolError::CommandTooLong(40))
        );
        assert!(parse_command(b"*2\r\n$4\r\nPING\r\n$10\r\n0123456789\r\n", &small).is_ok());
        assert_eq!(
            parse_command(&[b'a'; 50], &small),
            Err(ProtocolError::LineTooLong)
        );
        assert_eq!(parse(&vec![b'a'; 70_000]), Err(ProtocolError::LineTooLong));
        let many = format!("{}\r\n", "a ".repeat(100));
        assert_eq!(
            parse(many.as_bytes()),
            Err(ProtocolError::TooManyArgs(100, 64))
        );
    }

    /// Found by the `resp_frame` fuzz target: a bare `\n` ended an inline command only
    /// when no `\r\n` followed in the same read, so one client's bytes parsed one way
    /// when they arrived at once and another when split.
    #[test]
    fn an_inline_command_ends_at_its_first_newline_however_the_bytes_arrive() {
        let wire = b"PING\nECHO a\r\n";
        assert_eq!(parse(wire).unwrap(), Some((args(&["PING"]), 5)));
        assert_eq!(parse(&wire[5..]).unwrap(), Some((args(&["ECHO", "a"]), 8)));
        let zero = RespLimits {
            max_line: 0,
            ..RespLimits::default()
        };
        assert_eq!(parse_command(b"\n", &zero), Ok(Some((vec![], 1))));
        assert_eq!(parse_command(b"\n\n", &zero), Ok(Some((vec![], 1))));
        assert_eq!(parse_command(b"\r\n", &zero), Ok(Some((vec![], 2))));
        assert_eq!(
            parse_command(b"a\n", &zero),
            Err(ProtocolError::LineTooLong)
        );
        // a line of max_line bytes whose "\r\n" is split between two reads
        let four = RespLimits {
            max_line: 4,
            ..RespLimits::default()
        };
        assert_eq!(parse_command(b"PING\r", &four), Ok(None));
        assert_eq!(
            parse_command(b"PING\r\n", &four),
            Ok(Some((args(&["PING"]), 6)))
        );
        assert_eq!(
            parse_command(b"PINGS\r", &four),
            Err(ProtocolError::LineTooLong)
        );
        assert_eq!(
            parse_command(b"PINGS\n", &four),
            Err(ProtocolError::LineTooLong)
        );
    }

    #[test]
    fn never_panics_on_random_bytes() {
        let mut rng = fastrand::Rng::with_seed(7);
        let alphabet = b"*$:+-\r\n0123456789-abcPING ";
        for _ in 0..20_000 {
            let len = rng.usize(0..40);
            let v: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.usize(0..alphabet.len())])
                .collect();
            if let Ok(Some((_, used))) = parse(&v) {
                assert!(used <= v.len() && used > 0);
            }
        }
    }

    #[test]
    fn replies_encode_as_resp() {
        let mut out = Vec::new();
        Reply::Ints(vec![0, 16, 15, -1, 2]).encode(&mut out);
        Reply::Error("ERR a\r\nb".into()).encode(&mut out);
        Reply::Bulk(b"hi".to_vec()).encode(&mut out);
        assert_eq!(
            out,
            b"*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n-ERR a  b\r\n$2\r\nhi\r\n"
        );
    }
}
