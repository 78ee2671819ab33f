//! The processes of one phase: two brokers and four workers (each with its ledger file), every
//! worker ever started kept for its lines, and a killed or exited one replaced. Which build a
//! process runs is its `Build`: this one's, or (in the upgrade phase) an earlier release's, as
//! a Rust worker (`hero-bench worker`) or a Python one (benches/chaos_worker.py under that
//! release's hero-py).

use std::collections::HashSet;
use std::path::PathBuf;

use hero_testkit::{binary, Proc};

use super::{KEEP_SECS, LEASE_MS};

/// The binaries of one release: its `hero`, its `hero-bench`, and a Python with its hero-py.
#[derive(Clone, Debug)]
pub(crate) struct Build {
    pub(crate) name: String,
    pub(crate) hero: PathBuf,
    pub(crate) bench: PathBuf,
    pub(crate) python: Option<PathBuf>,
    /// Its Node package's build (`node/dist/esm/index.js`).
    pub(crate) node: Option<PathBuf>,
}

impl Build {
    /// This build's binaries (target/release, as `benches/chaos` builds them).
    pub(crate) fn current() -> Build {
        Build {
            name: "current".into(),
            hero: binary("hero"),
            bench: binary("hero-bench"),
            python: None,
            node: None,
        }
    }
}

/// Which language a worker is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lang {
    Rust,
    Python,
    Node,
}

/// The processes of one phase.
pub(super) struct Procs {
    pub(super) url: String,
    pub(super) replicas: u32,
    pub(super) dir: PathBuf,
    pub(super) run_ms: u64,
    pub(super) brokers: Vec<Proc>,
    pub(super) workers: Vec<Proc>,
    /// Every worker process ever started (a killed one's lines are still read at the end).
    pub(super) retired: Vec<Proc>,
    pub(super) started: u64,
    /// What a new broker or a replaced worker runs.
    pub(super) build: Build,
}

/// libfaketime, as Debian's `faketime` package installs it (scripts/setup).
pub(super) const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

impl Procs {
    /// No process yet: the phase starts its brokers and workers.
    pub(super) fn new(
        url: String,
        replicas: u32,
        dir: &std::path::Path,
        run_ms: u64,
        build: Build,
    ) -> Procs {
        Procs {
            url,
            replicas,
            dir: dir.to_path_buf(),
            run_ms,
            brokers: Vec::new(),
            workers: Vec::new(),
            retired: Vec::new(),
            started: 0,
            build,
        }
    }

    pub(super) fn replica_flags(&self) -> Vec<String> {
        if self.replicas == 0 {
            return Vec::new();
        }
        vec![
            "--min-replicas".into(),
            self.replicas.to_string(),
            "--replica-timeout-ms".into(),
            "2000".into(),
        ]
    }

    /// A broker; the soak's keep the ended jobs until they are checked, then one with a
    /// retention of 1 s deletes them, for the memory check.
    pub(super) fn broker(&self, retention_secs: u64) -> Proc {
        self.broker_of(&self.build, retention_secs)
    }

