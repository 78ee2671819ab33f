//! Connections to Redis: one shared multiplexed connection (redis-rs's `ConnectionManager`,
//! which pipelines concurrent calls on one socket and reconnects after a failure) for ordinary
//! commands, dedicated connections for blocking ones (BLPOP, XREAD BLOCK) so they never stall others,
//! what the server can do (asked of it, not guessed from its version), and calls that reload the
//! function library when a restarted Redis lost it.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::function;
use crate::wire::Lane;

/// What the server supports beyond Redis 7.0, detected with COMMAND INFO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// XACKDEL (Redis 8.2): acknowledge and delete an entry in one command.
    pub xackdel: bool,
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

/// Certificates for TLS (`rediss://`): verification is always on; `ca` replaces the system's
/// roots with the CA that signed the server's certificate, and `cert` with `key` is the client
/// certificate for mutual TLS. PEM files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl Tls {
    fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }

    fn certificates(&self) -> Result<redis::TlsCertificates> {
        let read = |what: &str, p: &std::path::Path| {
            std::fs::read(p).map_err(|e| {
                Error::InvalidInput(format!("cannot read the TLS {what} {}: {e}", p.display()))
            })
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                client_cert: read("client certificate", c)?,
                client_key: read("client key", k)?,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::InvalidInput(
                    "a TLS client certificate needs its key, and a key its certificate: give both --tls-cert and --tls-key".into(),
                ))
            }
        };
        let root_cert = self.ca.as_deref().map(|p| read("CA file", p)).transpose()?;
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

/// A handle on one Redis deployment. Cheap to clone.
#[derive(Clone)]
pub struct Redis {
    url: String,
    client: redis::Client,
    shared: ConnectionManager,
    /// Where `query` and `pipeline` go when the server is reached over plain TCP (see
    /// [`crate::wire`]); None: through `shared`.
    lane: Option<Arc<Lane>>,
    caps: Capabilities,
    replicas: Replicas,
}

/// Replicated acknowledgements: with `wanted` above 0 every call that writes (an FCALL, not an
/// FCALL_RO) is followed in the same round trip by `WAIT wanted timeout`, and answers
/// [`Error::NotReplicated`] when fewer replicas than that acknowledged it in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    pub wanted: u32,
    pub timeout: Duration,
}

