//! Redis full (issue 28, point 4): at `maxmemory` with `noeviction`, a submit gets a clear
//! error and is not acknowledged (nothing of it written); the worker and broker processes that
//! were running keep running and finish every job that was acknowledged (the functions that drain are allow-oom);
//! once there is room, submits are taken again. And a broker warns loudly at start when
//! `maxmemory-policy` lets Redis evict keys.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::{Error, NewJob};
use hero_testkit::{all_finished, binary, hero_cli, hero_command, job_key, test_worker, Proc};
use hero_testkit::{audit_consistent, RedisServer};

/// The bound guarantees.md gives for what draining a full Redis writes past `maxmemory`, per
/// job it had accepted, beside the event log (capped by `--events-max`, here 100) and the job's
/// own output: the fields the fetch and the completion add to its record (measured 362 B with
/// the record stored as a hash table, as any record whose script passes 64 bytes is) and its
/// retention entry (~30 B).
const OVERSHOOT_PER_JOB: u64 = 450;

async fn exists(server: &RedisServer, key: &str) -> bool {
    let mut raw = server.conn().await;
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(&mut raw)
        .await
        .unwrap()
        == 1
}

async fn set_maxmemory(server: &RedisServer, bytes: u64) {
    let mut raw = server.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(&mut raw)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_refuses_submits_loudly_and_drains_what_it_acknowledged() {
    let server =
        RedisServer::start_with(&["--maxmemory", "16mb", "--maxmemory-policy", "noeviction"]);
    let client = Client::connect(&server.url()).await.unwrap();

    let mut broker = Proc::spawn(
        &binary("hero"),
        &[
            "--redis-url",
            &server.url(),
            "broker",
            "--http",
            "off",
            "--events-max",
            "100",
        ],
        &[],
        None,
    );
    let mut worker = test_worker(&server.url(), "full", "w", &["--concurrency", "32"]);
    worker.expect_line("ready", Duration::from_secs(20)).await;

    // fill it, faster than the worker drains: batches of jobs of 30 ms with a 2 KiB script,
    // until Redis refuses one
    let script = format!("sleep 30 {}", "x".repeat(2048));
    let mut acked: Vec<String> = Vec::new();
    let mut refused: Option<(String, Error)> = None;
    for batch in 0..2000 {
        let jobs: Vec<NewJob> = (0..20)
            .map(|i| {
                NewJob::builder("full", script.clone())
                    .id(format!("b{batch}-{i}"))
                    .build()
                    .unwrap()
            })
            .collect();
        let results = match client.submit_many(&jobs).await {
            Ok(rs) => rs,
            Err(e) => {
                refused = Some((jobs[0].id().to_string(), e));
                break;
            }
        };
        for (job, r) in jobs.iter().zip(results) {
            match r {
                Ok(_) => acked.push(job.id().to_string()),
                Err(e) => {
                    refused.get_or_insert((job.id().to_string(), e));
                }
            }
        }
        if refused.is_some() {
            break;
        }
    }
    let (refused_id, err) = refused.expect("Redis reached its maxmemory");
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("maxmemory")
            && msg.contains("not accepted")
            && msg.contains("raise maxmemory"),
        "says what happened and what to do: {msg}"
    );
    assert!(
        !exists(&server, &job_key(&refused_id)).await,
        "nothing of a refused submit is written"
    );
    assert!(
        acked.len() > 100,
        "it took jobs until it was full ({})",
        acked.len()
    );

    // the CLI says the same, and exits non-zero. Redis's use falls back under maxmemory once
    // the refused pipeline's query buffer is freed, so one small submit could still fit: the
    // limit is lowered under any use for this check, then set back for the drain
    let limit = server.info_u64("memory", "maxmemory").await;
    set_maxmemory(&server, 1).await;
    let (code, _, stderr) = hero_cli(
        &server.url(),
        &["submit", "--type", "full", "--id", "cli-1", "x"],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("Redis is full"), "{stderr}");
    assert!(!exists(&server, &job_key("cli-1")).await);
    set_maxmemory(&server, limit).await;

    // the broker and worker that ran all along drain it, and what the allow-oom functions
    // write past maxmemory while they do stays within the documented bound (guarantees.md)
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (peak, url) = (peak.clone(), server.url());
        tokio::spawn(async move {
            let client = redis::Client::open(url).unwrap();
            let mut raw = client.get_multiplexed_async_connection().await.unwrap();
            loop {
                if let Ok(info) = redis::cmd("INFO")
                    .arg("memory")
                    .query_async::<String>(&mut raw)
                    .await
                {
                    if let Some(used) = hero_testkit::info_field(&info, "used_memory") {
                        peak.fetch_max(used, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    all_finished(&server, &acked, Duration::from_secs(120)).await;
    sampler.abort();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    let over = peak.saturating_sub(limit);
    eprintln!(
        "drained {} jobs at maxmemory {limit}: peak {peak}, {over} B past it, {} B a job",
        acked.len(),
        over / acked.len() as u64
    );
    assert!(
        over <= acked.len() as u64 * OVERSHOOT_PER_JOB,
        "draining at maxmemory grew Redis {over} B past it for {} jobs: more than the \
         documented {OVERSHOOT_PER_JOB} B a job",
        acked.len()
    );
    assert!(
        matches!(worker.child.try_wait(), Ok(None)),
        "the worker kept running"
    );
    assert!(
        matches!(broker.child.try_wait(), Ok(None)),
        "the broker kept running"
    );

    // room again: submits are taken and run
    set_maxmemory(&server, 0).await;
    let after = NewJob::builder("full", "sleep 1")
        .id("after")
        .build()
        .unwrap();
    client.submit(&after).await.unwrap();
    all_finished(&server, &["after".to_string()], Duration::from_secs(30)).await;
    audit_consistent(&server.url(), Duration::from_secs(30)).await;
    worker.kill9();
    broker.kill9();
}

#[test]
fn a_broker_warns_loudly_when_redis_may_evict_jobs() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let mut child = hero_command()
        .args(["--redis-url", &server.url(), "broker", "--http", "off"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let warned = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("maxmemory-policy is allkeys-lru") => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let line = warned
        .unwrap_or_else(|| panic!("no eviction warning; the broker said:\n{}", seen.join("\n")));
    assert!(
        line.contains("ERROR") && line.contains("noeviction"),
        "{line}"
    );
}
