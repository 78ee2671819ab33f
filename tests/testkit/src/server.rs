//! One throwaway redis-server (or Sentinel) on a free loopback port, killed by pid when
//! dropped, its log's tail printed when the test fails.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// A redis-server of this test's own. Killed (SIGKILL, by pid) when dropped.
pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    /// A configuration file's text, written into `dir` and given first (Sentinel needs one
    /// it can rewrite); `sentinel` starts the server in Sentinel mode.
    conf: Option<String>,
    sentinel: bool,
    /// libfaketime's `FAKETIME` for the server's clock (see [`RedisServer::start_at`]).
    clock: Option<String>,
}

impl RedisServer {
    /// No persistence: the fastest, for tests that do not restart Redis.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// With AOF, `appendfsync always`: survives a restart with nothing lost.
    pub fn start_durable() -> RedisServer {
        Self::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    pub fn start_with(extra: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            port: 0,
            dir: PathBuf::new(),
            child: None,
            args: extra.iter().map(|s| s.to_string()).collect(),
            conf: None,
            sentinel: false,
            clock: None,
        };
        server.start_on_free_port();
        server
    }

    /// A server whose clock starts at `utc` (`2027-03-28 00:59:50`, UTC) and runs on from there
    /// (libfaketime preloaded into redis-server itself, so the kill by pid kills it): every
    /// deadline and tick is Redis's `TIME`, so this puts a whole deployment at a moment such as
    /// a DST change.
    pub fn start_at(utc: &str) -> RedisServer {
        let mut server = RedisServer {
            port: 0,
            dir: PathBuf::new(),
            child: None,
            args: Vec::new(),
            conf: None,
            sentinel: false,
            clock: Some(format!("@{utc}")),
        };
        server.start_on_free_port();
        server
    }

    /// A Sentinel watching the master at `master_port` as `name` (quorum 2), quick to judge:
    /// down after 1 s of silence.
    pub fn start_sentinel(name: &str, master_port: u16) -> RedisServer {
        let mut server = RedisServer {
            port: 0,
            dir: PathBuf::new(),
            child: None,
            args: Vec::new(),
            conf: Some(format!(
                "sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n\
                 sentinel parallel-syncs {name} 1\n"
            )),
            sentinel: true,
            clock: None,
        };
        server.start_on_free_port();
        server
    }

    fn start_on_free_port(&mut self) {
        let server = self;
        // The port is free when chosen, but another process may take it before redis-server
        // binds it: then it exits at once, and a new port is chosen.
        for _ in 0..5 {
            server.port = free_port();
            server.dir = std::env::temp_dir().join(format!(
                "hero-test-redis-{}-{}",
                server.port,
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&server.dir);
            std::fs::create_dir_all(&server.dir).expect("create redis test dir");
            if let Some(conf) = &server.conf {
                std::fs::write(server.dir.join("redis.conf"), conf).expect("write redis.conf");
            }
            if server.spawn() {
                return;
            }
            let _ = std::fs::remove_dir_all(&server.dir);
        }
        panic!("redis-server would not start on five free ports in a row");
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn command_line(&self) -> Vec<String> {
        let mut args: Vec<String> = Vec::new();
        if self.conf.is_some() {
            args.push(self.dir.join("redis.conf").display().to_string());
        }
        if self.sentinel {
            args.push("--sentinel".into());
        }
        let port = self.port.to_string();
        let dir = self.dir.display().to_string();
        let log = self.log_file().display().to_string();
        let mut pairs = vec![
            ("--port", port.as_str()),
            ("--bind", "127.0.0.1"),
            ("--dir", &dir),
            ("--logfile", &log),
            ("--daemonize", "no"),
            ("--loglevel", "notice"),
        ];
        if !self.sentinel {
            // a Sentinel keeps no data: these are not its settings
            pairs.extend([("--save", ""), ("--appendonly", "no")]);
        }
        for (flag, value) in pairs {
            args.push(flag.into());
            args.push(value.into());
        }
        args.extend(self.args.iter().cloned());
        args
    }

    /// Starts redis-server and waits until it answers; false when it exited before that (its
    /// port was taken).
    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new(redis_server_binary());
        cmd.args(self.command_line())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(at) = &self.clock {
            let lib = crate::FAKETIME_LIB;
            assert!(
                std::path::Path::new(lib).exists(),
                "libfaketime is missing: scripts/setup installs it (apt-get install faketime)"
            );
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME", at)
                .env("TZ", "UTC")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_NO_CACHE", "1");
        }
        let child = cmd
            .spawn()
            .expect("start redis-server (install it: apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                if s.write_all(b"PING\r\n").is_ok() {
                    let mut buf = [0u8; 7];
                    // a server with a password answers, and refuses: it is up all the same
                    if s.read_exact(&mut buf).is_ok()
                        && (&buf == b"+PONG\r\n" || &buf == b"-NOAUTH")
                    {
                        return true;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not become ready; its log:\n{}",
                self.port,
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last `n` lines of the server's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.log_file()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGKILL, then start again on the same port and directory (AOF replayed if on).
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not start again on port {}; its log:\n{}",
            self.port,
            self.log_tail(40)
        );
    }

    /// Redis down for `d`: the server is killed, and started again on its port once `d` has
    /// passed. Meanwhile the port stays this test's (a listener that takes each connection and
    /// closes it, as a dead server's would end), so no other test's redis-server can be given it
    /// and answer in its place.
    pub async fn outage(&mut self, d: Duration) {
        self.kill();
        let hold = std::net::TcpListener::bind(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("hold port {} during the outage: {e}", self.port));
        hold.set_nonblocking(true).expect("a non-blocking listener");
        let until = Instant::now() + d;
        while Instant::now() < until {
            while let Ok((conn, _)) = hold.accept() {
                drop(conn);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(hold);
        assert!(
            self.spawn(),
            "redis-server did not start again on port {}; its log:\n{}",
            self.port,
            self.log_tail(40)
        );
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `CONFIG SET name value`, failing the test when refused.
    pub async fn config_set(&self, name: &str, value: &str) {
        let mut raw = self.conn().await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut raw)
            .await
            .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
    }

    /// The number `INFO <section>` gives for `name` (`used_memory`, `maxmemory`), failing the
    /// test when it has none.
    pub async fn info_u64(&self, section: &str, name: &str) -> u64 {
        let mut raw = self.conn().await;
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut raw)
            .await
            .unwrap_or_else(|e| panic!("INFO {section}: {e}"));
        info_field(&info, name).unwrap_or_else(|| panic!("INFO {section} has no {name}: {info}"))
    }

    /// A plain connection for seeding and inspecting raw state.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to test redis")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- the last lines of redis-server's log (port {}) ---\n{}",
                self.port,
                self.log_tail(30)
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn redis_server_binary() -> String {
    std::env::var("HERO_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// The number an `INFO` answer gives for `name`.
pub fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}
