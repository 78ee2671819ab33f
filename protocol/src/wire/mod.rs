//! The lane: the connection [`crate::Redis::query`] and [`crate::Redis::pipeline`] send on when
//! the server is reached over plain TCP. One socket; one task writes requests in the order they
//! come (coalescing whatever queued up into one write), another decodes replies with the RESP2
//! decoder of `decode` and hands them to the requests in the same order.
//!
//! It exists for speed: redis-rs's reply decoder (built on `combine`) was a third of a worker's
//! CPU in the worker benchmark, and the worker's CPU is on the path of every job: with this
//! decoder the worker's CPU per job fell from ~8.6 to ~6 µs. Everything else stays on
//! redis-rs: blocking commands, transactions, unix sockets and RESP3 URLs. A broken socket
//! fails the requests on it with an I/O error, which the callers treat like redis-rs's own
//! (retry, reconnect); the next request connects anew.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisError, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use decode::Decoder;

mod decode;

/// A request: its packed commands and who waits for how many replies.
struct Request {
    bytes: Vec<u8>,
    waiter: Waiter,
}

struct Waiter {
    want: usize,
    got: Vec<Value>,
    tx: oneshot::Sender<RedisResult<Vec<Value>>>,
}

/// The state the two tasks of one socket share.
struct State {
    pending: StdMutex<Pending>,
    /// Cancelled once the socket is given up; both tasks end.
    closed: CancellationToken,
}

#[derive(Default)]
struct Pending {
    /// Why the socket was given up, once it was.
    dead: Option<(io::ErrorKind, String)>,
    /// Requests written (or about to be), oldest first: replies come in this order.
    waiting: VecDeque<Waiter>,
}

fn io_error(kind: io::ErrorKind, why: &str) -> RedisError {
    RedisError::from(io::Error::new(kind, why.to_string()))
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_dead(&self) -> bool {
        self.lock().dead.is_some()
    }

    /// Gives the socket up: every request still waiting fails with `kind`.
    fn kill(&self, kind: io::ErrorKind, why: &str) {
        let waiting = {
            let mut p = self.lock();
            if p.dead.is_none() {
                p.dead = Some((kind, why.to_string()));
            }
            std::mem::take(&mut p.waiting)
        };
        self.closed.cancel();
        for w in waiting {
            let _ = w.tx.send(Err(io_error(kind, why)));
        }
    }

    /// Queues a request's waiter ahead of writing its bytes; false (and the request failed)
    /// when the socket is already given up.
    fn enqueue(&self, r: Request, buf: &mut Vec<u8>) -> bool {
        let mut p = self.lock();
        if let Some((kind, why)) = &p.dead {
            let err = io_error(*kind, why);
            drop(p);
            let _ = r.waiter.tx.send(Err(err));
            return false;
        }
        p.waiting.push_back(r.waiter);
        buf.extend_from_slice(&r.bytes);
        true
    }

    /// Hands one decoded reply to the oldest request; false when no request waits for it.
    fn deliver(&self, v: Value) -> bool {
        let mut p = self.lock();
        let Some(front) = p.waiting.front_mut() else {
            return false;
        };
        front.got.push(v);
        if front.got.len() >= front.want {
            if let Some(w) = p.waiting.pop_front() {
                drop(p);
                let _ = w.tx.send(Ok(w.got));
            }
        }
        true
    }
}

/// One live socket.
#[derive(Clone)]
struct Link {
    tx: mpsc::UnboundedSender<Request>,
    state: Arc<State>,
}

/// How to reach the server, and the socket to it while there is one.
pub(crate) struct Lane {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    db: i64,
    connect_timeout: Duration,
    response_timeout: Duration,
    current: StdMutex<Option<Link>>,
    /// Held while connecting, so concurrent requests after a failure make one socket.
    connecting: tokio::sync::Mutex<()>,
}

