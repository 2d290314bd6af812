//! Front door 2: a small Redis-protocol (RESP2) listener answering redis-cell's
//! `CL.THROTTLE key max_burst count period [quantity]`, so any Redis client can use
//! floodgate as a throttle service; `FG.RESERVE` and `FG.SETTLE` reserve at an estimate
//! and settle the actual cost on the config's policies (`settle`); `FG.THROTTLE` decides
//! on a configured policy (`policy`). Also `PING`, `ECHO`, `QUIT`, `COMMAND` (an empty
//! list, enough for `redis-cli`), `CLIENT ...` and `SELECT` (accepted and ignored, as
//! client libraries send them on connect); anything else is an unknown-command error.
//!
//! With a password configured, `AUTH` (or `HELLO ... AUTH`) comes first (`auth`); with
//! `resp.policies_only`, the commands taking the caller's rate are refused; keys are at
//! most `limits.max_value_bytes` (`policy`). With TLS on the door, each connection is
//! wrapped before its first command ([`crate::tls`]).
//!
//! The parser takes RESP arrays of bulk strings (what clients send) and inline commands
//! (what a human types in `telnet`), pipelined. It refuses, with an error reply and a
//! close (as Redis does on a protocol error), arrays above [`RespLimits::max_args`],
//! bulk strings above [`RespLimits::max_bulk`], lines above [`RespLimits::max_line`],
//! commands above [`RespLimits::max_command`], and anything that is not RESP. It never
//! panics on any input (property-tested).
//!
//! A connection with no command begun for [`RespTimeouts::idle`], or with a command begun
//! and not ended within [`RespTimeouts::request`], is closed (counted in
//! `floodgate_connection_timeouts_total{front="resp"}`); one over the door's caps
//! ([`Gate`]) is answered `-ERR max number of clients reached` and closed, as Redis does.

mod auth;
mod policy;
mod protocol;
mod settle;

use std::sync::Arc;
use std::time::Instant;

use floodgate_engine::CallerLimits;
use floodgate_engine::metrics::{DecisionOutcome, RequestOutcome};
use floodgate_redis::ThrottleArgs;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::gate::Gate;
use crate::leases::{DoorError, ceil_ms, parse_lease_id, parse_limit, parse_ttl_ms};
use crate::metrics::Metrics;

pub use auth::{HELLO_NOAUTH, NO_PASSWORD, NOAUTH, WRONGPASS};
pub use policy::{FG_THROTTLE_USAGE, POLICIES_ONLY, policies_only_error};
pub use protocol::{Parsed, ProtocolError, Reply, RespLimits, parse_command};

/// The `policy` label under which `CL.THROTTLE` decisions are counted
/// (`floodgate_decisions_total{policy="CL.THROTTLE"}`).
pub const THROTTLE_POLICY: &str = "CL.THROTTLE";

/// The usage error of `CL.THROTTLE`, as redis-cell words it.
pub const THROTTLE_USAGE: &str =
    "Usage: CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]";

fn quote_args(args: &[Vec<u8>]) -> String {
    args.iter()
        .take(8)
        .map(|a| {
            let s = String::from_utf8_lossy(&a[..a.len().min(128)]).into_owned();
            format!("'{s}' ")
        })
        .collect()
}

/// The usage of the lease commands.
pub const LEASE_USAGE: &str = "Usage: FG.ACQUIRE <key> <max_in_flight> <ttl_ms> | FG.RENEW <key> <lease> <ttl_ms> | FG.RELEASE <key> <lease>";

