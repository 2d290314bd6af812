//! Any algorithm, any parameters, any sequence of (time, cost): never a panic, and every
//! decision is well formed.
#![no_main]
use arbitrary::Arbitrary;
use floodgate_core::algorithms::DelayMode;
use floodgate_core::{Algorithm, Kind, Nanos, Rate, Spec};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    kind: u8,
    count: u64,
    period: u64,
    capacity: Option<u64>,
    delay: u64,
    steps: Vec<(u64, u64)>,
}

fuzz_target!(|input: Input| {
    let kind = Kind::ALL[input.kind as usize % Kind::ALL.len()];
    let Ok(rate) = Rate::from_nanos(input.count, input.period) else {
        return;
    };
    let spec = Spec {
        kind,
        rate,
        capacity: input.capacity,
        delay: DelayMode::After(input.delay % 1000),
    };
    let Ok(alg) = spec.build() else { return };
    let mut st = Default::default();
    for (t, cost) in input.steps.into_iter().take(256) {
        let peek = alg.peek(&st, Nanos(t), cost);
        let d = alg.check(&mut st, Nanos(t), cost);
        assert_eq!(peek, d);
        assert!(d.remaining <= d.limit);
        assert!(!d.allowed || d.retry_after.is_none());
        let _ = alg.full_at(&st);
    }
});
