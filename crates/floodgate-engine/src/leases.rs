//! Taking and giving back in-flight leases through any [`DecisionStore`]: [`acquire`]
//! (waiting in the policy's bounded queue), [`LeaseGuard`] (released when dropped) and
//! [`LeaseBody`] (a response body holding the guards until it ends). The policy and its
//! semantics: [`crate::inflight`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use floodgate_core::Decision;
use floodgate_core::inflight::{Lease, LeaseId};

use crate::adaptive::{AdaptivePermit, Outcome};
use crate::fault::StoreError;
use crate::inflight::{Acquired, LeaseAnswer, LeaseOp, LeasePolicy, QUEUE_POLL};
use crate::store::{BoxFuture, DecisionStore};

/// What taking one of a request's leases came to ([`leases_then_rates`]).
#[derive(Debug)]
pub enum LeaseStep<H, D> {
    /// Taken, kept with the others (or, for a surface that lists them, a decision to keep
    /// with them: a dry run's denial).
    Held(H),
    /// Nothing taken, and the request goes on (a rule without a lease, a store fault
    /// let through).
    Skipped,
    /// Denied: the request stops here; the leases held are given back.
    Denied(D),
}

/// Where a request's leases and rates ended ([`leases_then_rates`]).
#[derive(Debug)]
pub enum Ordered<H, D, R> {
    /// A lease was denied: no rate was decided; the leases taken before it were given
    /// back.
    LeaseDenied(D),
    /// The rates were decided: `rates`, and the leases kept (none when the rates denied:
    /// they were given back at once).
    Decided {
        /// What the rates decided.
        rates: R,
        /// The leases the request keeps while it runs.
        held: Vec<H>,
    },
}

/// One request's leases and rates, as a surface takes and decides them; run in the
/// order every surface keeps by [`leases_then_rates`].
pub trait LeasesAndRates {
    /// A lease taken (with what the surface keeps of it).
    type Held: Send;
    /// What a lease denied answers.
    type Denied;
    /// What the rates decided.
    type Rates;
    /// A fault that stops the request.
    type Error;

    /// How many leases the request wants.
    fn leases(&self) -> usize;

    /// Take the `i`th lease, `held` being those taken before it.
    fn take(
        &mut self,
        i: usize,
        held: &[Self::Held],
    ) -> impl Future<Output = Result<LeaseStep<Self::Held, Self::Denied>, Self::Error>> + Send;

    /// Decide the rates, the leases `held`.
    fn decide(
        &mut self,
        held: &[Self::Held],
    ) -> impl Future<Output = Result<Self::Rates, Self::Error>> + Send;

    /// Whether `rates` admit the request.
    fn admitted(rates: &Self::Rates) -> bool;

    /// Give `held` back.
    fn give_back(&mut self, held: Vec<Self::Held>) -> impl Future<Output = ()> + Send;
}

/// The order of every surface that has `max_in_flight` policies with rates (module docs
/// of [`crate::inflight`]): take the leases first, in order; a lease denied stops there,
/// gives back those held and decides no rate. Then decide the rates (with the leases
/// held); when they deny, the leases are given back at once. A fault (`Err`) at any step
/// gives back what is held and is returned as it is.
pub async fn leases_then_rates<A: LeasesAndRates + Send>(
    mut a: A,
) -> Result<Ordered<A::Held, A::Denied, A::Rates>, A::Error> {
    let mut held: Vec<A::Held> = Vec::new();
    for i in 0..a.leases() {
        match a.take(i, &held).await {
            Ok(LeaseStep::Held(h)) => held.push(h),
            Ok(LeaseStep::Skipped) => {}
            Ok(LeaseStep::Denied(d)) => {
                a.give_back(held).await;
                return Ok(Ordered::LeaseDenied(d));
            }
            Err(e) => {
                a.give_back(held).await;
                return Err(e);
            }
        }
    }
    match a.decide(&held).await {
        Ok(rates) if A::admitted(&rates) => Ok(Ordered::Decided { rates, held }),
        Ok(rates) => {
            a.give_back(held).await;
            Ok(Ordered::Decided {
                rates,
                held: Vec::new(),
            })
        }
        Err(e) => {
            a.give_back(held).await;
            Err(e)
        }
    }
}

