//! A connection's socket as the accept loop watches it: how long its answer has waited on a
//! client that does not read, and a write timeout that ends such a connection. A client that
//! pipelines requests and never reads its answers would otherwise hold them in memory for ever
//! (hyper waits on the socket, and counts the connection as busy), and no cap would shed it.
//! Written by hand because the state the shedding reads (a write waiting since when) is not
//! something an IO-timeout crate exposes; it costs one atomic store per write that waits.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a write may wait on a client that does not read before the connection ends.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the accept loop knows of one connection.
#[derive(Debug)]
pub struct ConnState {
    pub opened: Instant,
    /// A request of it passed what a client without a credential can make us wait for: its
    /// headers, and a body it must send before its credential is known (the sign-in form's).
    pub settled: AtomicBool,
    /// Since when (ms after `opened`, plus 1) a write waits on the client; 0: none waits.
    write_waits_since: AtomicU64,
}

impl ConnState {
    pub fn new() -> Arc<ConnState> {
        Arc::new(ConnState {
            opened: Instant::now(),
            settled: AtomicBool::new(false),
            write_waits_since: AtomicU64::new(0),
        })
    }

    /// Whether the connection holds a slot on a client's account: no request settled after
    /// `age` open, or a write waiting `age` on a client that does not read.
    pub fn stuck(&self, now: Instant, age: Duration) -> bool {
        let open = now.duration_since(self.opened);
        if !self.settled.load(Ordering::Relaxed) && open >= age {
            return true;
        }
        match self.write_waits_since.load(Ordering::Relaxed) {
            0 => false,
            since => open.saturating_sub(Duration::from_millis(since - 1)) >= age,
        }
    }
}

/// The socket, with the write timeout and the waiting state [`ConnState`] shows.
pub struct WatchedIo<S> {
    inner: S,
    state: Arc<ConnState>,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<S> WatchedIo<S> {
    pub fn new(inner: S, state: Arc<ConnState>) -> Self {
        WatchedIo {
            inner,
            state,
            deadline: None,
        }
    }

    /// After a write's poll: a ready one clears the wait; a pending one starts it (and the
    /// timeout), and fails once the timeout passed.
    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                if self.deadline.take().is_some() {
                    self.state.write_waits_since.store(0, Ordering::Relaxed);
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                if self.deadline.is_none() {
                    let since = self.state.opened.elapsed().as_millis() as u64 + 1;
                    self.state.write_waits_since.store(since, Ordering::Relaxed);
                    self.deadline = Some(Box::pin(tokio::time::sleep(WRITE_TIMEOUT)));
                }
                match self.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client read nothing of its answer within the write timeout",
                    ))),
                    _ => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.after_write(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
