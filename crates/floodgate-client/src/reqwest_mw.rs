//! Middleware for reqwest through `reqwest-middleware`: the same engine as the tower layer.

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use crate::polite::{Attempt, Polite, Verdict};

/// Pacing, backoff with jitter under the retry budget, and optional concurrency limiting
/// for a `reqwest_middleware::ClientWithMiddleware`. Requests whose body cannot be cloned
/// (streams) are sent once.
///
/// ```no_run
/// use floodgate_client::{Polite, PoliteConfig, PoliteMiddleware};
/// use reqwest_middleware::ClientBuilder;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Polite::new(PoliteConfig::default())?;
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(PoliteMiddleware::new(engine.clone()))
///     .build();
/// let resp = client.get("http://127.0.0.1:8080/").send().await?;
/// println!("{} ({} retries so far)", resp.status(), engine.stats().retries);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PoliteMiddleware {
    engine: Polite,
}

impl PoliteMiddleware {
    /// Middleware sharing `engine`.
    pub fn new(engine: Polite) -> Self {
        PoliteMiddleware { engine }
    }
}

/// `host:port` of a URL (the pacing key), port defaulted by scheme.
fn url_host(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{}:{p}", h.to_ascii_lowercase()),
        (Some(h), None) => h.to_ascii_lowercase(),
        _ => String::new(),
    }
}

#[async_trait::async_trait]
impl Middleware for PoliteMiddleware {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let engine = &self.engine;
        let host = url_host(req.url());
        let template = req.try_clone();
        let mut attempt = Attempt::first(engine, req.method(), req.headers(), template.is_some());
        let mut next_req = req;
        engine.begin();
        loop {
            let sending = engine.before_send(&host).await;
            let res = next.clone().run(next_req, extensions).await;
            let reply = res.as_ref().ok().map(|r| (r.status(), r.headers()));
            let verdict = engine.after_send(&host, sending, reply, &mut attempt);
            let Verdict::RetryAfter(w) = verdict else {
                return res;
            };
            let Some(copy) = template.as_ref().and_then(Request::try_clone) else {
                return res;
            };
            next_req = copy;
            drop(res);
            tokio::time::sleep(w).await;
        }
    }
}
