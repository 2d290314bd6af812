//! `adaptive:`: adaptive concurrency policies for callers that report each request's end
//! (`/v1/adaptive/acquire`, `/v1/adaptive/release`): floodgate proxy's adaptive
//! `[[policy]]` keys, read by the engine's one function for them
//! ([`floodgate_engine::adaptive::AdaptiveFields`]), plus the lease TTL of a permit never
//! released.

use std::collections::BTreeMap;
use std::time::Duration;

use floodgate_core::inflight::LeaseTtl;
use floodgate_core::rate::parse_duration;
use floodgate_engine::adaptive::{AdaptiveFields, AdaptiveSpec, ClassSpec};
use floodgate_engine::inflight::DEFAULT_LEASE_TTL;

use super::{Invalid, invalid};
use crate::file::AdaptiveFile;

/// One adaptive policy, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveDef {
    /// The algorithm, floor, ceiling, queue and classes (highest first).
    pub spec: AdaptiveSpec,
    /// A permit not released within this long is given back without a sample.
    pub lease_ttl: Duration,
}

/// The longest name of an adaptive policy, in bytes.
const MAX_NAME_BYTES: usize = 128;

/// The `adaptive:` section, by policy name; `taken` says whether a rate policy
/// (`policies:`) has the name, which an adaptive policy may not reuse.
pub(super) fn adaptive(
    file: BTreeMap<String, AdaptiveFile>,
    taken: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, AdaptiveDef>, Invalid> {
    let mut out = BTreeMap::new();
    for (name, f) in file {
        let at = format!("adaptive.{name}");
        if name.is_empty()
            || name.len() > MAX_NAME_BYTES
            || !name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(invalid(
                &at,
                format!("a policy name is 1 to {MAX_NAME_BYTES} printable ASCII characters"),
            ));
        }
        if taken(&name) {
            return Err(invalid(
                &at,
                "a policy of this name is also under policies: give each its own name",
            ));
        }
        out.insert(name, def(&at, f)?);
    }
    Ok(out)
}

fn def(at: &str, f: AdaptiveFile) -> Result<AdaptiveDef, Invalid> {
    let queue_timeout = f
        .queue_timeout
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(|e| invalid(at, format!("queue_timeout: {e}")))?;
    let mut spec = AdaptiveFields {
        algorithm: &f.algorithm,
        min_limit: f.min_limit,
        max_limit: f.max_limit,
        initial_limit: f.initial_limit,
        latency: None,
        drop_on: f.drop_on.as_deref(),
        queue: f.queue,
        queue_timeout,
    }
    .spec()
    .map_err(|e| invalid(at, e))?;
    if !f.classes.is_empty() {
        let classes = f
            .classes
            .into_iter()
            .map(|c| ClassSpec {
                name: c.name,
                share: c.share,
            })
            .collect();
        spec = spec
            .with_classes(classes)
            .map_err(|e| invalid(at, format!("classes: {e}")))?;
    }
    let lease_ttl = match &f.lease_ttl {
        None => DEFAULT_LEASE_TTL,
        Some(t) => parse_duration(t).map_err(|e| invalid(at, format!("lease_ttl: {e}")))?,
    };
    LeaseTtl::new(lease_ttl).map_err(|e| invalid(at, format!("lease_ttl: {e}")))?;
    Ok(AdaptiveDef { spec, lease_ttl })
}