/// `FG.ACQUIRE key max_in_flight ttl_ms`: `[limited, limit, remaining, retry_after_ms,
/// reset_after_ms, lease]` (`retry_after_ms` and `lease` -1 when there is none; the
/// durations rounded up to whole milliseconds); `FG.RENEW key lease ttl_ms` and
/// `FG.RELEASE key lease`: 1 when the lease was live, 0 (a no-op) when it was released
/// before, expired or never issued.
async fn lease_command(door: &CallerLimits, name: &str, args: &[Vec<u8>]) -> Reply {
    let s = |i: usize| String::from_utf8_lossy(&args[i]).into_owned();
    let key = args.get(1).map(Vec::as_slice).unwrap_or_default();
    let run = async {
        match (name, args.len()) {
            ("FG.ACQUIRE", 4) => {
                let (limit, ttl) = (parse_limit(&s(2))?, parse_ttl_ms(&s(3))?);
                let ms = |d| i64::try_from(ceil_ms(d)).unwrap_or(i64::MAX);
                let (d, lease) = match door.acquire(key, limit, ttl).await? {
                    Ok(l) => (l.decision, i64::try_from(l.id.0).unwrap_or(-1)),
                    Err(d) => (d, -1),
                };
                Ok(Reply::Ints(vec![
                    i64::from(!d.allowed),
                    ms_limit(d.limit),
                    ms_limit(d.remaining),
                    d.retry_after.map_or(-1, ms),
                    ms(d.reset_after),
                    lease,
                ]))
            }
            ("FG.RENEW", 4) => {
                let (id, ttl) = (parse_lease_id(&s(2))?, parse_ttl_ms(&s(3))?);
                Ok(Reply::Int(i64::from(door.renew(key, id, ttl).await?)))
            }
            ("FG.RELEASE", 3) => {
                let id = parse_lease_id(&s(2))?;
                Ok(Reply::Int(i64::from(door.release(key, id).await?)))
            }
            _ => Err(DoorError::Invalid(LEASE_USAGE.into())),
        }
    };
    match run.await {
        Ok(r) => r,
        Err(e) => Reply::Error(format!("ERR {e}")),
    }
}

fn ms_limit(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// How long a RESP connection may wait on its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RespTimeouts {
    /// No command begun (`connections.idle_timeout`).
    pub idle: std::time::Duration,
    /// A command begun and not ended, from its first octet (`connections.request_timeout`).
    pub request: std::time::Duration,
}

impl Default for RespTimeouts {
    fn default() -> Self {
        let c = crate::config::ConnectionSettings::default();
        RespTimeouts {
            idle: c.idle_timeout,
            request: c.request_timeout,
        }
    }
}

/// Per-connection protocol state.
#[derive(Debug, Default, Clone, Copy)]
pub struct Conn {
    /// The client switched to RESP3 with `HELLO 3`.
    pub resp3: bool,
    /// The client sent the right password (meaningless without one configured).
    pub authenticated: bool,
}

/// The RESP front door's state: the throttle store and the metrics.
#[derive(Debug)]
pub struct RespService {
    /// `CL.THROTTLE`'s state and the leases (shared with the HTTP door).
    store: Arc<CallerLimits>,
    metrics: Arc<Metrics>,
    limits: RespLimits,
    timeouts: RespTimeouts,
    /// The server's policies, for `FG.RESERVE` and `FG.SETTLE`.
    engine: Option<Arc<crate::descriptors::Engine>>,
    /// The password every connection must give first (`None`: none).
    auth: Option<crate::config::RespAuth>,
    /// Refuse the commands taking the caller's rate.
    policies_only: bool,
    /// TLS around every connection (`None`: cleartext).
    tls: Option<crate::tls::Acceptor>,
}

impl RespService {
    /// A service over `store` (`CL.THROTTLE`'s state and the leases, which the HTTP
    /// door shares).
    pub fn new(store: Arc<CallerLimits>, metrics: Arc<Metrics>, limits: RespLimits) -> RespService {
        RespService {
            store,
            metrics,
            limits,
            timeouts: RespTimeouts::default(),
            engine: None,
            auth: None,
            policies_only: false,
            tls: None,
        }
    }

    /// Require `AUTH` (`settings.auth`) and refuse the caller's rates
    /// (`settings.policies_only`) as configured.
    pub fn with_settings(mut self, settings: &crate::config::RespSettings) -> RespService {
        self.auth = settings.auth.clone();
        self.policies_only = settings.policies_only;
        self
    }

    /// Wrap every connection in TLS with `acceptor`.
    pub fn with_tls(mut self, acceptor: Option<crate::tls::Acceptor>) -> RespService {
        self.tls = acceptor;
        self
    }

    /// Close connections that wait on their client past `timeouts`.
    pub fn with_timeouts(mut self, timeouts: RespTimeouts) -> RespService {
        self.timeouts = timeouts;
        self
    }

