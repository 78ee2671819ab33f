//! Connections to Redis: a deadpool pool of multiplexed connections for ordinary commands,
//! dedicated connections for blocking ones (BLPOP, XREAD BLOCK) so they never stall others,
//! what the server can do (asked of it, not guessed from its version), and calls that reload the
//! function library when a restarted Redis lost it.

use std::time::Duration;

use deadpool_redis::{Manager, Pool, Runtime};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::function;

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

/// A handle on one Redis deployment. Cheap to clone.
#[derive(Clone)]
pub struct Redis {
    url: String,
    client: redis::Client,
    pool: Pool,
    caps: Capabilities,
}

/// How long one command may take before the connection is considered broken. Generous:
/// a pipelined batch of thousands of calls on a loaded server is still a few ms.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl Redis {
    /// Connects, checks the server answers, detects its capabilities and loads the function
    /// library when it is missing or stale.
    pub async fn connect(url: &str) -> Result<Redis> {
        let unreachable = |reason: String| Error::Unreachable {
            url: redacted(url),
            reason,
        };
        let client = redis::Client::open(url).map_err(|e| unreachable(e.to_string()))?;
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT));
        let manager =
            Manager::new_with_config(url, config).map_err(|e| unreachable(e.to_string()))?;
        let pool = Pool::builder(manager)
            .max_size(16)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| unreachable(e.to_string()))?;
        let mut redis = Redis {
            url: url.to_string(),
            client,
            pool,
            caps: Capabilities::default(),
        };
        let mut conn = redis.conn().await?;
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

    /// A pooled connection for non-blocking commands.
    pub async fn conn(&self) -> Result<deadpool_redis::Connection> {
        self.pool.get().await.map_err(|e| Error::Unreachable {
            url: self.url(),
            reason: match e {
                deadpool_redis::PoolError::Backend(e) => e.to_string(),
                other => other.to_string(),
            },
        })
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

    /// Runs one command (usually an FCALL), reloading the library once if it was missing.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn().await?;
        match cmd.query_async(&mut conn).await {
            Err(e) if function::is_missing(&e) => {
                function::ensure_loaded(&mut conn).await?;
                Ok(cmd.query_async(&mut conn).await?)
            }
            other => Ok(other?),
        }
    }

    /// Runs a pipeline in one round trip and returns each command's own result, reloading the
    /// library and running it again if the library was missing (then every FCALL in it failed
    /// and nothing was done).
    pub async fn pipeline(&self, pipe: &redis::Pipeline) -> Result<Vec<Result<Value>>> {
        if pipe.is_empty() {
            // nothing to send; redis-rs refuses an empty pipeline
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let mut pipe = pipe.clone();
        pipe.ignore_errors();
        let mut results: Vec<redis::RedisResult<Value>> = pipe.query_async(&mut conn).await?;
        if results
            .iter()
            .any(|r| matches!(r, Err(e) if function::is_missing(e)))
        {
            function::ensure_loaded(&mut conn).await?;
            results = pipe.query_async(&mut conn).await?;
        }
        Ok(results
            .into_iter()
            .map(|r| r.map_err(Error::from))
            .collect())
    }
}

fn redacted(url: &str) -> String {
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
