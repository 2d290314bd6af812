//! Rendezvous (highest random weight) hashing: which node owns a key.
//!
//! Every node computes `score(node, key)` for every node and the highest score owns the
//! key. All nodes agree without talking, and when a node leaves or joins only the keys it
//! owned (or now owns) move: about `1/N` of them, the minimum possible.
//!
//! The score is XXH3-64 of the node name and the key, with a fixed seed, so the answer is
//! the same in every process and every version of floodgate.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A node list and the owner of any key.
///
/// ```
/// use floodgate_dist::Rendezvous;
///
/// let ring = Rendezvous::new(["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"]);
/// let owner = ring.owner(b"api-key-42").unwrap();
/// // every node computes the same owner
/// assert_eq!(owner, Rendezvous::new(["10.0.0.3:8080", "10.0.0.1:8080", "10.0.0.2:8080"]).owner(b"api-key-42").unwrap());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    nodes: Vec<String>,
}

const SEED: u64 = 0x666c_6f6f_6467_6174; // "floodgat"

impl Rendezvous {
    /// A ring over `nodes` (names or addresses; duplicates are dropped).
    pub fn new<I, S>(nodes: I) -> Rendezvous
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
        nodes.sort();
        nodes.dedup();
        Rendezvous { nodes }
    }

    /// The nodes, sorted.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The node that owns `key`, or `None` when there are no nodes.
    pub fn owner(&self, key: &[u8]) -> Option<&str> {
        self.owner_index(key).map(|i| self.nodes[i].as_str())
    }

    /// Index (in [`nodes`](Self::nodes)) of the owner of `key`.
    pub fn owner_index(&self, key: &[u8]) -> Option<usize> {
        self.nodes
            .iter()
            .enumerate()
            .max_by_key(|(_, n)| (score(n.as_bytes(), key), n.as_str()))
            .map(|(i, _)| i)
    }

    /// Add a node; returns false if it was already there.
    pub fn join(&mut self, node: impl Into<String>) -> bool {
        let node = node.into();
        match self.nodes.binary_search(&node) {
            Ok(_) => false,
            Err(at) => {
                self.nodes.insert(at, node);
                true
            }
        }
    }

    /// Remove a node; returns false if it was not there.
    pub fn leave(&mut self, node: &str) -> bool {
        match self.nodes.iter().position(|n| n == node) {
            Some(at) => {
                self.nodes.remove(at);
                true
            }
            None => false,
        }
    }
}

/// The weight of `node` for `key`: XXH3-64 over a length-prefixed node name and the key
/// (the prefix keeps `("ab", "c")` and `("a", "bc")` apart).
pub fn score(node: &[u8], key: &[u8]) -> u64 {
    let mut buf = Vec::with_capacity(8 + node.len() + key.len());
    buf.extend_from_slice(&(node.len() as u64).to_le_bytes());
    buf.extend_from_slice(node);
    buf.extend_from_slice(key);
    xxh3_64_with_seed(&buf, SEED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    #[test]
    fn spreads_evenly_and_moves_only_the_leavers_keys() {
        let ring = Rendezvous::new(names(4));
        let keys: Vec<Vec<u8>> = (0..20_000u32).map(|k| k.to_le_bytes().to_vec()).collect();
        let before: Vec<usize> = keys.iter().map(|k| ring.owner_index(k).unwrap()).collect();
        for i in 0..4 {
            let share = before.iter().filter(|&&o| o == i).count();
            assert!((4_000..6_000).contains(&share), "node {i} owns {share}");
        }
        let mut smaller = ring.clone();
        smaller.leave("node-2");
        for (k, &b) in keys.iter().zip(&before) {
            let after = smaller.owner(k).unwrap();
            if ring.nodes()[b] != "node-2" {
                assert_eq!(
                    after,
                    ring.nodes()[b],
                    "a key not owned by the leaver moved"
                );
            }
        }
        let mut bigger = ring.clone();
        assert!(bigger.join("node-9"));
        let moved = keys
            .iter()
            .zip(&before)
            .filter(|(k, b)| bigger.owner(k).unwrap() != ring.nodes()[**b])
            .count();
        assert!(
            (3_000..5_000).contains(&moved),
            "about 1/5 move to the joiner: {moved}"
        );
        assert!(Rendezvous::new(Vec::<String>::new()).owner(b"x").is_none());
    }
}
