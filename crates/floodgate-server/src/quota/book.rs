//! Where the clients' reports of each bucket are kept, so that every replica divides a
//! bucket among all its clients: in process ([`DemandBook::Memory`]) when the server
//! has no Redis, else in Redis ([`DemandBook::Redis`]): per bucket, a hash of client ->
//! (demand, time of report) whose key expires a time to live after its last report,
//! written and read back in one round trip (`report.lua`, timed by Redis's
//! clock, so replicas' clocks need not agree).
//!
//! Both drop reports older than the time to live and bound what they hold: clients per
//! bucket and, in process, buckets.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use floodgate_core::Clock;
use floodgate_redis::RedisStore;

use super::share::ClientDemand;

/// Why a report was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum BookError {
    /// The bucket already has its most clients (`quota.max_clients_per_bucket`).
    #[error("the bucket has its most clients ({0})")]
    ClientsFull(usize),
    /// The server already tracks its most buckets (`quota.max_buckets`).
    #[error("the server tracks its most buckets ({0})")]
    BucketsFull(usize),
    /// Redis failed or timed out.
    #[error("the Redis store failed: {0}")]
    Redis(#[from] floodgate_redis::Error),
    /// Redis answered something the script does not write.
    #[error("the Redis store answered an unexpected reply: {0}")]
    Reply(String),
}

/// One report, and the caps it is recorded under.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    /// The bucket's identity (domain and its sorted `BucketId`).
    pub bucket: &'a str,
    /// The reporting client.
    pub client: &'a str,
    /// Its demand, requests per second.
    pub demand: f64,
    /// How long a report counts.
    pub ttl: Duration,
    /// Most clients in the bucket.
    pub max_clients: usize,
    /// Most buckets held in process.
    pub max_buckets: usize,
}

/// The bucket's live reports after a report, with the store's time.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The store's time, ms since the Unix epoch.
    pub now_ms: u64,
    /// Every live report of the bucket, the reporting client's included.
    pub clients: Vec<ClientDemand>,
}

/// One bucket's reports in process: client -> (demand per second, reported ms).
type Ledger = HashMap<String, (f64, u64)>;

/// Where reports are kept.
pub enum DemandBook {
    /// In process.
    Memory {
        /// Bucket -> client -> (demand, reported ms).
        buckets: Mutex<HashMap<String, Ledger>>,
        /// Wall-clock time.
        clock: Arc<dyn Clock>,
    },
    /// In Redis, shared by every replica on it.
    Redis(Arc<RedisStore>),
}

impl std::fmt::Debug for DemandBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DemandBook::Memory { .. } => "DemandBook::Memory",
            DemandBook::Redis(_) => "DemandBook::Redis",
        })
    }
}

/// The script's source.
const REPORT_LUA: &str = include_str!("report.lua");
static REPORT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(REPORT_LUA));
/// The read script's source.
const READ_LUA: &str = include_str!("read.lua");
static READ: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(READ_LUA));

