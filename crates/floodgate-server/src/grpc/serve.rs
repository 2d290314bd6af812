//! The gRPC listener: each connection accepted under the door's caps ([`Gate`]) is
//! served by [`conn`](super::conn) in a task of its own, until the server stops.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::gate::Gate;
use crate::metrics::Metrics;

use super::conn::{Http2Limits, serve_connection};
use super::door::GrpcDoor;

/// Serve gRPC on `listener` (connections under `gate`'s caps) until `shutdown` turns true (or its sender is gone); then stop
/// accepting, let every connection finish its calls, and return when all are closed.
pub async fn serve(
    listener: TcpListener,
    door: Arc<GrpcDoor>,
    limits: Http2Limits,
    gate: Gate,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = Arc::new(limits);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = gate.admit(peer) else {
                        drop(stream);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let conn = serve_accepted(
                        stream,
                        door.clone(),
                        limits.clone(),
                        gate.metrics().clone(),
                        shutdown.clone(),
                    );
                    conns.spawn(async move {
                        conn.await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "gRPC accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Serve one accepted connection: in TLS after its handshake when the door has TLS (a
/// failed handshake closes it), else as it is.
async fn serve_accepted(
    stream: TcpStream,
    door: Arc<GrpcDoor>,
    limits: Arc<Http2Limits>,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) {
    match door.tls() {
        None => serve_connection(stream, door, limits, metrics, stop).await,
        Some((acceptor, tls_metrics)) => {
            if let Some(tls) = crate::tls::handshake(&acceptor, stream, &tls_metrics).await {
                serve_connection(tls, door, limits, metrics, stop).await;
            }
        }
    }
}

/// Resolves when `rx` turns true or its sender is gone.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}
