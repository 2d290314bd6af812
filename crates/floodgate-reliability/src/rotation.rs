//! The key-rotation attack: an attacker sends every request with a new key, hoping to
//! exhaust memory or to evict (and so reset) legitimate keys.

use floodgate_core::algorithms::Gcra;
use floodgate_core::{KeyedLimiter, Limiter, Nanos, Rate};

use crate::{Row, mem};

/// Attack parameters.
#[derive(Debug, Clone, Copy)]
pub struct Attack {
    /// Distinct attacker keys, one request each.
    pub keys: u64,
    /// The store's key cap.
    pub cap: usize,
    /// Steady legitimate clients, each sending 10x its rate throughout.
    pub steady: u64,
    /// Bound on resident memory growth, KiB.
    pub mem_bound_kib: u64,
}

/// Run the attack. Attacker keys are strings (`"198.51.x.y:<n>"`, heap-allocated, as real
/// keys are); time advances 1 µs per attacker request; every millisecond each steady
/// client sends one request. Everyone is limited to 100/min with bursts of 10, so an
/// attacker key stays live (not back at full capacity) for 0.6 s: with 100k keys per
/// 0.1 s the cap forces evictions of live keys, not just idle ones. The steady clients'
/// admissions are compared with a dedicated, never-evicted limiter per client.
pub fn run(a: Attack) -> Row {
    let start_kib = mem::rss_kib();
    let gcra = Gcra::new(Rate::per_minute(100).expect("valid"), 10).expect("valid");
    let store: KeyedLimiter<String, Gcra> =
        KeyedLimiter::new(gcra.clone(), a.cap).expect("cap > 0");
    let reference: Vec<Limiter<Gcra>> = (0..a.steady).map(|_| Limiter::new(gcra.clone())).collect();
    let steady_keys: Vec<String> = (0..a.steady)
        .map(|i| format!("steady-client-{i}"))
        .collect();
    let (mut requests, mut mismatches, mut steady_admitted, mut max_len) =
        (0u64, 0u64, 0u64, 0usize);
    let mut peak_kib = start_kib;
    let mut key = String::with_capacity(32);
    for i in 0..a.keys {
        let now = Nanos(1_000_000_000 + i * 1_000);
        key.clear();
        use std::fmt::Write;
        let _ = write!(key, "198.51.{}.{}:{}", (i >> 8) & 255, i & 255, i);
        store.check(key.as_str(), now, 1);
        requests += 1;
        if i % 1_000 == 0 {
            for (k, r) in steady_keys.iter().zip(&reference) {
                let got = store.check(k.as_str(), now, 1).allowed;
                let want = r.check(now, 1).allowed;
                mismatches += u64::from(got != want);
                steady_admitted += u64::from(got);
                requests += 1;
            }
        }
        if i % 1_000_000 == 0 {
            max_len = max_len.max(store.len());
            peak_kib = peak_kib.max(mem::rss_kib());
        }
    }
    max_len = max_len.max(store.len());
    let end_kib = mem::rss_kib();
    peak_kib = peak_kib.max(end_kib);
    let stats = store.stats();
    let growth = peak_kib.saturating_sub(start_kib);
    let pass = max_len <= a.cap
        && mismatches == 0
        && stats.evicted + stats.idle_dropped > 0
        && growth <= a.mem_bound_kib;
    Row {
        area: "rotation",
        case: format!(
            "{} keys, cap {}, {} steady clients",
            a.keys, a.cap, a.steady
        ),
        cases: 1,
        faults: a.keys,
        requests,
        lost: mismatches,
        duplicated: 0,
        panics: 0,
        mem_start_kib: start_kib,
        mem_end_kib: end_kib,
        pass,
        detail: format!(
            "max keys held {max_len} (cap {}), evicted {}, idle dropped {}, steady admitted {steady_admitted} = reference ({} mismatches), peak RSS growth {growth} KiB (bound {} KiB)",
            a.cap, stats.evicted, stats.idle_dropped, mismatches, a.mem_bound_kib
        ),
    }
}
