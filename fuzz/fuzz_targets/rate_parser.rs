//! Rates, durations, bursts and algorithm names as users type them: never a panic, and
//! whatever parses builds a limiter that answers.
#![no_main]
use floodgate_core::simulate::Burst;
use floodgate_core::{Algorithm, Kind, Nanos, Rate, Spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = floodgate_core::rate::parse_duration(s);
    let _ = s.parse::<Burst>();
    let kind = s.parse::<Kind>().unwrap_or(Kind::Gcra);
    if let Ok(rate) = s.parse::<Rate>() {
        let _ = rate.to_string();
        if let Ok(alg) = Spec::new(kind, rate).build() {
            let mut st = Default::default();
            for t in [0u64, 1, rate.period_nanos(), u64::MAX] {
                let d = alg.check(&mut st, Nanos(t), 1);
                assert!(d.remaining <= d.limit);
            }
        }
    }
});
