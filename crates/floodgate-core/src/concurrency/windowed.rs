//! Aggregate samples over a window before updating the wrapped algorithm.

use std::time::Duration;

use crate::Nanos;
use crate::time::duration_to_nanos;

use super::{LimitAlgorithm, Sample};

/// Window settings (concurrency-limits' `WindowedLimit` defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowedConfig {
    /// Shortest window (default 1 s).
    pub min_window: Duration,
    /// Longest window (default 1 s).
    pub max_window: Duration,
    /// Samples needed before a window may close (default 10).
    pub window_size: usize,
    /// Samples with a shorter RTT are ignored (default 100 µs).
    pub min_rtt_threshold: Duration,
}

impl Default for WindowedConfig {
    fn default() -> Self {
        WindowedConfig {
            min_window: Duration::from_secs(1),
            max_window: Duration::from_secs(1),
            window_size: 10,
            min_rtt_threshold: Duration::from_micros(100),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Window {
    count: usize,
    sum_rtt: u128,
    min_rtt: u64,
    max_inflight: usize,
    dropped: bool,
}

/// Wraps an algorithm: samples accumulate (average RTT, max in-flight, any drop) and the
/// inner algorithm sees one aggregated sample once the window has `window_size` samples and
/// a sample ends after `next_update`; the next window then lasts
/// `clamp(2 x min RTT of the window, min_window, max_window)`.
#[derive(Debug, Clone)]
pub struct Windowed<A> {
    inner: A,
    cfg: WindowedConfig,
    window: Window,
    next_update: Nanos,
}

impl<A: LimitAlgorithm> Windowed<A> {
    /// Wrap `inner`.
    pub fn new(inner: A, cfg: WindowedConfig) -> Self {
        Windowed {
            inner,
            cfg,
            window: Window::default(),
            next_update: Nanos::ZERO,
        }
    }

    /// The wrapped algorithm.
    pub fn inner(&self) -> &A {
        &self.inner
    }
}

impl<A: LimitAlgorithm> LimitAlgorithm for Windowed<A> {
    fn limit(&self) -> usize {
        self.inner.limit()
    }

    fn on_sample(&mut self, s: &Sample) -> usize {
        if s.rtt < self.cfg.min_rtt_threshold {
            return self.inner.limit();
        }
        let rtt = duration_to_nanos(s.rtt);
        let w = &mut self.window;
        w.min_rtt = if w.count == 0 {
            rtt
        } else {
            w.min_rtt.min(rtt)
        };
        w.count += 1;
        w.sum_rtt += u128::from(rtt);
        w.max_inflight = w.max_inflight.max(s.inflight);
        w.dropped |= s.dropped;
        let end = s.start.saturating_add(s.rtt);
        if end > self.next_update && w.count >= self.cfg.window_size.max(1) {
            let w = std::mem::take(&mut self.window);
            let span = Duration::from_nanos(w.min_rtt.saturating_mul(2)).clamp(
                self.cfg.min_window,
                self.cfg.max_window.max(self.cfg.min_window),
            );
            self.next_update = end.saturating_add(span);
            let avg = (w.sum_rtt / w.count as u128) as u64;
            self.inner.on_sample(&Sample {
                start: s.start,
                rtt: Duration::from_nanos(avg),
                inflight: w.max_inflight,
                dropped: w.dropped,
            });
        }
        self.inner.limit()
    }
}
