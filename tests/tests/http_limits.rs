//! The HTTP face's limits against a real broker (issue 51, findings 4 and 5): 21 live streams
//! share one reader of the event log and none is refused, and past 64 the next is refused
//! rather than holding a connection; 220 sockets that connect and say nothing, under
//! `ulimit -n 200`, do not take the port, nor do 100 that send their headers a byte at a time,
//! nor a body that never ends.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{binary, http_broker, http_client, Proc, RedisServer};

const TOKEN: &str = "limits-admin-token-0123";
const READ: &str = "limits-read-token-0123";

/// Finding 4: 21 live streams (three read-only sessions' seven each) cost one reader; none is
/// refused and each sees the next job's event. Issue 61: one credential holds at most 8, reads
/// at most 48 in all (the admin's stream is still served past them), 64 in all.
#[tokio::test]
async fn twenty_one_live_streams_share_one_reader_and_none_starves() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &["--http-read-token", READ]).await;
    let open = |cookie: String, filter: &'static str| {
        let base = base.clone();
        async move {
            http_client()
                .get(format!("{base}/api/events/stream{filter}"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
        }
    };
    let mut streams = Vec::new();
    for s in 0..3 {
        let cookie = hero_testkit::session_for(&base, READ, false).await;
        for i in 0..7 {
            let filter = if i % 2 == 0 { "?type=feed" } else { "" };
            let r = open(cookie.clone(), filter).await;
            assert_eq!(r.status().as_u16(), 200, "session {s}, stream {i}");
            streams.push(r);
        }
    }
    let mut redis = server.conn().await;
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut redis)
        .await
        .unwrap();
    let blocked = clients.lines().filter(|l| l.contains("cmd=xread")).count();
    client
        .submit(&NewJob::builder("feed", "x").id("feed-1").build().unwrap())
        .await
        .unwrap();
    // one credential holds 8 at most: the read token's holders share it
    let mut more = Vec::new();
    for i in 0..9 {
        let r = http_client()
            .get(format!("{base}/api/events/stream"))
            .bearer_auth(READ)
            .send()
            .await
            .unwrap();
        if i < 8 {
            assert_eq!(r.status().as_u16(), 200, "the token's stream {i}");
            more.push(r);
        } else {
            assert_eq!(r.status().as_u16(), 503, "the token's ninth");
        }
    }
    // reads fill up to 48 (21 + 8 so far), then are refused; the admin's is still served
    while streams.len() + more.len() < 48 {
        let cookie = hero_testkit::session_for(&base, READ, false).await;
        for _ in 0..8 {
            if streams.len() + more.len() < 48 {
                more.push(open(cookie.clone(), "").await);
            }
        }
    }
    assert!(more.iter().all(|r| r.status().as_u16() == 200));
    let reader = hero_testkit::session_for(&base, READ, false).await;
    assert_eq!(open(reader, "").await.status().as_u16(), 503, "a 49th read");
    let admin = open(hero_testkit::session(&base, TOKEN).await, "").await;
    assert_eq!(admin.status().as_u16(), 200, "the admin's past the reads");
    drop(more);
    for (i, mut r) in streams.into_iter().enumerate() {
        let mut seen = String::new();
        let got = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(chunk) = r.chunk().await.unwrap() {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if seen.contains("\"job\":\"feed-1\"") {
                    return;
                }
            }
        })
        .await;
        assert!(got.is_ok(), "stream {i} saw no event: {seen:?}");
    }
    assert!(
        blocked <= 2,
        "one reader for 21 streams, not one each: {blocked} blocked XREADs\n{clients}"
    );
}

/// Finding 5: under `ulimit -n 200`, 220 sockets that connect and say nothing do not take the
/// port: the broker closes idle ones to make room, and a connection that never finishes its
/// headers is closed after the header timeout.
#[tokio::test]
async fn idle_sockets_cannot_take_the_port() {
    let server = RedisServer::start();
    let url = server.url();
    let hero = binary("hero");
    let script = format!(
        "ulimit -n 200 && exec {} --redis-url {url} broker --http 127.0.0.1:0 --http-token {TOKEN}",
        hero.display()
    );
    let p = Proc::spawn(std::path::Path::new("/bin/sh"), &["-c", &script], &[], None);
    let line = p
        .expect_line("http: http://", Duration::from_secs(30))
        .await;
    let base = line
        .trim()
        .trim_start_matches("http: ")
        .trim_end_matches('/')
        .to_string();
    let addr = base.trim_start_matches("http://").to_string();
    let mut idle = Vec::new();
    for _ in 0..220 {
        if let Ok(s) = tokio::net::TcpStream::connect(&addr).await {
            idle.push(s);
        }
    }
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        http_client().get(format!("{base}/healthz")).send(),
    )
    .await;
    assert!(
        matches!(&r, Ok(Ok(resp)) if resp.status().as_u16() == 200),
        "/healthz behind 220 idle sockets: {r:?} after {:?}",
        started.elapsed()
    );
    drop(idle);
    // a client that starts its headers and never ends them is closed
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let closed = tokio::time::timeout(Duration::from_secs(20), slow.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(_) | Err(_))),
        "a header that never ends is cut off within the header timeout"
    );
}