    /// Also answer `FG.RESERVE` and `FG.SETTLE` on `engine`'s policies.
    pub fn with_engine(mut self, engine: Arc<crate::descriptors::Engine>) -> RespService {
        self.engine = Some(engine);
        self
    }

    /// The in-flight leases `FG.ACQUIRE`, `FG.RENEW` and `FG.RELEASE` use (on the same
    /// store as `CL.THROTTLE`); the HTTP door shares them.
    pub fn leases(&self) -> &Arc<CallerLimits> {
        &self.store
    }

    /// Execute one command on a connection speaking `conn`. Returns the reply and whether
    /// to close the connection.
    pub async fn execute(&self, conn: &mut Conn, args: &[Vec<u8>]) -> (Reply, bool) {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let arity = |ok: bool, reply: Reply| {
            if ok {
                reply
            } else {
                Reply::Error(format!(
                    "ERR wrong number of arguments for '{}' command",
                    name.to_ascii_lowercase()
                ))
            }
        };
        if let Some(reply) = self.gate(conn, &name) {
            return (reply, false);
        }
        if let Some(reply) = self.refusal(&name, args) {
            return (reply, false);
        }
        match name.as_str() {
            "AUTH" => (self.auth_command(conn, args), false),
            "CL.THROTTLE" => (self.throttle(args).await, false),
            "FG.THROTTLE" => (self.policy_throttle(args).await, false),
            "FG.RESERVE" => (self.reserve(args).await, false),
            "FG.SETTLE" => (self.settle(args).await, false),
            "FG.ACQUIRE" | "FG.RENEW" | "FG.RELEASE" => {
                let start = Instant::now();
                let reply = lease_command(&self.store, &name, args).await;
                let outcome = match &reply {
                    Reply::Ints(v) if v[0] == 1 => RequestOutcome::Rejected,
                    Reply::Ints(_) | Reply::Int(_) => RequestOutcome::Passed,
                    Reply::Error(e) if e.starts_with("ERR store") => RequestOutcome::Error,
                    _ => RequestOutcome::Invalid,
                };
                self.metrics.request("resp", outcome, start.elapsed());
                (reply, false)
            }
            "PING" => match args.len() {
                1 => (Reply::Simple("PONG"), false),
                2 => (Reply::Bulk(args[1].clone()), false),
                _ => (arity(false, Reply::EmptyArray), false),
            },
            "ECHO" => (
                arity(
                    args.len() == 2,
                    Reply::Bulk(args.get(1).cloned().unwrap_or_default()),
                ),
                false,
            ),
            "QUIT" => (Reply::Simple("OK"), true),
            "COMMAND" => (Reply::EmptyArray, false),
            "CLIENT" | "SELECT" => (Reply::Simple("OK"), false),
            // RESP3 clients (redis-py 8 by default) open with HELLO 3; the replies this
            // server sends (simple strings, errors, bulks, arrays of integers) are the
            // same in RESP2 and RESP3, only HELLO's own reply differs.
            "HELLO" => (self.hello(conn, args), false),
            _ => (
                Reply::Error(format!(
                    "ERR unknown command '{}', with args beginning with: {}",
                    String::from_utf8_lossy(&args[0][..args[0].len().min(128)]),
                    quote_args(&args[1..])
                )),
                false,
            ),
        }
    }

    async fn throttle(&self, args: &[Vec<u8>]) -> Reply {
        let start = Instant::now();
        let reply = self.throttle_inner(args).await;
        let outcome = match &reply {
            Reply::Ints(v) if v[0] == 1 => RequestOutcome::Rejected,
            Reply::Ints(_) => RequestOutcome::Passed,
            Reply::Error(e) if e.starts_with("ERR store") => RequestOutcome::Error,
            _ => RequestOutcome::Invalid,
        };
        let decision = match outcome {
            RequestOutcome::Passed => Some(DecisionOutcome::Passed),
            RequestOutcome::Rejected => Some(DecisionOutcome::Rejected),
            _ => None,
        };
        if let Some(d) = decision {
            self.metrics.decision_counter(THROTTLE_POLICY, d).inc();
        }
        self.metrics.request("resp", outcome, start.elapsed());
        reply
    }

