//! Middleware for reqwest through `reqwest-middleware`: the same engine as the tower layer.

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use crate::polite::{Attempt, Polite, Verdict};
use crate::tower::outcome_of;

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
            let wait = engine.pace(&host);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let permit = match engine.limiter() {
                Some(l) => Some(l.acquire().await),
                None => None,
            };
            let res = next.clone().run(next_req, extensions).await;
            attempt.sent += 1;
            let verdict = match &res {
                Ok(resp) => {
                    if let Some(p) = permit {
                        p.release(outcome_of(resp.status()));
                    }
                    engine.on_response(&host, resp.status(), resp.headers(), &mut attempt)
                }
                Err(_) => {
                    if let Some(p) = permit {
                        p.dropped();
                    }
                    engine.on_error(&mut attempt)
                }
            };
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
