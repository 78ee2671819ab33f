//! A Redis that lost data (issue 58), with real redis-servers and processes: restarted from an
//! older snapshot (the restored job runs and ends: a late completion deletes no entry it does
//! not own; the broker names the rollback), or come back empty (the broker says how many jobs
//! may be gone and since when); the audit names either until acknowledged.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{
    all_finished, audit_consistent, hero_broker_logged, hero_cli, keys, test_worker, wait_for,
    RedisServer,
};
use redis::AsyncCommands;

fn job(id: &str, ty: &str, script: &str) -> NewJob {
    NewJob::builder(ty, script).id(id).build().unwrap()
}

/// A Redis restarted from a snapshot taken before a job was fetched: the job is queued again,
/// under its old entry; the first delivery's late completion is refused (its lease is gone)
/// and deletes nothing, so the job runs again and ends. The broker names the rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_an_older_snapshot_restored_runs_and_ends_and_the_rollback_is_named() {
    let mut server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut b = hero_broker_logged(&server.url(), &[]);
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
    w.saw("started r1 ", Duration::from_secs(20)).await;
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
    w.saw("completion r1 lease_lost", Duration::from_secs(30))
        .await;
    all_finished(&server, &["r1".to_string()], Duration::from_secs(30)).await;
    assert_eq!(
        w.starts_seen("r1", 2).await,
        2,
        "restored, it ran again: {:?}",
        w.output()
    );
    let line = b.saw("went back in time", Duration::from_secs(20)).await;
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
    let mut b = hero_broker_logged(&server.url(), &[]);
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
    let line = b
        .saw("Redis lost the namespace's data", Duration::from_secs(20))
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
