//! Connections to Redis: the `Redis` handle every call goes through. From a URL to a live
//! connection, top to bottom (`Redis::open`):
//!
//! 1. `locate::Endpoint::parse`: what the URL names: one server, a set of Sentinels and the
//!    master they watch, or a cluster's seeds.
//! 2. `Endpoint::master`: which node is the namespace's master now (asked of the Sentinels or
//!    the cluster; the URL's own server otherwise).
//! 3. `node::Node::connect`: the connections to that node: the lane (`crate::wire`) for calls
//!    and pipelines over plain TCP, a multiplexed redis-rs `ConnectionManager` for TLS and
//!    transactions, and a deadpool pool for blocking commands (BLPOP, XREAD BLOCK), so a block
//!    never stalls the others.
//! 4. `Redis::probe`: what the server can do (asked of it, not guessed from its version), and
//!    the function library loaded when it is missing.
//!
//! Afterwards a call that finds its node gone, turned replica or redirected relocates (steps
//! 2 and 3 again) and is sent again; one that finds the library gone (a restarted Redis)
//! reloads it first.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, RetryMethod, Value};

use crate::error::{Error, Result};
use crate::function;

mod blocking;
mod locate;
mod node;
mod options;
mod shown;
mod tls;

pub use blocking::Blocking;
use locate::Endpoint;
use node::{Node, MAX_BLOCK, POOL_WAIT};
pub use options::ConnectOptions;
pub use shown::{shown_url, HIDDEN};
pub use tls::Tls;

/// What the server supports beyond Redis 7.0, detected with COMMAND INFO, and how it persists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// XACKDEL (Redis 8.2): acknowledge and delete an entry in one command.
    pub xackdel: bool,
    /// WAITAOF (Redis 7.2): wait until a write is on disk, here and on replicas.
    pub waitaof: bool,
    /// The server fsyncs its AOF before it answers any write (`appendfsync always`), so a
    /// write's round trip holds a disk flush: a worker then sends its next fetch with each
    /// batch of results (one flush for both). False where CONFIG GET is not allowed (a
    /// least-privilege ACL user): see `hero_worker::WorkerBuilder::group_commit`.
    pub fsync_always: bool,
}

impl Capabilities {
    /// The ARGV flag the functions take.
    pub fn xackdel_flag(&self) -> &'static str {
        if self.xackdel {
            "1"
        } else {
            "0"
        }
    }
}

/// A handle on one Redis deployment: the namespace's master, found again after a failover
/// (Sentinel) or a move (Cluster). Cheap to clone; clones share the connections and the
/// knowledge of where the master is.
#[derive(Clone)]
pub struct Redis {
    url: String,
    place: Arc<Place>,
    caps: Capabilities,
    replicas: Replicas,
}

/// Where the master is and the connections to it, shared by every clone of a handle.
struct Place {
    endpoint: Endpoint,
    tls: Tls,
    /// A key of the namespace: in a cluster its slot picks the node.
    slot_key: String,
    pool_size: usize,
    node: std::sync::RwLock<Arc<Node>>,
    /// One relocation at a time: the calls that fail together wait for the first to look.
    relocating: tokio::sync::Mutex<()>,
}

/// Replicated acknowledgements: with `wanted` above 0 every call that writes (an FCALL, not an
/// FCALL_RO) is followed in the same round trip by `WAIT wanted timeout` (with `fsync`,
/// `WAITAOF 1 wanted timeout`: on disk here and on that many replicas, Redis 7.2+), and
/// answers [`Error::NotReplicated`] when fewer replicas than that acknowledged it in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    pub wanted: u32,
    pub timeout: Duration,
    pub fsync: bool,
}

/// Connections for blocking commands per handle, unless configured.
pub const DEFAULT_POOL_SIZE: usize = 16;
/// How long connecting waits for a server that is loading its data.
const LOADING_WAIT: Duration = Duration::from_secs(60);
/// Sends of one call: the first, and again after a reconnect, a relocation, a redirect or a
/// wait for a cluster that asked to try again.
const ATTEMPTS: u32 = 4;

impl Redis {
    /// Connects, checks the server answers, detects its capabilities and loads the function
    /// library when it is missing or stale.
    pub async fn connect(url: &str) -> Result<Redis> {
        Self::connect_with(url, &Tls::default()).await
    }

