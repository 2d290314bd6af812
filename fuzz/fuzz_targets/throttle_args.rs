//! `CL.THROTTLE key max_burst count period [quantity]` arguments: never a panic; what
//! parses gives a reply of five integers with limited in {0, 1}.
#![no_main]
use floodgate_core::{Algorithm, Nanos};
use floodgate_redis::ThrottleArgs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let args: Vec<&str> = s.split(' ').collect();
    if args.len() < 3 || args.len() > 4 {
        return;
    }
    let Ok(parsed) = ThrottleArgs::parse(args[0], args[1], args[2], args.get(3).copied()) else {
        return;
    };
    if let Ok(gcra) = parsed.gcra() {
        let mut st = Default::default();
        let reply = gcra
            .check(&mut st, Nanos(1_700_000_000_000_000_000), parsed.quantity)
            .throttle_reply();
        assert!(reply[0] == 0 || reply[0] == 1);
    }
});
