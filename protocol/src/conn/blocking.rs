//! The pooled connection blocking commands borrow ([`super::Redis::dedicated`]), and the rule
//! that keeps the pool honest: a connection whose command was abandoned mid-flight never goes
//! back to the pool.
//!
//! Why: Redis runs nothing else from a client blocked in BLPOP or XREAD BLOCK until the block
//! ends. A caller that gives up on its wait (a timeout, a `select!` that took another branch, a
//! worker told to stop) drops the future, not the command: back in the pool, the connection
//! would hold its next borrower's command behind the old block for up to the rest of it. That
//! was seen: the bench's latency scenario, run after another scenario's worker stopped, started
//! its first jobs 165 ms late, behind a stopped worker's 1 s control BLPOP.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// How much longer than its block a blocking command may take before its connection is given
/// up: a half-open connection (a peer gone without a FIN) answers never, and the pool's own
/// response timeout is sized for the longest block of any caller.
const BLOCK_SLACK: Duration = Duration::from_secs(3);

/// A connection of the blocking pool. Returned to the pool when dropped, unless a command sent
/// on it has not been answered; then it is closed.
pub struct Blocking {
    conn: Option<deadpool_redis::Connection>,
    /// A command was sent and its answer not yet read.
    unanswered: bool,
    /// The longest a command may wait for its answer.
    limit: Duration,
}

impl Blocking {
    /// For commands that block at most `block`.
    pub(crate) fn new(conn: deadpool_redis::Connection, block: Duration) -> Blocking {
        Blocking {
            conn: Some(conn),
            unanswered: false,
            limit: block + BLOCK_SLACK,
        }
    }

    fn conn(&mut self) -> &mut deadpool_redis::Connection {
        // only Drop takes it out, and nothing runs after Drop
        self.conn
            .as_mut()
            .expect("a blocking connection is held until dropped")
    }
}

impl Drop for Blocking {
    fn drop(&mut self) {
        if self.unanswered {
            if let Some(c) = self.conn.take() {
                // out of the pool for good; dropping the connection closes it, which also ends
                // the block in Redis
                drop(deadpool_redis::Connection::take(c));
            }
        }
    }
}

impl ConnectionLike for Blocking {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.unanswered = true;
            let limit = self.limit;
            let r = within(limit, self.conn().req_packed_command(cmd)).await?;
            self.unanswered = false;
            Ok(r)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.unanswered = true;
            let limit = self.limit;
            let r = within(limit, self.conn().req_packed_commands(cmd, offset, count)).await?;
            self.unanswered = false;
            Ok(r)
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.as_ref().map_or(0, ConnectionLike::get_db)
    }
}

/// `f`'s answer, or a timed-out I/O error after `limit` (the connection, left unanswered, is
/// then closed on drop rather than returned to the pool).
async fn within<T>(
    limit: Duration,
    f: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {limit:?}: the connection is given up (half-open?)"),
        ))),
    }
}