    /// [`Redis::connect`] with certificates for a `rediss://` URL.
    pub async fn connect_with(url: &str, tls: &Tls) -> Result<Redis> {
        Self::open(url, tls, false, "hero", DEFAULT_POOL_SIZE).await
    }

    /// Connects to the master that serves `slot_key` (any key of the namespace; it matters in
    /// a cluster only): the URL's server, the master its Sentinels name, or, with `cluster`
    /// (or a `redis+cluster://` URL), the cluster node that owns the key's slot. `pool_size`
    /// connections at most serve blocking commands ([`Redis::dedicated`]).
    pub async fn open(
        url: &str,
        tls: &Tls,
        cluster: bool,
        slot_key: &str,
        pool_size: usize,
    ) -> Result<Redis> {
        if pool_size == 0 {
            return Err(Error::InvalidInput(
                "the pool of blocking connections needs at least 1 (--pool-size)".into(),
            ));
        }
        let endpoint = Endpoint::parse(url, cluster)?;
        if !tls.is_empty() && !url.starts_with("rediss") {
            return Err(Error::InvalidInput(format!(
                "TLS certificates were given for {}, which is not a rediss:// URL",
                shown_url(url)
            )));
        }
        let master = endpoint.master(slot_key, tls).await?;
        let node = Node::connect(&master, tls, pool_size).await?;
        let place = Place {
            endpoint,
            tls: tls.clone(),
            pool_size,
            slot_key: slot_key.to_string(),
            node: std::sync::RwLock::new(Arc::new(node)),
            relocating: tokio::sync::Mutex::new(()),
        };
        let mut redis = Redis {
            url: url.to_string(),
            place: Arc::new(place),
            caps: Capabilities::default(),
            replicas: Replicas::default(),
        };
        // a server that is still loading its data (just restarted) answers LOADING: a process
        // started beside it waits for it rather than exiting
        let deadline = std::time::Instant::now() + LOADING_WAIT;
        loop {
            match redis.probe().await {
                Err(Error::Redis(e))
                    if e.kind()
                        == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other.map(|()| redis),
            }
        }
    }

    /// Detects the server's capabilities and loads the function library when it is missing.
    async fn probe(&mut self) -> Result<()> {
        let mut conn = self.conn();
        let info: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("XACKDEL")
            .arg("WAITAOF")
            .query_async(&mut conn)
            .await?;
        let has = |i: usize| matches!(&info, Value::Array(items) if items.get(i).is_some_and(|v| !matches!(v, Value::Nil)));
        self.caps.xackdel = has(0);
        self.caps.waitaof = has(1);
        // a refusal (an ACL user without CONFIG) leaves it unknown, taken as no
        let persistence: Option<std::collections::HashMap<String, String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .arg("appendfsync")
            .query_async(&mut conn)
            .await
            .ok();
        self.caps.fsync_always = persistence.is_some_and(|p| {
            p.get("appendonly").is_some_and(|v| v == "yes")
                && p.get("appendfsync").is_some_and(|v| v == "always")
        });
        function::ensure_loaded(&mut conn).await
    }

    /// The URL without its password, for messages.
    pub fn url(&self) -> String {
        shown_url(&self.url)
    }

    /// The URL of the server the calls go to now (the master of the moment), without its
    /// password.
    pub fn node_url(&self) -> String {
        shown_url(&self.node().url)
    }

    pub fn caps(&self) -> Capabilities {
        self.caps
    }

    /// Whether every write waits for replicas ([`Redis::set_replicas`]): a pipeline then ends
    /// with a WAIT that may refuse it whole.
    pub fn waits_for_replicas(&self) -> bool {
        self.replicas.wanted > 0
    }

    /// Asks for replicated acknowledgements from now on (see [`Replicas`]).
    pub fn set_replicas(&mut self, replicas: Replicas) -> Result<()> {
        if replicas.fsync && replicas.wanted > 0 && !self.caps.waitaof {
            return Err(Error::InvalidInput(format!(
                "{} has no WAITAOF (Redis 7.2 or later): acknowledgements on disk cannot be asked of it; drop --replica-fsync to wait for replicas with WAIT",
                self.url()
            )));
        }
        self.replicas = replicas;
        Ok(())
    }

    fn node(&self) -> Arc<Node> {
        let node = self.place.node.read().unwrap_or_else(|e| e.into_inner());
        node.clone()
    }

    /// The shared connection for non-blocking commands (cheap to clone).
    pub fn conn(&self) -> ConnectionManager {
        self.node().shared.clone()
    }

