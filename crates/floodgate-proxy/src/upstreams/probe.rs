//! The active health check: for each server of a group with a `probe`, a task on the
//! proxy's runtime sends `GET path` every `interval` (hyper-util's client, `Host` the
//! server's authority, h2c when the upstreams speak it). An answer 2xx or 3xx within
//! `timeout` passes; anything else (another status, no connection, no head in time)
//! fails. A failing server is not taken until a probe passes; probes do not count
//! towards passive health.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::task::JoinHandle;

use super::{ProbeSpec, Server, Upstreams, shown_url};

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
/// probe. `http2`: the upstreams speak h2c (prior knowledge).
pub(crate) fn start(upstreams: &Arc<Upstreams>, http2: bool) -> Probes {
    let mut tasks = Vec::new();
    for g in upstreams.groups() {
        let Some(spec) = &g.spec.probe else {
            continue;
        };
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(spec.timeout));
        let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_only(http2)
            .build(connector);
        for s in &g.servers {
            tasks.push(tokio::spawn(run(
                client.clone(),
                spec.clone(),
                s.clone(),
                g.spec.name.clone(),
            )));
        }
    }
    Probes(tasks)
}

async fn run(
    client: Client<HttpConnector, Empty<Bytes>>,
    spec: ProbeSpec,
    server: Arc<Server>,
    group: String,
) {
    let uri: Option<Uri> = format!("http://{}{}", server.authority, spec.path)
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

async fn probe(
    client: &Client<HttpConnector, Empty<Bytes>>,
    uri: &Uri,
    spec: &ProbeSpec,
) -> Result<(), String> {
    let req = Request::get(uri.clone())
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(spec.timeout, client.request(req)).await {
        Err(_) => Err(format!("no answer within {:?}", spec.timeout)),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(resp)) if resp.status().is_success() || resp.status().is_redirection() => Ok(()),
        Ok(Ok(resp)) => Err(format!("answered {}", resp.status())),
    }
}
