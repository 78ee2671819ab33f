//! Nothing lost when Redis itself fails (issue 58): the faults Redis makes in production, with
//! real redis-servers and real worker and broker processes, each test counting handler runs
//! (the test worker's `started <id> <attempt>` lines), not only recorded results:
//! - an evicting maxmemory policy: every submit refused, naming it, until an operator accepts
//!   it; the broker says so once; the audit names every job whose record Redis evicted;
//! - a full Redis (noeviction): no live worker declared dead, a worker starts and registers,
//!   `hero remove` frees memory;
//! - refused writes (NOREPLICAS, MISCONF from a failed disk): every outcome kept and recorded
//!   once Redis takes writes again, each job run once;
//! - a restart from an older snapshot: the restored job runs and ends (a late completion
//!   deletes no entry it does not own), and the broker names the rollback;
//! - a Redis that came back empty: the broker says how many jobs may be gone, and the audit;
//! - clocks 30 s off Redis's (libfaketime): a live worker is not declared dead, a dead one is
//!   recovered as soon as a true one;
//! - dead letters keep their records as long as themselves;
//! - `hero up`'s Redis never outlives it.

use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::{Error, NewJob};
use hero_testkit::{
    all_finished, audit_consistent, binary, hero_cli, job_key, keys, test_worker, wait_for, Proc,
    RedisServer,
};
use redis::AsyncCommands;

fn job(id: &str, ty: &str, script: &str) -> NewJob {
    NewJob::builder(ty, script).id(id).build().unwrap()
}

/// How many times the worker's handler started job `id` (its `started <id> <attempt>` lines).
fn runs(worker: &Proc, id: &str) -> usize {
    let prefix = format!("started {id} ");
    worker
        .output()
        .iter()
        .filter(|l| l.starts_with(&prefix))
        .count()
}