    async fn throttle_inner(&self, args: &[Vec<u8>]) -> Reply {
        if !(5..=6).contains(&args.len()) {
            return Reply::Error(format!("ERR {THROTTLE_USAGE}"));
        }
        let s = |i: usize| String::from_utf8_lossy(&args[i]).into_owned();
        let parsed =
            match ThrottleArgs::parse(&s(2), &s(3), &s(4), args.get(5).map(|_| s(5)).as_deref()) {
                Ok(p) => p,
                Err(e) => return Reply::Error(format!("ERR {e}")),
            };
        match self.store.throttle(&args[1], &parsed).await {
            Ok(r) => Reply::Ints(r.to_vec()),
            Err(e) if e.is_transient() => {
                self.metrics.store_error(&e);
                Reply::Error(format!("ERR store unavailable: {}", e.kind))
            }
            Err(e) => Reply::Error(format!("ERR {}", e.kind)),
        }
    }

    /// Serve one connection until the client quits, sends garbage, or `shutdown` fires;
    /// with TLS configured, after its handshake (a failed one closes it).
    pub async fn serve_connection(
        self: Arc<Self>,
        stream: TcpStream,
        shutdown: watch::Receiver<bool>,
    ) {
        let _ = stream.set_nodelay(true);
        match &self.tls {
            None => self.serve_stream(stream, shutdown).await,
            Some(acceptor) => {
                if let Some(tls) = crate::tls::handshake(acceptor, stream, &self.metrics).await {
                    self.serve_stream(tls, shutdown).await;
                }
            }
        }
    }

    async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(
        self: Arc<Self>,
        mut stream: S,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut buf: Vec<u8> = Vec::with_capacity(4096);
        let mut out: Vec<u8> = Vec::with_capacity(4096);
        let mut conn = Conn::default();
        // when the command in `buf` (not yet whole) began, or the connection went idle
        let mut waiting_since = tokio::time::Instant::now();
        loop {
            // Answer every complete command in the buffer (pipelining).
            let mut used = 0;
            let mut close = false;
            loop {
                match parse_command(&buf[used..], &self.limits) {
                    Ok(Some((args, n))) => {
                        used += n;
                        if args.is_empty() {
                            continue;
                        }
                        let (reply, quit) = self.execute(&mut conn, &args).await;
                        reply.encode(&mut out);
                        if quit {
                            close = true;
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        Reply::Error(format!("ERR {e}")).encode(&mut out);
                        self.metrics.request(
                            "resp",
                            RequestOutcome::Invalid,
                            std::time::Duration::ZERO,
                        );
                        close = true;
                        break;
                    }
                }
            }
            buf.drain(..used);
            if used > 0 {
                // idle from now, or the command left in `buf` began in the last read: a
                // client pipelining without pause is never timed out
                waiting_since = tokio::time::Instant::now();
            }
            if !out.is_empty() {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
            if close || *shutdown.borrow() {
                lingering_close(stream).await;
                return;
            }
            let (phase, limit) = if buf.is_empty() {
                ("idle", self.timeouts.idle)
            } else {
                ("request", self.timeouts.request)
            };
            let was_empty = buf.is_empty();
            tokio::select! {
                r = stream.read_buf(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if was_empty {
                            waiting_since = tokio::time::Instant::now();
                        }
                    }
                },
                () = tokio::time::sleep_until(waiting_since + limit) => {
                    self.metrics.connection_timeout("resp", phase);
                    tracing::debug!(phase, ?limit, "RESP connection timed out; closing it");
                    return;
                }
                _ = shutdown.changed() => {
                    lingering_close(stream).await;
                    return;
                }
            }
        }
    }
}

/// Close the way HTTP servers do: send FIN, then read and discard what the client is
/// still sending for a moment, so the kernel does not answer it with a reset that could
/// destroy the error reply before the client reads it.
async fn lingering_close<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 16 * 1024];
    let mut left: usize = 4 << 20;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
    while left > 0 {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => return,
        }
    }
}

/// The answer to a connection over the door's caps (Redis's words for its `maxclients`).
pub const TOO_MANY_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

