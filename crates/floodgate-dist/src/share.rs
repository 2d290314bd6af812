//! Local share: each of N nodes enforces `1/N` of the limit on its own, with no round trip.

use floodgate_core::{ConfigError, Kind, Rate, Spec};

/// The spec one node enforces when `nodes` nodes share `global` evenly.
///
/// Bucket algorithms get `rate / N` and `ceil(capacity / N)`; windowed algorithms get
/// `ceil(limit / N)` per the same window. The price: a client whose requests all land on
/// one node gets `1/N` of its quota while the other nodes' shares sit idle (the waste), and
/// a client spreading over all nodes gets the whole limit only if the balancer is fair.
///
/// ```
/// use floodgate_core::{Kind, Spec};
/// use floodgate_dist::local_share;
///
/// let global = Spec::new(Kind::Gcra, "300/min".parse()?);
/// let per_node = local_share(&global, 3)?;
/// assert_eq!(per_node.rate.emission_interval_nanos(), 600_000_000); // 100/min
/// assert_eq!((per_node.rate.count(), per_node.rate.period_nanos()), (100, 60_000_000_000));
/// assert_eq!(per_node.capacity, Some(100));
/// # Ok::<(), floodgate_core::ConfigError>(())
/// ```
pub fn local_share(global: &Spec, nodes: usize) -> Result<Spec, ConfigError> {
    if nodes == 0 {
        return Err(ConfigError::Zero { what: "nodes" });
    }
    let n = nodes as u64;
    let count = global.rate.count();
    let windowed = matches!(
        global.kind,
        Kind::FixedWindow | Kind::SlidingLog | Kind::SlidingCounter
    );
    let rate = if windowed {
        Rate::from_nanos(count.div_ceil(n), global.rate.period_nanos())?
    } else if count.is_multiple_of(n) {
        // the same rate as count per N periods, written per the configured period (what
        // the RateLimit fields advertise: 30/min over 3 nodes is 10/min, not 30/3min)
        Rate::from_nanos(count / n, global.rate.period_nanos())?
    } else {
        let period = global
            .rate
            .period_nanos()
            .checked_mul(n)
            .ok_or(ConfigError::Overflow {
                what: "nodes",
                detail: format!("period x {n} nodes overflows"),
            })?;
        Rate::from_nanos(count, period)?
    };
    let capacity = global.capacity.unwrap_or(count).div_ceil(n).max(1);
    Ok(Spec {
        rate,
        capacity: Some(capacity),
        ..global.clone()
    })
}