async fn config_set(server: &RedisServer, name: &str, value: &str) {
    let mut raw = server.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(&mut raw)
        .await
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

fn broker(server: &RedisServer, extra: &[&str]) -> Proc {
    let url = server.url();
    let mut args = vec!["--redis-url", url.as_str(), "broker", "--http", "off"];
    args.extend_from_slice(extra);
    Proc::spawn_with_stderr(&binary("hero"), &args, &[], None)
}

/// Waits for a line of `p`'s containing `needle` (any so far, none consumed), or fails with
/// everything `p` said.
async fn expect(p: &Proc, needle: &str, limit: Duration) -> String {
    let until = Instant::now() + limit;
    loop {
        if let Some(l) = p.output().into_iter().find(|l| l.contains(needle)) {
            return l;
        }
        assert!(
            Instant::now() < until,
            "no line containing {needle:?} within {limit:?}; the process said:\n{}",
            p.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn lines_with(p: &Proc, needle: &str) -> usize {
    p.output().iter().filter(|l| l.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_policy_refuses_every_submit_until_accepted_and_is_said_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client.submit(&job("before", "ev", "x")).await.unwrap();
    let mut b = broker(&server, &[]);
    // switched after start: within the second the policy is trusted, submits are refused
    config_set(&server, "maxmemory-policy", "allkeys-lru").await;
    let switched = Instant::now();
    let mut n = 0;
    let err = wait_for(
        "a submit refused for the policy",
        Duration::from_secs(5),
        || {
            n += 1;
            let client = client.clone();
            async move { client.submit(&job(&format!("j{n}"), "ev", "x")).await.err() }
        },
    )
    .await;
    assert!(
        switched.elapsed() < Duration::from_millis(1500),
        "refused within the policy check's second: {:?}",
        switched.elapsed()
    );
    match &err {
        Error::Evicting { policy } => assert_eq!(policy, "allkeys-lru"),
        other => panic!("not the eviction refusal: {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("allkeys-lru")
            && msg.contains("noeviction")
            && msg.contains("--accept-eviction"),
        "names the policy and both ways out: {msg}"
    );
    let (code, _, stderr) = hero_cli(&server.url(), &["submit", "--type", "ev", "y"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("maxmemory-policy is allkeys-lru"),
        "{stderr}"
    );
    // the broker says so as an ERROR, once for the change, not once a pass
    expect(
        &b,
        "maxmemory-policy is allkeys-lru",
        Duration::from_secs(15),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await; // two more health passes
    assert_eq!(
        lines_with(&b, "maxmemory-policy is allkeys-lru"),
        1,
        "{:?}",
        b.output()
    );
    assert!(b
        .output()
        .iter()
        .any(|l| l.contains("ERROR") && l.contains("allkeys-lru")));
    b.kill9();
    // an operator who accepts the loss says so, by name
    let mut accepted = broker(&server, &["--accept-eviction", "allkeys-lru"]);
    let mut n = 0;
    wait_for(
        "a submit taken under the accepted policy",
        Duration::from_secs(15),
        || {
            n += 1;
            let client = client.clone();
            async move { client.submit(&job(&format!("a{n}"), "ev", "x")).await.ok() }
        },
    )
    .await;
    accepted.kill9();
}

/// An evicting Redis (accepted, so submits go through) evicts job records; the audit counts
/// every queued entry whose record is gone and, after a worker dropped them, every entry it
/// dropped: finished plus lost is every job submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_names_every_job_an_evicting_redis_lost() {
    let server =
        RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"]);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = server.conn().await;
    let script = format!("sleep 0 {}", "x".repeat(1024));
    let mut ids = Vec::new();
    for batch in 0..60 {
        let jobs: Vec<NewJob> = (0..50)
            .map(|i| job(&format!("e{batch}-{i}"), "evict", &script))
            .collect();
        loop {
            // the config hash itself may be evicted: the acceptance is written again
            let _: () = raw
                .hset(keys().config(), "accept_eviction", "allkeys-lru")
                .await
                .unwrap();
            match client.submit_many(&jobs).await {
                Ok(rs) => {
                    for (j, r) in jobs.iter().zip(rs) {
                        if r.is_ok() {
                            ids.push(j.id().to_string());
                        }
                    }
                    break;
                }
                Err(Error::Evicting { .. }) => continue,
                Err(e) => panic!("submit: {e}"),
            }
        }
    }
    // no more evictions from here (each command over the limit evicts), so the counts hold
    config_set(&server, "maxmemory", "0").await;
    // what the queue still names (Redis may have evicted a whole stream too: those jobs leave
    // no trace at all, which is why an evicting policy is refused by default)
    let stream = keys().work(
        &hero_protocol::Target::of_type(hero_protocol::ScriptType::new("evict").unwrap()),
        hero_protocol::Priority::DEFAULT,
    );
    let entries: Vec<(String, std::collections::HashMap<String, String>)> = raw
        .xrange_all(&stream)
        .await
        .map(|r: redis::streams::StreamRangeReply| {
            r.ids
                .into_iter()
                .map(|e| {
                    let m = e
                        .map
                        .into_iter()
                        .filter_map(|(k, v)| Some((k, redis::from_redis_value::<String>(v).ok()?)))
                        .collect();
                    (e.id, m)
                })
                .collect()
        })
        .unwrap();
    let named: Vec<String> = entries
        .iter()
        .filter_map(|(_, m)| m.get("j").cloned())
        .collect();
    let mut gone = 0u64;
    for id in &named {
        if !raw.exists::<_, bool>(job_key(id)).await.unwrap() {
            gone += 1;
        }
    }
    assert!(
        gone > 100,
        "Redis evicted records ({gone} of {} queued)",
        named.len()
    );
    let inspector = hero_admin::Inspector::from(&client);
    let report = inspector.audit(&|_| {}).await.unwrap();
    let missing = report.counts()[&hero_admin::inspect::Class::Missing];
    assert_eq!(missing, gone, "every queued job without a record is named");
    assert!(!report.is_consistent());
    // a worker drains what is left, dropping the entries that name no record
    let mut w = test_worker(&server.url(), "evict", "w", &["--concurrency", "16"]);
    expect(&w, "ready", Duration::from_secs(20)).await;
    let mut kept = Vec::new();
    for id in &named {
        if raw.exists::<_, bool>(job_key(id)).await.unwrap() {
            kept.push(id.clone());
        }
    }
    all_finished(&server, &kept, Duration::from_secs(120)).await;
    let dropped_of = |r: &hero_admin::inspect::AuditReport| -> u64 {
        r.findings
            .iter()
            .filter(|f| f.class == hero_admin::inspect::Class::Dropped)
            .map(|f| f.deliveries.unwrap_or(0))
            .sum()
    };
    let report = wait_for(
        "the dropped entries counted",
        Duration::from_secs(30),
        || {
            let inspector = inspector.clone();
            async move {
                let r = inspector.audit(&|_| {}).await.unwrap();
                (dropped_of(&r) >= gone).then_some(r)
            }
        },
    )
    .await;
    assert_eq!(
        dropped_of(&report) as usize + kept.len(),
        named.len(),
        "finished plus dropped is every job the queue named"
    );
    assert_eq!(report.counts()[&hero_admin::inspect::Class::Missing], 0);
    assert!(ids.len() >= named.len());
    // acknowledged, the audit is clean again
    let (code, out, err) = hero_cli(&server.url(), &["audit", "--fix"]);
    assert_eq!(code, 0, "{out}{err}");
    audit_consistent(&server.url(), Duration::from_secs(30)).await;
    w.kill9();
}

/// Redis full: over its maxmemory (noeviction), so it refuses every write that adds data.
async fn fill(server: &RedisServer) {
    let mut raw = server.conn().await;
    let used = || async {
        let mut raw = server.conn().await;
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut raw)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap()
    };
    let chunk = "f".repeat(64 * 1024);
    for i in 0..8 {
        let _: () = raw.set(format!("filler:{i}"), &chunk).await.unwrap();
    }
    // the limit below what it holds: full however much a refused command's buffer frees
    let limit = used().await - 256 * 1024;
    config_set(server, "maxmemory", &limit.to_string()).await;
    let r: redis::RedisResult<()> = raw.set("probe", "x").await;
    let e = r.expect_err("a full Redis refuses a write");
    assert_eq!(e.code(), Some("OOM"), "{e}");
}

/// At maxmemory with noeviction the heartbeat still runs (allow-oom): the broker recovers no
/// job of a live worker however long Redis stays full; a worker started meanwhile registers
/// and works; `hero remove` frees memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_declares_no_live_worker_dead_and_lets_workers_start() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut b = broker(&server, &[]);
    let mut a = test_worker(
        &server.url(),
        "full",
        "a",
        &["--concurrency", "4", "--presence-ms", "2000"],
    );
    expect(&a, "ready", Duration::from_secs(20)).await;
    let long: Vec<String> = (0..4).map(|i| format!("long{i}")).collect();
    for id in &long {
        client.submit(&job(id, "full", "sleep 7000")).await.unwrap();
    }
    client.submit(&job("for-b", "fullb", "x")).await.unwrap();
    client.submit(&job("ended", "fullc", "x")).await.unwrap();
    let mut c = test_worker(&server.url(), "fullc", "c", &[]);
    all_finished(&server, &["ended".to_string()], Duration::from_secs(20)).await;
    c.kill9();
    wait_for("the long jobs started", Duration::from_secs(20), || {
        let started = long.iter().all(|id| runs(&a, id) == 1);
        async move { started.then_some(()) }
    })
    .await;
    fill(&server).await;
    let err = client
        .submit(&job("refused", "full", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
    // a worker started while full registers and runs what was queued before
    let mut wb = test_worker(&server.url(), "fullb", "b", &["--presence-ms", "2000"]);
    expect(&wb, "ready", Duration::from_secs(20)).await;
    all_finished(&server, &["for-b".to_string()], Duration::from_secs(20)).await;
    // the long jobs outlive three presence TTLs in a full Redis, and end once each
    all_finished(&server, &long, Duration::from_secs(30)).await;
    for id in &long {
        assert_eq!(runs(&a, id), 1, "{id} ran once: {:?}", a.output());
    }
    let stats: std::collections::HashMap<String, String> =
        server.conn().await.hgetall(keys().stats()).await.unwrap();
    assert!(
        !stats
            .iter()
            .any(|(k, v)| k.ends_with("|recovered") && v != "0"),
        "nothing recovered from a live worker: {stats:?}"
    );
    // removing an ended job frees memory, full or not
    let (code, out, err) = hero_cli(&server.url(), &["remove", "ended"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!server
        .conn()
        .await
        .exists::<_, bool>(job_key("ended"))
        .await
        .unwrap());
    a.kill9();
    wb.kill9();
    b.kill9();
}

/// Writes refused for a while (too few replicas, then a failed disk): the worker keeps each
/// outcome and records it once Redis takes writes again; every job ran exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_keep_every_outcome_and_run_each_job_once() {
    // (CONFIG SET dir, to put the snapshot on a disk that fails, is a protected config)
    let server = RedisServer::start_with(&["--enable-protected-configs", "yes"]);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut w = test_worker(&server.url(), "refused", "w", &["--concurrency", "8"]);
    expect(&w, "ready", Duration::from_secs(20)).await;
    let mut ids = Vec::new();
    for phase in ["noreplicas", "misconf"] {
        let batch: Vec<String> = (0..16).map(|i| format!("{phase}-{i}")).collect();
        for id in &batch {
            client
                .submit(&job(id, "refused", "sleep 400"))
                .await
                .unwrap();
        }
        expect(&w, &format!("started {phase}-0 "), Duration::from_secs(20)).await;
        let disk = server.dir.join("failing-disk");
        match phase {
            "noreplicas" => config_set(&server, "min-replicas-to-write", "1").await,
            _ => {
                // a disk that fails under the snapshot: Redis refuses writes (MISCONF)
                std::fs::create_dir_all(&disk).unwrap();
                config_set(&server, "dir", disk.to_str().unwrap()).await;
                config_set(&server, "stop-writes-on-bgsave-error", "yes").await;
                config_set(&server, "save", "1 1").await;
                std::fs::remove_dir_all(&disk).unwrap();
                let mut raw = server.conn().await;
                let _: redis::RedisResult<()> = redis::cmd("BGSAVE").query_async(&mut raw).await;
                wait_for("the snapshot failed", Duration::from_secs(10), || async {
                    let mut raw = server.conn().await;
                    let info: String = redis::cmd("INFO")
                        .arg("persistence")
                        .query_async(&mut raw)
                        .await
                        .ok()?;
                    info.contains("rdb_last_bgsave_status:err").then_some(())
                })
                .await;
                let refused: redis::RedisResult<()> = raw.set("probe", "1").await;
                let e = refused.expect_err("writes refused after the failed save");
                assert_eq!(e.code(), Some("MISCONF"), "{e}");
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await; // the outage's length
        match phase {
            "noreplicas" => config_set(&server, "min-replicas-to-write", "0").await,
            _ => {
                // the disk back (a directory anew: Redis must enter it again)
                std::fs::create_dir_all(&disk).unwrap();
                config_set(&server, "dir", disk.to_str().unwrap()).await;
                config_set(&server, "save", "").await;
                let mut raw = server.conn().await;
                let _: () = redis::cmd("SAVE").query_async(&mut raw).await.unwrap();
            }
        }
        all_finished(&server, &batch, Duration::from_secs(60)).await;
        ids.extend(batch);
    }
    for id in &ids {
        assert_eq!(runs(&w, id), 1, "{id} ran once: {:?}", w.output());
    }
    assert!(
        matches!(w.child.try_wait(), Ok(None)),
        "the worker kept running"
    );
    w.kill9();
}

/// A Redis restarted from a snapshot taken before a job was fetched: the job is queued again,
/// under its old entry; the first delivery's late completion is refused (its lease is gone)
/// and deletes nothing, so the job runs again and ends. The broker names the rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_an_older_snapshot_restored_runs_and_ends_and_the_rollback_is_named() {
    let mut server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut b = broker(&server, &[]);
    client
        .submit(&job("r1", "roll", "sleep 8000"))
        .await
        .unwrap();
    // the broker's epoch counts a few passes, then the snapshot
    let mut raw = server.conn().await;
    wait_for("the broker's epoch", Duration::from_secs(20), || {
        let mut raw = raw.clone();
        async move {
            let seq: Option<u64> = raw.hget(keys().epoch(), "seq").await.ok()?;
            (seq? >= 2).then_some(())
        }
    })
    .await;
    let _: () = redis::cmd("SAVE").query_async(&mut raw).await.unwrap();
    let old = server.dir.join("dump.old");
    std::fs::copy(server.dir.join("dump.rdb"), &old).unwrap();
    let seq_at_save: u64 = raw.hget(keys().epoch(), "seq").await.unwrap();
    // a long lease: the first renewal (a third of it) comes after the job's end, so the late
    // completion, not a renewal, finds the lease gone
    let mut w = test_worker(&server.url(), "roll", "w", &["--lease-ms", "60000"]);
    expect(&w, "started r1 ", Duration::from_secs(20)).await;
    // the broker counts on past the snapshot
    wait_for("passes after the snapshot", Duration::from_secs(20), || {
        let mut raw = raw.clone();
        async move {
            let seq: u64 = raw.hget(keys().epoch(), "seq").await.ok()?;
            (seq >= seq_at_save + 2).then_some(())
        }
    })
    .await;
    server.kill();
    std::fs::copy(&old, server.dir.join("dump.rdb")).unwrap();
    server.restart();
    expect(&w, "completion r1 lease_lost", Duration::from_secs(30)).await;
    all_finished(&server, &["r1".to_string()], Duration::from_secs(30)).await;
    assert_eq!(
        runs(&w, "r1"),
        2,
        "restored, it ran again: {:?}",
        w.output()
    );
    let line = expect(&b, "went back in time", Duration::from_secs(20)).await;
    assert!(line.contains("ERROR"), "{line}");
    let report = hero_admin::Inspector::from(&Client::connect(&server.url()).await.unwrap())
        .audit(&|_| {})
        .await
        .unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.class == hero_admin::inspect::Class::DataLoss
                && f.detail.contains("went back")),
        "{:?}",
        report.findings
    );
    w.kill9();
    b.kill9();
}

/// A Redis without persistence restarted: empty. The broker says so as an ERROR with how many
/// jobs were unfinished and since when; the audit names it until acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_came_back_empty_is_named_with_what_may_be_gone() {
    let mut server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for i in 0..7 {
        client
            .submit(&job(&format!("k{i}"), "nobody", "x"))
            .await
            .unwrap();
    }
    let mut b = broker(&server, &[]);
    let mut raw = server.conn().await;
    wait_for("the broker's epoch", Duration::from_secs(20), || {
        let mut raw = raw.clone();
        async move {
            let n: Option<u64> = raw.hget(keys().epoch(), "unfinished").await.ok()?;
            (n? == 7).then_some(())
        }
    })
    .await;
    server.restart();
    let line = expect(
        &b,
        "Redis lost the namespace's data",
        Duration::from_secs(20),
    )
    .await;
    assert!(
        line.contains("ERROR") && line.contains("Up to 7 accepted jobs"),
        "{line}"
    );
    let report = hero_admin::Inspector::from(&client)
        .audit(&|_| {})
        .await
        .unwrap();
    assert!(!report.is_consistent());
    assert_eq!(report.counts()[&hero_admin::inspect::Class::DataLoss], 1);
    let (code, out, err) = hero_cli(&server.url(), &["audit", "--fix"]);
    assert_eq!(code, 0, "{out}{err}");
    audit_consistent(&server.url(), Duration::from_secs(30)).await;
    let _ = &mut raw;
    b.kill9();
}

/// A test worker whose clock is `offset` off (libfaketime preloaded into the worker itself,
/// so a kill -9 kills the worker: the `faketime` wrapper would fork).
fn skewed_worker(url: &str, offset: &str, types: &str, label: &str, extra: &[&str]) -> Proc {
    let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    assert!(
        std::path::Path::new(lib).exists(),
        "libfaketime is missing: scripts/setup installs it (apt-get install faketime)"
    );
    let mut args = vec!["--url", url, "--types", types, "--label", label];
    args.extend_from_slice(extra);
    Proc::spawn(
        &binary("hero-test-worker"),
        &args,
        &[
            ("LD_PRELOAD", lib),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        None,
    )
}

/// One clock: a worker 30 s behind Redis is not declared dead while it runs a job, and a
/// worker 30 s ahead that dies is recovered as soon as a true one would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_30_s_off_redis_clock_change_nothing() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut b = broker(&server, &[]);
    let mut behind = skewed_worker(
        &server.url(),
        "-30s",
        "behind",
        "b",
        &["--presence-ms", "3000"],
    );
    expect(&behind, "ready", Duration::from_secs(20)).await;
    client
        .submit(&job("slow", "behind", "sleep 7000"))
        .await
        .unwrap();
    all_finished(&server, &["slow".to_string()], Duration::from_secs(30)).await;
    assert_eq!(runs(&behind, "slow"), 1, "{:?}", behind.output());
    // and `hero actors` shows how far off it is
    let (code, out, err) = hero_cli(&server.url(), &["actors"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("CLOCK") && out.contains(" s behind"), "{out}");
    let attempts: Option<String> = server
        .conn()
        .await
        .hget(job_key("slow"), "attempts")
        .await
        .unwrap();
    assert!(
        attempts.is_none() || attempts.as_deref() == Some("1"),
        "{attempts:?}"
    );

    let mut ahead = skewed_worker(
        &server.url(),
        "+30s",
        "ahead",
        "a",
        &["--presence-ms", "3000"],
    );
    expect(&ahead, "ready", Duration::from_secs(20)).await;
    client
        .submit(&job("orphan", "ahead", "sleep 60000"))
        .await
        .unwrap();
    expect(&ahead, "started orphan ", Duration::from_secs(20)).await;
    ahead.kill9();
    let killed = Instant::now();
    let mut fresh = test_worker(&server.url(), "ahead", "f", &[]);
    expect(&fresh, "started orphan ", Duration::from_secs(25)).await;
    assert!(
        killed.elapsed() < Duration::from_secs(12),
        "recovered after its 3 s presence, not 30 s later: {:?}",
        killed.elapsed()
    );
    fresh.kill9();
    behind.kill9();
    b.kill9();
}

/// A dead letter kept longer than the ended jobs keeps its record, so it can be retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_keep_their_records_as_long_as_themselves() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut b = broker(
        &server,
        &[
            "--retention-secs",
            "1",
            "--dead-retention-secs",
            "3600",
            "--max-attempts",
            "1",
        ],
    );
    let mut w = test_worker(&server.url(), "letters", "w", &["--presence-ms", "1000"]);
    expect(&w, "ready", Duration::from_secs(20)).await;
    client
        .submit(&job("poison", "letters", "sleep 60000"))
        .await
        .unwrap();
    expect(&w, "started poison ", Duration::from_secs(20)).await;
    w.kill9();
    let mut raw = server.conn().await;
    wait_for("dead-lettered", Duration::from_secs(20), || {
        let mut raw = raw.clone();
        async move {
            let dead: Option<String> = raw.hget(job_key("poison"), "dead").await.ok()?;
            dead.filter(|d| !d.is_empty())
        }
    })
    .await;
    // past the retention time, and a few retention passes
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        raw.exists::<_, bool>(job_key("poison")).await.unwrap(),
        "the record outlived the job retention"
    );
    let (code, out, err) = hero_cli(&server.url(), &["dead", "retry", "--all"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !out.contains("no record") && !err.contains("no record"),
        "{out}{err}"
    );
    let status: String = raw.hget(job_key("poison"), "status").await.unwrap();
    assert_eq!(status, "dispatched");
    b.kill9();
}

/// `hero up`'s Redis ends with it, however it ends: SIGKILL leaves it no time to stop Redis.
#[tokio::test]
async fn hero_ups_redis_never_outlives_it() {
    let dir = std::env::temp_dir().join(format!("hero-up-pdeath-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut up = Proc::spawn(
        &binary("hero"),
        &["up", "--workers", "0", "--http", "off"],
        &[],
        Some(&dir),
    );
    expect(&up, "ready", Duration::from_secs(30)).await;
    let children =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", up.pid(), up.pid()))
            .unwrap_or_default();
    let mut redis_pids: Vec<u32> = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", up.pid()))
        .unwrap()
        .flatten()
    {
        let kids = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in kids
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.starts_with("redis-server") {
                redis_pids.push(pid);
            }
        }
    }
    assert_eq!(redis_pids.len(), 1, "hero up's redis-server ({children})");
    up.kill9();
    let pid = redis_pids[0];
    wait_for(
        "redis-server gone",
        Duration::from_secs(15),
        || async move {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // gone, or a zombie reaped by init
            (state.is_empty() || state.contains(") Z ")).then_some(())
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