/// How long one command may take before the connection is considered broken. Generous:
/// a pipelined batch of thousands of calls on a loaded server is still a few ms.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl Redis {
    /// Connects, checks the server answers, detects its capabilities and loads the function
    /// library when it is missing or stale.
    pub async fn connect(url: &str) -> Result<Redis> {
        Self::connect_with(url, &Tls::default()).await
    }

    /// [`Redis::connect`] with certificates for a `rediss://` URL.
    pub async fn connect_with(url: &str, tls: &Tls) -> Result<Redis> {
        let unreachable = |reason: String| {
            // a refused certificate is not an unreachable server: say what to fix
            if reason.contains("certificate") || reason.contains("UnknownIssuer") {
                Error::Tls {
                    url: redacted(url),
                    reason,
                }
            } else {
                Error::Unreachable {
                    url: redacted(url),
                    reason,
                }
            }
        };
        let client = if tls.is_empty() {
            redis::Client::open(url)
        } else {
            if !url.starts_with("rediss://") {
                return Err(Error::InvalidInput(format!(
                    "TLS certificates were given for {}, which is not a rediss:// URL",
                    redacted(url)
                )));
            }
            redis::Client::build_with_tls(url, tls.certificates()?)
        }
        .map_err(|e| unreachable(e.to_string()))?;
        // No pool: a pool would check every connection it hands out with a PING round trip,
        // doubling the latency of each call, while one multiplexed socket already carries any
        // number of concurrent calls.
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(2));
        let shared = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let lane = Lane::for_server(
            client.get_connection_info(),
            CONNECT_TIMEOUT,
            RESPONSE_TIMEOUT,
        );
        let mut redis = Redis {
            url: url.to_string(),
            client,
            shared,
            lane: lane.map(Arc::new),
            caps: Capabilities::default(),
            replicas: Replicas::default(),
        };
        let mut conn = redis.conn();
        let info: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("XACKDEL")
            .query_async(&mut conn)
            .await?;
        redis.caps.xackdel = matches!(&info, Value::Array(items) if items.first().is_some_and(|v| !matches!(v, Value::Nil)));
        function::ensure_loaded(&mut conn).await?;
        Ok(redis)
    }

    /// The URL without its password, for messages.
    pub fn url(&self) -> String {
        redacted(&self.url)
    }

    pub fn caps(&self) -> Capabilities {
        self.caps
    }

    /// Asks for replicated acknowledgements from now on (see [`Replicas`]).
    pub fn set_replicas(&mut self, replicas: Replicas) {
        self.replicas = replicas;
    }

    /// The shared connection for non-blocking commands (cheap to clone).
    pub fn conn(&self) -> ConnectionManager {
        self.shared.clone()
    }

    /// A connection of its own for blocking commands; `block` is the longest block it will
    /// be asked for, so a dead server is still noticed.
    pub async fn dedicated(&self, block: Duration) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(block + RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT));
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| Error::Unreachable {
                url: self.url(),
                reason: e.to_string(),
            })
    }

    /// Runs one command (usually an FCALL), reloading the library once if it was missing, and
    /// sending it once more on a fresh connection if the shared one was found broken (a
    /// restarted or failed-over Redis). Every function is safe to send twice: submit is
    /// idempotent on the id, complete is fenced by the lease, and a fetch whose answer was lost
    /// leaves leased jobs that recovery hands out again.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        if self.replicas.wanted > 0 && writes(cmd) {
            let mut pipe = redis::pipe();
            pipe.add_command(cmd.clone());
            let mut results = self.pipeline(&pipe).await?;
            let reply = results.pop().unwrap_or(Ok(Value::Nil))?;
            return redis::from_redis_value(reply)
                .map_err(|e| Error::protocol(format!("unexpected reply: {e}")));
        }
        let first = match self.send(cmd).await {
            Err(e) if broken(&e) => self.send(cmd).await,
            other => other,
        };
        match first {
            Err(e) if function::is_missing(&e) => {
                function::ensure_loaded(&mut self.conn()).await?;
                Ok(self.send(cmd).await?)
            }
            other => Ok(other?),
        }
    }

    async fn send<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match &self.lane {
            Some(lane) => {
                let mut replies = lane.request(cmd.get_packed_command(), 1).await?;
                let reply = replies.pop().unwrap_or(Value::Nil);
                Ok(redis::from_redis_value(reply.extract_error()?)?)
            }
            None => cmd.query_async(&mut self.conn()).await,
        }
    }

    /// Runs a pipeline in one round trip and returns each command's own result (mark no command
    /// `.ignore()`: the lane answers for it, redis-rs does not), reloading the library and
    /// running it again if the library was missing (then every FCALL in it failed and nothing
    /// was done). A broken connection is handled as in [`Redis::query`].
    pub async fn pipeline(&self, pipe: &redis::Pipeline) -> Result<Vec<Result<Value>>> {
        if pipe.is_empty() {
            // nothing to send; redis-rs refuses an empty pipeline
            return Ok(Vec::new());
        }
        if self.replicas.wanted > 0 && !pipe.is_transaction() && pipe.cmd_iter().any(writes) {
            // the WAIT rides in the same round trip, on the same connection, after the writes
            let mut with_wait = pipe.clone();
            with_wait
                .cmd("WAIT")
                .arg(self.replicas.wanted)
                .arg(self.replicas.timeout.as_millis() as u64);
            let mut results = self.pipeline_once(&with_wait).await?;
            let acked = match results.pop() {
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
        let mut results = match self.send_pipeline(pipe).await {
            Err(e) if broken(&e) => self.send_pipeline(pipe).await?,
            other => other?,
        };
        if results
            .iter()
            .any(|r| matches!(r, Err(e) if function::is_missing(e)))
        {
            function::ensure_loaded(&mut self.conn()).await?;
            results = self.send_pipeline(pipe).await?;
        }
        Ok(results
            .into_iter()
            .map(|r| r.map_err(Error::from))
            .collect())
    }

    async fn send_pipeline(
        &self,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<Vec<redis::RedisResult<Value>>> {
        match &self.lane {
            // a transaction answers in a shape of its own: redis-rs unpacks it
            Some(lane) if !pipe.is_transaction() => Ok(lane
                .request(pipe.get_packed_pipeline(), pipe.len())
                .await?
                .into_iter()
                .map(Value::extract_error)
                .collect()),
            _ => {
                let mut pipe = pipe.clone();
                pipe.ignore_errors();
                pipe.query_async(&mut self.conn()).await
            }
        }
    }
}

/// A call that writes: an FCALL (FCALL_RO and plain reads need no replica's acknowledgement).
fn writes(cmd: &redis::Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(a)) if a.eq_ignore_ascii_case(b"FCALL"))
}

/// The shared connection died under this call; the connection manager is reconnecting.
fn broken(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal()
}

/// The URL with its user and password masked, for messages and `hero config show`.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn url_password_is_redacted_in_messages() {
        assert_eq!(
            super::redacted("redis://u:secret@h:1/0"),
            "redis://***@h:1/0"
        );
        assert_eq!(super::redacted("redis://h:1"), "redis://h:1");
    }
}
