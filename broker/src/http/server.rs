//! Accepting HTTP connections within limits, so that clients who connect and say nothing cannot
//! take the port (or the process's file descriptors) away from everyone else.
//!
//! - A request's headers must arrive within [`HEADER_TIMEOUT`], counted from when the connection
//!   starts waiting for them: a new connection, and a kept-alive one between requests, so an
//!   idle connection closes after that long too.
//! - At most [`Limits::max_connections`] connections are open at once, lowered to what the
//!   open-file limit leaves room for. At the cap the server asks every connection to close once
//!   it is idle (hyper closes an idle one at once, a busy one after its answer), as nginx reuses
//!   idle connections, and closes the oldest that hold a slot on a client's account for
//!   [`SHED_AGE`] (`ConnState::stuck`): open that long without a settled request (headers sent
//!   a byte at a time, or a sign-in body), or an answer waiting that long on a client that does
//!   not read; then accepts the next. So `/healthz` gets a slot within about
//!   [`SHED_AGE`] + [`SHED_EVERY`] while misbehaving clients open fewer than `cap / SHED_AGE`
//!   connections a second (a cap of 16 frees 32 slots a second; the default, 512).
//! - An answer a client does not read ends its connection after `watched_io::WRITE_TIMEOUT`,
//!   and hyper buffers at most [`MAX_BUF`] of a connection's pipelined requests.
//! - A request's body must arrive within `access::BODY_TIMEOUT` once its credentials passed; the
//!   sign-in form's, read before any credential, is bounded smaller (`access`).
//! - On stop, no new connection is accepted and open ones get [`DRAIN`] to finish.
//!
//! axum's own `serve` has no header timeout and no cap, hence this loop over hyper.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;

use super::watched_io::{ConnState, WatchedIo};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How long a client has to send a request's headers, and how long a kept-alive connection may
/// sit idle.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long open connections get to finish when the broker stops.
pub const DRAIN: Duration = Duration::from_secs(5);

/// A connection that holds a slot on its client's account this long may be closed at the cap:
/// a client on any network sends a request's headers well within it, and at the cap the
/// broker frees `cap / SHED_AGE` slots a second for new clients (so `/healthz` keeps its bound
/// while misbehaving clients open fewer connections a second than that: 512 at the default cap).
pub const SHED_AGE: Duration = Duration::from_millis(500);

/// How often the accept loop looks again for connections to close while at the cap.
const SHED_EVERY: Duration = Duration::from_millis(200);

/// Connections without a complete request closed at most per look at the cap.
const SHED_BATCH: usize = 32;

/// The most hyper buffers of one connection's unread requests (a client pipelining requests
/// it never reads the answers to): its minimum is 8 KiB.
const MAX_BUF: usize = 16 * 1024;

/// File descriptors kept out of the cap for Redis connections, logs and the listener.
const RESERVED_FDS: u64 = 64;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
}

/// The process's soft limit on open files.
fn open_file_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and reads nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } == 0;
    (ok && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

impl Limits {
    /// `wanted` connections at once, or fewer when the open-file limit has no room for them.
    pub fn new(wanted: usize) -> Limits {
        let mut max = wanted.max(1);
        if let Some(files) = open_file_limit() {
            let room = usize::try_from(files.saturating_sub(RESERVED_FDS).max(8)).unwrap_or(max);
            if room < max {
                tracing::warn!(
                    wanted,
                    open_file_limit = files,
                    serving = room,
                    "HTTP: the open-file limit leaves room for fewer connections than asked; raise it (ulimit -n) to serve more"
                );
                max = room;
            }
        }
        Limits {
            max_connections: max,
        }
    }
}

/// Serves `router` on `listener` until `stop`.
pub async fn run(listener: TcpListener, router: Router, limits: Limits, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // a new value asks every connection to close once idle
    let (shed, _) = watch::channel(0u64);
    let mut conns = tokio::task::JoinSet::new();
    // per connection: what the loop knows of it, its task
    let mut opened: std::collections::VecDeque<(Arc<ConnState>, AbortHandle)> =
        std::collections::VecDeque::new();
    let accept_failing = AtomicBool::new(false);
    let at_cap_said = AtomicBool::new(false);
    loop {
        while conns.try_join_next().is_some() {}
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !at_cap_said.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        max = limits.max_connections,
                        "HTTP: at the connection cap; closing idle connections to make room (said once)"
                    );
                }
                shed.send_modify(|g| *g += 1);
                // until a slot frees, every SHED_EVERY: the oldest connections that have been
                // open SHED_AGE without a complete request go
                let slot = loop {
                    opened.retain(|(_, task)| !task.is_finished());
                    let now = Instant::now();
                    for (_, task) in opened
                        .iter()
                        .filter(|(state, _)| state.stuck(now, SHED_AGE))
                        .take(SHED_BATCH)
                    {
                        task.abort();
                    }
                    tokio::select! {
                        () = stop.cancelled() => break None,
                        s = slots.clone().acquire_owned() => break s.ok(),
                        () = tokio::time::sleep(SHED_EVERY) => {}
                    }
                };
                match slot {
                    Some(slot) => slot,
                    None => break,
                }
            }
        };
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                if accept_failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("HTTP: accepting connections again");
                }
                stream
            }
            Err(e) => {
                // out of file descriptors, most often: wait for some to close, say it once
                if !accept_failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "HTTP: cannot accept a connection; retrying (said once until it works)");
                }
                drop(slot);
                shed.send_modify(|g| *g += 1);
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(50)) => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let state = ConnState::new();
        let service = {
            let state = state.clone();
            let router = router.clone();
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                // a request with no body is settled once its headers are in; one with a body
                // when the access layer has its credentials or its sign-in form
                if hyper::body::Body::is_end_stream(req.body()) {
                    state.settled.store(true, Ordering::Relaxed);
                } else {
                    req.extensions_mut().insert(Settle(state.clone()));
                }
                router.clone().oneshot(req.map(axum::body::Body::new))
            })
        };
        let mut shed_rx = shed.subscribe();
        let stop = stop.clone();
        let conn_state = state.clone();
        let conn_settled = state.clone();
        let task = conns.spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_BUF);
            let io = WatchedIo::new(stream, conn_state);
            let conn = builder.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            let mut closing = false;
            loop {
                tokio::select! {
                    _ = &mut conn => break,
                    () = stop.cancelled(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    changed = shed_rx.changed(), if !closing => {
                        // only a connection that was served closes once idle: one just accepted
                        // has not had its first request read yet (closing it would refuse the
                        // very client the slot was freed for); an unsettled one that lingers
                        // is closed by age instead
                        if changed.is_ok() && conn_settled.settled.load(Ordering::Relaxed) {
                            closing = true;
                            conn.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
        });
        opened.push_back((state, task));
        if opened.len() > 2 * limits.max_connections {
            // ended connections leave their entries behind: swept once there are as many
            opened.retain(|(_, task)| !task.is_finished());
        }
    }
    drop(listener);
    let drained =
        tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::info!(
            left = conns.len(),
            "HTTP: connections still open after {DRAIN:?} at stop; closing them"
        );
        conns.abort_all();
    }
}

/// A request's connection, for the access layer to mark settled once the request's body no
/// longer waits on a client without a credential.
#[derive(Clone)]
pub struct Settle(Arc<ConnState>);

impl Settle {
    pub fn settled(&self) {
        self.0.settled.store(true, Ordering::Relaxed);
    }
}