/// Accept connections on `listener` under `gate`'s caps until `shutdown` fires; each
/// connection finishes the commands it has received, then closes. A connection over a
/// cap is answered [`TOO_MANY_CLIENTS`] (if the socket takes it at once) and closed.
pub async fn serve(
    listener: TcpListener,
    service: Arc<RespService>,
    gate: Gate,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = gate.admit(peer) else {
                        let _ = stream.try_write(TOO_MANY_CLIENTS);
                        drop(stream);
                        continue;
                    };
                    let conn = service.clone().serve_connection(stream, shutdown.clone());
                    tasks.spawn(async move {
                        conn.await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "RESP accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
        while tasks.try_join_next().is_some() {}
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[tokio::test]
    async fn hello_switches_protocol_and_rejects_unknown_versions() {
        let s = RespService::new(
            Arc::new(CallerLimits::memory(10).unwrap()),
            Arc::new(Metrics::new(None)),
            RespLimits::default(),
        );
        let mut conn = Conn::default();
        let (r, _) = s.execute(&mut conn, &args(&["HELLO", "3"])).await;
        assert!(conn.resp3);
        let mut out = Vec::new();
        r.encode(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("%7\r\n$6\r\nserver\r\n$9\r\nfloodgate\r\n"),
            "{text}"
        );
        assert!(text.contains("$5\r\nproto\r\n:3\r\n"), "{text}");
        let (r, _) = s.execute(&mut conn, &args(&["HELLO", "2"])).await;
        let mut out = Vec::new();
        r.encode(&mut out);
        assert!(out.starts_with(b"*14\r\n") && !conn.resp3);
        let (r, _) = s.execute(&mut conn, &args(&["HELLO", "4"])).await;
        assert_eq!(
            r,
            Reply::Error("NOPROTO unsupported protocol version".into())
        );
    }

    #[tokio::test]
    async fn throttle_answers_as_redis_cell() {
        let s = RespService::new(
            Arc::new(CallerLimits::memory(1000).unwrap()),
            Arc::new(Metrics::new(None)),
            RespLimits::default(),
        );
        let run = |v: &[&str]| {
            let a = args(v);
            let s = &s;
            async move { s.execute(&mut Conn::default(), &a).await.0 }
        };
        assert_eq!(
            run(&["CL.THROTTLE", "k", "15", "30", "60"]).await,
            Reply::Ints(vec![0, 16, 15, -1, 2])
        );
        assert_eq!(
            run(&["cl.throttle", "k", "15", "30", "60"]).await,
            // 4 s less the time since the first call, truncated as redis-cell truncates
            Reply::Ints(vec![0, 16, 14, -1, 3])
        );
        assert_eq!(
            run(&["CL.THROTTLE", "k2", "15", "30", "60", "0"]).await,
            Reply::Ints(vec![0, 16, 16, -1, 0])
        );
        assert_eq!(
            run(&["CL.THROTTLE", "k3", "4", "1", "1", "6"]).await,
            Reply::Ints(vec![1, 5, 5, -1, 0])
        );
        assert_eq!(
            run(&["CL.THROTTLE", "k"]).await,
            Reply::Error(format!("ERR {THROTTLE_USAGE}"))
        );
        assert_eq!(
            run(&["CL.THROTTLE", "k", "15", "3o", "60"]).await,
            Reply::Error("ERR count must be an integer, got \"3o\"".into())
        );
        assert_eq!(
            run(&["CL.THROTTLE", "k", "15", "30", "0"]).await,
            Reply::Error("ERR zero rates are not supported (period is 0)".into())
        );
        let Reply::Error(e) = run(&["CL.THROTTLE", "k", "18446744073709551615", "30", "60"]).await
        else {
            panic!()
        };
        assert!(e.starts_with("ERR "), "{e}");
        assert_eq!(run(&["PING"]).await, Reply::Simple("PONG"));
        assert_eq!(run(&["ping", "x"]).await, Reply::Bulk(b"x".to_vec()));
        assert_eq!(
            run(&["FLUSHALL", "now"]).await,
            Reply::Error("ERR unknown command 'FLUSHALL', with args beginning with: 'now' ".into())
        );
    }
}
