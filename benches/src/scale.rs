//! `hero-bench --namespaces N`: scale-out on a Redis Cluster. Starts a cluster of three masters
//! on loopback (the test kit's), and for 1..=N namespaces, each on a shard of its own, runs the
//! end-to-end scenario in every namespace at once (its producers and a worker of its own, all
//! in this process): the aggregate jobs per second, and the Redis CPU each shard spent per job.
//! On a machine with fewer cores than shards the throughput cannot grow with the shards; the CPU
//! per job per shard shows what each shard would carry with a core of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hero_client::{Client, ClientOptions};
use hero_protocol::{Job, NewJob};
use hero_testkit::RedisCluster;
use hero_worker::{Outcome, Worker};
use tokio::sync::Notify;

use crate::scenario::BenchArgs;

const SHARDS: usize = 3;

/// One row of the table: how many namespaces ran at once, and what they did.
#[derive(serde::Serialize)]
struct Row {
    namespaces: usize,
    jobs: u64,
    seconds: f64,
    jobs_per_sec: f64,
    /// Redis CPU per job (µs) on each shard that served a namespace.
    redis_cpu_us_per_job: Vec<f64>,
}

pub async fn run(args: &BenchArgs, json: bool) -> Result<i32> {
    let max = args.namespaces;
    if max == 0 || max > SHARDS {
        bail!("--namespaces takes 1 to {SHARDS} (the cluster has {SHARDS} shards)");
    }
    eprintln!("starting a Redis Cluster of {SHARDS} masters on loopback");
    let cluster = RedisCluster::start(SHARDS, 0).await;
    let url = cluster.url();
    // one namespace per shard
    let mut namespaces: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let ns = format!("bench{i}");
        let node = cluster.master_of(&format!("{{{ns}}}")).await;
        if namespaces.iter().all(|(_, n)| *n != node) {
            namespaces.push((ns, node));
        }
        if namespaces.len() == SHARDS {
            break;
        }
    }
    let mut rows = Vec::new();
    for n in 1..=max {
        let row = round(args, &cluster, &url, &namespaces[..n]).await?;
        eprintln!(
            "{} namespace(s): {:.0} jobs/s, Redis CPU per job per shard {:?} µs",
            n,
            row.jobs_per_sec,
            row.redis_cpu_us_per_job
                .iter()
                .map(|c| format!("{c:.1}"))
                .collect::<Vec<_>>()
        );
        rows.push(row);
    }
    println!("| namespaces (shards) | jobs | jobs/s (all) | Redis CPU µs/job, per shard |");
    println!("| --- | --- | --- | --- |");
    for r in &rows {
        let cpu: Vec<String> = r
            .redis_cpu_us_per_job
            .iter()
            .map(|c| format!("{c:.1}"))
            .collect();
        println!(
            "| {} | {} | {:.0} | {} |",
            r.namespaces,
            r.jobs,
            r.jobs_per_sec,
            cpu.join(" / ")
        );
    }
    if json {
        let text = serde_json::to_string_pretty(&rows)?;
        std::fs::write(&args.out, text)
            .with_context(|| format!("cannot write {}", args.out.display()))?;
    }
    Ok(0)
}

/// End to end in each of `namespaces` at once: `--jobs` jobs in each.
async fn round(
    args: &BenchArgs,
    cluster: &RedisCluster,
    url: &str,
    namespaces: &[(String, usize)],
) -> Result<Row> {
    let per_ns = args.jobs;
    let total = per_ns * namespaces.len() as u64;
    let done = Arc::new(AtomicU64::new(0));
    let all_done = Arc::new(Notify::new());
    let mut clients = Vec::new();
    let mut workers = Vec::new();
    for (ns, _) in namespaces {
        let mut opts = ClientOptions::new(url);
        opts.namespace = ns.clone();
        let client = Client::with_options(opts).await?;
        let (done, all_done) = (done.clone(), all_done.clone());
        let worker = Worker::builder(client.clone())
            .types(["bench"])
            .concurrency(args.concurrency)
            .handler(move |_: Job, _| {
                if done.fetch_add(1, Ordering::Relaxed) + 1 == total {
                    all_done.notify_one();
                }
                async { Outcome::Done(String::new()) }
            })
            .build()?;
        let stop = tokio_util::sync::CancellationToken::new();
        let s = stop.clone();
        workers.push((stop, tokio::spawn(worker.run(s.cancelled_owned()))));
        clients.push(client);
    }
    let cpu_before = shard_cpu(cluster, namespaces).await?;
    let started = Instant::now();
    let round = namespaces.len();
    // `round` keeps the ids of one round apart from another's in the same namespace
    let submits = clients.iter().map(|c| {
        crate::ours::submit_in_batches(c, per_ns, args, move |i| {
            Ok(NewJob::builder("bench", "noop")
                .id(format!("r{round}-{i}"))
                .build()?)
        })
    });
    futures::future::try_join_all(submits).await?;
    tokio::time::timeout(Duration::from_secs(600), all_done.notified())
        .await
        .context("the jobs did not all finish within 10 minutes")?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = shard_cpu(cluster, namespaces).await?;
    for (stop, task) in workers {
        stop.cancel();
        let _ = task.await;
    }
    Ok(Row {
        namespaces: namespaces.len(),
        jobs: total,
        seconds,
        jobs_per_sec: total as f64 / seconds,
        redis_cpu_us_per_job: cpu_before
            .iter()
            .zip(&cpu_after)
            .map(|(b, a)| (a - b) * 1e6 / per_ns as f64)
            .collect(),
    })
}

/// The CPU seconds (user + system) each namespace's shard has used.
async fn shard_cpu(cluster: &RedisCluster, namespaces: &[(String, usize)]) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for (_, node) in namespaces {
        let probe = crate::probe::Probe::connect(&cluster.nodes[*node].url()).await?;
        out.push(probe.cpu_secs().await?);
    }
    Ok(out)
}