/// One acquire through `store`, no queue: the lease or the denial.
pub async fn acquire_once(
    store: &dyn DecisionStore,
    policy: &LeasePolicy,
    key: &[u8],
) -> Result<Acquired, StoreError> {
    store
        .lease(policy, key, LeaseOp::Acquire)
        .await?
        .acquired("store")
}

/// Renew or release through `store`: whether the lease was live.
pub async fn lease_done(
    store: &dyn DecisionStore,
    policy: &LeasePolicy,
    key: &[u8],
    op: LeaseOp,
) -> Result<bool, StoreError> {
    store.lease(policy, key, op).await.map(LeaseAnswer::done)
}

/// The answer of [`acquire`]: a held lease, or why none was taken.
#[derive(Debug)]
pub enum Admission {
    /// Leased (after waiting `waited` in the queue, if at all).
    Leased {
        /// The guard releasing it.
        guard: LeaseGuard,
        /// The admitting decision.
        decision: Decision,
        /// Time spent in the queue.
        waited: Duration,
    },
    /// Denied: `N` in flight (and the queue full, or the wait past its timeout, or no
    /// queue).
    Denied {
        /// The denial (the last one seen, for a request that waited).
        decision: Decision,
        /// Whether the queue was full (the request did not wait at all).
        queue_full: bool,
    },
}

/// Take a lease of `policy` on `key` from `store`, waiting in the policy's queue when it
/// has one (see the module docs). Store faults are returned as they are.
pub async fn acquire(
    store: &Arc<dyn DecisionStore>,
    policy: &Arc<LeasePolicy>,
    key: &[u8],
) -> Result<Admission, StoreError> {
    let first = acquire_once(&**store, policy, key).await?;
    let denial = match first {
        Ok(lease) => return Ok(leased(store, policy, key, lease, Duration::ZERO)),
        Err(d) => d,
    };
    let spec = policy.spec;
    if spec.queue == 0 {
        return Ok(Admission::Denied {
            decision: denial,
            queue_full: false,
        });
    }
    if !policy.enter_queue() {
        return Ok(Admission::Denied {
            decision: denial,
            queue_full: true,
        });
    }
    // leaves on every way out: leased, timed out, a store fault, the request dropped
    struct Leave<'a>(&'a LeasePolicy);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            self.0.leave_queue();
        }
    }
    let _leave = Leave(policy);
    let start = tokio::time::Instant::now();
    let deadline = start + spec.queue_timeout;
    let mut last = denial;
    loop {
        let wait = last.retry_after.unwrap_or(QUEUE_POLL).min(QUEUE_POLL);
        let wake = (tokio::time::Instant::now() + wait).min(deadline);
        tokio::select! {
            _ = policy.released.notified() => {}
            _ = tokio::time::sleep_until(wake) => {}
        }
        match acquire_once(&**store, policy, key).await? {
            Ok(lease) => return Ok(leased(store, policy, key, lease, start.elapsed())),
            Err(d) => last = d,
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Admission::Denied {
                decision: last,
                queue_full: false,
            });
        }
    }
}

fn leased(
    store: &Arc<dyn DecisionStore>,
    policy: &Arc<LeasePolicy>,
    key: &[u8],
    lease: Lease,
    waited: Duration,
) -> Admission {
    policy.count(1);
    Admission::Leased {
        guard: LeaseGuard {
            store: store.clone(),
            policy: policy.clone(),
            key: key.to_vec(),
            id: lease.id,
            released: false,
        },
        decision: lease.decision,
        waited,
    }
}

