//! The proxy's per-generation state ([`Generation`]: the limiter a configuration built)
//! and the one place a reload swaps it ([`Generations`]).
//!
//! Invariants: generation ids start at 1 and grow by one per swap; a reader that sees id
//! `n` from [`Generations::id`] then loads a generation whose id is at least `n`. Each
//! worker keeps the services it built for the generation it last saw and rebuilds them
//! when the id moves, so a request pays one atomic load for the check. Requests already
//! in flight finish on the generation they started on (their leases and held requests
//! with it); open connections are kept and their next request sees the new generation.
//!
//! A future section swapped on reload (TLS certificates) joins [`Generation`] and is
//! swapped with the limiter. The upstream groups are read at startup; which group each
//! route sends to is the generation's ([`Generation::route_upstreams`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use floodgate_http::limiter::RateLimiter;

/// What one configuration built.
#[derive(Debug)]
pub struct Generation {
    /// 1 at startup, +1 per applied reload.
    pub id: u64,
    /// The policies, routes, keys and store.
    pub limiter: RateLimiter,
    /// The upstream group each of the limiter's routes names (in its route order; `None`:
    /// the group `default`).
    pub route_upstreams: Vec<Option<String>>,
}

/// The current generation, shared by the acceptor, the workers and the admin listener.
#[derive(Debug)]
pub struct Generations {
    current: ArcSwap<Generation>,
    id: AtomicU64,
}

impl Generations {
    /// Generation 1, of `limiter` and its routes' upstream groups.
    pub fn new(limiter: RateLimiter, route_upstreams: Vec<Option<String>>) -> Arc<Generations> {
        Arc::new(Generations {
            current: ArcSwap::from_pointee(Generation {
                id: 1,
                limiter,
                route_upstreams,
            }),
            id: AtomicU64::new(1),
        })
    }

    /// The current generation.
    pub fn load(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// The current generation's id (one atomic load: what a request checks).
    pub fn id(&self) -> u64 {
        self.id.load(Ordering::Acquire)
    }

    /// Make `limiter`, with its routes' upstream groups, the current generation; returns
    /// its id. Callers serialize swaps (the reloader holds a lock around build and swap).
    pub fn swap(&self, limiter: RateLimiter, route_upstreams: Vec<Option<String>>) -> u64 {
        let id = self.current.load().id + 1;
        self.current.store(Arc::new(Generation {
            id,
            limiter,
            route_upstreams,
        }));
        self.id.store(id, Ordering::Release);
        id
    }
}
