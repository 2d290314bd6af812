//! The active health check: for each server of a group with a `probe`, a task on the
//! proxy's runtime sends `GET path` every `interval` (hyper-util's client, `Host` the
//! server's authority, h2c when the upstreams speak it; over TLS, with the proxy's one
//! upstream TLS connector, to an `https://` server). An answer 2xx or 3xx within
//! `timeout` passes; anything else (another status, no connection, no head in time)
//! fails. A failing server is not taken until a probe passes; probes do not count
//! towards passive health.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_net::tls::ClientTls;
use http::{Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::task::JoinHandle;

use super::{ProbeSpec, Server, Upstreams, shown_url};
use crate::tls_connect::TlsConnector;

/// The client a probe asks with: cleartext, or TLS for an `https://` server.
#[derive(Clone)]
enum ProbeClient {
    Plain(Client<HttpConnector, Empty<Bytes>>),
    Tls(Client<TlsConnector, Empty<Bytes>>),
}

impl ProbeClient {
    /// A client for servers `tls` says, `http2`: h2c or ALPN `h2`.
    fn new(timeout: Duration, http2: bool, tls: Option<ClientTls>) -> ProbeClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_only(http2);
        match tls {
            None => ProbeClient::Plain(builder.build(connector)),
            Some(tls) => {
                connector.enforce_http(false);
                ProbeClient::Tls(builder.build(TlsConnector {
                    http: connector,
                    tls,
                    timeout,
                }))
            }
        }
    }

    async fn request(
        &self,
        req: Request<Empty<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, String> {
        let r = match self {
            ProbeClient::Plain(c) => c.request(req).await,
            ProbeClient::Tls(c) => c.request(req).await,
        };
        r.map_err(|e| crate::error_text::with_sources(&e))
    }
}

/// The probe tasks of a set of upstreams; dropping it stops them.
#[derive(Debug, Default)]
pub(crate) struct Probes(Vec<JoinHandle<()>>);

impl Drop for Probes {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Start, on the current runtime, a probe task for each server of each group that has a
/// probe. `http2`: the upstreams speak HTTP/2 (h2c prior knowledge, or ALPN `h2`); `tls`:
/// the connector to `https://` servers (given when some server is one).
pub(crate) fn start(upstreams: &Arc<Upstreams>, http2: bool, tls: Option<&ClientTls>) -> Probes {
    let mut tasks = Vec::new();
    for g in upstreams.groups() {
        let Some(spec) = &g.spec.probe else {
            continue;
        };
        let plain = ProbeClient::new(spec.timeout, http2, None);
        let secure = tls.map(|t| ProbeClient::new(spec.timeout, http2, Some(t.clone())));
        for s in &g.servers {
            let client = match (&secure, s.tls) {
                (Some(c), true) => c.clone(),
                _ => plain.clone(),
            };
            tasks.push(tokio::spawn(run(
                client,
                spec.clone(),
                s.clone(),
                g.spec.name.clone(),
            )));
        }
    }
    Probes(tasks)
}

async fn run(client: ProbeClient, spec: ProbeSpec, server: Arc<Server>, group: String) {
    let scheme = if server.tls { "https" } else { "http" };
    let uri: Option<Uri> = format!("{scheme}://{}{}", server.authority, spec.path)
        .parse()
        .ok();
    let mut tick = tokio::time::interval(spec.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let verdict = match &uri {
            None => Err("the probe path does not make a URL".to_string()),
            Some(uri) => probe(&client, uri, &spec).await,
        };
        let passed = verdict.is_ok();
        if server.health.set_probe(passed) {
            // the `up` gauge follows at the next rendering of /metrics
            match verdict {
                Ok(()) => {
                    tracing::info!(upstream = %group, server = %shown_url(&server.url), "upstream server passes its probe again")
                }
                Err(why) => {
                    tracing::warn!(upstream = %group, server = %shown_url(&server.url), %why, "upstream server fails its probe: not taken until it passes")
                }
            }
        }
    }
}

async fn probe(client: &ProbeClient, uri: &Uri, spec: &ProbeSpec) -> Result<(), String> {
    let req = Request::get(uri.clone())
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(spec.timeout, client.request(req)).await {
        Err(_) => Err(format!("no answer within {:?}", spec.timeout)),
        Ok(Err(e)) => Err(e),
        Ok(Ok(resp)) if resp.status().is_success() || resp.status().is_redirection() => Ok(()),
        Ok(Ok(resp)) => Err(format!("answered {}", resp.status())),
    }
}
