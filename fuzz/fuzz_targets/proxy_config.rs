//! `floodgate proxy`'s TOML config file: never a panic; an error is located inside the
//! file (`FILE:LINE:COLUMN: `); a file that parses builds its limiter (what `--check`
//! accepts starts); and the file re-rendered from its TOML tables (other layout, quoting,
//! order of keys) reads the same: the same config, or the same error.
#![no_main]
use std::path::Path;

use floodgate_proxy::config::Config;
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("floodgate.toml");
    let parsed = Config::parse(src, path);
    match &parsed {
        Err(e) => common::check_located(e, path, src, common::Lines::Toml),
        Ok(cfg) => {
            let _rt = common::runtime().enter();
            if let Err(e) = cfg.limiter_builder().build() {
                panic!("the file parses but its limiter does not build: {e}\n{src}");
            }
        }
    }
    let Ok(table) = toml::from_str::<toml::Table>(src) else {
        return;
    };
    let again = toml::to_string(&table).expect("a TOML table renders");
    let reparsed = Config::parse(&again, path);
    match (&parsed, &reparsed) {
        (Ok(a), Ok(b)) => assert_eq!(common::unspanned(a), common::unspanned(b)),
        (Err(a), Err(b)) => assert_eq!(a.message(), b.message()),
        _ => panic!(
            "the file and its re-rendering read differently: {parsed:?} / {reparsed:?}\n{src}\n---\n{again}"
        ),
    }
});
