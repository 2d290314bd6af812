//! The access log's line formats: nginx's `combined` followed by floodgate's fields, and
//! JSON lines ([`AccessFormat`]), written into a caller's buffer ([`Entry::write`]).
//!
//! Every value taken from the request is escaped as nginx escapes it: in `combined`,
//! `"`, `\`, control bytes (below 0x20, and 0x7f) and bytes from 0x80 on become `\xHH`;
//! in JSON, the string escapes of RFC 8259, with bytes that are not UTF-8 as `\u00HH`.
//! So no client can end a field, forge a line, or send a terminal escape to whoever
//! reads the log.

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use floodgate_http::RecordedDecision;
use http::{HeaderValue, Method, Version};
use serde::Deserialize;

/// The format of the access log's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessFormat {
    /// nginx's `combined`, then `rl=OUTCOME policy=NAME key=KEY rt=SECONDS`.
    #[default]
    Combined,
    /// One JSON object per line.
    Json,
}

/// One request's line: what the request said, what was answered, what the limiter
/// decided.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    /// When the response ended.
    pub time: SystemTime,
    /// The client's address (the connection's peer, nginx's `$remote_addr`).
    pub remote_addr: IpAddr,
    /// `None` for a head the parser refused (no request line to show: `"-"`, and
    /// `null` method, path and protocol in JSON); `target` and `version` are then unused.
    pub method: Option<&'a Method>,
    /// The request target as the request line gave it (path and query).
    pub target: &'a [u8],
    pub version: Version,
    pub status: u16,
    /// Body bytes sent to the client.
    pub bytes: u64,
    pub referer: Option<&'a HeaderValue>,
    pub user_agent: Option<&'a HeaderValue>,
    /// From the request's first byte to the response's end, seconds.
    pub request_time: f64,
    /// The limiter's decision (`None`: no route limited the request).
    pub decided: Option<&'a RecordedDecision>,
}

impl Entry<'_> {
    /// Append the line (its newline included) to `out`.
    pub(crate) fn write(&self, format: AccessFormat, out: &mut Vec<u8>) {
        match format {
            AccessFormat::Combined => self.combined(out),
            AccessFormat::Json => self.json(out),
        }
    }

    fn combined(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let _ = write!(out, "{} - - [", self.remote_addr);
        time_local(self.time, out);
        out.extend_from_slice(b"] \"");
        match self.method {
            Some(method) => {
                escape_nginx(method.as_str().as_bytes(), out);
                out.push(b' ');
                escape_nginx(self.target, out);
                out.push(b' ');
                out.extend_from_slice(protocol(self.version).as_bytes());
            }
            None => out.push(b'-'),
        }
        let _ = write!(out, "\" {} {} \"", self.status, self.bytes);
        escape_nginx(self.referer.map_or(b"-", |v| v.as_bytes()), out);
        out.extend_from_slice(b"\" \"");
        escape_nginx(self.user_agent.map_or(b"-", |v| v.as_bytes()), out);
        out.extend_from_slice(b"\" rl=");
        let d = self.decided;
        out.extend_from_slice(d.map_or("-", |d| d.outcome.as_str()).as_bytes());
        out.extend_from_slice(b" policy=");
        escape_nginx(
            d.and_then(|d| d.policy.as_deref())
                .unwrap_or("-")
                .as_bytes(),
            out,
        );
        out.extend_from_slice(b" key=");
        escape_key(d.and_then(|d| d.key.as_deref()).unwrap_or("-"), out);
        let _ = writeln!(out, " rt={:.3}", self.request_time);
    }

    fn json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        out.extend_from_slice(b"{\"time\":\"");
        rfc3339(self.time, out);
        let _ = write!(
            out,
            "\",\"remote_addr\":\"{}\",\"method\":",
            self.remote_addr
        );
        json_opt(self.method.map(|m| m.as_str().as_bytes()), out);
        out.extend_from_slice(b",\"path\":");
        json_opt(self.method.map(|_| self.target), out);
        out.extend_from_slice(b",\"protocol\":");
        json_opt(self.method.map(|_| protocol(self.version).as_bytes()), out);
        let _ = write!(
            out,
            ",\"status\":{},\"bytes\":{},\"referer\":",
            self.status, self.bytes
        );
        json_opt(self.referer.map(|v| v.as_bytes()), out);
        out.extend_from_slice(b",\"user_agent\":");
        json_opt(self.user_agent.map(|v| v.as_bytes()), out);
        let _ = write!(
            out,
            ",\"request_time_ms\":{:.3},\"outcome\":",
            self.request_time * 1000.0
        );
        let d = self.decided;
        json_opt(d.map(|d| d.outcome.as_str().as_bytes()), out);
        out.extend_from_slice(b",\"policy\":");
        json_opt(d.and_then(|d| d.policy.as_deref()).map(str::as_bytes), out);
        out.extend_from_slice(b",\"key\":");
        json_opt(d.and_then(|d| d.key.as_deref()).map(str::as_bytes), out);
        out.extend_from_slice(b"}\n");
    }
}

/// The request line's protocol, as nginx's `$server_protocol`.
fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "-",
    }
}

