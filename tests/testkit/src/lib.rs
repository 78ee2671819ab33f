//! The test kit: a throwaway `redis-server` per test on a free loopback port (never 6379, never
//! shared; a port taken between choosing and binding is chosen again), killed by pid when
//! dropped, its log's tail printed when the test fails; child processes of the workspace's
//! binaries with their output captured line by line; workers and brokers in the test process;
//! and bounded waits so a hang fails fast instead of sleeping.

use std::collections::VecDeque;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod server;
mod topology;

pub use server::RedisServer;
pub use topology::{RedisCluster, SentinelSet};

/// A loopback port nobody listens on now (the OS picks it; never 6379).
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        if port != 6379 {
            return port;
        }
    }
}

/// Polls `check` every 10 ms until it returns Some, or panics after `limit` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The directory cargo puts the workspace's binaries in (next to the test executable's `deps`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("deps dir");
    if dir.ends_with("deps") {
        dir.parent().expect("target profile dir").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The path of a workspace binary; tells how to build it when it is missing.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (scripts/test does)",
        path.display()
    );
    path
}

/// A child process whose stdout lines are collected as they arrive. Killed when dropped.
pub struct Proc {
    pub child: Child,
    lines: Arc<Mutex<VecDeque<String>>>,
    all: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub fn spawn(program: &Path, args: &[&str], envs: &[(&str, &str)], cwd: Option<&Path>) -> Proc {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .stdin(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        let stdout = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let all = Arc::new(Mutex::new(Vec::new()));
        let (l, a) = (lines.clone(), all.clone());
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                a.lock().expect("lines").push(line.clone());
                l.lock().expect("lines").push_back(line);
            }
        });
        Proc { child, lines, all }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (bounded) for a stdout line containing `needle` and returns it.
    pub async fn expect_line(&self, needle: &str, limit: Duration) -> String {
        let lines = self.lines.clone();
        wait_for(&format!("a line containing {needle:?}"), limit, || {
            let lines = lines.clone();
            async move {
                let mut q = lines.lock().expect("lines");
                let pos = q.iter().position(|l| l.contains(needle))?;
                let line = q.remove(pos);
                q.drain(..pos);
                line
            }
        })
        .await
    }

    /// Every stdout line so far.
    pub fn output(&self) -> Vec<String> {
        self.all.lock().expect("lines").clone()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
        assert!(
            status.map(|s| s.success()).unwrap_or(false),
            "kill -{sig} {}",
            self.pid()
        );
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }

    /// Waits (bounded) for the process to exit and returns its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "process {} did not exit within {limit:?}",
                self.pid()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs a tracing subscriber once (RUST_LOG decides), so failures show the libraries' logs.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// How many entries of `stream` are pending (delivered, not acknowledged) in the workers' group.
pub async fn pending(raw: &mut redis::aio::MultiplexedConnection, stream: impl AsRef<str>) -> i64 {
    let summary: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(stream.as_ref())
        .arg(hero_client::keys::CONSUMER_GROUP)
        .query_async(raw)
        .await
        .expect("XPENDING");
    match summary.first() {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("unexpected XPENDING summary {other:?}"),
    }
}

/// A worker running in this test process, its events delivered on a channel.
pub struct InProcWorker {
    events: tokio::sync::mpsc::UnboundedReceiver<hero_worker::WorkerEvent>,
    stop: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<hero_worker::Result<()>>,
    pub consumer: String,
}

impl InProcWorker {
    pub fn spawn(builder: hero_worker::WorkerBuilder) -> InProcWorker {
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let worker = builder
            .on_event(move |e| {
                let _ = tx.send(e.clone());
            })
            .build()
            .expect("build worker");
        let consumer = worker.consumer().to_string();
        let stop = tokio_util::sync::CancellationToken::new();
        let handle = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
        InProcWorker {
            events,
            stop,
            handle,
            consumer,
        }
    }

    /// The next event for which `pick` returns Some, within `limit`; earlier ones are skipped.
    pub async fn next<T>(
        &mut self,
        limit: Duration,
        mut pick: impl FnMut(&hero_worker::WorkerEvent) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(e)) => {
                    if let Some(v) = pick(&e) {
                        return v;
                    }
                }
                Ok(None) => panic!("worker {} ended while an event was awaited", self.consumer),
                Err(_) => panic!(
                    "timed out after {limit:?} waiting for a worker event of {}",
                    self.consumer
                ),
            }
        }
    }

    /// Graceful shutdown; returns once the worker has stopped.
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("worker stops within 30 s")
            .expect("worker task")
            .expect("worker run");
    }
}

/// A broker running in this test process until the token is cancelled or it is dropped.
pub struct InProcBroker {
    stop: tokio_util::sync::CancellationToken,
}

impl InProcBroker {
    pub async fn spawn(url: &str, cfg: hero_broker::config::BrokerConfig) -> InProcBroker {
        let client = hero_client::Client::connect(url)
            .await
            .expect("broker connects");
        hero_broker::daemon::publish_config(&client, &cfg)
            .await
            .expect("publish config");
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(hero_broker::daemon::run(client, cfg, stop.clone()));
        InProcBroker { stop }
    }
}

impl Drop for InProcBroker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// For the test binaries: one stdout line, flushed at once so a test following the process sees it.
pub fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// For the test binaries: `--name value` pairs of the command line.
pub fn flags() -> std::collections::HashMap<String, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.chunks(2)
        .filter_map(|c| Some((c[0].trim_start_matches("--").to_string(), c.get(1)?.clone())))
        .collect()
}

/// The keys of the default namespace `hero`, which the tests use.
pub fn keys() -> hero_client::Keyspace {
    hero_client::Keyspace::new(&hero_client::Namespace::new("hero").expect("namespace"))
}

