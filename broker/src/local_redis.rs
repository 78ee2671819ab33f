//! The `redis-server` children hero starts itself: the one of `hero up` when no Redis is
//! configured (loopback only, data and AOF under `./.hero/redis`, its URL written to
//! `./.hero/redis.url` so the other commands run from the same directory find it, shut down
//! cleanly on exit), and the throwaway one of the benchmark (`hero-bench`), pinned to a core,
//! with or without persistence.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

pub const STATE_DIR: &str = ".hero";

/// The URL file `hero up` leaves for the other commands.
pub fn url_file(base: &Path) -> PathBuf {
    base.join(STATE_DIR).join("redis.url")
}

pub struct LocalRedis {
    child: tokio::process::Child,
    pub url: String,
    pub dir: PathBuf,
}

/// Whether `program` is on the PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
        .unwrap_or(false)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// How a local `redis-server` is started.
#[derive(Clone, Debug)]
pub struct Options {
    /// Its working directory (AOF, log).
    pub dir: PathBuf,
    /// `appendfsync` policy, or `None` for no persistence at all.
    pub aof: Option<&'static str>,
    /// Pin it to this CPU core (with taskset).
    pub core: Option<usize>,
}

impl LocalRedis {
    /// The Redis of `hero up`: AOF every second under `base/.hero/redis`, its URL written to
    /// the URL file.
    pub async fn start(base: &Path) -> anyhow::Result<LocalRedis> {
        let dir = base.join(STATE_DIR).join("redis");
        let redis = Self::spawn(Options {
            dir,
            aof: Some("everysec"),
            core: None,
        })
        .await?;
        std::fs::write(url_file(base), &redis.url).context("writing .hero/redis.url")?;
        Ok(redis)
    }

    /// Starts a loopback-only `redis-server` on a free port and waits until it answers.
    pub async fn spawn(opts: Options) -> anyhow::Result<LocalRedis> {
        if !on_path("redis-server") {
            bail!(
                "redis-server is not installed, and no Redis is configured.\n\
                 Install it (Debian/Ubuntu: `sudo apt-get install redis-server`), or point hero at a running \
                 Redis with --redis-url / HERO_REDIS_URL."
            );
        }
        let dir = opts.dir;
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = free_port()?;
        let mut command = match opts.core {
            Some(core) => {
                let mut c = tokio::process::Command::new("taskset");
                c.arg("-c").arg(core.to_string()).arg("redis-server");
                c
            }
            None => tokio::process::Command::new("redis-server"),
        };
        command
            .arg("--port")
            .arg(port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&dir)
            .args(["--save", "", "--daemonize", "no"]);
        match opts.aof {
            Some(fsync) => command.args(["--appendonly", "yes", "--appendfsync", fsync]),
            None => command.args(["--appendonly", "no"]),
        };
        // Redis never outlives the process that started it, however that one ends (a SIGKILL
        // leaves no time to shut it down): the kernel sends it SIGTERM (a clean shutdown, the
        // AOF flushed) when its parent dies
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .args(["--logfile", "redis.log"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server")?;
        let url = format!("redis://127.0.0.1:{port}");
        let client = redis::Client::open(url.as_str())?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
                {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "redis-server on port {port} did not answer within 15 s; see {}/redis.log",
                    dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(LocalRedis { child, url, dir })
    }

    /// SHUTDOWN (flushes the AOF), then waits for the process; kills it if it lingers.
    pub async fn stop(self, base: &Path) {
        self.shutdown().await;
        let _ = std::fs::remove_file(url_file(base));
    }

    /// SHUTDOWN, then waits for the process; kills it if it lingers.
    pub async fn shutdown(mut self) {
        if let Ok(client) = redis::Client::open(self.url.as_str()) {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let _ = redis::cmd("SHUTDOWN").query_async::<()>(&mut c).await;
            }
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
