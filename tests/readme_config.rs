//! The README's `floodgate.toml` example is a valid config: parsed and built as
//! `floodgate proxy --check-config` would.

use std::path::Path;

#[test]
fn the_readme_config_example_is_valid() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .find("### Configuration (`floodgate.toml`)")
        .expect("the README has its configuration section");
    let start = readme[section..].find("```toml").expect("a toml block") + section + 7;
    let end = readme[start..].find("```").expect("the block ends") + start;
    let cfg = floodgate_proxy::config::Config::parse(&readme[start..end], Path::new("README.md"))
        .unwrap_or_else(|e| panic!("{e}"));
    let limiter = cfg.limiter_builder().build().unwrap();
    assert!(limiter.policies().len() >= 2);
    // every [redis] setting it shows reaches the store's settings
    let rc = cfg.redis.store_config();
    assert_eq!(rc.breaker_open_for, std::time::Duration::from_millis(250));
}
