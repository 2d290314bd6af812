//! `floodgate top URL`: the top limited keys of a proxy's admin listener or a server's
//! HTTP listener, refreshed every second (the table is floodgate-engine's
//! `admin::text::top_table` of `/admin/api/top`).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use clap::Args;
use floodgate_engine::admin::text::{printable, top_table};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

use crate::exit::{UsageContext, usage};

const EXAMPLES: &str = "\
Examples:
  floodgate top http://127.0.0.1:9090                  # a proxy's admin listener, every second
  floodgate top http://127.0.0.1:8080 --policy per_user -n 20 --once
      a server's HTTP listener, one policy, 20 keys, printed once";

/// Flags of `floodgate top`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct TopArgs {
    /// The admin listener (proxy) or HTTP listener (server): http://127.0.0.1:9090
    url: String,
    /// Only this policy.
    #[arg(long)]
    policy: Option<String>,
    /// Keys listed per policy (1 to 100).
    #[arg(short = 'n', long, default_value_t = 10)]
    keys: usize,
    /// Print the table once and exit.
    #[arg(long)]
    once: bool,
    /// Print the table this many times, one second apart, then exit (default: until
    /// interrupted).
    #[arg(long, conflicts_with = "once")]
    count: Option<u64>,
}

/// `http://host:port[/...]` as `(host:port, base path)`.
fn split(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url:?}: give an http:// URL, e.g. http://127.0.0.1:9090"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.is_empty() {
        bail!("{url:?} has no host");
    }
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix("/admin").unwrap_or(path);
    Ok((authority.to_string(), path.to_string()))
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn get(authority: &str, path: &str) -> Result<(u16, Bytes)> {
    let stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(authority),
    )
    .await
    .with_context(|| format!("connecting to {authority}: timed out"))?
    .with_context(|| format!("cannot connect to {authority}"))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP handshake")?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header(http::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .context("building the request")?;
    let resp = tokio::time::timeout(Duration::from_secs(5), send.send_request(req))
        .await
        .context("no answer within 5 s")??;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// Run `floodgate top`.
pub fn run(args: TopArgs) -> Result<()> {
    if !(1..=100).contains(&args.keys) {
        return Err(usage(anyhow!("-n {}: give 1 to 100 keys", args.keys)));
    }
    let (authority, base) = split(&args.url).usage_err()?;
    let mut path = format!("{base}/admin/api/top?n={}", args.keys);
    if let Some(p) = &args.policy {
        path.push_str("&policy=");
        path.push_str(&percent(p));
    }
    let rounds = if args.once { Some(1) } else { args.count };
    let clear = rounds != Some(1) && std::io::stdout().is_terminal();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async {
        let mut done = 0u64;
        loop {
            let (status, body) = get(&authority, &path).await?;
            let v: serde_json::Value = serde_json::from_slice(&body).with_context(|| {
                format!(
                    "{}{path}: answer {status} is not JSON (is this a floodgate admin listener?)",
                    args.url
                )
            })?;
            if status != 200 {
                bail!(
                    "{}{path}: {status}: {}",
                    args.url,
                    printable(v["error"].as_str().unwrap_or("no message"))
                );
            }
            let table = top_table(&v).map_err(anyhow::Error::msg)?;
            let mut out = std::io::stdout().lock();
            if clear {
                write!(out, "\x1b[2J\x1b[H")?;
            }
            write!(out, "{table}")?;
            out.flush()?;
            done += 1;
            if rounds.is_some_and(|r| done >= r) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_split_into_authority_and_base() {
        assert_eq!(
            super::split("http://127.0.0.1:9090").unwrap(),
            ("127.0.0.1:9090".into(), String::new())
        );
        assert_eq!(
            super::split("http://h:1/x/admin/").unwrap(),
            ("h:1".into(), "/x".into())
        );
        assert!(super::split("https://h").is_err());
        assert!(super::split("http:///x").is_err());
        assert_eq!(super::percent("a b/é"), "a%20b%2F%C3%A9");
    }
}
