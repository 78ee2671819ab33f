//! SPEC §4.1, §4.2, §4.5 with real processes: a worker killed with SIGKILL loses no job and its
//! jobs are recovered as soon as its presence expires; a stalled worker (SIGSTOP) loses its lease
//! and its late result is rejected; a live worker renews long leases and keeps its job.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::work_key;
use hero_testkit::{all_finished, binary, InProcBroker, Proc, RedisServer};
use redis::AsyncCommands;

fn test_worker(url: &str, label: &str, extra: &[&str]) -> Proc {
    hero_testkit::test_worker(url, "t", label, extra)
}

fn broker_config(lease: Duration) -> BrokerConfig {
    BrokerConfig {
        lease,
        presence_poll: Duration::from_millis(100),
        ..BrokerConfig::default()
    }
}

/// Workers A and B, ten jobs at once each, dead to the broker 1 s after they stop, leases of
/// 60 s (so only presence-driven recovery can be quick), ready when this returns.
async fn two_workers(url: &str) -> (Proc, Proc) {
    let flags = [
        "--concurrency",
        "10",
        "--presence-ms",
        "1000",
        "--lease-ms",
        "60000",
        "--sleep-ms",
        "5",
    ];
    let a = test_worker(url, "A", &flags);
    let b = test_worker(url, "B", &flags);
    a.expect_line("ready", Duration::from_secs(10)).await;
    b.expect_line("ready", Duration::from_secs(10)).await;
    (a, b)
}