    pub(super) fn broker_of(&self, build: &Build, retention_secs: u64) -> Proc {
        let mut args: Vec<String> = vec!["--redis-url".into(), self.url.clone()];
        args.extend(self.replica_flags());
        args.extend(
            [
                "broker",
                "--http",
                "off",
                "--lease-ms",
                &LEASE_MS.to_string(),
                "--retention-secs",
                &retention_secs.to_string(),
                // a SIGKILL every ~250 ms among four workers: each lives about a second, and a
                // job whose five holders in a row were killed is what the poison-job guard (5
                // deliveries) dead-letters as "abandoned"; the soak counts loss, so its budget
                // is out of reach (the first full run dead-lettered 32 jobs, each after five
                // different workers died holding it, every recovery by presence)
                "--max-attempts",
                "1000",
                "--events-max",
                // enough to read a lost job's history back (trimmed before the memory check)
                "100000",
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::spawn(&build.hero, &args, &[("RUST_LOG", "error")], None)
    }

    pub(super) fn worker(&mut self) -> Proc {
        let build = self.build.clone();
        self.worker_of(&build, Lang::Rust)
    }

    /// A worker of `build` in `lang` (Python needs the build's Python, Node its package's
    /// build; else a Rust one).
    pub(super) fn worker_of(&mut self, build: &Build, lang: Lang) -> Proc {
        self.started += 1;
        if let (Lang::Node, Some(dist)) = (lang, &build.node) {
            let ledger = self.dir.join(format!("w{}.ledger", self.started));
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("chaos_worker.mjs");
            let args: Vec<String> = vec![
                script.display().to_string(),
                "--dist".into(),
                dist.display().to_string(),
                "--redis-url".into(),
                self.url.clone(),
                "--concurrency".into(),
                "16".into(),
                "--presence-ms".into(),
                "1000".into(),
                "--lease-ms".into(),
                LEASE_MS.to_string(),
                "--run-ms".into(),
                self.run_ms.to_string(),
                "--ledger".into(),
                ledger.display().to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            return Proc::spawn(std::path::Path::new("node"), &args, &[], None);
        }
        if let (Lang::Python, Some(python)) = (lang, &build.python) {
            let ledger = self.dir.join(format!("w{}.ledger", self.started));
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("chaos_worker.py");
            let args: Vec<String> = vec![
                script.display().to_string(),
                "--redis-url".into(),
                self.url.clone(),
                "--concurrency".into(),
                "16".into(),
                "--presence-ms".into(),
                "1000".into(),
                "--lease-ms".into(),
                LEASE_MS.to_string(),
                "--run-ms".into(),
                self.run_ms.to_string(),
                "--ledger".into(),
                ledger.display().to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            return Proc::spawn(python, &args, &[("PYTHONUNBUFFERED", "1")], None);
        }
        let args = self.rust_worker_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::spawn(&build.bench, &args, &[("RUST_LOG", "error")], None)
    }

    /// A Rust worker of this build whose clock is `offset` off (`-30s`, `+30s`: libfaketime
    /// preloaded into the worker itself, so a SIGKILL kills the worker).
    pub(super) fn skewed_worker(&mut self, offset: &str) -> Proc {
        self.started += 1;
        let args = self.rust_worker_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::spawn(
            &self.build.bench,
            &args,
            &[
                ("RUST_LOG", "error"),
                ("LD_PRELOAD", FAKETIME),
                ("FAKETIME", offset),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
            None,
        )
    }

    /// The arguments of a Rust worker of the soak, with a ledger of its own.
    fn rust_worker_args(&self) -> Vec<String> {
        let ledger = self.dir.join(format!("w{}.ledger", self.started));
        let mut args: Vec<String> = [
            "worker",
            "--redis-url",
            &self.url,
            "--concurrency",
            "16",
            "--presence-ms",
            "1000",
            "--lease-ms",
            &LEASE_MS.to_string(),
            "--run-ms",
            &self.run_ms.to_string(),
        ]
        .map(String::from)
        .to_vec();
        args.push("--ledger".into());
        args.push(ledger.display().to_string());
        args.extend(self.replica_flags());
        args
    }

    /// Replaces worker `i` with a new process and gives back the old one.
    pub(super) fn swap_worker(&mut self, i: usize) -> Proc {
        let fresh = self.worker();
        std::mem::replace(&mut self.workers[i], fresh)
    }

    /// A process started while Redis was down may have given up at once: replace it.
    pub(super) fn replace_exited(&mut self) {
        for i in 0..self.workers.len() {
            if matches!(self.workers[i].child.try_wait(), Ok(Some(_))) {
                let gone = self.swap_worker(i);
                self.retired.push(gone);
            }
        }
        for i in 0..self.brokers.len() {
            if matches!(self.brokers[i].child.try_wait(), Ok(Some(_))) {
                self.brokers[i] = self.broker(KEEP_SECS);
            }
        }
    }
}

/// The jobs a worker process started and has not finished, from its lines.
pub(super) fn held(p: &Proc) -> Vec<String> {
    let mut running: HashSet<String> = HashSet::new();
    for line in p.output() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next()) {
            (Some("started"), Some(id)) => {
                running.insert(id.to_string());
            }
            (Some("done"), Some(id)) => {
                running.remove(id);
            }
            _ => {}
        }
    }
    running.into_iter().collect()
}
