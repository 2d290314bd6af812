//! What the layer's integration tests share.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tokio::sync::Semaphore;
use tower::Service;

/// A backend answering `status` with the body `ok` when `gate` gives it a permit (so
/// requests stay in flight until the test lets them go).
pub fn gated_backend(
    gate: Arc<Semaphore>,
    status: StatusCode,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_req: Request<Full<Bytes>>| {
        let gate = gate.clone();
        async move {
            gate.acquire().await.unwrap().forget();
            let mut r = Response::new(Full::new(Bytes::from_static(b"ok")));
            *r.status_mut() = status;
            Ok::<_, Infallible>(r)
        }
    })
}