/// Job id → how many times a worker's output says its result was recorded.
fn completions(procs: &[&Proc]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for p in procs {
        for line in p.output() {
            let mut w = line.split_whitespace();
            if let (Some("completion"), Some(id), Some("completed")) =
                (w.next(), w.next(), w.next())
            {
                *counts.entry(id.to_string()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// Exactly-once completion as the workers' logs and the records show it: no job's result was
/// recorded twice, every job is `finished`, and a job no log shows `completed` is explained:
/// its completion was answered `already_completed` (sent again after Redis died before
/// answering), or `killed` recorded it on its first attempt and died before printing it.
async fn assert_each_recorded_once(
    client: &Client,
    ids: &[String],
    procs: &[&Proc],
    killed: Option<&str>,
) {
    // A finished job's answer can still be on its way to a surviving worker: a call Redis
    // applied and then died before answering is sent again after a back-off, which may end
    // after the last job finished. So wait until every finished job is explained.
    let answered = |id: &String| {
        procs.iter().flat_map(|p| p.output()).any(|l| {
            l.strip_prefix("completion ")
                .and_then(|rest| rest.strip_prefix(id.as_str()))
                .is_some_and(|a| a == " completed" || a == " already_completed")
        })
    };
    let mut unexplained = Vec::new();
    for id in ids.iter().filter(|id| !answered(id)) {
        let job = client.get(&JobId::new(id).unwrap()).await.unwrap();
        if killed.is_none() || job.output.as_deref() != killed {
            unexplained.push(id);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Some(id) = unexplained.iter().find(|id| !answered(id)) {
        if Instant::now() > deadline {
            let said: Vec<String> = procs
                .iter()
                .flat_map(|p| p.output())
                .filter(|l| l.contains(id.as_str()))
                .collect();
            let job = client.get(&JobId::new(id.as_str()).unwrap()).await.unwrap();
            panic!("{id} finished but no worker recorded it; the workers said {said:?} and the record is {job:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counts = completions(procs);
    assert!(counts.values().all(|&n| n == 1), "no result recorded twice");
    let retried: Vec<String> = procs
        .iter()
        .flat_map(|p| p.output())
        .filter_map(|l| {
            l.strip_prefix("completion ")?
                .strip_suffix(" already_completed")
                .map(str::to_string)
        })
        .collect();
    for id in ids {
        let job = client.get(&JobId::new(id).unwrap()).await.unwrap();
        assert_eq!(job.status, Status::Finished, "{id}");
        if !counts.contains_key(id) && !retried.contains(id) {
            assert!(killed.is_some(), "{id} finished but no worker recorded it");
            assert_eq!(
                (job.output.as_deref(), job.attempts),
                (killed, 1),
                "{id} was recorded by the killed worker"
            );
        }
    }
}

#[tokio::test]
async fn no_job_is_lost_and_recovery_is_presence_driven_when_a_worker_is_killed() {
    let server = RedisServer::start();
    let url = server.url();
    let lease = Duration::from_secs(60);
    let _broker = InProcBroker::spawn(&url, broker_config(lease)).await;
    let (mut a, b) = two_workers(&url).await;

    let client = Client::connect(&url).await.unwrap();
    let jobs: Vec<NewJob> = (0..2000)
        .map(|_| NewJob::builder("t", "x").build().unwrap())
        .collect();
    for chunk in jobs.chunks(500) {
        for r in client.submit_many(chunk).await.unwrap() {
            assert!(r.unwrap().created);
        }
    }
    // kill A mid-run, while it holds jobs
    for _ in 0..100 {
        a.expect_line("completion", Duration::from_secs(20)).await;
    }
    a.kill9();
    let killed_at = Instant::now();

    let ids: Vec<String> = jobs.iter().map(|j| j.id().to_string()).collect();
    all_finished(&server, &ids, Duration::from_secs(40)).await;
    let recovered_in = killed_at.elapsed();
    eprintln!(
        "all 2000 jobs finished {recovered_in:?} after the kill (presence TTL 1 s, lease 60 s)"
    );
    assert!(
        recovered_in < lease / 2,
        "recovered in {recovered_in:?}: presence-driven, not the {lease:?} lease"
    );

    assert_each_recorded_once(&client, &ids, &[&a, &b], Some("A")).await;
    let mut rerun = 0;
    for id in &ids {
        let job = client.get(&JobId::new(id).unwrap()).await.unwrap();
        if job.attempts > 1 {
            rerun += 1;
            assert_eq!(
                job.output.as_deref(),
                Some("B"),
                "{id} was re-run by the survivor"
            );
        }
    }
    assert!(rerun > 0, "A held jobs when it was killed");
    let mut raw = server.conn().await;
    assert_eq!(
        hero_testkit::pending(&mut raw, work_key("t")).await,
        0,
        "nothing left pending"
    );
    let len: usize = raw.xlen(work_key("t")).await.unwrap();
    assert_eq!(len, 0, "the work stream is empty");
    hero_testkit::audit_consistent(&url, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn late_completion_is_rejected_when_a_stalled_worker_lost_its_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, broker_config(Duration::from_secs(30))).await;
    // presence 1 s: a stalled worker is dead to the broker after 1 s; its lease renewal (every
    // 10 s) cannot run before its handler's result when it wakes
    let flags = ["--presence-ms", "1000", "--lease-ms", "30000"];
    let a = test_worker(&url, "A", &flags);
    a.expect_line("ready", Duration::from_secs(10)).await;
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "sleep 1500").build().unwrap();
    client.submit(&job).await.unwrap();
    a.expect_line(&format!("started {}", job.id()), Duration::from_secs(10))
        .await;
    a.signal("STOP");
    let b = test_worker(&url, "B", &flags);
    b.expect_line(
        &format!("completion {} completed", job.id()),
        Duration::from_secs(20),
    )
    .await;
    a.signal("CONT");
    a.expect_line(
        &format!("completion {} lease_lost", job.id()),
        Duration::from_secs(20),
    )
    .await;
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(
        (record.status, record.output.as_deref(), record.attempts),
        (Status::Finished, Some("B"), 2)
    );
}

#[tokio::test]
async fn live_worker_keeps_a_job_running_three_times_its_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let lease = Duration::from_millis(1000);
    // the broker reclaims anything idle for 1 s, every 500 ms
    let _broker = InProcBroker::spawn(&url, broker_config(lease)).await;
    let a = test_worker(&url, "A", &["--lease-ms", "1000", "--presence-ms", "15000"]);
    a.expect_line("ready", Duration::from_secs(10)).await;
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "sleep 3000").build().unwrap();
    let r = client.run(&job, Duration::from_secs(20)).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "A"));
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(record.attempts, 1, "never recovered while its worker lived");
    assert!(
        !a.output().iter().any(|l| l.starts_with("interrupted")),
        "{:?}",
        a.output()
    );
}

/// A worker renews within the brokers' lease (the config hash's `lease_ms`, what their
/// recovery waits for) even when its own is longer: a 3 s job under brokers of 1 s and a
/// worker of 30 s runs once (before, its renewal came after 10 s and the job ran twice).
#[tokio::test]
async fn a_worker_renews_within_the_brokers_lease_when_its_own_is_longer() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, broker_config(Duration::from_millis(1000))).await;
    let a = test_worker(
        &url,
        "A",
        &["--lease-ms", "30000", "--presence-ms", "15000"],
    );
    a.expect_line("ready", Duration::from_secs(10)).await;
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "sleep 3000").build().unwrap();
    let r = client.run(&job, Duration::from_secs(20)).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "A"));
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(
        record.attempts, 1,
        "never taken back while its worker renewed"
    );
}

