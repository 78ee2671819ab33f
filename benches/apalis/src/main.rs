//! The apalis-redis side of `hero-bench --peer apalis` / `--peer apalis-nolock`: runs one
//! scenario against the Redis it is given, through apalis 1.0's public API as its README shows
//! it (`RedisStorage`, `TaskSink::push_bulk`, `WorkerBuilder` with `.concurrency(n)`), and prints
//! its figures as one JSON object on stdout (progress goes to stderr). The figures and their
//! names match hero's scenarios and the BullMQ peer's (`benches/peer/bullmq.mjs`): a timed
//! section, Redis CPU from `INFO cpu` before and after it, this process's CPU from getrusage,
//! latencies from a submit timestamp carried in the job.
//!
//! A job counts as done when apalis says so: its `handle_results` script publishes the task id
//! on `tasks:<done set>` after it wrote the result (`emit_events`, on by default), and this
//! program listens there, as apalis's own `WaitForCompletion` does. `--nolock` is
//! `Config::lock_tasks(false)`: no per-task lease (no `acquire_leases` call per fetch).
//!
//! usage: hero-bench-apalis <scenario> --url redis://127.0.0.1:PORT [--jobs N] [--batch N]
//!        [--producers N] [--concurrency N] [--rate N] [--secs N] [--nolock]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apalis::prelude::*;
use apalis_redis::{Config, RedisStorage};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Deserialize, Serialize)]
struct Noop {
    /// Submit time, µs since the epoch.
    t: u64,
}

struct Opts {
    scenario: String,
    url: String,
    jobs: u64,
    batch: u64,
    producers: u64,
    concurrency: usize,
    rate: u64,
    secs: f64,
    nolock: bool,
}

fn opts() -> Result<Opts, Error> {
    let mut args = std::env::args().skip(1);
    let scenario = args
        .next()
        .ok_or("usage: hero-bench-apalis <scenario> --url URL ...")?;
    let mut o = Opts {
        scenario,
        url: String::new(),
        jobs: 100_000,
        batch: 50,
        producers: 4,
        concurrency: 100,
        rate: 5_000,
        secs: 10.0,
        nolock: false,
    };
    while let Some(name) = args.next() {
        if name == "--nolock" {
            o.nolock = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{name} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{name} {value}: {e}");
        match name.as_str() {
            "--url" => o.url = value,
            "--jobs" => o.jobs = value.parse().map_err(|e| bad(&e))?,
            "--batch" => o.batch = value.parse().map_err(|e| bad(&e))?,
            "--producers" => o.producers = value.parse().map_err(|e| bad(&e))?,
            "--concurrency" => o.concurrency = value.parse().map_err(|e| bad(&e))?,
            "--rate" => o.rate = value.parse().map_err(|e| bad(&e))?,
            "--secs" => o.secs = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {name}").into()),
        }
    }
    if o.url.is_empty() {
        return Err("--url is required".into());
    }
    Ok(o)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn progress(scenario: &str, msg: &str) {
    eprintln!("  apalis {scenario}: {msg}");
}

/// What the handler and the completion listener share.
#[derive(Default)]
struct Seen {
    /// submit→start, µs.
    start: Mutex<Vec<u64>>,
    /// task id → submit time, until its completion is published.
    submitted: Mutex<HashMap<String, u64>>,
    /// submit→result, µs.
    result: Mutex<Vec<u64>>,
    done: AtomicU64,
}

static SEEN: OnceLock<Arc<Seen>> = OnceLock::new();

fn seen() -> &'static Arc<Seen> {
    SEEN.get_or_init(Arc::default)
}

async fn noop(job: Noop, id: TaskId) -> Result<(), BoxDynError> {
    let s = seen();
    s.start
        .lock()
        .map_err(|_| "poisoned")?
        .push(now_us().saturating_sub(job.t));
    s.submitted
        .lock()
        .map_err(|_| "poisoned")?
        .insert(id.to_string(), job.t);
    Ok(())
}

/// apalis's defaults but two: the lock (`--nolock`), and a fetch of up to `--concurrency` tasks
/// instead of 10. With 10 a fetch, a worker of 100 slots ran at half the pace (end to end 27 k
/// against 51 k jobs/s with 100, worker-concurrent 38 k against 81 k; 25 and 50 between): the
/// comparison is with apalis at its best, as a user tuning it for throughput would set it.
fn config(o: &Opts) -> Config {
    Config::default()
        .queue("bench")
        .lock_tasks(!o.nolock)
        .batch_size(o.concurrency.max(1))
}

async fn storage(o: &Opts) -> Result<RedisStorage<Noop>, Error> {
    let conn = apalis_redis::connect(o.url.as_str()).await?;
    Ok(RedisStorage::new(conn).with_config(config(o)))
}

/// Redis's CPU seconds (user + sys) from INFO cpu.
async fn redis_cpu(c: &mut redis::aio::MultiplexedConnection) -> Result<f64, Error> {
    let text: String = redis::cmd("INFO").arg("cpu").query_async(c).await?;
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(field("used_cpu_sys") + field("used_cpu_user"))
}

async fn used_memory(c: &mut redis::aio::MultiplexedConnection) -> Result<f64, Error> {
    let text: String = redis::cmd("INFO").arg("memory").query_async(c).await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN))
}

