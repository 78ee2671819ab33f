//! Stats kept on write (SPEC §5): after a mixed run the counters equal what the job records say,
//! queue by queue, and the histograms hold every start and every recorded run.

use std::collections::HashMap;
use std::time::Duration;

use hero_broker::config::BrokerConfig;
use hero_client::{Client, StopOutcome};
use hero_protocol::job::{Placement, PLACEMENT_FIELDS};
use hero_protocol::stats::Histogram;
use hero_protocol::{JobId, NewJob};
use hero_testkit::{wait_for, work_key, InProcBroker, Proc, RedisServer};

fn worker(url: &str, label: &str, types: &str, concurrency: &str, sleep_ms: &str) -> Proc {
    let flags = [
        "--concurrency",
        concurrency,
        "--presence-ms",
        "1000",
        "--lease-ms",
        "60000",
        "--sleep-ms",
        sleep_ms,
    ];
    hero_testkit::test_worker(url, types, label, &flags)
}

#[tokio::test]
async fn counters_equal_the_records_queue_by_queue_after_a_mixed_run() {
    let server = RedisServer::start();
    let url = server.url();
    let cfg = BrokerConfig {
        lease: Duration::from_secs(60),
        presence_poll: Duration::from_millis(100),
        ..BrokerConfig::default()
    };
    let _broker = InProcBroker::spawn(&url, cfg).await;
    let client = Client::connect(&url).await.unwrap();

    // queue sb: a worker takes two jobs and is killed with SIGKILL while running them
    let mut victim = worker(&url, "V", "sb", "2", "600000");
    victim.expect_line("ready", Duration::from_secs(10)).await;
    let mut jobs = Vec::new();
    for n in 0..6 {
        jobs.push(
            NewJob::builder("sb", "x")
                .id(format!("b{n}"))
                .build()
                .unwrap(),
        );
    }
    for r in client.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    victim.expect_line("started", Duration::from_secs(10)).await;
    victim.expect_line("started", Duration::from_secs(10)).await;
    victim.kill9();

    // queue sa: successes, failures, failures retried once, and a delayed job stopped
    let mut sa = Vec::new();
    for n in 0..20 {
        sa.push(
            NewJob::builder("sa", "x")
                .id(format!("ok{n}"))
                .build()
                .unwrap(),
        );
    }
    for n in 0..5 {
        sa.push(
            NewJob::builder("sa", "fail boom")
                .id(format!("bad{n}"))
                .build()
                .unwrap(),
        );
    }
    for n in 0..3 {
        let job = NewJob::builder("sa", "fail again")
            .id(format!("again{n}"))
            .retries(1)
            .build()
            .unwrap();
        sa.push(job);
    }
    for r in client.submit_many(&sa).await.unwrap() {
        r.unwrap();
    }
    let later = NewJob::builder("sa", "x")
        .id("later")
        .delay(Duration::from_secs(600))
        .build()
        .unwrap();
    client.submit(&later).await.unwrap();
    let before_stop = hero_admin::Inspector::from(&client).queues().await.unwrap();
    let sa_before = before_stop.iter().find(|q| q.name == "sa").unwrap();
    assert_eq!(
        sa_before.delayed, 1,
        "the delayed job counts while it waits"
    );
    assert_eq!(
        client.stop(later.id()).await.unwrap(),
        StopOutcome::Cancelled
    );

    let _survivor = worker(&url, "S", "sa,sb", "4", "1");
    let all: Vec<String> = jobs
        .iter()
        .chain(&sa)
        .map(|j| j.id().to_string())
        .chain(["later".to_string()])
        .collect();
    let raw = server.conn().await;
    wait_for("every job ended", Duration::from_secs(30), || {
        let mut raw = raw.clone();
        let all = all.clone();
        async move {
            let mut pipe = redis::pipe();
            for id in &all {
                pipe.hget(hero_testkit::job_key(id), "status");
            }
            let s: Vec<Option<String>> = pipe.query_async(&mut raw).await.ok()?;
            s.iter()
                .all(|s| matches!(s.as_deref(), Some("finished" | "error")))
                .then_some(())
        }
    })
    .await;

    // what the records say, queue by queue
    #[derive(Default, Debug)]
    struct Seen {
        finished: u64,
        failed: u64,
        recovered: u64,
        runs: u64,
        starts: u64,
    }
    let mut seen: HashMap<String, Seen> = HashMap::new();
    for id in &all {
        let job = client.get(&JobId::new(id).unwrap()).await.unwrap();
        let mut raw = raw.clone();
        let values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(hero_testkit::job_key(id))
            .arg(&PLACEMENT_FIELDS)
            .query_async(&mut raw)
            .await
            .unwrap();
        let at = Placement::read(&values).unwrap();
        let s = seen
            .entry(client.keys().work(&at.target, at.priority))
            .or_default();
        match job.status {
            hero_protocol::Status::Finished => s.finished += 1,
            _ => s.failed += 1,
        }
        if id.starts_with('b') && job.attempts > 1 {
            s.recovered += 1;
        }
        // every attempt that ran to an outcome is one run; a stopped job never started
        if id != "later" {
            s.starts += u64::from(job.attempts);
            s.runs += if id.starts_with('b') && job.attempts > 1 {
                1 // the killed attempt recorded nothing
            } else {
                u64::from(job.attempts)
            };
        }
    }
    let queues = hero_admin::Inspector::from(&client).queues().await.unwrap();
    for q in &queues {
        let s = seen
            .get(&q.stream)
            .unwrap_or_else(|| panic!("no records of {}", q.stream));
        assert_eq!(
            (q.finished, q.failed, q.recovered, q.dead),
            (s.finished, s.failed, s.recovered, 0),
            "{}: stats {q:?} against the records {s:?}",
            q.name
        );
        assert_eq!(
            q.wait.count(),
            s.starts,
            "{}: a wait sample per start",
            q.name
        );
        assert_eq!(
            q.run.count(),
            s.runs,
            "{}: a run sample per recorded run",
            q.name
        );
        assert_eq!(
            (q.waiting, q.running, q.delayed),
            (0, 0, 0),
            "{}: at rest",
            q.name
        );
        assert!(q.done_per_minute >= 0.0);
        for (what, h) in [("wait", &q.wait), ("run", &q.run)] {
            // the total lies within what the buckets allow (bucket b: [2^b - 1, 2^(b+1) - 1))
            let low: u64 = h.buckets.iter().map(|(b, n)| n * ((1u64 << b) - 1)).sum();
            let high: u64 = h
                .buckets
                .iter()
                .map(|(b, n)| n * Histogram::upper_ms(*b))
                .sum();
            assert!(
                (low..=high).contains(&h.sum_ms),
                "{}: {what} sum {} outside [{low}, {high}]",
                q.name,
                h.sum_ms
            );
        }
    }
    let sa = queues.iter().find(|q| q.stream == work_key("sa")).unwrap();
    assert_eq!(
        (sa.finished, sa.failed, sa.retried),
        (20, 5 + 3 + 1, 3),
        "sa: 20 finished; 5 failed, 3 failed after a retry each, 1 stopped"
    );
    let sb = queues.iter().find(|q| q.stream == work_key("sb")).unwrap();
    assert_eq!((sb.finished, sb.recovered), (6, 2));
}
