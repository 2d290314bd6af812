//! Choosing a server of a group: smooth weighted round robin, least requests by the power
//! of two choices, and a consistent hash ring of the policy key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{Balance, Server};

/// Points each unit of weight puts on the hash ring (ketama's 160: the keys a server
/// holds stay within a few percent of its share).
const POINTS_PER_WEIGHT: u64 = 160;

/// A group's way of choosing, with its state.
pub(super) struct Picker {
    balance: Balance,
    /// Server indices in smooth weighted round-robin order (one turn of the weights);
    /// also the fallback of the hash for requests without a key.
    turn: Vec<usize>,
    /// The next place in the turn, shared by the workers (one turn for all of them).
    next: AtomicUsize,
    /// `(point, server)`, sorted by point (hash groups only).
    ring: Vec<(u64, usize)>,
    /// xorshift state for the two random draws of least requests.
    rng: AtomicU64,
}

impl Picker {
    pub(super) fn new(balance: Balance, servers: &[Arc<Server>]) -> Picker {
        let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
        let ring = if balance == Balance::Hash {
            let mut ring: Vec<(u64, usize)> = servers
                .iter()
                .enumerate()
                .flat_map(|(i, s)| {
                    let base = fnv1a(s.addr.as_bytes());
                    (0..POINTS_PER_WEIGHT * u64::from(s.weight))
                        .map(move |p| (mix(base ^ mix(p + 1)), i))
                })
                .collect();
            ring.sort_unstable();
            ring
        } else {
            Vec::new()
        };
        Picker {
            balance,
            turn: smooth_turn(&weights),
            next: AtomicUsize::new(0),
            ring,
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        }
    }

    /// A server for which `usable` holds, chosen by the group's balance; `None` when
    /// none is usable.
    pub(super) fn pick(
        &self,
        servers: &[Arc<Server>],
        key: Option<&[u8]>,
        usable: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        if servers.len() == 1 {
            return usable(0).then_some(0);
        }
        match (self.balance, key) {
            (Balance::Hash, Some(k)) if !self.ring.is_empty() => self.by_hash(k, &usable),
            (Balance::LeastRequests, _) => self.least(servers, &usable),
            _ => self.round_robin(&usable),
        }
    }

    fn round_robin(&self, usable: &impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.turn.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| self.turn[start.wrapping_add(i) % n])
            .find(|&s| usable(s))
    }

    /// The first usable server clockwise from the key's point on the ring.
    fn by_hash(&self, key: &[u8], usable: &impl Fn(usize) -> bool) -> Option<usize> {
        let h = mix(fnv1a(key));
        let start = self.ring.partition_point(|(p, _)| *p < h);
        let n = self.ring.len();
        (0..n)
            .map(|i| self.ring[(start + i) % n].1)
            .find(|&s| usable(s))
    }

    /// Of two usable servers drawn at random, the one with fewer requests in flight per
    /// unit of weight (the first drawn on a tie).
    fn least(&self, servers: &[Arc<Server>], usable: &impl Fn(usize) -> bool) -> Option<usize> {
        // counted, then the two drawn found by their places among the usable: no list
        // is built
        let n = (0..servers.len()).filter(|&i| usable(i)).count();
        let nth = |k: usize| (0..servers.len()).filter(|&i| usable(i)).nth(k);
        match n {
            0 => None,
            1 => nth(0),
            n => {
                let r = self.random();
                let a = (r % n as u64) as usize;
                let b = (a + 1 + ((r >> 32) % (n as u64 - 1)) as usize) % n;
                let (Some(a), Some(b)) = (nth(a), nth(b)) else {
                    return nth(0);
                };
                let load = |i: usize, other: usize| {
                    i128::from(servers[i].in_flight()) * i128::from(servers[other].weight)
                };
                Some(if load(b, a) < load(a, b) { b } else { a })
            }
        }
    }

    fn random(&self) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x
    }
}

/// One turn of nginx's smooth weighted round robin: each server appears `weight` times,
/// spread out (weights 5, 1, 1 give a a b a c a a).
fn smooth_turn(weights: &[u32]) -> Vec<usize> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut turn = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, &w) in current.iter_mut().zip(weights) {
            *c += i64::from(w);
        }
        let best = (0..weights.len())
            .max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        current[best] -= total;
        turn.push(best);
    }
    turn
}

/// FNV-1a, 64 bits: stable across runs and builds (the ring must not move when the
/// proxy restarts).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// splitmix64's finalizer: spreads FNV's clustered outputs over the ring.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smooth_turn_spreads_weights_as_nginx_does() {
        assert_eq!(smooth_turn(&[5, 1, 1]), vec![0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(smooth_turn(&[1, 1, 1]), vec![0, 1, 2]);
    }
}