/// The key of job `id` in namespace `hero` (any string: tests plant foreign ids too).
pub fn job_key(id: impl std::fmt::Display) -> String {
    keys().job_unchecked(&id.to_string())
}

/// The work stream of a script type at the default priority, in namespace `hero`.
pub fn work_key(script_type: &str) -> String {
    let t = hero_client::ScriptType::new(script_type).expect("script type");
    keys().work(
        &hero_client::Target::of_type(t),
        hero_client::Priority::DEFAULT,
    )
}

/// The tracking zset of the legacy list `legacy` (a full key), in namespace `hero`.
pub fn bridge_track_key(legacy: &str) -> String {
    let keys = keys();
    let queue = keys.parse_legacy_queue(legacy).expect("a legacy queue key");
    keys.bridge_track(&queue)
}

/// Waits until every job of `ids` is `finished` (namespace `hero`).
pub async fn all_finished(server: &RedisServer, ids: &[String], limit: Duration) {
    let raw = server.conn().await;
    let keys = keys();
    wait_for("every job finished", limit, || {
        let mut raw = raw.clone();
        let ids = ids.to_vec();
        let keys = keys.clone();
        async move {
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.hget(keys.job_unchecked(id), "status");
            }
            let statuses: Vec<Option<String>> = pipe.query_async(&mut raw).await.ok()?;
            statuses
                .iter()
                .all(|s| s.as_deref() == Some("finished"))
                .then_some(())
        }
    })
    .await;
}

/// Waits (bounded) until the audit finds the namespace `hero` at `url` consistent, as it must
/// once the broker has had its recovery pass after a crash; panics with what it found else.
pub async fn audit_consistent(url: &str, limit: Duration) -> hero_client::inspect::AuditReport {
    let client = hero_client::Client::connect(url).await.expect("connect");
    let inspector = client.inspector();
    let deadline = Instant::now() + limit;
    loop {
        let report = inspector.audit(&|_: &str| {}).await.expect("audit");
        if report.is_consistent() {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "the audit still finds inconsistencies after {limit:?}: {:#?}",
            report.inconsistencies().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A `hero-test-worker` process serving `types`, its answers labelled `label`, with `extra`
/// flags (`--concurrency 2`, `--sleep-ms 5`, ...).
pub fn test_worker(url: &str, types: &str, label: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["--url", url, "--types", types, "--label", label];
    args.extend_from_slice(extra);
    Proc::spawn(&binary("hero-test-worker"), &args, &[], None)
}

/// A `hero worker` process (the built-in Rhai worker) against `url`, with `extra` flags
/// (`--concurrency 1`, ...).
pub fn hero_worker(url: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["--redis-url", url, "worker"];
    args.extend_from_slice(extra);
    Proc::spawn(&binary("hero"), &args, &[], None)
}

/// `hero <args>` against `url`: (exit code, stdout, stderr).
pub fn hero_cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary("hero"))
        .args(args)
        .env("HERO_REDIS_URL", url)
        .output()
        .expect("run hero");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `hero broker` process serving HTTP on a free loopback port with `token` (none: `&[]`
/// args only), plus `extra` flags; returns it and its base URL (`http://127.0.0.1:<port>`).
pub async fn http_broker(url: &str, token: Option<&str>, extra: &[&str]) -> (Proc, String) {
    let mut args = vec!["--redis-url", url, "broker", "--http", "127.0.0.1:0"];
    if let Some(t) = token {
        args.extend_from_slice(&["--http-token", t]);
    }
    args.extend_from_slice(extra);
    let p = Proc::spawn(&binary("hero"), &args, &[], None);
    let line = p
        .expect_line("http: http://", Duration::from_secs(30))
        .await;
    let base = line
        .trim()
        .trim_start_matches("http: ")
        .trim_end_matches('/')
        .to_string();
    (p, base)
}

/// Leases `id` (a job of type `script_type`) to a consumer that then dies, and has recovery
/// give up on it at once: a dead letter, made in a few calls.
pub async fn dead_letter(client: &hero_client::Client, script_type: &str, id: &str) {
    use hero_client::function::Recovery;
    let job = hero_client::NewJob::builder(script_type, "x")
        .id(id)
        .build()
        .expect("a valid job");
    client.submit(&job).await.expect("submit");
    let stream = work_key(script_type);
    let fetch = hero_client::function::fetch(
        client.keys(),
        std::slice::from_ref(&stream),
        "g:gone:1",
        1,
        "0",
    );
    let _: redis::Value = client.redis().query(&fetch).await.expect("fetch");
    let taken = hero_client::recovery::recover_stream(
        client.redis(),
        client.keys(),
        &stream,
        Recovery::Consumer("g:gone:1"),
        1,
    )
    .await
    .expect("recover");
    assert_eq!(taken.dead, 1, "{id} dead-lettered");
}

/// Submits `jobs` and waits (bounded) until each has finished.
pub async fn run_to_finish(client: &hero_client::Client, jobs: &[hero_client::NewJob]) {
    for job in jobs {
        client.submit(job).await.expect("submit");
    }
    for job in jobs {
        let r = client
            .wait(job.id(), Duration::from_secs(20))
            .await
            .expect("the job ends");
        assert_eq!(r.status, hero_client::Status::Finished, "{}", job.id());
    }
}

/// Submits `n` jobs of `script_type` named `<prefix>-0`, `<prefix>-1`, ... that no worker takes.
pub async fn queue_idle(client: &hero_client::Client, script_type: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let job = hero_client::NewJob::builder(script_type, "x")
            .id(format!("{prefix}-{i}"))
            .build()
            .expect("a valid job");
        client.submit(&job).await.expect("submit");
    }
}
