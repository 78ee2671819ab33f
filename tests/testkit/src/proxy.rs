//! The fault proxy: a TCP proxy on a free loopback port in front of one Redis, which the tests
//! and the chaos soak put between the system and its server to throw what a network throws.
//! Debian packages no toxiproxy and no maintained crate does this in-process, so it is a small
//! tokio proxy of our own: it runs on a thread and runtime of its own, so a test that blocks its
//! own runtime does not stall the network under it.
//!
//! Faults, each on every connection open at the time:
//! - `cut`: both sockets closed at once (a dropped connection; the next one works).
//! - `half_open`: forwarding stops with no FIN and no data, the sockets held open until the
//!   proxy ends: a peer that vanished without a word. Only a command timeout detects it; new
//!   connections are served normally.
//! - `set_latency`: every chunk delivered this much later, in both directions (order kept).
//! - `set_bandwidth`: at most this many bytes a second per direction and connection.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a half-open connection's sockets are held before they are closed (as TCP itself
/// would give up on it at last; the chaos soak freezes many and must not run out of
/// descriptors).
const HALF_OPEN_FOR: Duration = Duration::from_secs(60);

/// One proxied connection's controls.
struct Link {
    /// Cancelled to close both sockets.
    cut: CancellationToken,
    /// Set: forward nothing more, close nothing (half-open).
    frozen: AtomicBool,
}

struct Shared {
    upstream: SocketAddr,
    links: Mutex<Vec<Arc<Link>>>,
    latency_ms: AtomicU64,
    /// Bytes a second per direction; 0: unlimited.
    bandwidth: AtomicU64,
    /// Connections accepted so far.
    accepted: AtomicU64,
}

/// A fault proxy in front of `127.0.0.1:<upstream>`; stopped (every socket closed) on drop.
pub struct FaultProxy {
    pub port: u16,
    shared: Arc<Shared>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: u16) -> FaultProxy {
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .expect("bind the fault proxy on loopback");
        std_listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = std_listener.local_addr().expect("its address").port();
        let shared = Arc::new(Shared {
            upstream: SocketAddr::from((Ipv4Addr::LOCALHOST, upstream)),
            links: Mutex::new(Vec::new()),
            latency_ms: AtomicU64::new(0),
            bandwidth: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("fault-proxy-{port}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .enable_all()
                        .build()
                        .expect("the fault proxy's runtime");
                    rt.block_on(async move {
                        let listener = TcpListener::from_std(std_listener).expect("tokio listener");
                        loop {
                            let accepted = tokio::select! {
                                _ = stop.cancelled() => break,
                                a = listener.accept() => a,
                            };
                            let Ok((client, _)) = accepted else { continue };
                            shared.accepted.fetch_add(1, Ordering::Relaxed);
                            let link = Arc::new(Link {
                                cut: stop.child_token(),
                                frozen: AtomicBool::new(false),
                            });
                            {
                                let mut links =
                                    shared.links.lock().unwrap_or_else(|p| p.into_inner());
                                links.retain(|l| !l.cut.is_cancelled());
                                links.push(link.clone());
                            }
                            tokio::spawn(serve(client, link, shared.clone()));
                        }
                    });
                })
                .expect("spawn the fault proxy's thread")
        };
        FaultProxy {
            port,
            shared,
            stop,
            thread: Some(thread),
        }
    }

    /// The proxy's URL, for the system under test.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn links(&self) -> Vec<Arc<Link>> {
        let links = self.shared.links.lock().unwrap_or_else(|p| p.into_inner());
        links
            .iter()
            .filter(|l| !l.cut.is_cancelled())
            .cloned()
            .collect()
    }

    /// Closes every open connection that is not half-open (a half-open one already lost its
    /// peer); returns how many.
    pub fn cut(&self) -> usize {
        let links: Vec<_> = self
            .links()
            .into_iter()
            .filter(|l| !l.frozen.load(Ordering::Relaxed))
            .collect();
        for l in &links {
            l.cut.cancel();
        }
        links.len()
    }

    /// Stalls every open connection half-open: nothing forwarded, nothing closed. Returns how
    /// many.
    pub fn half_open(&self) -> usize {
        self.links()
            .into_iter()
            .filter(|l| !l.frozen.swap(true, Ordering::Relaxed))
            .count()
    }

    /// Delays every chunk by `d` from now on (zero: none).
    pub fn set_latency(&self, d: Duration) {
        self.shared
            .latency_ms
            .store(d.as_millis() as u64, Ordering::Relaxed);
    }

    /// Limits each direction of each connection to `bytes_per_sec` (None: unlimited).
    pub fn set_bandwidth(&self, bytes_per_sec: Option<u64>) {
        self.shared
            .bandwidth
            .store(bytes_per_sec.unwrap_or(0), Ordering::Relaxed);
    }

    /// Connections accepted so far (a client that reconnects shows here).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(client: TcpStream, link: Arc<Link>, shared: Arc<Shared>) {
    let upstream = tokio::select! {
        _ = link.cut.cancelled() => None,
        u = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(shared.upstream)) => {
            u.ok().and_then(Result::ok)
        }
    };
    let Some(upstream) = upstream else {
        // the server is down: the client sees its connection closed
        link.cut.cancel();
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::select! {
        _ = pipe(cr, uw, &link, &shared) => {}
        _ = pipe(ur, cw, &link, &shared) => {}
        _ = link.cut.cancelled() => {}
        _ = frozen_for(&link, HALF_OPEN_FOR) => {}
    }
    // one side closed: close the other (a frozen link ends only by `frozen_for`, so its peers
    // see no FIN: half-open, until TCP itself would give up on it)
    link.cut.cancel();
}

/// Resolves once the link has been frozen for `d`.
async fn frozen_for(link: &Link, d: Duration) {
    while !link.frozen.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(d).await;
}

/// One direction: a reader stamps each chunk with its arrival, a writer delivers it at
/// arrival + latency, paced to the bandwidth; a frozen link forwards nothing and holds on.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, link: &Link, shared: &Shared) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let got = from.read(&mut buf).await;
            if link.frozen.load(Ordering::Relaxed) {
                std::future::pending::<()>().await;
            }
            match got {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    };
    let write = async move {
        while let Some((at, bytes)) = rx.recv().await {
            let latency = shared.latency_ms.load(Ordering::Relaxed);
            if latency > 0 {
                tokio::time::sleep_until(at + Duration::from_millis(latency)).await;
            }
            if link.frozen.load(Ordering::Relaxed) {
                std::future::pending::<()>().await;
            }
            if to.write_all(&bytes).await.is_err() {
                break;
            }
            let bw = shared.bandwidth.load(Ordering::Relaxed);
            if bw > 0 {
                let secs = bytes.len() as f64 / bw as f64;
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            }
        }
    };
    // the reader's end (EOF) lets the writer drain what it holds, then both end
    tokio::join!(read, write);
}
