//! A raw recording backend and a raw client, for tests that look at exact bytes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The requests a [`Recorder`] received, each its exact bytes (head and body).
pub type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// A raw backend: reads requests (a body by `Content-Length` or chunked), records each
/// one's exact bytes, and answers `200 ok`, or for `/huge-length` a `Content-Length` of
/// 2^64-1, for `/max-length` one of 2^63-1, for `/big` 32 MiB.
pub struct Recorder {
    pub addr: SocketAddr,
    pub received: Received,
    /// When each backend connection ended, in order.
    pub closed: Arc<Mutex<Vec<Instant>>>,
}

impl Recorder {
    pub async fn start() -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let received: Received = Arc::default();
        let closed: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let (rec, ends) = (received.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let (rec, ends) = (rec.clone(), ends.clone());
                tokio::spawn(async move {
                    record(s, rec).await;
                    ends.lock().unwrap().push(Instant::now());
                });
            }
        });
        Recorder {
            addr,
            received,
            closed,
        }
    }

    pub fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.received.lock().unwrap())
    }
}

async fn record(mut s: TcpStream, rec: Received) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = find(&buf, b"\r\n\r\n") else {
            if !fill(&mut s, &mut buf).await {
                return;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end + 4]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        let chunked = head
            .lines()
            .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
        let mut total = end + 4;
        if chunked {
            loop {
                if let Some(e) = find(&buf[total..], b"0\r\n\r\n") {
                    total += e + 5;
                    break;
                }
                if !fill(&mut s, &mut buf).await {
                    return;
                }
            }
        } else if let Some(n) = length {
            while buf.len() < total + n {
                if !fill(&mut s, &mut buf).await {
                    return;
                }
            }
            total += n;
        }
        let req: Vec<u8> = buf.drain(..total).collect();
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        rec.lock().unwrap().push(req);
        let answer: Vec<u8> = match path.as_str() {
            "/huge-length" => {
                b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\nok".to_vec()
            }
            "/max-length" => {
                b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\nok".to_vec()
            }
            "/big" => {
                let mut v = b"HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\n\r\n".to_vec();
                v.resize(v.len() + (32 << 20), b'x');
                v
            }
            _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        };
        if s.write_all(&answer).await.is_err() {
            return;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match s.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// One response as the client read it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
}

/// Send `bytes` on a new connection and read the responses until the proxy closes the
/// connection or `want` responses have come and nothing more follows for 100 ms.
pub async fn exchange(proxy: SocketAddr, bytes: &[u8], want: usize) -> Vec<Answer> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    // a write may fail when the proxy has closed after a refusal: what came is read
    let _ = s.write_all(bytes).await;
    let bodyless = bytes.starts_with(b"HEAD ");
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        while let Some((a, used)) = parse_response(&buf, bodyless) {
            out.push(a);
            buf.drain(..used);
        }
        let wait = if out.len() >= want {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        };
        let mut chunk = vec![0u8; 64 * 1024];
        match tokio::time::timeout(wait, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    out
}

/// A complete response at the front of `buf` (length-delimited or chunked bodies; none
/// when `bodyless`, the answer to a HEAD), and the bytes it takes.
pub fn parse_response(buf: &[u8], bodyless: bool) -> Option<(Answer, usize)> {
    let end = find(buf, b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let status = head.get(9..12)?.parse().ok()?;
    if bodyless {
        return Some((Answer { status, head }, end));
    }
    let lower = head.to_ascii_lowercase();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    if lower.contains("transfer-encoding: chunked") {
        let e = find(&buf[end..], b"0\r\n\r\n")?;
        return Some((Answer { status, head }, end + e + 5));
    }
    let total = end.checked_add(length.unwrap_or(0))?;
    (buf.len() >= total).then_some((Answer { status, head }, total))
}

/// The value of one sample line (`name{labels} value`) in a text exposition; 0 when
/// absent.
pub fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}
