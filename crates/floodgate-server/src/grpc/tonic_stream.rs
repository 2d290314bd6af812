//! A stream the gRPC door hands to tonic's routes, in a task of its own: its request body
//! read from h2 ([`RequestBody`]), the reply's head, data and trailers sent back as
//! tonic yields them, within the client's flow-control windows. A stream the client
//! resets ends the task, and tonic's future with it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http_body::{Body, Frame};

use super::door::GrpcDoor;

/// Serve `req` through tonic's routes; `first` is body already read from `req`'s stream
/// (its window already given back), the rest follows from the stream.
pub async fn serve(
    door: Arc<GrpcDoor>,
    req: http::Request<RecvStream>,
    first: Option<Bytes>,
    mut respond: SendResponse<Bytes>,
) {
    let (parts, recv) = req.into_parts();
    let body = RequestBody {
        first,
        recv,
        data_done: false,
    };
    let answer = door.handle(http::Request::from_parts(parts, body));
    let reply = tokio::select! {
        reply = answer => reply,
        // reset by the client (or the connection is gone): tonic's future is dropped
        _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => return,
    };
    let (head, mut body) = reply.into_parts();
    let end = body.is_end_stream();
    let Ok(mut send) = respond.send_response(http::Response::from_parts(head, ()), end) else {
        return;
    };
    if end {
        return;
    }
    match send_body(&mut send, &mut body).await {
        Ok(()) | Err(Unsent::Reset) => {}
        Err(Unsent::Failed) => send.send_reset(Reason::INTERNAL_ERROR),
    }
}

/// Why a reply body could not be sent whole.
enum Unsent {
    /// The client reset the stream, or the connection is gone.
    Reset,
    /// tonic's body failed.
    Failed,
}

/// Send tonic's reply body: data within the client's windows, then trailers (or an
/// empty end).
async fn send_body(
    send: &mut SendStream<Bytes>,
    body: &mut tonic::body::Body,
) -> Result<(), Unsent> {
    loop {
        // the next frame, unless the client resets the stream while tonic waits for it
        let frame = std::future::poll_fn(|cx| {
            if send.poll_reset(cx).is_ready() {
                return Poll::Ready(Err(Unsent::Reset));
            }
            Pin::new(&mut *body).poll_frame(cx).map(Ok)
        })
        .await?;
        let frame = match frame {
            None => {
                return send
                    .send_data(Bytes::new(), true)
                    .map_err(|_| Unsent::Reset);
            }
            Some(Err(_)) => return Err(Unsent::Failed),
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) => send_data(send, data).await?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return send.send_trailers(trailers).map_err(|_| Unsent::Reset);
                }
            }
        }
    }
}

/// Send `data` as the client's windows allow (h2 holds at most its send buffer of it).
async fn send_data(send: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), Unsent> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(_)) | None => return Err(Unsent::Reset),
        };
        if granted == 0 {
            continue;
        }
        let chunk = data.split_to(granted.min(data.len()));
        send.send_data(chunk, false).map_err(|_| Unsent::Reset)?;
    }
    Ok(())
}

/// A request body read from h2 for tonic: `first` (already read), then the stream's
/// data, each chunk's window given back as tonic reads it, then its trailers.
pub struct RequestBody {
    first: Option<Bytes>,
    recv: RecvStream,
    data_done: bool,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if !this.data_done {
            match this.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.data_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        match this.recv.poll_trailers(cx) {
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.recv.is_end_stream()
    }
}
