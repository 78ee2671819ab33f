//! The peer: BullMQ, driven by `benches/peer/bullmq.mjs` under Node.js, installed with npm into
//! `benches/peer/node_modules` (ignored by git) the first time it is needed.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context, Result};

use crate::report::Figures;
use hero_broker::local_redis::on_path;

use crate::scenario::{BenchArgs, Pinning, Scenario};

pub struct Peer {
    dir: PathBuf,
    pin: Option<Pinning>,
}

impl Peer {
    /// Checks Node.js is there and installs BullMQ when it is not installed yet.
    pub async fn prepare(dir: &Path, pin: Option<Pinning>) -> Result<Peer> {
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
        Ok(Peer {
            dir: dir.to_path_buf(),
            pin,
        })
    }

    /// Runs one scenario in a fresh Node.js process on the load core; its progress goes to our
    /// stderr, its figures come back as one JSON line.
    pub async fn run(&self, scenario: Scenario, url: &str, args: &BenchArgs) -> Result<Figures> {
        let mut cmd = match self.pin {
            Some(p) => {
                let mut c = tokio::process::Command::new("taskset");
                c.arg("-c").arg(p.load.to_string()).arg("node");
                c
            }
            None => tokio::process::Command::new("node"),
        };
        let jobs = args.jobs.to_string();
        let batch = args.batch.to_string();
        let producers = args.producers.to_string();
        let concurrency = args.concurrency.to_string();
        let rate = args.rate.to_string();
        let secs = args.duration.as_secs_f64().to_string();
        cmd.arg("bullmq.mjs")
            .arg(scenario.name())
            .args(["--url", url, "--jobs", &jobs, "--batch", &batch])
            .args(["--producers", &producers, "--concurrency", &concurrency])
            .args(["--rate", &rate, "--secs", &secs])
            .current_dir(&self.dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let out = cmd.output().await.context("running node")?;
        if !out.status.success() {
            bail!("the bullmq peer exited with {}", out.status);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .context("the bullmq peer printed no figures")?;
        serde_json::from_str(line).with_context(|| format!("reading the peer's figures: {line}"))
    }
}