/// Clients that send their headers a byte at a time fill the cap, and the oldest are closed to
/// make room; a body that never ends is cut off once the headers are in.
#[tokio::test]
async fn half_sent_headers_and_bodies_cannot_take_the_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = RedisServer::start();
    let url = server.url();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &["--http-max-connections", "32"]).await;
    let addr = base.trim_start_matches("http://").to_string();
    let mut slow = Vec::new();
    for _ in 0..100 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
            let _ = s
                .write_all(b"GET /api/queues HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")
                .await;
            slow.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(1100)).await; // older than the shedding age
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        http_client().get(format!("{base}/healthz")).send(),
    )
    .await;
    assert!(
        matches!(&r, Ok(Ok(resp)) if resp.status().as_u16() == 200),
        "/healthz behind 100 half-sent headers at a cap of 32: {r:?}"
    );
    drop(slow);
    // with a credential, a body that never ends is cut off after the body timeout
    let mut body = tokio::net::TcpStream::connect(&addr).await.unwrap();
    body.write_all(
        format!("POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 65000\r\n\r\n{{").as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), body.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(
        read.is_ok() && text.contains(" 408 "),
        "a body that never ends: {text}"
    );
    // without one, the sign-in form is all that is read, and only a small one
    let mut form = tokio::net::TcpStream::connect(&addr).await.unwrap();
    form.write_all(
        b"POST /sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 65000\r\n\r\ntoken=",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), form.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(
        read.is_ok() && text.contains(" 413 "),
        "a sign-in form of 65,000 bytes: {text}"
    );
}

/// `/healthz` answers within `within` each of `probes` times, spaced by `every`: the bound the
/// HTTP face keeps however clients misbehave (docs/http.md).
async fn healthz_answers(base: &str, probes: usize, every: Duration, within: Duration) {
    for i in 0..probes {
        let r =
            tokio::time::timeout(within, http_client().get(format!("{base}/healthz")).send()).await;
        assert!(
            matches!(&r, Ok(Ok(resp)) if resp.status().as_u16() == 200),
            "/healthz probe {i}: {r:?}"
        );
        tokio::time::sleep(every).await;
    }
}

/// The broker's resident memory, from /proc.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib / 1024
}

/// Issue 61, finding 1: 15 clients (at a cap of 16) that pipeline requests for the dashboard's
/// script and never read an answer, with no token, neither hold the answers in memory nor keep
/// `/healthz` from a slot: a connection whose answer waits on its client is shed at the cap, and
/// ends after the write timeout below it.
#[tokio::test]
async fn clients_that_never_read_cannot_take_the_port_or_the_memory() {
    use tokio::io::AsyncWriteExt;
    let server = RedisServer::start();
    let url = server.url();
    let (broker, base) = http_broker(&url, Some(TOKEN), &["--http-max-connections", "16"]).await;
    let addr = base.trim_start_matches("http://").to_string();
    // more answers than the kernel's buffers hold, so the writes wait on this client
    let ask = "GET /assets/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(2000);
    let mut readers = Vec::new();
    // 15 first, then waves of 40 more, as an attacker reconnects what was shed
    for wave in [15, 40, 40, 40] {
        for _ in 0..wave {
            // a small receive window, as on a slow link
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            let Ok(mut s) = socket.connect(addr.parse().unwrap()).await else {
                continue;
            };
            let ask = ask.clone();
            readers.push(tokio::spawn(async move {
                let _ = s.write_all(ask.as_bytes()).await;
                // never read: hold the socket until the test ends
                tokio::time::sleep(Duration::from_secs(60)).await;
                drop(s);
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        // probes two at a time: the second needs a slot an attacker holds
        for i in 0..4 {
            let probes: Vec<_> = (0..2)
                .map(|_| {
                    let url = format!("{base}/healthz");
                    tokio::spawn(async move {
                        let client = reqwest::Client::builder()
                            .pool_max_idle_per_host(0)
                            .build()
                            .unwrap();
                        tokio::time::timeout(Duration::from_secs(3), client.get(url).send()).await
                    })
                })
                .collect();
            for p in probes {
                let r = p.await.unwrap();
                assert!(
                    matches!(&r, Ok(Ok(resp)) if resp.status().as_u16() == 200),
                    "/healthz, round {i} after a wave of {wave} clients that never read: {r:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let rss = rss_mib(broker.pid());
    assert!(
        rss < 150,
        "the broker holds {rss} MiB beside 15 clients that never read"
    );
    for r in readers {
        r.abort();
    }
}

/// Issue 61, finding 2: sign-in bodies sent a byte every half second, with no token, are shed
/// at the cap like half-sent headers: `/healthz` keeps answering.
#[tokio::test]
async fn slow_sign_in_bodies_cannot_take_the_port() {
    use tokio::io::AsyncWriteExt;
    let server = RedisServer::start();
    let url = server.url();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &["--http-max-connections", "16"]).await;
    let addr = base.trim_start_matches("http://").to_string();
    let mut slow = Vec::new();
    for _ in 0..40 {
        let addr = addr.clone();
        slow.push(tokio::spawn(async move {
            let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
                return;
            };
            let head = "POST /sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n";
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for _ in 0..1000 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if s.write_all(b"a").await.is_err() {
                    return;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1200)).await; // the bodies older than the shedding age
    healthz_answers(
        &base,
        12,
        Duration::from_millis(250),
        Duration::from_secs(3),
    )
    .await;
    for s in slow {
        s.abort();
    }
}
