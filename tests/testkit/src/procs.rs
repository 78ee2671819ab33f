//! Child processes of the workspace's binaries (`hero`, `hero-test-worker`): found next to the
//! test executable, started with their stdout (and, when asked, stderr) collected line by line
//! and killed when dropped; the CLI run as a command; and what the test binaries use to talk
//! back (`say`, `flags`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::wait_for;

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

/// The Python of hero-py's environment (`scripts/interop-setup` makes it, with the package
/// installed), or HERO_INTEROP_PYTHON.
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("HERO_INTEROP_PYTHON") {
        return PathBuf::from(p);
    }
    let p = crate::workspace_root().join("target/interop-venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/interop-setup (scripts/test does) to make the Python environment",
        p.display()
    );
    p
}

/// Node.js, with the node/ package built (`scripts/node-setup` installs Node and builds it).
pub fn node() -> PathBuf {
    let dist = crate::workspace_root().join("node/dist/esm/index.js");
    assert!(
        dist.exists(),
        "{} is missing: run scripts/node-setup (scripts/test does) to build the Node package",
        dist.display()
    );
    PathBuf::from("node")
}

/// Runs `program args` to its end with a time bound: (exit code, stdout, stderr).
pub fn run_script(program: &Path, args: &[&str], limit: Duration) -> (i32, String, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    // read both pipes as they fill, so a chatty script cannot block on a full pipe
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{} {args:?} ran longer than {limit:?}", program.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.code().unwrap_or(-1),
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

/// A child process whose stdout lines (and, from [`Proc::spawn_with_stderr`], its stderr
/// lines too) are collected as they arrive. Killed when dropped.
pub struct Proc {
    pub child: Child,
    lines: Arc<Mutex<VecDeque<String>>>,
    all: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Proc {
    pub fn spawn(program: &Path, args: &[&str], envs: &[(&str, &str)], cwd: Option<&Path>) -> Proc {
        Self::start(program, args, envs, cwd, false)
    }

    /// As [`Proc::spawn`], with stderr's lines collected with stdout's (for a test of what a
    /// process logs), instead of passed through to the test's own stderr.
    pub fn spawn_with_stderr(
        program: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
        cwd: Option<&Path>,
    ) -> Proc {
        Self::start(program, args, envs, cwd, true)
    }

    fn start(
        program: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
        cwd: Option<&Path>,
        with_stderr: bool,
    ) -> Proc {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdout(Stdio::piped())
            .stderr(if with_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
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
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let all = Arc::new(Mutex::new(Vec::new()));
        let collect = |pipe: Box<dyn std::io::Read + Send>| {
            let (l, a) = (lines.clone(), all.clone());
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                    a.lock().expect("lines").push(line.clone());
                    l.lock().expect("lines").push_back(line);
                }
            })
        };
        let mut readers = vec![collect(Box::new(child.stdout.take().expect("stdout")))];
        if let Some(stderr) = child.stderr.take() {
            readers.push(collect(Box::new(stderr)));
        }
        Proc {
            child,
            lines,
            all,
            readers,
        }
    }

    /// Every line the process wrote, to its end: call it once the process exited. Waits
    /// (bounded) until its pipes are read to the end (a child of its own still holding one
    /// fails the wait).
    pub async fn output_to_end(&mut self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        while !self.readers.iter().all(|r| r.is_finished()) {
            assert!(
                Instant::now() < deadline,
                "the output of process {} was not closed within {limit:?}",
                self.pid()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.output()
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

    /// Waits (bounded) for a line containing `needle` among every line so far (none consumed,
    /// unlike [`Proc::expect_line`], so the order lines come in does not matter) and returns
    /// it; fails with everything the process said.
    pub async fn saw(&self, needle: &str, limit: Duration) -> String {
        let until = std::time::Instant::now() + limit;
        loop {
            if let Some(l) = self.output().into_iter().find(|l| l.contains(needle)) {
                return l;
            }
            assert!(
                std::time::Instant::now() < until,
                "no line containing {needle:?} within {limit:?}; the process said:\n{}",
                self.output().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many lines so far contain `needle`.
    pub fn lines_with(&self, needle: &str) -> usize {
        self.output().iter().filter(|l| l.contains(needle)).count()
    }

    /// How many times a test worker's handler started job `id` (its `started <id> <attempt>`
    /// lines): the handler runs a fault test counts, not only the results recorded.
    pub fn starts(&self, id: &str) -> usize {
        let prefix = format!("started {id} ");
        self.output()
            .iter()
            .filter(|l| l.starts_with(&prefix))
            .count()
    }

    /// [`Proc::starts`] once at least `expected` of them were read: a result recorded in Redis
    /// can be seen before the reader thread took the `started` line the worker wrote before
    /// it, so a count taken right after a wait can come up short on a loaded machine. Waits
    /// (bounded, 10 s) and returns the count then, which a test compares with `expected`.
    pub async fn starts_seen(&self, id: &str, expected: usize) -> usize {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while self.starts(id) < expected && std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.starts(id)
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

/// A `hero-test-worker` process serving `types`, its answers labelled `label`, with `extra`
/// flags (`--concurrency 2`, `--sleep-ms 5`, ...).
pub fn test_worker(url: &str, types: &str, label: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["--url", url, "--types", types, "--label", label];
    args.extend_from_slice(extra);
    Proc::spawn(&binary("hero-test-worker"), &args, &[], None)
}

/// A `hero worker` process (the built-in Rhai worker) against `url`, with `extra` flags
/// (`--concurrency 1`, ...).
/// `hero broker` (no HTTP) against `url`, its log lines collected with its stdout.
pub fn hero_broker_logged(url: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["--redis-url", url, "broker", "--http", "off"];
    args.extend_from_slice(extra);
    Proc::spawn_with_stderr(&binary("hero"), &args, &[], None)
}

pub fn hero_worker(url: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["--redis-url", url, "worker"];
    args.extend_from_slice(extra);
    Proc::spawn(&binary("hero"), &args, &[], None)
}

/// `hero <args>` against `url`: (exit code, stdout, stderr).
pub fn hero_cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let mut c = hero_command();
    c.args(args).env("HERO_REDIS_URL", url);
    run_to_end(&mut c)
}

/// A `hero` command with none of the `HERO_*` settings of the environment the tests run in
/// (a developer's shell may set some), for a test to add its own.
pub fn hero_command() -> Command {
    let mut c = Command::new(binary("hero"));
    for (k, _) in std::env::vars() {
        if k.starts_with("HERO_") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs `c` to its end: (exit code, stdout, stderr).
pub fn run_to_end(c: &mut Command) -> (i32, String, String) {
    let out = c.output().expect("run the command");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The workspace's root folder (the test kit sits in `tests/testkit`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the test kit sits two folders below the workspace root")
        .to_path_buf()
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing test leaves none
/// behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
