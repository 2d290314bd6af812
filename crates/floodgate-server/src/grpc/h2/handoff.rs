//! Requests the door hands to tonic: each runs in a task of its own through
//! [`GrpcDoor::handle`], its body fed by the connection ([`ChannelBody`]), its reply sent
//! back to the connection as [`Event`]s.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame};
use tokio::sync::mpsc;

use super::hpack;
use crate::grpc::serve::GrpcDoor;

/// What a stream's tonic task (or its request body) tells the connection.
pub enum Event {
    /// The reply's head; `true` if nothing follows.
    Head(u32, http::response::Parts, bool),
    /// Reply data.
    Data(u32, Bytes),
    /// The reply's trailers (its end).
    Trailers(u32, HeaderMap),
    /// The reply ended without trailers.
    End(u32),
    /// The reply's body failed: the stream is reset.
    Failed(u32),
    /// Request octets the body handed to tonic: their window goes back to the client.
    Consumed(u32, usize),
}

/// A reply's header block: `:status` and the fields, each a literal without indexing.
pub fn response_block(parts: &http::response::Parts) -> Vec<u8> {
    let mut block = Vec::with_capacity(64);
    if parts.status == http::StatusCode::OK {
        block.push(0x88);
    } else {
        hpack::put_field(&mut block, 8, b"", parts.status.as_str().as_bytes());
    }
    for (n, v) in &parts.headers {
        hpack::put_field(&mut block, 0, n.as_str().as_bytes(), v.as_bytes());
    }
    block
}

/// A request answered by tonic, in its own task: the reply's head, data and trailers
/// are sent to the connection as they come.
pub async fn tonic_call(
    door: Arc<GrpcDoor>,
    id: u32,
    req: http::Request<ChannelBody>,
    events: mpsc::UnboundedSender<Event>,
) {
    let (parts, mut body) = door.handle(req).await.into_parts();
    let end = body.is_end_stream();
    if events.send(Event::Head(id, parts, end)).is_err() || end {
        return;
    }
    loop {
        let event = match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => Event::End(id),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Event::Data(id, data),
                Err(frame) => match frame.into_trailers() {
                    Ok(trailers) => Event::Trailers(id, trailers),
                    Err(_) => continue,
                },
            },
            Some(Err(_)) => Event::Failed(id),
        };
        let last = !matches!(event, Event::Data(..));
        if events.send(event).is_err() || last {
            return;
        }
    }
}

/// A request body fed by the connection; each chunk read gives its window back.
pub struct ChannelBody {
    /// The stream it belongs to.
    pub stream: u32,
    /// Chunks of the body, each with whether its window is still to be given back.
    pub rx: mpsc::UnboundedReceiver<(Bytes, bool)>,
    /// Where `Consumed` goes.
    pub events: mpsc::UnboundedSender<Event>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some((data, counted))) => {
                if counted {
                    let _ = this.events.send(Event::Consumed(this.stream, data.len()));
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