/// A held lease: released when dropped (in process at once; on Redis by a task spawned
/// on the current tokio runtime, or left to expire at its TTL when there is none).
pub struct LeaseGuard {
    store: Arc<dyn DecisionStore>,
    policy: Arc<LeasePolicy>,
    key: Vec<u8>,
    id: LeaseId,
    released: bool,
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("policy", &self.policy.name)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl LeaseGuard {
    /// The lease's id.
    pub fn id(&self) -> LeaseId {
        self.id
    }

    /// The policy.
    pub fn policy(&self) -> &Arc<LeasePolicy> {
        &self.policy
    }

    /// Extend the lease by the policy's TTL from now (a long request); `false` when it
    /// had expired (its place may be someone else's: the request runs unleased).
    pub async fn renew(&self) -> Result<bool, StoreError> {
        lease_done(
            &*self.store,
            &self.policy,
            &self.key,
            LeaseOp::Renew(self.id),
        )
        .await
    }

    /// Release now and wait for the store's answer (`true`: a place was freed).
    pub async fn release(mut self) -> Result<bool, StoreError> {
        self.released = true;
        self.policy.count(-1);
        let r = lease_done(
            &*self.store,
            &self.policy,
            &self.key,
            LeaseOp::Release(self.id),
        )
        .await;
        self.policy.released.notify_waiters();
        r
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.policy.count(-1);
        let (store, policy, key, id) = (
            self.store.clone(),
            self.policy.clone(),
            std::mem::take(&mut self.key),
            self.id,
        );
        let mut fut: BoxFuture<'static, ()> = Box::pin(async move {
            // a failed release leaves the lease to expire at its TTL: nothing to act on
            let _ = store.lease(&policy, &key, LeaseOp::Release(id)).await;
            policy.released.notify_waiters();
        });
        // the in-process store answers at once; another is driven by a task
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if fut.as_mut().poll(&mut cx).is_pending()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(fut);
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body holding leases until it ends: released when the body reports its
    /// end, fails, or is dropped (the client went away, a timeout cut it). It may also
    /// hold adaptive permits taken at the body's end ([`crate::adaptive::Latency::End`]):
    /// released at the end (seen by a poll, or by `is_end_stream`, which is all a server
    /// asks of a body that ends at once) with the outcome preset from the response head,
    /// as a drop when the body fails, and without a sample when it is dropped before its
    /// end.
    pub struct LeaseBody<B> {
        #[pin]
        inner: B,
        guards: Vec<LeaseGuard>,
        permits: Permits,
    }
}

/// The adaptive permits a body holds (`is_end_stream` takes `&self`: a lock, taken only
/// when there are permits and the body has ended).
#[derive(Default)]
struct Permits(Option<std::sync::Mutex<Vec<AdaptivePermit>>>);

impl Permits {
    fn len(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |m| m.lock().map_or(0, |v| v.len()))
    }

    fn end(&self, failed: bool) {
        let Some(m) = &self.0 else { return };
        let taken = std::mem::take(&mut *m.lock().unwrap_or_else(|p| p.into_inner()));
        for p in taken {
            if failed {
                p.release(Outcome::Dropped);
            } else {
                p.release_preset();
            }
        }
    }
}

impl<B> LeaseBody<B> {
    /// `inner` holding `guards`.
    pub fn new(inner: B, guards: Vec<LeaseGuard>) -> LeaseBody<B> {
        LeaseBody {
            inner,
            guards,
            permits: Permits::default(),
        }
    }

    /// `inner` holding nothing.
    pub fn plain(inner: B) -> LeaseBody<B> {
        LeaseBody::new(inner, Vec::new())
    }

    /// Also hold `permits` until the body ends.
    pub fn with_permits(mut self, permits: Vec<AdaptivePermit>) -> LeaseBody<B> {
        if !permits.is_empty() {
            self.permits = Permits(Some(std::sync::Mutex::new(permits)));
        }
        self
    }

    /// The body inside.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for LeaseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseBody")
            .field("inner", &self.inner)
            .field("leases", &self.guards.len())
            .field("permits", &self.permits.len())
            .finish()
    }
}

impl<B> http_body::Body for LeaseBody<B>
where
    B: http_body::Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let out = this.inner.as_mut().poll_frame(cx);
        match &out {
            Poll::Ready(None) => {
                this.guards.clear();
                this.permits.end(false);
            }
            Poll::Ready(Some(Err(_))) => {
                this.guards.clear();
                this.permits.end(true);
            }
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => {
                this.guards.clear();
                this.permits.end(false);
            }
            _ => {}
        }
        out
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.inner.is_end_stream();
        if ended {
            self.permits.end(false);
        }
        ended
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