    /// A connection of its own for blocking commands (BLPOP, XREAD BLOCK), from the pool, so
    /// a block never stalls the calls on the shared connection; back in the pool when dropped.
    /// `block` is the longest block it will be asked for (at most 10 s), so a dead server is
    /// still noticed. A caller that loses it asks for another, from the master of the moment.
    pub async fn dedicated(&self, block: Duration) -> Result<Blocking> {
        debug_assert!(
            block <= MAX_BLOCK,
            "a block of {block:?} outlasts the pool's timeout"
        );
        let node = self.node();
        match node.blocking.get().await {
            Ok(c) => Ok(Blocking::new(c, block)),
            Err(deadpool_redis::PoolError::Timeout(_)) => Err(Error::Unreachable {
                url: self.url(),
                reason: format!(
                    "all {} blocking connections stayed busy for {POOL_WAIT:?}: raise --pool-size",
                    self.place.pool_size
                ),
            }),
            Err(e) => {
                // the master may have moved: look, so the caller's next try goes there
                let _ = self.relocate(&node, None).await;
                Err(Error::Unreachable {
                    url: self.url(),
                    reason: e.to_string(),
                })
            }
        }
    }

    /// Finds the master again after `failed` (the node a call failed on) broke, turned
    /// replica or redirected (`to`: the node a MOVED named). Calls that fail together relocate
    /// once: the others find the node already changed.
    async fn relocate(&self, failed: &Arc<Node>, to: Option<&str>) -> Result<()> {
        let place = &self.place;
        if matches!(place.endpoint, Endpoint::Direct(_)) {
            // one server: the connection manager reconnects to it by itself
            return Ok(());
        }
        let _one = place.relocating.lock().await;
        if !Arc::ptr_eq(&self.node(), failed) {
            return Ok(());
        }
        let master = match (to, &place.endpoint) {
            (Some(addr), Endpoint::Cluster { node, .. }) => node.at(addr),
            _ => place.endpoint.master(&place.slot_key, &place.tls).await?,
        };
        if master == failed.url {
            return Ok(());
        }
        let node = Node::connect(&master, &place.tls, place.pool_size).await?;
        tracing::info!(from = %shown_url(&failed.url), to = %shown_url(&master), "the namespace's master moved; calls go to the new one");
        *place.node.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(node);
        Ok(())
    }

