//! When open-loop requests are due: evenly spaced (`i / rate`) or as a Poisson process
//! (independent exponential gaps of mean `1 / rate`, from a seeded generator), the
//! arrivals of many independent clients that a server sees in production.

use std::sync::Mutex;

use crate::dist::exponential_ns;

/// How open-loop send times are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrivals {
    /// Request `i` is due at `i / rate`.
    #[default]
    Uniform,
    /// Gaps between requests are exponential with mean `1 / rate` (a Poisson process):
    /// the same mean rate, with the bunching of independent clients.
    Poisson,
}

impl Arrivals {
    /// The name as given on the command line and printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Arrivals::Uniform => "uniform",
            Arrivals::Poisson => "poisson",
        }
    }
}

/// The running clock of a Poisson schedule: each call hands out the next arrival.
/// Shared by the workers behind a mutex (one short lock per request).
#[derive(Debug)]
pub struct PoissonClock {
    state: Mutex<(fastrand::Rng, f64)>,
    mean_gap_ns: f64,
}

impl PoissonClock {
    /// Arrivals at `rate` per second on average, starting at 0, from `seed`.
    pub fn new(rate: f64, seed: u64) -> PoissonClock {
        PoissonClock {
            state: Mutex::new((fastrand::Rng::with_seed(seed), 0.0)),
            mean_gap_ns: 1e9 / rate,
        }
    }

    /// The next arrival, ns since the start (non-decreasing over calls). The first
    /// arrival is one gap after the start, as in a Poisson process.
    pub fn next_ns(&self) -> u64 {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (rng, t) = &mut *g;
        *t += exponential_ns(rng, self.mean_gap_ns) as f64;
        *t as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_keep_the_rate_with_exponential_gaps() {
        let c = PoissonClock::new(1000.0, 11);
        let times: Vec<u64> = (0..50_000).map(|_| c.next_ns()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        // 50,000 arrivals at 1000/s span about 50 s
        let span_s = *times.last().unwrap() as f64 / 1e9;
        assert!((span_s - 50.0).abs() < 1.0, "{span_s}");
        // exponential gaps: about 1 - 1/e of them shorter than the mean gap (1 ms);
        // evenly spaced arrivals would have none shorter
        let short = times.windows(2).filter(|w| w[1] - w[0] < 1_000_000).count() as f64
            / times.len() as f64;
        assert!((short - (1.0 - (-1f64).exp())).abs() < 0.01, "{short}");
        // counts per 100 ms window: Poisson, variance about equal to the mean (100)
        let mut per = vec![0f64; 499];
        for t in &times {
            if let Some(b) = per.get_mut((*t / 100_000_000) as usize) {
                *b += 1.0;
            }
        }
        let mean = per.iter().sum::<f64>() / per.len() as f64;
        let var = per.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / per.len() as f64;
        assert!(
            (mean - 100.0).abs() < 3.0 && (var / mean - 1.0).abs() < 0.25,
            "{mean} {var}"
        );
    }

    #[test]
    fn a_seed_repeats_its_schedule() {
        let (a, b) = (PoissonClock::new(50.0, 5), PoissonClock::new(50.0, 5));
        let other = PoissonClock::new(50.0, 6);
        let xs: Vec<u64> = (0..20).map(|_| a.next_ns()).collect();
        let ys: Vec<u64> = (0..20).map(|_| b.next_ns()).collect();
        let zs: Vec<u64> = (0..20).map(|_| other.next_ns()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }
}
