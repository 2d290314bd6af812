//! What every door does with a connection before it speaks: the door's caps on
//! connections open at once, in total and per client address ([`floodgate_net::ConnCaps`]).
//! A connection over a cap is closed at once and counted
//! (`floodgate_connections_refused_total{front, reason}`); each door has caps of its own,
//! so a client that fills one door leaves the others open.

use std::net::SocketAddr;
use std::sync::Arc;

use floodgate_net::{ConnCaps, ConnSlot, Refused};

use crate::metrics::Metrics;

/// One door's connection caps.
#[derive(Debug, Clone)]
pub struct Gate {
    front: &'static str,
    caps: Arc<ConnCaps>,
    metrics: Arc<Metrics>,
}

impl Gate {
    /// The caps of door `front` (`grpc`, `http` or `resp`): `max_total` connections, and
    /// `max_per_client` from one address (each at least 1).
    pub fn new(
        front: &'static str,
        max_total: usize,
        max_per_client: usize,
        metrics: Arc<Metrics>,
    ) -> Gate {
        Gate {
            front,
            caps: ConnCaps::new(max_total, max_per_client),
            metrics,
        }
    }

    /// A place for a connection from `peer` (held while it is open), or which cap refused
    /// it (counted; the caller closes the connection).
    pub fn admit(&self, peer: SocketAddr) -> Result<ConnSlot, Refused> {
        self.caps.admit(peer.ip()).inspect_err(|refused| {
            self.metrics.connection_refused(self.front, *refused);
            tracing::debug!(front = self.front, %peer, reason = %refused, "connection refused");
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.caps.open()
    }

    /// The metrics the door counts in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The door's name.
    pub fn front(&self) -> &'static str {
        self.front
    }
}
