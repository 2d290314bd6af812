//! Every configuration example of the book parses, as the command that reads it would
//! parse it. A `toml` or `yaml` block names what it configures in its info string:
//! `proxy-config` (`floodgate proxy --config`), `server-config` (`floodgate server
//! --config`), or `bad-example` (a file a transcript shows being refused; it must fail).

use std::path::Path;

use floodgate_book::{Block, blocks};

fn config_blocks() -> Vec<Block> {
    blocks()
        .unwrap()
        .into_iter()
        .filter(|b| matches!(b.lang(), "toml" | "yaml"))
        .collect()
}

fn parse_proxy(b: &Block) -> Result<floodgate_proxy::config::Config, String> {
    let cfg = floodgate_proxy::config::Config::parse(&b.body, Path::new(&b.place()))
        .map_err(|e| e.to_string())?;
    cfg.limiter_builder().build().map_err(|e| e.to_string())?;
    Ok(cfg)
}

fn parse_server(b: &Block) -> Result<(), String> {
    // the server picks YAML or TOML by the file's extension
    let path = format!("{}.{}", b.place(), b.lang());
    floodgate_server::config::parse(Path::new(&path), &b.body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn every_config_example_names_what_it_configures_and_parses() {
    let blocks = config_blocks();
    assert!(blocks.len() >= 4, "{blocks:?}");
    for b in &blocks {
        if b.has("proxy-config") {
            parse_proxy(b).unwrap_or_else(|e| panic!("{}: {e}", b.place()));
        } else if b.has("server-config") {
            parse_server(b).unwrap_or_else(|e| panic!("{}: {e}", b.place()));
        } else if b.has("bad-example") {
            let proxy = parse_proxy(b);
            assert!(proxy.is_err(), "{}: a bad example parses", b.place());
        } else {
            panic!(
                "{}: a {} block must say what it configures (proxy-config, server-config or bad-example)",
                b.place(),
                b.lang()
            );
        }
    }
}

/// The proxy page's reference example shows at least two policies, and every `[redis]`
/// setting it shows reaches the store's settings.
#[test]
fn the_proxy_reference_example_is_complete() {
    let block = config_blocks()
        .into_iter()
        .find(|b| b.page == "proxy.md" && b.has("proxy-config"))
        .expect("proxy.md has its configuration example");
    let cfg = parse_proxy(&block).unwrap();
    let limiter = cfg.limiter_builder().build().unwrap();
    assert!(limiter.policies().len() >= 2);
    let rc = cfg.redis.store_config();
    assert_eq!(rc.breaker_open_for, std::time::Duration::from_millis(250));
}