async fn submit_all(client: &Client, n: usize) -> Vec<String> {
    let jobs: Vec<NewJob> = (0..n)
        .map(|_| NewJob::builder("t", "x").build().unwrap())
        .collect();
    for chunk in jobs.chunks(500) {
        for r in client.submit_many(chunk).await.unwrap() {
            assert!(r.unwrap().created);
        }
    }
    jobs.iter().map(|j| j.id().to_string()).collect()
}

#[tokio::test]
async fn no_job_is_lost_when_redis_is_killed_and_restarted_with_appendfsync_always() {
    let mut server = RedisServer::start_durable();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, broker_config(Duration::from_secs(1))).await;
    let flags = [
        "--concurrency",
        "10",
        "--presence-ms",
        "2000",
        "--lease-ms",
        "1000",
        "--sleep-ms",
        "2",
    ];
    let a = test_worker(&url, "A", &flags);
    a.expect_line("ready", Duration::from_secs(10)).await;
    let client = Client::connect(&url).await.unwrap();
    let ids = submit_all(&client, 1000).await;
    for _ in 0..200 {
        a.expect_line("completion", Duration::from_secs(20)).await;
    }
    server.restart(); // SIGKILL mid-run, then the same port and AOF
    all_finished(&server, &ids, Duration::from_secs(60)).await;
    assert_each_recorded_once(&client, &ids, &[&a], None).await;
    hero_testkit::audit_consistent(&url, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn no_job_is_lost_when_the_broker_and_a_worker_are_killed_together() {
    let server = RedisServer::start();
    let url = server.url();
    let hero = binary("hero");
    let broker_args = [
        "--redis-url",
        url.as_str(),
        "broker",
        "--lease-ms",
        "60000",
        "--http",
        "off",
    ];
    let mut broker = Proc::spawn(&hero, &broker_args, &[], None);
    let (mut a, b) = two_workers(&url).await;
    let client = Client::connect(&url).await.unwrap();
    let ids = submit_all(&client, 1000).await;
    for _ in 0..100 {
        a.expect_line("completion", Duration::from_secs(20)).await;
    }
    a.kill9();
    broker.kill9();
    // B finishes what it can; A's jobs wait, unowned by anyone alive, until a broker returns
    let _broker2 = Proc::spawn(&hero, &broker_args, &[], None);
    all_finished(&server, &ids, Duration::from_secs(40)).await;
    assert_each_recorded_once(&client, &ids, &[&a, &b], Some("A")).await;
    hero_testkit::audit_consistent(&url, Duration::from_secs(10)).await;
}

/// A job whose worker went silent past the job's time limit (SIGSTOP: its own timer cannot
/// fire, its presence still counts it alive) is taken by the server's time limit as a failed
/// attempt: with no retry left it ends `error`/`timeout`, and when the worker wakes its
/// completion is fenced.
#[tokio::test]
async fn a_job_whose_worker_went_silent_past_its_time_limit_ends_timeout() {
    let server = RedisServer::start();
    let url = server.url();
    let cfg = BrokerConfig {
        ..broker_config(Duration::from_secs(30))
    };
    let _broker = InProcBroker::spawn(&url, cfg).await;
    // presence 60 s: the silence is the time limit's to notice, not presence recovery's
    let a = test_worker(
        &url,
        "A",
        &["--presence-ms", "60000", "--lease-ms", "30000"],
    );
    a.expect_line("ready", Duration::from_secs(10)).await;
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "sleep 4000")
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    a.expect_line(&format!("started {}", job.id()), Duration::from_secs(10))
        .await;
    a.signal("STOP");
    let t0 = Instant::now();
    let r = client
        .wait(job.id(), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.error.as_str()),
        (Status::Error, "timeout"),
        "{r:?}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "at the limit plus the grace: {:?}",
        t0.elapsed()
    );
    a.signal("CONT");
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(
        (record.status, record.error.as_deref()),
        (Status::Error, Some("timeout"))
    );
}