    /// After `e` on `node` (attempt `attempt`): true when the call should be sent again,
    /// having reloaded the library, relocated the master, or waited for the cluster.
    async fn recover(&self, node: &Arc<Node>, e: &redis::RedisError, attempt: u32) -> Result<bool> {
        if attempt + 1 >= ATTEMPTS {
            return Ok(false);
        }
        if function::is_missing(e) {
            function::ensure_loaded(&mut node.shared.clone()).await?;
            return Ok(true);
        }
        match e.retry_method() {
            RetryMethod::MovedRedirect => {
                let to = e.redirect_node().map(|(addr, _)| addr.to_string());
                log_relocation(self.relocate(node, to.as_deref()).await);
                Ok(true)
            }
            RetryMethod::AskRedirect => {
                // a slot half moved: its keys settle on the new node within moments, and a
                // MOVED then names it (until then the cluster may answer TRYAGAIN)
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                Ok(true)
            }
            RetryMethod::WaitAndRetry => {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                Ok(true)
            }
            RetryMethod::RefreshSlotsAndRetry | RetryMethod::Reconnect => {
                // Redis went away or moved: the process's recovery holds off a while (a live
                // worker's heartbeat may have missed it too; `outage::since_last_outage`)
                crate::outage::note_outage();
                reconnect_pause(attempt).await;
                log_relocation(self.relocate(node, None).await);
                Ok(true)
            }
            _ if broken(e) => {
                crate::outage::note_outage();
                reconnect_pause(attempt).await;
                log_relocation(self.relocate(node, None).await);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Runs one command (usually an FCALL), reloading the library if it was missing, and
    /// sending it again on a fresh connection if the shared one was found broken (a restarted
    /// Redis) or to the new master (a failover, a moved slot). Every function is safe to send
    /// twice: submit is idempotent on the id, complete is fenced by the lease, and a fetch
    /// whose answer was lost leaves leased jobs that recovery hands out again.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        if self.replicas.wanted > 0 && writes(cmd) {
            let mut pipe = redis::pipe();
            pipe.add_command(cmd.clone());
            let mut results = self.pipeline(&pipe).await?;
            let reply = results.pop().unwrap_or(Ok(Value::Nil))?;
            return redis::from_redis_value(reply)
                .map_err(|e| Error::protocol(format!("unexpected reply: {e}")));
        }
        let mut attempt = 0;
        loop {
            let node = self.node();
            match node.send(cmd).await {
                Err(e) if self.recover(&node, &e, attempt).await? => attempt += 1,
                other => return Ok(other?),
            }
        }
    }

    /// Runs a pipeline in one round trip and returns each command's own result (mark no command
    /// `.ignore()`: the lane answers for it, redis-rs does not). When the library was missing,
    /// the master moved or the connection broke, the whole pipeline is sent again, as
    /// [`Redis::query`] does (a namespace's keys share one node, so its commands fail
    /// together).
    pub async fn pipeline(&self, pipe: &redis::Pipeline) -> Result<Vec<Result<Value>>> {
        if pipe.is_empty() {
            // nothing to send; redis-rs refuses an empty pipeline
            return Ok(Vec::new());
        }
        if self.replicas.wanted > 0 && !pipe.is_transaction() && pipe.cmd_iter().any(writes) {
            // the WAIT rides in the same round trip, on the same connection, after the writes
            let mut with_wait = pipe.clone();
            let timeout = self.replicas.timeout.as_millis() as u64;
            if self.replicas.fsync {
                with_wait
                    .cmd("WAITAOF")
                    .arg(1)
                    .arg(self.replicas.wanted)
                    .arg(timeout);
            } else {
                with_wait.cmd("WAIT").arg(self.replicas.wanted).arg(timeout);
            }
            let mut results = self.pipeline_once(&with_wait).await?;
            let acked = match results.pop() {
                Some(Ok(Value::Array(counts))) => counts
                    .get(1)
                    .and_then(|v| redis::from_redis_value_ref::<u64>(v).ok())
                    .unwrap_or(0),
                Some(Ok(v)) => redis::from_redis_value::<u64>(v).unwrap_or(0),
                Some(Err(e)) => return Err(e),
                None => 0,
            };
            if acked < u64::from(self.replicas.wanted) {
                return Err(Error::NotReplicated {
                    wanted: self.replicas.wanted,
                    got: acked,
                    timeout: self.replicas.timeout,
                });
            }
            return Ok(results);
        }
        self.pipeline_once(pipe).await
    }

    async fn pipeline_once(&self, pipe: &redis::Pipeline) -> Result<Vec<Result<Value>>> {
        let mut attempt = 0;
        loop {
            let node = self.node();
            let failed = match node.send_pipeline(pipe).await {
                Ok(results) => match results
                    .iter()
                    .find_map(|r| r.as_ref().err().filter(|e| retried(e)))
                {
                    Some(e) => e.clone(),
                    None => {
                        return Ok(results
                            .into_iter()
                            .map(|r| r.map_err(Error::from))
                            .collect())
                    }
                },
                Err(e) => e,
            };
            if !self.recover(&node, &failed, attempt).await? {
                return Err(failed.into());
            }
            attempt += 1;
        }
    }
}

/// A lost connection is tried again after 50, 100, 200 ms: a Redis that is down takes a call
/// ~350 ms to give up on (then its caller backs off), not four tries in a row.
async fn reconnect_pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
}

/// The caller's own loop reports the outage (see `crate::outage`): a line per failed relocation
/// would repeat it several times a second.
fn log_relocation(r: Result<()>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "could not find the namespace's master yet");
    }
}

/// An error in a pipeline's answer that sends the pipeline again: the library was missing,
/// the slot moved, the node turned replica, or the cluster asked to wait.
fn retried(e: &redis::RedisError) -> bool {
    function::is_missing(e)
        || !matches!(
            e.retry_method(),
            RetryMethod::NoRetry | RetryMethod::RetryImmediately
        )
}

/// Whether `url` names a Redis Cluster (`redis+cluster://`, `rediss+cluster://`).
pub fn names_cluster(url: &str) -> bool {
    url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
}

/// A call that writes: an FCALL (FCALL_RO and plain reads need no replica's acknowledgement).
fn writes(cmd: &redis::Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(a)) if a.eq_ignore_ascii_case(b"FCALL"))
}

/// The shared connection died under this call; the connection manager is reconnecting.
fn broken(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal()
}
