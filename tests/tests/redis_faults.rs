//! Nothing lost when Redis itself fails (issue 58): the faults of Redis's memory and writes,
//! with real redis-servers and real worker and broker processes, each test counting handler
//! runs (the test worker's `started <id> <attempt>` lines), not only recorded results:
//! - an evicting maxmemory policy: every submit refused, naming it, until an operator accepts
//!   it; the broker says so once; the audit names every job whose record Redis evicted; a queue
//!   registry it evicted is made again by the next fetch (paused queues stay paused);
//! - a full Redis (noeviction): no live worker declared dead, a worker starts and registers,
//!   `hero remove` frees memory;
//! - refused writes (NOREPLICAS, MISCONF from a failed disk): every outcome kept and recorded
//!   once Redis takes writes again, each job run once.
//!
//! A Redis that lost data is `redis_data_loss.rs`; clocks off Redis's, `clocks.rs`.

use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::{Error, NewJob};
use hero_testkit::{
    all_finished, audit_consistent, hero_broker_logged, hero_cli, job_key, keys, test_worker,
    wait_for, RedisServer,
};
use redis::AsyncCommands;

fn job(id: &str, ty: &str, script: &str) -> NewJob {
    NewJob::builder(ty, script).id(id).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_policy_refuses_every_submit_until_accepted_and_is_said_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client.submit(&job("before", "ev", "x")).await.unwrap();
    let mut b = hero_broker_logged(&server.url(), &[]);
    // switched after start: within the second the policy is trusted, submits are refused
    server.config_set("maxmemory-policy", "allkeys-lru").await;
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
    b.saw("maxmemory-policy is allkeys-lru", Duration::from_secs(15))
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await; // two more health passes
    assert_eq!(
        b.lines_with("maxmemory-policy is allkeys-lru"),
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
    let mut accepted = hero_broker_logged(&server.url(), &["--accept-eviction", "allkeys-lru"]);
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
    // LRU: Redis evicts the key idle longest among a sample, by a clock of 1 s; so the jobs go
    // in first, then wait, and the limit comes while the queue and the namespace's keys are fresh
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = server.conn().await;
    let _: () = raw
        .hset(keys().config(), "accept_eviction", "allkeys-lru")
        .await
        .unwrap();
    let script = format!("sleep 0 {}", "x".repeat(1024));
    let mut ids = Vec::new();
    for batch in 0..60 {
        let jobs: Vec<NewJob> = (0..50)
            .map(|i| job(&format!("e{batch}-{i}"), "evict", &script))
            .collect();
        for (j, r) in jobs.iter().zip(client.submit_many(&jobs).await.unwrap()) {
            r.unwrap();
            ids.push(j.id().to_string());
        }
    }
    let stream = keys().work(
        &hero_protocol::Target::of_type(hero_protocol::ScriptType::new("evict").unwrap()),
        hero_protocol::Priority::DEFAULT,
    );
    tokio::time::sleep(Duration::from_millis(2500)).await; // the records' idle time
    let used = server.info_u64("memory", "used_memory").await;
    let _: i64 = raw.xlen(&stream).await.unwrap();
    // a limit 1 MiB below what it holds: the next writes evict records until it fits
    server
        .config_set("maxmemory", &(used - (1 << 20)).to_string())
        .await;
    for i in 0..64 {
        // the queue and the namespace's own keys kept fresh: what goes is idle records (an
        // evicted registry would hide the queue from the workers too)
        let _: i64 = raw.xlen(&stream).await.unwrap();
        let _: i64 = raw.scard(keys().queues()).await.unwrap();
        let _: i64 = raw.hlen(keys().config()).await.unwrap();
        let _: i64 = raw.xlen(keys().queue_signal()).await.unwrap();
        let _: redis::RedisResult<()> = raw.set(format!("filler:{i}"), "x".repeat(64)).await;
    }
    // no more evictions from here (each command over the limit evicts), so the counts hold
    server.config_set("maxmemory", "0").await;
    // what the queue still names (Redis may evict a whole stream too: those jobs leave no
    // trace at all, which is why an evicting policy is refused by default)
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
        gone >= 100,
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
    w.saw("ready", Duration::from_secs(20)).await;
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

/// An evicting Redis may take the queue registry itself (it did, on Valkey 8.1, in about one run
/// of two of the test above): no worker would ever see the queues again. The next fetch of a
/// worker none of whose streams is registered registers again the ones that exist, except a
/// paused one, which stays paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_registry_redis_evicted_is_made_again_and_pauses_hold() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = server.conn().await;
    client.submit(&job("held", "regheld", "x")).await.unwrap();
    let (code, out, err) = hero_cli(&server.url(), &["pause", "regheld"]);
    assert_eq!(code, 0, "{out}{err}");
    let ids: Vec<String> = (0..20).map(|i| format!("reg{i}")).collect();
    for id in &ids {
        client.submit(&job(id, "reg", "x")).await.unwrap();
    }
    // what an eviction does: the registry and its signal stream gone, the queues not
    let _: () = raw.del(keys().queues()).await.unwrap();
    let _: () = raw.del(keys().queue_signal()).await.unwrap();
    let mut w = test_worker(&server.url(), "reg,regheld", "w", &[]);
    w.saw("ready", Duration::from_secs(20)).await;
    all_finished(&server, &ids, Duration::from_secs(30)).await;
    let registered: Vec<String> = raw.smembers(keys().queues()).await.unwrap();
    assert!(
        registered.iter().any(|s| s.ends_with(":type:reg")),
        "registered again: {registered:?}"
    );
    assert!(
        !registered.iter().any(|s| s.contains(":type:regheld")),
        "a paused queue stays out of the registry: {registered:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await; // a paused queue's job must not start
    assert_eq!(w.starts("held"), 0, "a paused queue's job did not run");
    let (code, out, err) = hero_cli(&server.url(), &["resume", "regheld"]);
    assert_eq!(code, 0, "{out}{err}");
    all_finished(&server, &["held".to_string()], Duration::from_secs(30)).await;
    w.kill9();
}

/// Redis full: over its maxmemory (noeviction), so it refuses every write that adds data.
async fn fill(server: &RedisServer) {
    let mut raw = server.conn().await;
    let chunk = "f".repeat(64 * 1024);
    for i in 0..8 {
        let _: () = raw.set(format!("filler:{i}"), &chunk).await.unwrap();
    }
    // the limit below what it holds: full however much a refused command's buffer frees
    let limit = server.info_u64("memory", "used_memory").await - 256 * 1024;
    server.config_set("maxmemory", &limit.to_string()).await;
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
    let mut b = hero_broker_logged(&server.url(), &[]);
    let mut a = test_worker(
        &server.url(),
        "full",
        "a",
        &["--concurrency", "4", "--presence-ms", "2000"],
    );
    a.saw("ready", Duration::from_secs(20)).await;
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
        let started = long.iter().all(|id| a.starts(id) == 1);
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
    wb.saw("ready", Duration::from_secs(20)).await;
    all_finished(&server, &["for-b".to_string()], Duration::from_secs(20)).await;
    // the long jobs outlive three presence TTLs in a full Redis, and end once each
    all_finished(&server, &long, Duration::from_secs(30)).await;
    for id in &long {
        assert_eq!(
            a.starts_seen(id, 1).await,
            1,
            "{id} ran once: {:?}",
            a.output()
        );
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
    w.saw("ready", Duration::from_secs(20)).await;
    let mut ids = Vec::new();
    for phase in ["noreplicas", "misconf"] {
        let batch: Vec<String> = (0..16).map(|i| format!("{phase}-{i}")).collect();
        for id in &batch {
            client
                .submit(&job(id, "refused", "sleep 400"))
                .await
                .unwrap();
        }
        w.saw(&format!("started {phase}-0 "), Duration::from_secs(20))
            .await;
        let disk = server.dir.join("failing-disk");
        match phase {
            "noreplicas" => server.config_set("min-replicas-to-write", "1").await,
            _ => {
                // a disk that fails under the snapshot: Redis refuses writes (MISCONF)
                std::fs::create_dir_all(&disk).unwrap();
                server.config_set("dir", disk.to_str().unwrap()).await;
                server
                    .config_set("stop-writes-on-bgsave-error", "yes")
                    .await;
                server.config_set("save", "1 1").await;
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
            "noreplicas" => server.config_set("min-replicas-to-write", "0").await,
            _ => {
                // the disk back (a directory anew: Redis must enter it again)
                std::fs::create_dir_all(&disk).unwrap();
                server.config_set("dir", disk.to_str().unwrap()).await;
                server.config_set("save", "").await;
                let mut raw = server.conn().await;
                let _: () = redis::cmd("SAVE").query_async(&mut raw).await.unwrap();
            }
        }
        all_finished(&server, &batch, Duration::from_secs(60)).await;
        ids.extend(batch);
    }
    for id in &ids {
        assert_eq!(
            w.starts_seen(id, 1).await,
            1,
            "{id} ran once: {:?}",
            w.output()
        );
    }
    assert!(
        matches!(w.child.try_wait(), Ok(None)),
        "the worker kept running"
    );
    w.kill9();
}
