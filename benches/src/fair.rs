//! `hero-bench --only fair`: fair share within a queue (issue 52). One key submits a backlog of
//! 50,000 jobs, then 20 keys submit 100 each; one worker of concurrency 100 then drains the
//! queue, with the policy on (`fair-on`) and off (`fair-off`), in interleaved rounds on a fresh
//! Redis each; per round:
//! - `jobs/s`: the jobs over the time the submits took plus the time from the worker's start
//!   until the last job ended (a fair queue moves work from the submit to the fetch: both count);
//! - `small-keys-done s`: from the worker's start (every job queued by then: both sides start
//!   from the same backlog) until every small key's jobs had ended;
//! - `jain`: Jain's fairness index `(Σx)² / (n·Σx²)` of the jobs each of the 21 keys got done
//!   while every key still had work (until the first key ran out): 1 is equal shares, 1/21
//!   one key served alone.
//!
//! Then the scale in keys: 100,000 jobs over 1,000 keys and over 100,000, fair share on, jobs/s
//! and Redis's CPU per job side by side (a fetch costs the same whatever the number of keys).
//!
//! BullMQ's open-source version has no equivalent: its groups (per-group round robin) are in
//! the paid BullMQ Pro, so no peer figure is measured here (docs/benchmarks.md).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hero_client::{Client, ClientOptions};
use hero_protocol::policy::Policy;
use hero_protocol::{Job, NewJob};
use hero_testkit::RedisServer;
use hero_worker::{Outcome, Worker};
use tokio::sync::Notify;

use crate::probe::Probe;
use crate::scenario::BenchArgs;

const BIG: u64 = 50_000;
const SMALL_KEYS: usize = 20;
const SMALL: u64 = 100;
const CONCURRENCY: usize = 100;

#[derive(Clone, Copy, Debug, serde::Serialize)]
struct Row {
    jobs_per_sec: f64,
    small_keys_done_s: f64,
    jain: f64,
    /// Redis's CPU per job, submits and drain (INFO cpu): steadier than jobs/s on a noisy
    /// machine.
    redis_cpu_us_per_job: f64,
}

pub async fn run(args: &BenchArgs, json: bool) -> Result<i32> {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        for fair in [true, false] {
            let r = one(fair, &main_shape(), args.commandstats).await?;
            eprintln!(
                "fair-{} round {}: {:.0} jobs/s, small keys done in {:.2} s, jain {:.3}, Redis {:.1} µs/job",
                if fair { "on" } else { "off" },
                round + 1,
                r.jobs_per_sec,
                r.small_keys_done_s,
                r.jain,
                r.redis_cpu_us_per_job
            );
            if fair {
                on.push(r);
            } else {
                off.push(r);
            }
        }
    }
    // scale in keys: the same 100,000 jobs over 1,000 keys and over 100,000 (a turn gives one
    // job in both): a fetch's cost must not follow the number of keys waiting
    let (mut few, mut many) = (Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        for (keys, out) in [(1_000, &mut few), (100_000, &mut many)] {
            let shape = vec![100_000 / keys as u64; keys];
            let r = one(true, &shape, args.commandstats).await?;
            eprintln!(
                "fair-on {keys} keys round {}: {:.0} jobs/s, Redis {:.1} µs/job",
                round + 1,
                r.jobs_per_sec,
                r.redis_cpu_us_per_job
            );
            out.push(r);
        }
    }
    let (few, many) = (median(&few), median(&many));
    let (on, off) = (median(&on), median(&off));
    println!("\nfair share: one key's {BIG} jobs first, then {SMALL_KEYS} keys' {SMALL} each, one worker of concurrency {CONCURRENCY} (medians of {} rounds)", args.rounds.max(1));
    println!("| scenario | jobs/s | small-keys-done s | jain | Redis µs/job |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, r) in [("fair-on", on), ("fair-off", off)] {
        println!(
            "| {name} | {:.0} | {:.2} | {:.3} | {:.1} |",
            r.jobs_per_sec, r.small_keys_done_s, r.jain, r.redis_cpu_us_per_job
        );
    }
    println!(
        "| fair-on vs fair-off | {:.2}× | {:.1}× sooner | | {:.2}× |",
        on.jobs_per_sec / off.jobs_per_sec,
        off.small_keys_done_s / on.small_keys_done_s,
        on.redis_cpu_us_per_job / off.redis_cpu_us_per_job
    );
    println!(
        "\nscale in keys: 100,000 jobs, fair share on, one worker of concurrency {CONCURRENCY}"
    );
    println!("| scenario | jobs/s | Redis µs/job |");
    println!("| --- | ---: | ---: |");
    for (name, r) in [("fair-1k-keys", few), ("fair-100k-keys", many)] {
        println!(
            "| {name} | {:.0} | {:.1} |",
            r.jobs_per_sec, r.redis_cpu_us_per_job
        );
    }
    println!(
        "| 100k vs 1k keys | {:.2}× | {:.2}× |",
        many.jobs_per_sec / few.jobs_per_sec,
        many.redis_cpu_us_per_job / few.redis_cpu_us_per_job
    );
    if json {
        let report = serde_json::json!({"fair-on": on, "fair-off": off, "fair-1k-keys": few, "fair-100k-keys": many});
        std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", args.out.display()))?;
    }
    Ok(0)
}