/// Append `bytes` escaped as nginx's log module escapes variables: `"`, `\`, control
/// bytes and bytes from 0x7f on as `\xHH`, the rest as they are.
pub(crate) fn escape_nginx(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            push_hex(b, out);
        } else {
            out.push(b);
        }
    }
}

/// A key in `combined`: escaped as [`escape_nginx`] does, and a space as `\x20` too, so
/// that the `key=` field ends at the next space.
fn escape_key(key: &str, out: &mut Vec<u8>) {
    for &b in key.as_bytes() {
        if b == b' ' {
            push_hex(b, out);
        } else {
            escape_nginx(&[b], out);
        }
    }
}

fn push_hex(b: u8, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(&[
        b'\\',
        b'x',
        HEX[usize::from(b >> 4)],
        HEX[usize::from(b & 15)],
    ]);
}

/// `null` or the JSON string of `bytes`.
fn json_opt(bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    match bytes {
        Some(b) => json_str(b, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// Append `bytes` as a JSON string: valid UTF-8 as it is (escaped as RFC 8259 says),
/// each byte of an invalid sequence as `\u00HH`.
pub(crate) fn json_str(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let b = c as u8;
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 15)]);
                }
                c => {
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        for &b in chunk.invalid() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 15)]);
        }
    }
    out.push(b'"');
}

/// The UTC calendar date and time of `t`: (year, month 1-12, day, hour, minute, second,
/// millisecond).
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400) as u32);
    // days to a civil date (H. Hinnant's algorithm, proleptic Gregorian)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis(),
    )
}

/// nginx's `$time_local`, in UTC: `07/Dec/2026:11:45:46 +0000`.
fn time_local(t: SystemTime, out: &mut Vec<u8>) {
    use std::io::Write;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s, _) = civil(t);
    let month = MONTHS[(mo - 1) as usize];
    let _ = write!(out, "{d:02}/{month}/{y:04}:{h:02}:{mi:02}:{s:02} +0000");
}

/// RFC 3339 in UTC, to the millisecond: `2026-12-07T11:45:46.123Z`.
fn rfc3339(t: SystemTime, out: &mut Vec<u8>) {
    use std::io::Write;
    let (y, mo, d, h, mi, s, ms) = civil(t);
    let _ = write!(out, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn esc(b: &[u8]) -> String {
        let mut out = Vec::new();
        escape_nginx(b, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_quotes_controls_and_high_bytes_as_nginx() {
        assert_eq!(esc(b"/a?b=c"), "/a?b=c");
        assert_eq!(esc(b"/\"x\" 200"), "/\\x22x\\x22 200");
        assert_eq!(esc(b"a\nb\rc\x01\x7f\\"), "a\\x0Ab\\x0Dc\\x01\\x7F\\x5C");
        assert_eq!(esc("é".as_bytes()), "\\xC3\\xA9");
    }

    #[test]
    fn a_refused_head_has_no_request_line() {
        let e = Entry {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000),
            remote_addr: "127.0.0.1".parse().unwrap(),
            method: None,
            target: b"/ignored",
            version: Version::HTTP_11,
            status: 431,
            bytes: 0,
            referer: None,
            user_agent: None,
            request_time: 0.002,
            decided: None,
        };
        let mut out = Vec::new();
        e.write(AccessFormat::Combined, &mut out);
        let line = String::from_utf8(out).unwrap();
        assert!(
            line.ends_with("] \"-\" 431 0 \"-\" \"-\" rl=- policy=- key=- rt=0.002\n"),
            "{line}"
        );
        let mut out = Vec::new();
        e.write(AccessFormat::Json, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        for field in ["method", "path", "protocol", "outcome", "policy", "key"] {
            assert_eq!(v[field], serde_json::Value::Null, "{field}: {v}");
        }
        assert_eq!(
            (v["status"].as_u64(), v["bytes"].as_u64()),
            (Some(431), Some(0))
        );
    }

    #[test]
    fn every_byte_escaped_leaves_only_printable_ascii_without_quotes() {
        let all: Vec<u8> = (0..=255).collect();
        let s = esc(&all);
        assert!(s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"'));
    }

    #[test]
    fn json_strings_parse_back_to_what_was_given() {
        for s in ["plain", "q\"uote\\", "new\nline\u{1}\u{7f}", "é ü"] {
            let mut out = Vec::new();
            json_str(s.as_bytes(), &mut out);
            let back: String = serde_json::from_slice(&out).unwrap();
            assert_eq!(back, s);
        }
        let mut out = Vec::new();
        json_str(b"a\xffb", &mut out);
        let back: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, "a\u{ff}b");
    }

    #[test]
    fn dates_match_known_instants() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let mut out = Vec::new();
        time_local(at(0), &mut out);
        assert_eq!(out, b"01/Jan/1970:00:00:00 +0000");
        out.clear();
        // 2000-02-29 (a leap day of a century leap year)
        time_local(at(951_782_400), &mut out);
        assert_eq!(out, b"29/Feb/2000:00:00:00 +0000");
        out.clear();
        rfc3339(at(1_796_643_946) + Duration::from_millis(7), &mut out);
        assert_eq!(out, b"2026-12-07T11:45:46.007Z");
        out.clear();
        rfc3339(at(4_102_444_799), &mut out);
        assert_eq!(out, b"2099-12-31T23:59:59.000Z");
    }
}