/// Demands are kept in Redis as whole milli-requests per second, below 2^53.
const MAX_MILLI: f64 = 9.0e15;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl DemandBook {
    /// An in-process book reading `clock` (nanoseconds since the Unix epoch).
    pub fn memory(clock: Arc<dyn Clock>) -> DemandBook {
        DemandBook::Memory {
            buckets: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// Record `r` and read the bucket's live reports back.
    pub async fn record(&self, r: Report<'_>) -> Result<Recorded, BookError> {
        match self {
            DemandBook::Memory { buckets, clock } => {
                let now_ms = clock.now().0 / 1_000_000;
                let mut all = buckets.lock().unwrap_or_else(|p| p.into_inner());
                record_in(&mut all, r, now_ms)
            }
            DemandBook::Redis(store) => record_redis(store, r).await,
        }
    }

    /// The live reports of `bucket` (under a time to live of `ttl`), recording nothing:
    /// what the server divides when it pushes fresh assignments between reports.
    pub async fn read(&self, bucket: &str, ttl: Duration) -> Result<Recorded, BookError> {
        match self {
            DemandBook::Memory { buckets, clock } => {
                let now_ms = clock.now().0 / 1_000_000;
                let all = buckets.lock().unwrap_or_else(|p| p.into_inner());
                Ok(read_in(&all, bucket, ms(ttl), now_ms))
            }
            DemandBook::Redis(store) => read_redis(store, bucket, ttl).await,
        }
    }

    /// Buckets held in process (0 on Redis).
    pub fn buckets(&self) -> usize {
        match self {
            DemandBook::Memory { buckets, .. } => {
                buckets.lock().unwrap_or_else(|p| p.into_inner()).len()
            }
            DemandBook::Redis(_) => 0,
        }
    }
}

fn record_in(
    all: &mut HashMap<String, Ledger>,
    r: Report<'_>,
    now_ms: u64,
) -> Result<Recorded, BookError> {
    let ttl = ms(r.ttl);
    let live = |at: u64| at.saturating_add(ttl) > now_ms;
    if !all.contains_key(r.bucket) && all.len() >= r.max_buckets {
        // full: sweep every bucket's expired reports (only when full, so amortized)
        all.retain(|_, clients| {
            clients.retain(|_, (_, at)| at.saturating_add(ttl) > now_ms);
            !clients.is_empty()
        });
        if all.len() >= r.max_buckets {
            return Err(BookError::BucketsFull(r.max_buckets));
        }
    }
    let clients = all.entry(r.bucket.to_string()).or_default();
    clients.retain(|_, (_, at)| live(*at));
    if !clients.contains_key(r.client) && clients.len() >= r.max_clients {
        return Err(BookError::ClientsFull(r.max_clients));
    }
    let demand = if r.demand.is_finite() && r.demand > 0.0 {
        r.demand
    } else {
        0.0
    };
    clients.insert(r.client.to_string(), (demand, now_ms));
    Ok(Recorded {
        now_ms,
        clients: clients
            .iter()
            .map(|(c, &(demand, reported_ms))| ClientDemand {
                client: c.clone(),
                demand,
                reported_ms,
            })
            .collect(),
    })
}

fn read_in(all: &HashMap<String, Ledger>, bucket: &str, ttl: u64, now_ms: u64) -> Recorded {
    let clients = all
        .get(bucket)
        .into_iter()
        .flatten()
        .filter(|(_, (_, at))| at.saturating_add(ttl) > now_ms)
        .map(|(c, &(demand, reported_ms))| ClientDemand {
            client: c.clone(),
            demand,
            reported_ms,
        })
        .collect();
    Recorded { now_ms, clients }
}

async fn read_redis(
    store: &RedisStore,
    bucket: &str,
    ttl: Duration,
) -> Result<Recorded, BookError> {
    let key = store.key_space().key("quota", bucket.as_bytes())?;
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(READ.get_hash()).arg(1).arg(&key).arg(ms(ttl));
    let reply: Vec<String> = match store.command(&cmd).await {
        Err(floodgate_redis::Error::Redis(e)) if e.code() == Some("NOSCRIPT") => {
            let mut load = redis::cmd("EVAL");
            load.arg(READ_LUA).arg(1).arg(&key).arg(ms(ttl));
            store.command(&load).await?
        }
        other => other?,
    };
    parse_reply(&reply, 0)
}

async fn record_redis(store: &RedisStore, r: Report<'_>) -> Result<Recorded, BookError> {
    let key = store.key_space().key("quota", r.bucket.as_bytes())?;
    let milli = (r.demand * 1000.0).clamp(0.0, MAX_MILLI);
    let milli = if milli.is_nan() { 0 } else { milli as u64 };
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(REPORT.get_hash())
        .arg(1)
        .arg(&key)
        .arg(r.client)
        .arg(milli)
        .arg(ms(r.ttl))
        .arg(r.max_clients);
    let reply: Vec<String> = match store.command(&cmd).await {
        // after SCRIPT FLUSH or a restart: send the source once
        Err(floodgate_redis::Error::Redis(e)) if e.code() == Some("NOSCRIPT") => {
            let mut load = redis::cmd("EVAL");
            load.arg(REPORT_LUA)
                .arg(1)
                .arg(&key)
                .arg(r.client)
                .arg(milli)
                .arg(ms(r.ttl))
                .arg(r.max_clients);
            store.command(&load).await?
        }
        other => other?,
    };
    parse_reply(&reply, r.max_clients)
}

fn parse_reply(reply: &[String], max_clients: usize) -> Result<Recorded, BookError> {
    let bad = || BookError::Reply(format!("{reply:?}"));
    let (status, rest) = reply.split_first().ok_or_else(bad)?;
    let (now, rest) = rest.split_first().ok_or_else(bad)?;
    let now_ms: u64 = now.parse().map_err(|_| bad())?;
    match status.as_str() {
        "full" => return Err(BookError::ClientsFull(max_clients)),
        "ok" => {}
        _ => return Err(bad()),
    }
    if rest.len() % 3 != 0 {
        return Err(bad());
    }
    let clients = rest
        .chunks_exact(3)
        .map(|c| {
            Ok(ClientDemand {
                client: c[0].clone(),
                demand: c[1].parse::<u64>().map_err(|_| bad())? as f64 / 1000.0,
                reported_ms: c[2].parse().map_err(|_| bad())?,
            })
        })
        .collect::<Result<_, BookError>>()?;
    Ok(Recorded { now_ms, clients })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report<'a>(bucket: &'a str, client: &'a str, demand: f64) -> Report<'a> {
        Report {
            bucket,
            client,
            demand,
            ttl: Duration::from_secs(10),
            max_clients: 2,
            max_buckets: 2,
        }
    }

    #[test]
    fn memory_book_keeps_live_reports_within_its_caps() {
        let mut all = HashMap::new();
        let r = record_in(&mut all, report("b1", "a", 5.0), 1_000).unwrap();
        assert_eq!(r.clients.len(), 1);
        let r = record_in(&mut all, report("b1", "b", f64::NAN), 2_000).unwrap();
        assert_eq!(r.clients.len(), 2);
        assert!(r.clients.iter().any(|c| c.client == "b" && c.demand == 0.0));
        // a third client is refused while two are live
        assert!(matches!(
            record_in(&mut all, report("b1", "c", 1.0), 3_000),
            Err(BookError::ClientsFull(2))
        ));
        // a's report expires at 11 s: c takes its place
        let r = record_in(&mut all, report("b1", "c", 1.0), 11_000).unwrap();
        let mut names: Vec<&str> = r.clients.iter().map(|c| c.client.as_str()).collect();
        names.sort();
        assert_eq!(names, ["b", "c"]);
        record_in(&mut all, report("b2", "a", 1.0), 11_000).unwrap();
        assert!(matches!(
            record_in(&mut all, report("b3", "a", 1.0), 11_000),
            Err(BookError::BucketsFull(2))
        ));
        // once b2's only report expired, a new bucket fits
        record_in(&mut all, report("b3", "a", 1.0), 21_500).unwrap();
        // reading writes nothing and drops expired reports from the answer
        let held = all.len();
        let r = read_in(&all, "b3", 10_000, 22_000);
        assert_eq!(r.clients.len(), 1);
        assert_eq!(r.now_ms, 22_000);
        assert!(read_in(&all, "b3", 10_000, 31_500).clients.is_empty());
        assert!(read_in(&all, "nope", 10_000, 22_000).clients.is_empty());
        assert_eq!(all.len(), held);
    }

    #[test]
    fn redis_replies_are_read_strictly() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let r = parse_reply(&s(&["ok", "5", "a", "1500", "4"]), 9).unwrap();
        assert_eq!(r.now_ms, 5);
        assert_eq!(r.clients[0].demand, 1.5);
        assert!(matches!(
            parse_reply(&s(&["full", "5"]), 9),
            Err(BookError::ClientsFull(9))
        ));
        for bad in [
            &["ok"][..],
            &["ok", "x"],
            &["ok", "5", "a"],
            &["no", "5"],
            &["ok", "5", "a", "z", "1"],
        ] {
            assert!(
                matches!(parse_reply(&s(bad), 9), Err(BookError::Reply(_))),
                "{bad:?}"
            );
        }
    }
}