fn own_cpu() -> f64 {
    // SAFETY: getrusage writes the struct it is given; zeroed is a valid rusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

struct CpuMark {
    redis: f64,
    own: f64,
}

async fn cpu_mark(c: &mut redis::aio::MultiplexedConnection) -> Result<CpuMark, Error> {
    Ok(CpuMark {
        own: own_cpu(),
        redis: redis_cpu(c).await?,
    })
}

async fn cpu_record(
    mark: &CpuMark,
    c: &mut redis::aio::MultiplexedConnection,
    jobs: u64,
    out: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(), Error> {
    let own = own_cpu();
    let redis = redis_cpu(c).await?;
    out.insert(
        "client_us_per_job".into(),
        ((own - mark.own) * 1e6 / jobs as f64).into(),
    );
    out.insert(
        "redis_us_per_job".into(),
        ((redis - mark.redis) * 1e6 / jobs as f64).into(),
    );
    Ok(())
}

fn pcts(mut us: Vec<u64>) -> (f64, f64, f64) {
    if us.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    us.sort_unstable();
    let at = |q: f64| {
        let i = ((q * us.len() as f64).ceil() as usize).clamp(1, us.len()) - 1;
        us[i] as f64 / 1000.0
    };
    (at(0.5), at(0.99), us[us.len() - 1] as f64 / 1000.0)
}

/// Submits `n` jobs in batches of `--batch`, `--producers` batches in flight at once.
async fn submit_bulk(o: &Opts, n: u64) -> Result<(), Error> {
    let next = Arc::new(AtomicU64::new(0));
    let mut producers = Vec::new();
    for _ in 0..o.producers {
        let mut store = storage(o).await?;
        let next = next.clone();
        let batch = o.batch;
        producers.push(async move {
            loop {
                let from = next.fetch_add(batch, Ordering::Relaxed);
                if from >= n {
                    return Ok::<(), Error>(());
                }
                let size = batch.min(n - from);
                let jobs = (0..size).map(|_| Noop { t: now_us() }).collect();
                store
                    .push_bulk(jobs)
                    .await
                    .map_err(|e| format!("push_bulk: {e}"))?;
            }
        });
    }
    for r in futures::future::join_all(producers).await {
        r?;
    }
    Ok(())
}

/// apalis-redis 1.0 puts every pushed task in its scheduled set, and its fetch (`fetch_next.lua`)
/// moves every due one to the active list with one `RPUSH` of all of them: from 8,000 due tasks
/// on, Lua's unpack limit fails that fetch and the worker stops. A backlog of 100,000 cannot
/// start, so before a timed section that starts on a backlog this does the same move in slices
/// with plain commands, outside the timing (it favours the peer: the move is part of its cost).
async fn promote_backlog(o: &Opts, c: &mut redis::aio::MultiplexedConnection) -> Result<(), Error> {
    let cfg = config(o);
    loop {
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(cfg.scheduled_jobs_set())
            .arg(0)
            .arg(4999)
            .query_async(c)
            .await?;
        if ids.is_empty() {
            return Ok(());
        }
        redis::pipe()
            .cmd("RPUSH")
            .arg(cfg.active_jobs_list())
            .arg(&ids)
            .ignore()
            .cmd("ZREM")
            .arg(cfg.scheduled_jobs_set())
            .arg(&ids)
            .ignore()
            .query_async::<()>(c)
            .await?;
    }
}

/// A worker of `--concurrency`, and the listener on apalis's completion channel that counts
/// `n` completions. Resolves when all `n` are done, then stops the worker.
async fn run_worker(
    o: &Opts,
    n: u64,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<(), Error> {
    let client = redis::Client::open(o.url.as_str())?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub
        .subscribe(format!("tasks:{}", config(o).done_jobs_set()))
        .await?;
    let store = storage(o).await?;
    static WORKERS: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "bench-{}-{}",
        std::process::id(),
        WORKERS.fetch_add(1, Ordering::Relaxed)
    );
    let worker = WorkerBuilder::new(name)
        .backend(store)
        .concurrency(o.concurrency)
        .build(noop);
    let s = seen().clone();
    let scenario = o.scenario.clone();
    let listen = async move {
        let mut messages = pubsub.on_message();
        let _ = ready.send(());
        while let Some(m) = messages.next().await {
            let id: String = m.get_payload().unwrap_or_default();
            let submitted = s.submitted.lock().ok().and_then(|mut m| m.remove(&id));
            if let (Some(t), Ok(mut r)) = (submitted, s.result.lock()) {
                r.push(now_us().saturating_sub(t));
            }
            let done = s.done.fetch_add(1, Ordering::Relaxed) + 1;
            if done % 20_000 == 0 {
                progress(&scenario, &format!("{done} done"));
            }
            if done >= n {
                return;
            }
        }
    };
    // the worker stops when every job is done; run_until ends it gracefully
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = worker.run_until(async move {
        let _ = stop_rx.await;
        Ok::<(), std::io::Error>(())
    });
    let watch = async move {
        listen.await;
        let _ = stop_tx.send(());
    };
    let (r, ()) = tokio::join!(run, watch);
    r.map_err(|e| format!("the apalis worker failed: {e}"))?;
    Ok(())
}

async fn main_async() -> Result<(), Error> {
    let o = opts()?;
    let client = redis::Client::open(o.url.as_str())?;
    // a connection of its own for INFO, so the probe never waits behind the queue's traffic
    let mut probe = client.get_multiplexed_async_connection().await?;
    let mut out = serde_json::Map::new();
    let scenario = o.scenario.as_str();
    let reset = || {
        let s = seen();
        s.done.store(0, Ordering::Relaxed);
        if let Ok(mut v) = s.start.lock() {
            v.clear();
        }
        if let Ok(mut v) = s.result.lock() {
            v.clear();
        }
    };
    match scenario {
        "submit-bulk" => {
            let cpu = cpu_mark(&mut probe).await?;
            let t0 = Instant::now();
            submit_bulk(&o, o.jobs).await?;
            out.insert(
                "jobs_per_s".into(),
                (o.jobs as f64 / t0.elapsed().as_secs_f64()).into(),
            );
            cpu_record(&cpu, &mut probe, o.jobs, &mut out).await?;
        }
        "worker-concurrent" => {
            submit_bulk(&o, o.jobs).await?;
            progress(scenario, &format!("{} queued", o.jobs));
            promote_backlog(&o, &mut probe).await?;
            let cpu = cpu_mark(&mut probe).await?;
            let t0 = Instant::now();
            let (tx, _rx) = tokio::sync::oneshot::channel();
            run_worker(&o, o.jobs, tx).await?;
            out.insert(
                "jobs_per_s".into(),
                (o.jobs as f64 / t0.elapsed().as_secs_f64()).into(),
            );
            cpu_record(&cpu, &mut probe, o.jobs, &mut out).await?;
        }
        "end-to-end" => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let worker = run_worker(&o, o.jobs, tx);
            let load = async {
                rx.await
                    .map_err(|_| "the worker ended before it was ready")?;
                let cpu = cpu_mark(&mut probe).await?;
                let t0 = Instant::now();
                submit_bulk(&o, o.jobs).await?;
                Ok::<_, Error>((cpu, t0))
            };
            let (w, l) = tokio::join!(worker, load);
            w?;
            let (cpu, t0) = l?;
            out.insert(
                "jobs_per_s".into(),
                (o.jobs as f64 / t0.elapsed().as_secs_f64()).into(),
            );
            cpu_record(&cpu, &mut probe, o.jobs, &mut out).await?;
            let (p50, p99, max) = pcts(std::mem::take(
                &mut *seen().start.lock().map_err(|_| "poisoned")?,
            ));
            out.insert("start_p50_ms".into(), p50.into());
            out.insert("start_p99_ms".into(), p99.into());
            out.insert("start_max_ms".into(), max.into());
        }
        "latency" => {
            let total = (o.rate as f64 * o.secs).round() as u64;
            let (tx, rx) = tokio::sync::oneshot::channel();
            let worker = run_worker(&o, total, tx);
            let load = async {
                rx.await
                    .map_err(|_| "the worker ended before it was ready")?;
                let cpu = cpu_mark(&mut probe).await?;
                let store = storage(&o).await?;
                let t0 = Instant::now();
                let mut sent = 0u64;
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                let mut pending = futures::stream::FuturesUnordered::new();
                while sent < total {
                    tokio::select! {
                        _ = tick.tick() => {
                            let due = total.min((t0.elapsed().as_secs_f64() * o.rate as f64) as u64);
                            for _ in sent..due {
                                let mut s = store.clone();
                                pending.push(async move { s.push(Noop { t: now_us() }).await.map_err(|e| format!("push: {e}")) });
                            }
                            sent = sent.max(due);
                        }
                        Some(r) = pending.next(), if !pending.is_empty() => { r?; }
                    }
                }
                while let Some(r) = pending.next().await {
                    r?;
                }
                Ok::<_, Error>((cpu, t0))
            };
            let (w, l) = tokio::join!(worker, load);
            w?;
            let (cpu, t0) = l?;
            out.insert(
                "offered_per_s".into(),
                (total as f64 / t0.elapsed().as_secs_f64()).into(),
            );
            cpu_record(&cpu, &mut probe, total, &mut out).await?;
            let s = seen();
            let (p50, p99, max) = pcts(std::mem::take(
                &mut *s.start.lock().map_err(|_| "poisoned")?,
            ));
            out.insert("start_p50_ms".into(), p50.into());
            out.insert("start_p99_ms".into(), p99.into());
            out.insert("start_max_ms".into(), max.into());
            let (p50, p99, max) = pcts(std::mem::take(
                &mut *s.result.lock().map_err(|_| "poisoned")?,
            ));
            out.insert("result_p50_ms".into(), p50.into());
            out.insert("result_p99_ms".into(), p99.into());
            out.insert("result_max_ms".into(), max.into());
        }
        "memory" => {
            // warm up: scripts loaded, keys of an idle queue in place
            let (tx, _rx) = tokio::sync::oneshot::channel();
            let warm = run_worker(&o, 1000, tx);
            let (w, s) = tokio::join!(warm, submit_bulk(&o, 1000));
            w?;
            s?;
            reset();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let base = used_memory(&mut probe).await?;
            submit_bulk(&o, o.jobs).await?;
            let full = used_memory(&mut probe).await?;
            progress(scenario, &format!("{} queued", o.jobs));
            promote_backlog(&o, &mut probe).await?;
            let (tx, _rx) = tokio::sync::oneshot::channel();
            run_worker(&o, o.jobs, tx).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let after = used_memory(&mut probe).await?;
            out.insert(
                "bytes_per_waiting_job".into(),
                ((full - base) / o.jobs as f64).into(),
            );
            out.insert(
                "after_drain_pct".into(),
                ((after - base) * 100.0 / base).into(),
            );
        }
        other => return Err(format!("unknown scenario {other}").into()),
    }
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}

fn main() {
    // one thread, as hero-bench's own side and the Node peer run
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("apalis peer: cannot start the runtime: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = rt.block_on(main_async()) {
        eprintln!("apalis peer failed: {e}");
        std::process::exit(1);
    }
}