impl Lane {
    /// A lane for this server, or None when it is not reached over plain TCP with RESP2.
    pub(crate) fn for_server(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Option<Lane> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        Some(Lane {
            host: host.clone(),
            port: *port,
            username: settings.username().map(str::to_string),
            password: settings.password().map(str::to_string),
            db: settings.db(),
            connect_timeout,
            response_timeout,
            current: StdMutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    fn live(&self) -> Option<Link> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.as_ref().filter(|l| !l.state.is_dead()).cloned()
    }

    async fn link(&self) -> RedisResult<Link> {
        if let Some(l) = self.live() {
            return Ok(l);
        }
        let _one = self.connecting.lock().await;
        if let Some(l) = self.live() {
            return Ok(l);
        }
        let link = self.connect().await?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(link.clone());
        Ok(link)
    }

    async fn connect(&self) -> RedisResult<Link> {
        let stream = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| io_error(io::ErrorKind::TimedOut, "connecting to Redis timed out"))??;
        // requests are small and each waits for its reply: Nagle would only delay them
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let state = Arc::new(State {
            pending: StdMutex::new(Pending::default()),
            closed: CancellationToken::new(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(w, rx, state.clone()));
        tokio::spawn(read_loop(r, state.clone()));
        let link = Link { tx, state };
        let mut hello = Vec::new();
        let mut replies = 0;
        if let Some(password) = &self.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &self.username {
                auth.arg(user);
            }
            auth.arg(password).write_packed_command(&mut hello);
            replies += 1;
        }
        if self.db != 0 {
            redis::cmd("SELECT")
                .arg(self.db)
                .write_packed_command(&mut hello);
            replies += 1;
        }
        if replies > 0 {
            for v in self.send(&link, hello, replies).await? {
                if let Err(e) = v.extract_error() {
                    link.state
                        .kill(io::ErrorKind::PermissionDenied, "handshake refused");
                    return Err(e);
                }
            }
        }
        Ok(link)
    }

    async fn send(&self, link: &Link, bytes: Vec<u8>, want: usize) -> RedisResult<Vec<Value>> {
        let (tx, rx) = oneshot::channel();
        let request = Request {
            bytes,
            waiter: Waiter {
                want,
                got: Vec::with_capacity(want),
                tx,
            },
        };
        let gone = || {
            io_error(
                io::ErrorKind::ConnectionReset,
                "the connection to Redis closed",
            )
        };
        if link.tx.send(request).is_err() {
            return Err(gone());
        }
        match tokio::time::timeout(self.response_timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(gone()),
            Err(_) => {
                // replies may still come for it: the socket cannot be trusted to line up again
                link.state
                    .kill(io::ErrorKind::TimedOut, "Redis did not answer in time");
                Err(io_error(
                    io::ErrorKind::TimedOut,
                    "Redis did not answer in time",
                ))
            }
        }
    }

    /// Sends packed commands and returns their `want` replies, server errors among them as
    /// [`Value::ServerError`].
    pub(crate) async fn request(&self, bytes: Vec<u8>, want: usize) -> RedisResult<Vec<Value>> {
        let link = self.link().await?;
        self.send(&link, bytes, want).await
    }
}

/// Writes requests as they come; what queued while the last write ran goes out in one write.
async fn write_loop(
    mut w: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Request>,
    state: Arc<State>,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        let first = tokio::select! {
            r = rx.recv() => r,
            _ = state.closed.cancelled() => None,
        };
        let Some(first) = first else { break };
        buf.clear();
        state.enqueue(first, &mut buf);
        while buf.len() < (1 << 20) {
            match rx.try_recv() {
                Ok(r) => {
                    state.enqueue(r, &mut buf);
                }
                Err(_) => break,
            }
        }
        if buf.is_empty() {
            continue;
        }
        let written = tokio::select! {
            r = w.write_all(&buf) => r,
            _ = state.closed.cancelled() => break,
        };
        if let Err(e) = written {
            state.kill(e.kind(), &format!("writing to Redis failed: {e}"));
            break;
        }
    }
    // requests still in the channel drop their waiters: their callers see the socket closed
}

/// Decodes replies as they arrive and hands each to the request it answers.
async fn read_loop(mut r: OwnedReadHalf, state: Arc<State>) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut at = 0;
    let mut decoder = Decoder::default();
    loop {
        if at == buf.len() {
            buf.clear();
            at = 0;
        } else if at >= 64 * 1024 {
            buf.drain(..at);
            at = 0;
        }
        buf.reserve(64 * 1024);
        let read = tokio::select! {
            n = r.read_buf(&mut buf) => n,
            _ = state.closed.cancelled() => return,
        };
        match read {
            Ok(0) => {
                state.kill(io::ErrorKind::UnexpectedEof, "Redis closed the connection");
                return;
            }
            Ok(_) => {}
            Err(e) => {
                state.kill(e.kind(), &format!("reading from Redis failed: {e}"));
                return;
            }
        }
        loop {
            match decoder.next(&buf, &mut at) {
                Ok(Some(v)) => {
                    if !state.deliver(v) {
                        state.kill(
                            io::ErrorKind::InvalidData,
                            "Redis sent a reply nobody asked for",
                        );
                        return;
                    }
                }
                Ok(None) => break,
                Err(why) => {
                    state.kill(io::ErrorKind::InvalidData, &why);
                    return;
                }
            }
        }
    }
}
