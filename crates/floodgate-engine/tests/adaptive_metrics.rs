//! The adaptive policies' series in the metrics every surface renders: the limit, the
//! permits held and the requests shed per class, the latency samples.

use std::sync::Arc;
use std::time::Duration;

use floodgate_core::{ManualClock, Nanos};
use floodgate_engine::adaptive::{
    AdaptiveSpec, AlgorithmKind, ClassSpec, Outcome, PartitionedLimiter,
};
use floodgate_engine::metrics::Metrics;

const CRITICAL: usize = 0;
const SHEDDABLE: usize = 1;

fn limiter(min: usize, initial: usize, max: usize) -> (PartitionedLimiter, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Nanos(1_000_000_000)));
    let spec = AdaptiveSpec::new(AlgorithmKind::Aimd, min, initial, max)
        .unwrap()
        .with_classes(vec![
            ClassSpec {
                name: "critical".into(),
                share: 0.5,
            },
            ClassSpec {
                name: "sheddable".into(),
                share: 0.2,
            },
        ])
        .unwrap();
    (
        PartitionedLimiter::new("backend", spec, clock.clone()).unwrap(),
        clock,
    )
}

#[test]
fn metrics_show_limit_in_flight_and_shed() {
    let m = Metrics::new(&["backend".to_string()]);
    let (l, clock) = limiter(2, 2, 3);
    let names: Vec<String> = l.spec().classes.iter().map(|c| c.name.clone()).collect();
    l.attach_metrics(m.adaptive("backend", &names));
    let a = l.try_acquire(CRITICAL).unwrap();
    let b = l.try_acquire(CRITICAL).unwrap();
    assert!(l.try_acquire(SHEDDABLE).is_err());
    let text = m.encode();
    assert!(
        text.contains("floodgate_adaptive_in_flight{policy=\"backend\",class=\"critical\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("floodgate_adaptive_shed_total{policy=\"backend\",class=\"sheddable\"} 1"),
        "{text}"
    );
    clock.advance(Duration::from_millis(3));
    a.release(Outcome::Success);
    b.release(Outcome::Success);
    let text = m.encode();
    assert!(
        text.contains("floodgate_adaptive_limit{policy=\"backend\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("floodgate_adaptive_latency_seconds_count{policy=\"backend\"} 2"),
        "{text}"
    );
}
