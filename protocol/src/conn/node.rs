//! The connections to one server, as the `Redis` handle holds them: the lane (`crate::wire`,
//! its own socket and RESP2 decoder) that carries calls and pipelines over plain TCP, the
//! multiplexed redis-rs `ConnectionManager` that carries them otherwise (TLS) and any
//! transaction, and the deadpool pool of connections for blocking commands; and the redis-rs
//! client for a node's URL, which `locate` uses to ask Sentinels and cluster seeds too.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, FromRedisValue, Value};

use super::shown::shown_url;
use super::tls::Tls;
use crate::error::{Error, Result};
use crate::wire::Lane;

/// How long one command may take before the connection is considered broken. Generous:
/// a pipelined batch of thousands of calls on a loaded server is still a few ms.
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest block a pooled connection serves (its response timeout is this plus
/// [`RESPONSE_TIMEOUT`]).
pub(super) const MAX_BLOCK: Duration = Duration::from_secs(10);
/// How long a blocking waiter waits for a pooled connection before it fails.
pub(super) const POOL_WAIT: Duration = Duration::from_secs(5);

/// The connections to one server.
pub(super) struct Node {
    pub(super) url: String,
    pub(super) shared: ConnectionManager,
    /// Connections for blocking commands, each lent to one waiter at a time.
    pub(super) blocking: deadpool_redis::Pool,
    /// Where `query` and `pipeline` go when the server is reached over plain TCP (see
    /// [`crate::wire`]); None: through `shared`.
    lane: Option<Arc<Lane>>,
}

impl Node {
    pub(super) async fn connect(url: &str, tls: &Tls, pool_size: usize) -> Result<Node> {
        let client = client_for(url, tls)?;
        // the pool's connections are made from the same connection info (TLS included); each
        // lent connection is checked with a PING, which a blocking wait of seconds can afford
        let manager = deadpool_redis::Manager::new_with_config(
            client.get_connection_info().clone(),
            AsyncConnectionConfig::new()
                .set_response_timeout(Some(MAX_BLOCK + RESPONSE_TIMEOUT))
                .set_connection_timeout(Some(CONNECT_TIMEOUT)),
        )
        .map_err(|e| unreachable(url, e.to_string()))?;
        let blocking = deadpool_redis::Pool::builder(manager)
            .max_size(pool_size)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .runtime(deadpool_redis::Runtime::Tokio1)
            .build()
            .map_err(|e| unreachable(url, e.to_string()))?;
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
            .map_err(|e| unreachable(url, e.to_string()))?;
        let lane = Lane::for_server(
            client.get_connection_info(),
            CONNECT_TIMEOUT,
            RESPONSE_TIMEOUT,
        );
        Ok(Node {
            url: url.to_string(),
            shared,
            blocking,
            lane: lane.map(Arc::new),
        })
    }

    pub(super) async fn send<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match &self.lane {
            Some(lane) => {
                let mut replies = lane.request(cmd.get_packed_command(), 1).await?;
                let reply = replies.pop().unwrap_or(Value::Nil);
                Ok(redis::from_redis_value(reply.extract_error()?)?)
            }
            None => cmd.query_async(&mut self.shared.clone()).await,
        }
    }

    pub(super) async fn send_pipeline(
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
                pipe.query_async(&mut self.shared.clone()).await
            }
        }
    }
}

/// The redis-rs client for one server's URL, with the certificates for `rediss://`.
pub(super) fn client_for(url: &str, tls: &Tls) -> Result<redis::Client> {
    if tls.is_empty() {
        redis::Client::open(url)
    } else {
        redis::Client::build_with_tls(url, tls.certificates()?)
    }
    .map_err(|e| match e.kind() {
        // a URL that does not parse is not a server that cannot be reached
        redis::ErrorKind::InvalidClientConfig => Error::InvalidInput(format!(
            "{} is not a valid Redis URL ({e}). Write redis://host:port[/db], rediss://… for TLS, redis+sentinel://host:port,host:port/<master name> or redis+cluster://host:port,host:port",
            shown_url(url)
        )),
        _ => unreachable(url, e.to_string()),
    })
}

pub(super) fn unreachable(url: &str, reason: String) -> Error {
    // a refused certificate is not an unreachable server: say what to fix
    if reason.contains("certificate") || reason.contains("UnknownIssuer") {
        Error::Tls {
            url: shown_url(url),
            reason,
        }
    } else {
        Error::Unreachable {
            url: shown_url(url),
            reason,
        }
    }
}
