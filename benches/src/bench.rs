//! The benchmark run (SPEC §9): starts a throwaway `redis-server`, pins it and the load to different
//! cores, runs each scenario with hero's own client and worker (the API users get, no
//! shortcuts) and, with `--peer bullmq,apalis,apalis-nolock`, the same scenario with each peer on
//! the same Redis, interleaved round by round; then prints a table of medians per peer and writes
//! them as JSON.
//!
//! Every figure is measured the same way on both sides: a timed section, Redis CPU time from
//! `INFO cpu` before and after it, latencies from a submit timestamp carried in the job.

use anyhow::{bail, Context, Result};

use hero_broker::local_redis::{self, on_path, LocalRedis};

use crate::probe::Probe;
use crate::report::{Figures, Report};
use crate::scenario::{AofMode, BenchArgs, PeerKind, Pinning, Scenario, Side};
use crate::{ours, peer};

fn pinning(args: &BenchArgs) -> Option<Pinning> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if args.no_pin || cores < 2 || !on_path("taskset") {
        return None;
    }
    Some(Pinning { redis: 0, load: 1 })
}

/// Moves every thread of this process to `core` (threads made later inherit it).
fn pin_self(core: usize) -> Result<()> {
    let status = std::process::Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &core.to_string(),
            &std::process::id().to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .context("running taskset")?;
    if !status.success() {
        bail!("taskset could not pin the benchmark to core {core}");
    }
    Ok(())
}

/// Runs the benchmark; prints progress to stderr and the table to stdout. Exit code 0.
pub async fn run(args: BenchArgs, json: bool) -> Result<i32> {
    if args.jobs == 0 || args.batch == 0 || args.producers == 0 || args.concurrency == 0 {
        bail!("--jobs, --batch, --producers and --concurrency must be at least 1");
    }
    if args.rounds == 0 || args.rate == 0 {
        bail!("--rounds and --rate must be at least 1");
    }
    ours::streams_shape(args.streams)?;
    let scenarios: Vec<Scenario> = if args.only.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        let mut s = args.only.clone();
        s.sort();
        s.dedup();
        s
    };
    let pin = pinning(&args);
    let mut peer_kinds = args.peer.clone();
    peer_kinds.sort();
    peer_kinds.dedup();
    let mut peers = Vec::new();
    for kind in peer_kinds {
        peers.push(peer::Peer::prepare(kind, &args, pin).await?);
    }
    let dir = std::env::temp_dir().join(format!("hero-bench-{}", std::process::id()));
    let redis = LocalRedis::spawn(local_redis::Options {
        dir: dir.clone(),
        aof: args.aof.map(|a| match a {
            AofMode::Always => "always",
            AofMode::Everysec => "everysec",
        }),
        core: pin.map(|p| p.redis),
    })
    .await?;
    if let Some(p) = pin {
        pin_self(p.load)?;
    }
    let probe = Probe::connect(&redis.url).await?;
    let version = probe.version().await?;
    eprintln!(
        "hero-bench: redis {version} at {} ({}), {}; {} round(s), {} jobs{}",
        redis.url,
        match args.aof {
            Some(AofMode::Always) => "AOF fsync always",
            Some(AofMode::Everysec) => "AOF fsync everysec",
            None => "no persistence",
        },
        match pin {
            Some(p) => format!("redis on core {}, load on core {}", p.redis, p.load),
            None => "not pinned".to_string(),
        },
        args.rounds,
        args.jobs,
        peers
            .iter()
            .map(|p| format!(", peer {}", p.kind().name()))
            .collect::<String>(),
    );
    let ours = ours::Ours::new(&redis.url, &args).await?;
    let ceiling = crate::ceiling::Ceiling::new(&redis.url, &args)?;
    let kinds: Vec<PeerKind> = peers.iter().map(peer::Peer::kind).collect();
    let mut report = Report::new(&args, &version, pin, &kinds);
    let result = async {
        for round in 1..=args.rounds {
            for &scenario in &scenarios {
                eprintln!("[round {round}/{}] {} ours", args.rounds, scenario.name());
                probe.flushall().await?;
                if args.commandstats {
                    probe.reset_stats().await?;
                }
                let figures = match scenario {
                    Scenario::Ceiling | Scenario::CeilingLatency => ceiling
                        .run(&probe, scenario == Scenario::CeilingLatency)
                        .await
                        .with_context(|| format!("{} scenario", scenario.name()))?,
                    _ => ours
                        .run(scenario, &probe)
                        .await
                        .with_context(|| format!("hero {} scenario", scenario.name()))?,
                };
                eprintln!("    {}", figures.summary());
                if args.commandstats {
                    for (name, calls, usec) in probe.commandstats().await?.into_iter().take(12) {
                        eprintln!(
                            "      {name:<16} {calls:>9} calls {usec:>10} µs {:>7.2} µs/call",
                            usec as f64 / calls.max(1) as f64
                        );
                    }
                }
                report.add(scenario, Side::Ours, figures);
                for peer in peers.iter().filter(|p| scenario.has_peer(p.kind())) {
                    let name = peer.kind().name();
                    eprintln!("[round {round}/{}] {} {name}", args.rounds, scenario.name());
                    probe.flushall().await?;
                    let figures: Figures = peer
                        .run(scenario, &redis.url, &args)
                        .await
                        .with_context(|| format!("{name} {} scenario", scenario.name()))?;
                    eprintln!("    {}", figures.summary());
                    report.add(scenario, Side::Peer(peer.kind()), figures);
                }
            }
        }
        anyhow::Ok(())
    }
    .await;
    redis.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    print!("{}", report.table());
    if json {
        std::fs::write(&args.out, serde_json::to_string_pretty(&report.json())?)
            .with_context(|| format!("writing {}", args.out.display()))?;
        eprintln!("wrote {}", args.out.display());
    }
    Ok(0)
}
