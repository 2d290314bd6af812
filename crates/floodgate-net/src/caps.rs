//! Caps on client connections open at once, in total and per client address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use thiserror::Error;

/// Client connections open now, in total and per address, against their caps. An
/// IPv4-mapped IPv6 address counts as its IPv4 address.
///
/// Invariant: `open() <= max_total` and, for every address, its count `<= max_per_client`
/// (both caps are at least 1).
#[derive(Debug)]
pub struct ConnCaps {
    total: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    max_total: usize,
    max_per_client: usize,
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Refused {
    /// `max_total` connections are open.
    #[error("the connection cap is reached")]
    Total,
    /// `max_per_client` connections from this address are open.
    #[error("the per-address connection cap is reached")]
    PerClient,
}

impl Refused {
    /// The metric label word: `refused_total` or `refused_per_client`.
    pub fn label(self) -> &'static str {
        match self {
            Refused::Total => "refused_total",
            Refused::PerClient => "refused_per_client",
        }
    }
}

/// One client connection's place under the caps, given back when dropped.
#[derive(Debug)]
pub struct ConnSlot {
    caps: Arc<ConnCaps>,
    ip: IpAddr,
}

impl ConnCaps {
    /// Caps of `max_total` connections and `max_per_client` per address (each at least
    /// 1: a cap of 0 is taken as 1).
    pub fn new(max_total: usize, max_per_client: usize) -> Arc<Self> {
        Arc::new(ConnCaps {
            total: AtomicUsize::new(0),
            per_client: Mutex::new(HashMap::new()),
            max_total: max_total.max(1),
            max_per_client: max_per_client.max(1),
        })
    }

    /// The cap on connections in total.
    pub fn max_total(&self) -> usize {
        self.max_total
    }

    /// The cap on connections per client address.
    pub fn max_per_client(&self) -> usize {
        self.max_per_client
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// A place for a connection from `ip`, or which cap is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnSlot, Refused> {
        let ip = ip.to_canonical();
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.max_total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Total);
        }
        let mut per = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
        let n = per.entry(ip).or_insert(0);
        if *n >= self.max_per_client {
            drop(per);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::PerClient);
        }
        *n += 1;
        drop(per);
        Ok(ConnSlot {
            caps: self.clone(),
            ip,
        })
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut per = self
            .caps
            .per_client
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = per.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.ip);
            }
        }
        drop(per);
        self.caps.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_refuse_the_excess_and_free_on_drop() {
        let caps = ConnCaps::new(3, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = caps.admit(a).unwrap();
        let _a2 = caps.admit(a).unwrap();
        assert_eq!(caps.admit(a).unwrap_err(), Refused::PerClient);
        let _b1 = caps.admit(b).unwrap();
        assert_eq!(caps.admit(b).unwrap_err(), Refused::Total);
        assert_eq!(caps.open(), 3);
        drop(a1);
        let b2 = caps.admit(b).unwrap();
        // an IPv4-mapped IPv6 address is the same client
        let mapped: IpAddr = "::ffff:192.0.2.2".parse().unwrap();
        drop(b2);
        let _m = caps.admit(mapped).unwrap();
        assert_eq!(caps.admit(mapped).unwrap_err(), Refused::Total);
        assert_eq!(caps.per_client.lock().unwrap().len(), 2);
        assert_eq!(Refused::PerClient.label(), "refused_per_client");
    }

    #[test]
    fn a_zero_cap_is_one() {
        let caps = ConnCaps::new(0, 0);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let _one = caps.admit(ip).unwrap();
        assert!(caps.admit(ip).is_err());
        assert_eq!((caps.max_total(), caps.max_per_client()), (1, 1));
    }
}