/// The main rows' queue: one key's `BIG` jobs, then `SMALL_KEYS` keys' `SMALL` each.
fn main_shape() -> Vec<u64> {
    let mut shape = vec![BIG];
    shape.extend(std::iter::repeat_n(SMALL, SMALL_KEYS));
    shape
}

/// Each figure's median over the rounds (the rounds' figures taken one by one).
fn median(rows: &[Row]) -> Row {
    let mid = |f: fn(&Row) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Row {
        jobs_per_sec: mid(|r| r.jobs_per_sec),
        small_keys_done_s: mid(|r| r.small_keys_done_s),
        jain: mid(|r| r.jain),
        redis_cpu_us_per_job: mid(|r| r.redis_cpu_us_per_job),
    }
}

/// Jain's index of `x`.
fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// One round on a fresh Redis: `shape[k]` jobs of key `k`, submitted key after key (key 0
/// first: the big one of the main rows).
async fn one(fair: bool, shape: &[u64], commandstats: bool) -> Result<Row> {
    let server = RedisServer::start();
    let client = Client::with_options(ClientOptions::new(server.url())).await?;
    if fair {
        hero_admin::Admin::from(&client)
            .set_policy(
                "fair",
                &Policy {
                    fair: Some(true),
                    ..Policy::default()
                },
            )
            .await?;
    }
    // key 0 is the big one; the job's id says its key
    let mut batch = Vec::with_capacity(1000);
    let mut submit = |key: usize, i: u64| -> Result<Option<Vec<NewJob>>> {
        batch.push(
            NewJob::builder("fair", "noop")
                .id(format!("k{key}-{i}"))
                .limit_key(format!("k{key}"))
                .build()?,
        );
        Ok((batch.len() == 1000).then(|| std::mem::take(&mut batch)))
    };
    let mut batches = Vec::new();
    for (key, &n) in shape.iter().enumerate() {
        for i in 0..n {
            batches.extend(submit(key, i)?);
        }
    }
    batches.push(std::mem::take(&mut batch));
    // a fair queue moves work from the submit (a lane instead of the stream) to the fetch (the
    // release): jobs/s and the CPU count both
    let probe = Probe::connect(&server.url()).await?;
    let cpu_before = probe.cpu_secs().await?;
    let submitting = Instant::now();
    for b in batches.iter().filter(|b| !b.is_empty()) {
        client.submit_many(b).await?;
    }
    let submit_time = submitting.elapsed();
    let total: u64 = shape.iter().sum();
    // per job ended: its key and when (since the worker started)
    let ended: Arc<Mutex<Vec<(usize, Duration)>>> =
        Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let all_done = Arc::new(Notify::new());
    let started = Instant::now();
    let (e, a) = (ended.clone(), all_done.clone());
    let worker = Worker::builder(client.clone())
        .types(["fair"])
        .concurrency(CONCURRENCY)
        .handler(move |j: Job, _| {
            let key =
                j.id.as_str()
                    .strip_prefix('k')
                    .and_then(|r| r.split('-').next())
                    .and_then(|k| k.parse().ok())
                    .unwrap_or(0);
            let mut v = e.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            v.push((key, started.elapsed()));
            if v.len() as u64 == total {
                a.notify_one();
            }
            async { Outcome::Done(String::new()) }
        })
        .build()?;
    let stop = tokio_util::sync::CancellationToken::new();
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    tokio::time::timeout(Duration::from_secs(600), all_done.notified())
        .await
        .context("the jobs did not all end within 10 minutes")?;
    let cpu = probe.cpu_secs().await? - cpu_before;
    eprintln!(
        "  submits {:.2} s, drain {:.2} s",
        submit_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    if commandstats {
        let mut rows = probe.commandstats().await?;
        rows.sort_by_key(|(_, _, usec)| std::cmp::Reverse(*usec));
        for (name, calls, usec) in rows.into_iter().take(14) {
            eprintln!(
                "      {name:<24} {:>8.3} calls/job {:>7.2} µs/job",
                calls as f64 / total as f64,
                usec as f64 / total as f64
            );
        }
    }
    stop.cancel();
    let _ = w.await;
    let ended = ended
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let last = ended.iter().map(|(_, t)| *t).max().unwrap_or_default();
    let small_done = ended
        .iter()
        .filter(|(k, _)| *k > 0)
        .map(|(_, t)| *t)
        .max()
        .unwrap_or_default();
    // every key has work until the first one's last job ended
    let mut key_last = vec![Duration::ZERO; shape.len()];
    for (k, t) in &ended {
        key_last[*k] = key_last[*k].max(*t);
    }
    let window = key_last.iter().min().copied().unwrap_or_default();
    let mut got = vec![0.0; shape.len()];
    for (k, t) in &ended {
        if *t <= window {
            got[*k] += 1.0;
        }
    }
    Ok(Row {
        jobs_per_sec: total as f64 / (submit_time + last).as_secs_f64(),
        small_keys_done_s: small_done.as_secs_f64(),
        jain: jain(&got),
        redis_cpu_us_per_job: cpu * 1e6 / total as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::jain;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_one_key() {
        assert!((jain(&[3.0, 3.0, 3.0]) - 1.0).abs() < 1e-9);
        assert!((jain(&[9.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-9);
    }
}
