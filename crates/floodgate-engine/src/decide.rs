//! The decide procedure: a request's checks in, one decision per check and the request's
//! outcome out. Every surface that decides through a [`DecisionStore`] runs it: the tower
//! layer (and so floodgate proxy) for a request's policies, floodgate server for the
//! limits its descriptors reach.
//!
//! * The enforced checks are decided in one all-or-nothing store call
//!   ([`DecisionStore::check`]): a request denied by one consumes from none.
//! * Each shadow (dry-run) check is charged on its own and never denies; a store fault
//!   on one admits it (it is counted, and never decides the request).
//! * A blocking check (a limit of 0 requests) denies any request with a cost, without a
//!   store call; the enforced checks are then only looked at (cost 0). In dry run it
//!   only reports the denial.
//! * A transient store fault (timeout, open circuit, store unavailable) on the enforced
//!   checks is decided by the [`FaultPolicy`]; a refusal (a check the store cannot
//!   decide) is an error.
//!
//! Every fault, transient or not, is reported to the caller's `on_fault` first (to count
//! and log it under its kind).

use std::time::Duration;

use floodgate_core::multi::{MultiDecision, binding_rank};
use floodgate_core::{Algorithm, Decision};
use smallvec::SmallVec;

use crate::fault::{StoreError, StoreFailure};
use crate::store::{DecisionStore, LocalStore, PolicyInfo, StoreCheck};

/// The part a check plays in its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Decides the request, all-or-nothing with the other enforced checks.
    Enforced,
    /// Charged and reported, never denies (dry run, Envoy's `shadow_mode`).
    Shadow,
    /// A limit of 0: denies any request with a cost, never sent to a store.
    Blocking,
    /// A limit of 0 in dry run: reported as denying any cost, denies nothing, never sent
    /// to a store.
    BlockingShadow,
}

/// One check of a request: a policy, the key it is counted under, the cost in the
/// policy's units, and its role.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The policy (its index is its place in the store).
    pub policy: &'a PolicyInfo,
    /// The limiter key (arbitrary bytes).
    pub key: &'a Vec<u8>,
    /// Units the request costs (0 looks without consuming).
    pub cost: u64,
    /// What the check does to the request.
    pub role: Role,
}

impl Check<'_> {
    fn store_check(&self, cost: u64) -> StoreCheck<'_> {
        StoreCheck {
            policy: self.policy,
            key: self.key,
            cost,
        }
    }
}

/// What a request gets when its store fails: [`StoreFailure`] (admit or deny), and the
/// retry a fail-closed denial advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPolicy {
    /// Admit (fail open, the default) or deny (fail closed).
    pub failure: StoreFailure,
    /// `Retry-After` of a fail-closed denial (a Redis breaker's open time).
    pub retry: Duration,
}

impl Default for FaultPolicy {
    fn default() -> Self {
        FaultPolicy {
            failure: StoreFailure::Allow,
            retry: Duration::from_secs(1),
        }
    }
}

impl FaultPolicy {
    /// The decision of `policy` when the store could not decide.
    pub fn decision(&self, policy: &PolicyInfo) -> Decision {
        let cap = policy.algorithm.limit();
        match self.failure {
            StoreFailure::Allow => Decision::allow(cap, 0, Duration::ZERO),
            StoreFailure::Deny => Decision::deny(cap, 0, self.retry, self.retry),
        }
    }
}

/// The decisions of a request's checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// One decision per check, in the order of the checks. When the request is denied,
    /// an enforced check that would have admitted it was not charged, and its decision
    /// is the cost-0 view of its state.
    pub decisions: SmallVec<[Decision; 2]>,
    /// Every enforced check admitted the request (and was charged), and no blocking
    /// check with a cost was reached; under a store fault, the fault policy's answer.
    pub admitted: bool,
    /// The fault policy decided the enforced checks (their store failed).
    pub fault: Option<StoreFailure>,
}

