//! The peers: BullMQ, driven by `benches/peer/bullmq.mjs` under Node.js (installed with npm into
//! `benches/peer/node_modules`, ignored by git, the first time it is needed), and apalis-redis,
//! driven by the `hero-bench-apalis` program (`benches/apalis`, a crate of its own so apalis stays
//! out of the workspace; `benches/run` builds it). Both take the same arguments, run one scenario
//! in a fresh process pinned to the load core, and print their figures as one JSON line.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context, Result};

use crate::report::Figures;
use hero_broker::local_redis::on_path;

use crate::scenario::{BenchArgs, PeerKind, Pinning, Scenario};

pub struct Peer {
    kind: PeerKind,
    /// The program and the arguments before the scenario's.
    program: PathBuf,
    pre_args: Vec<String>,
    dir: Option<PathBuf>,
    pin: Option<Pinning>,
}

impl Peer {
    /// Checks the peer can run (installing BullMQ when it is not installed yet).
    pub async fn prepare(kind: PeerKind, args: &BenchArgs, pin: Option<Pinning>) -> Result<Peer> {
        match kind {
            PeerKind::Bullmq => {
                let dir = &args.peer_dir;
                bullmq(dir).await?;
                Ok(Peer {
                    kind,
                    program: "node".into(),
                    pre_args: vec!["bullmq.mjs".into()],
                    dir: Some(dir.clone()),
                    pin,
                })
            }
            PeerKind::Apalis | PeerKind::ApalisNolock => {
                let program = match &args.apalis_bin {
                    Some(p) => p.clone(),
                    None => std::env::current_exe()
                        .context("finding the hero-bench binary")?
                        .with_file_name("hero-bench-apalis"),
                };
                if !program.is_file() {
                    bail!(
                        "--peer {} needs the apalis peer program at {}: build it with `cargo \
                         build --release --manifest-path benches/apalis/Cargo.toml \
                         --target-dir target` (benches/run does), or give --apalis-bin",
                        kind.name(),
                        program.display()
                    );
                }
                Ok(Peer {
                    kind,
                    program,
                    pre_args: Vec::new(),
                    dir: None,
                    pin,
                })
            }
        }
    }

    pub fn kind(&self) -> PeerKind {
        self.kind
    }

    /// Runs one scenario in a fresh process on the load core; its progress goes to our
    /// stderr, its figures come back as one JSON line.
    pub async fn run(&self, scenario: Scenario, url: &str, args: &BenchArgs) -> Result<Figures> {
        let mut cmd = match self.pin {
            Some(p) => {
                let mut c = tokio::process::Command::new("taskset");
                c.arg("-c").arg(p.load.to_string()).arg(&self.program);
                c
            }
            None => tokio::process::Command::new(&self.program),
        };
        let jobs = args.jobs.to_string();
        let batch = args.batch.to_string();
        let producers = args.producers.to_string();
        let concurrency = args.concurrency.to_string();
        let rate = args.rate.to_string();
        let secs = args.duration.as_secs_f64().to_string();
        cmd.args(&self.pre_args)
            .arg(scenario.name())
            .args(["--url", url, "--jobs", &jobs, "--batch", &batch])
            .args(["--producers", &producers, "--concurrency", &concurrency])
            .args(["--rate", &rate, "--secs", &secs])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if self.kind == PeerKind::ApalisNolock {
            cmd.arg("--nolock");
        }
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        let name = self.kind.name();
        let out = cmd
            .output()
            .await
            .with_context(|| format!("running the {name} peer"))?;
        if !out.status.success() {
            bail!("the {name} peer exited with {}", out.status);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .with_context(|| format!("the {name} peer printed no figures"))?;
        serde_json::from_str(line)
            .with_context(|| format!("reading the {name} peer's figures: {line}"))
    }
}

/// Checks Node.js is there and installs BullMQ into `dir` when it is not installed yet.
async fn bullmq(dir: &Path) -> Result<()> {
    if !dir.join("bullmq.mjs").is_file() {
        bail!(
            "no peer script at {}: run from the repository root or set --peer-dir",
            dir.join("bullmq.mjs").display()
        );
    }
    if !on_path("node") || !on_path("npm") {
        bail!("--peer bullmq needs Node.js and npm (Debian: apt-get install nodejs npm)");
    }
    if !dir.join("node_modules/bullmq/package.json").is_file() {
        eprintln!("installing bullmq with npm into {}", dir.display());
        let status = tokio::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .status()
            .await
            .context("running npm install")?;
        if !status.success() {
            bail!("npm install in {} failed", dir.display());
        }
    }
    Ok(())
}