impl Decided {
    /// The delay to apply before the request: the largest of the enforced checks' (0 when
    /// denied).
    pub fn delay(&self, checks: &[Check<'_>]) -> Duration {
        if !self.admitted {
            return Duration::ZERO;
        }
        checks
            .iter()
            .zip(&self.decisions)
            .filter(|(c, _)| c.role == Role::Enforced)
            .map(|(_, d)| d.delay)
            .max()
            .unwrap_or_default()
    }

    /// The denial that binds among the enforced and blocking checks: its index among the
    /// checks. The denied check with the longest `retry_after` (`None`, "never", binds
    /// over any finite one).
    pub fn binding(&self, checks: &[Check<'_>]) -> Option<usize> {
        checks
            .iter()
            .zip(&self.decisions)
            .enumerate()
            .filter(|(_, (c, d))| matches!(c.role, Role::Enforced | Role::Blocking) && !d.allowed)
            .max_by_key(|(_, (_, d))| binding_rank(d))
            .map(|(i, _)| i)
    }
}

/// Where a request's checks go: a store, and the same store when it is the in-process
/// one (then decided at once, without a boxed future).
#[derive(Clone, Copy)]
pub struct Stores<'a> {
    /// The store.
    pub store: &'a dyn DecisionStore,
    /// The same store when in process.
    pub local: Option<&'a LocalStore>,
}

impl Stores<'_> {
    async fn check(&self, checks: &[StoreCheck<'_>]) -> Result<MultiDecision, StoreError> {
        match self.local {
            Some(l) => l.check_now(checks),
            None => self.store.check(checks).await,
        }
    }
}

/// Decide `checks` through `stores` (see the module docs); `on_fault` is told of every
/// store fault first. `Err` is a fault that is not transient (the store refused a check).
pub async fn decide(
    stores: Stores<'_>,
    fault: &FaultPolicy,
    checks: &[Check<'_>],
    on_fault: &mut (dyn FnMut(&StoreError) + Send),
) -> Result<Decided, StoreError> {
    let mut out = Decided::start(checks);
    for (i, c) in checks.iter().enumerate() {
        if c.role == Role::Shadow {
            let r = stores.check(&[c.store_check(c.cost)]).await;
            out.shadow(i, c, r, on_fault)?;
        }
    }
    let blocked = blocked(checks);
    let (enforced, list) = enforced(checks, blocked);
    if !list.is_empty() {
        let r = stores.check(&list).await;
        drop(list);
        out.enforced(checks, &enforced, r, fault, on_fault)?;
    }
    out.admitted &= !blocked;
    Ok(out)
}

/// [`decide`] on the in-process store, at once.
pub fn decide_now(
    local: &LocalStore,
    fault: &FaultPolicy,
    checks: &[Check<'_>],
    on_fault: &mut (dyn FnMut(&StoreError) + Send),
) -> Result<Decided, StoreError> {
    let mut out = Decided::start(checks);
    for (i, c) in checks.iter().enumerate() {
        if c.role == Role::Shadow {
            let r = local.check_now(&[c.store_check(c.cost)]);
            out.shadow(i, c, r, on_fault)?;
        }
    }
    let blocked = blocked(checks);
    let (enforced, list) = enforced(checks, blocked);
    if !list.is_empty() {
        let r = local.check_now(&list);
        drop(list);
        out.enforced(checks, &enforced, r, fault, on_fault)?;
    }
    out.admitted &= !blocked;
    Ok(out)
}

/// Whether a blocking check with a cost is among `checks`.
fn blocked(checks: &[Check<'_>]) -> bool {
    checks
        .iter()
        .any(|c| c.role == Role::Blocking && c.cost > 0)
}

/// The enforced checks' indices and their store checks (at cost 0 when `blocked`).
fn enforced<'a>(
    checks: &'a [Check<'a>],
    blocked: bool,
) -> (SmallVec<[usize; 2]>, SmallVec<[StoreCheck<'a>; 2]>) {
    let idx: SmallVec<[usize; 2]> = (0..checks.len())
        .filter(|&i| checks[i].role == Role::Enforced)
        .collect();
    let list = idx
        .iter()
        .map(|&i| checks[i].store_check(if blocked { 0 } else { checks[i].cost }))
        .collect();
    (idx, list)
}

impl Decided {
    fn start(checks: &[Check<'_>]) -> Decided {
        Decided {
            // a blocking check's answer; the store's replaces it for the others
            decisions: checks
                .iter()
                .map(|c| {
                    if c.cost == 0 {
                        Decision::allow(0, 0, Duration::ZERO)
                    } else {
                        Decision::never(0, c.cost, 0, Duration::ZERO)
                    }
                })
                .collect(),
            admitted: true,
            fault: None,
        }
    }

    fn shadow(
        &mut self,
        i: usize,
        c: &Check<'_>,
        r: Result<MultiDecision, StoreError>,
        on_fault: &mut (dyn FnMut(&StoreError) + Send),
    ) -> Result<(), StoreError> {
        match r {
            Ok(m) => {
                if let Some(d) = m.decisions.first() {
                    self.decisions[i] = *d;
                }
            }
            Err(e) => {
                on_fault(&e);
                if !e.is_transient() {
                    return Err(e);
                }
                self.decisions[i] = FaultPolicy {
                    failure: StoreFailure::Allow,
                    retry: Duration::ZERO,
                }
                .decision(c.policy);
            }
        }
        Ok(())
    }

    fn enforced(
        &mut self,
        checks: &[Check<'_>],
        enforced: &[usize],
        r: Result<MultiDecision, StoreError>,
        fault: &FaultPolicy,
        on_fault: &mut (dyn FnMut(&StoreError) + Send),
    ) -> Result<(), StoreError> {
        match r {
            Ok(m) => {
                self.admitted = m.allowed;
                for (&i, d) in enforced.iter().zip(m.decisions) {
                    self.decisions[i] = d;
                }
            }
            Err(e) => {
                on_fault(&e);
                if !e.is_transient() {
                    return Err(e);
                }
                self.fault = Some(fault.failure);
                self.admitted = fault.failure == StoreFailure::Allow;
                for &i in enforced {
                    self.decisions[i] = fault.decision(checks[i].policy);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
