//! Pause and resume: no job starts from a paused queue while the worker's other queues keep
//! flowing, submits still queue, the pause outlives every process (it lives in Redis), and
//! resume wakes the waiting worker at once and drains the queue.

use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{hero_cli, wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

fn jobs(script_type: &str, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| {
            NewJob::builder(script_type, "x")
                .id(format!("{script_type}-{i}"))
                .build()
                .unwrap()
        })
        .collect()
}

#[tokio::test]
async fn a_paused_queue_starts_nothing_while_others_flow_and_resume_drains_it_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    // the queue exists (one job ran) before the pause, and a worker waits on it
    let first = jobs("pa", 1);
    client.submit(&first[0]).await.unwrap();
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["pa", "pb"])
            .concurrency(4)
            .handler(|j: hero_protocol::Job, _| async move { Outcome::Done(j.id.to_string()) }),
    );
    client.wait(first[0].id(), LIMIT).await.unwrap();

    let (code, out, err) = hero_cli(&url, &["pause", "pa", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"paused\":true"), "{out}");
    let paused = jobs("pa", 20)
        .into_iter()
        .skip(1)
        .chain(
            // a group stream made after the pause is covered too
            [NewJob::builder("pa", "x")
                .id("pa-grouped")
                .group("io")
                .build()
                .unwrap()],
        )
        .collect::<Vec<_>>();
    let flowing = jobs("pb", 20);
    for j in paused.iter().chain(&flowing) {
        client.submit(j).await.unwrap();
    }
    for j in &flowing {
        let r = client.wait(j.id(), LIMIT).await.unwrap();
        assert_eq!(r.status, Status::Finished);
    }
    for j in &paused {
        assert_eq!(
            client.status(j.id()).await.unwrap(),
            Status::Dispatched,
            "{} waits in its paused queue",
            j.id()
        );
    }
    let stats = hero_admin::Inspector::from(&client).queues().await.unwrap();
    let pa = stats.iter().find(|q| q.name == "pa").unwrap();
    assert!(pa.paused && pa.waiting == 19, "{pa:?}");
    assert!(stats.iter().find(|q| q.name == "pa/io").unwrap().paused);
    assert!(!stats.iter().find(|q| q.name == "pb").unwrap().paused);
    let (_, table, _) = hero_cli(&url, &["queues"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("pa ") && l.trim_end().ends_with("yes")),
        "{table}"
    );

    // resume: the worker, blocked since the pb jobs ended, wakes at once (its wait blocks 2 s)
    let resumed = Instant::now();
    hero_admin::Admin::from(&client).resume("pa").await.unwrap();
    wait_for("a paused job to start", LIMIT, || {
        let client = client.clone();
        async move {
            let s = client.status(&JobId::new("pa-1").unwrap()).await.ok()?;
            (s != Status::Dispatched).then_some(())
        }
    })
    .await;
    let took = resumed.elapsed();
    assert!(took < Duration::from_millis(500), "woke after {took:?}");
    // (pa-grouped is for group io's workers: none runs here)
    for j in paused.iter().filter(|j| j.id().as_str() != "pa-grouped") {
        let r = client.wait(j.id(), LIMIT).await.unwrap();
        assert_eq!(r.status, Status::Finished, "{}", j.id());
    }
    assert!(hero_admin::Inspector::from(&client)
        .paused()
        .await
        .unwrap()
        .is_empty());
    let stats = hero_admin::Inspector::from(&client).queues().await.unwrap();
    assert!(stats.iter().all(|q| !q.paused), "{stats:?}");
}

#[tokio::test]
async fn a_pause_by_type_covers_its_groups_and_a_narrower_pause_outlasts_a_broader_resume() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    hero_admin::Admin::from(&client)
        .pause("pc/io")
        .await
        .unwrap();
    hero_admin::Admin::from(&client).pause("pc").await.unwrap();
    for (id, group) in [("c-type", None), ("c-io", Some("io")), ("c-db", Some("db"))] {
        let mut b = NewJob::builder("pc", "x").id(id);
        if let Some(g) = group {
            b = b.group(g);
        }
        client.submit(&b.build().unwrap()).await.unwrap();
    }
    let q = |stats: &[hero_admin::inspect::QueueStats], n: &str| {
        stats.iter().find(|q| q.name == n).unwrap().paused
    };
    let stats = hero_admin::Inspector::from(&client).queues().await.unwrap();
    assert!(q(&stats, "pc") && q(&stats, "pc/io") && q(&stats, "pc/db"));
    hero_admin::Admin::from(&client).resume("pc").await.unwrap();
    let stats = hero_admin::Inspector::from(&client).queues().await.unwrap();
    assert!(!q(&stats, "pc") && q(&stats, "pc/io") && !q(&stats, "pc/db"));
    assert_eq!(
        hero_admin::Inspector::from(&client).paused().await.unwrap(),
        vec!["pc/io"]
    );
    let bad = hero_admin::Admin::from(&client)
        .pause("pc prio 1")
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("without a priority"), "{bad}");
}

/// The wake-up wait watches only the streams that existed at the last fetch, and the
/// registry's signal stream: a job on a stream that did not exist (a new priority level) still
/// wakes the waiting worker at once, not after its 2 s block.
#[tokio::test]
async fn a_waiting_worker_wakes_at_once_for_a_job_on_a_stream_that_did_not_exist() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let first = jobs("nw", 1);
    client.submit(&first[0]).await.unwrap();
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["nw"])
            .handler(|j: hero_protocol::Job, _| async move { Outcome::Done(j.id.to_string()) }),
    );
    client.wait(first[0].id(), LIMIT).await.unwrap();
    // the worker is blocked now; let it settle into its wait
    tokio::time::sleep(Duration::from_millis(300)).await;
    let urgent = NewJob::builder("nw", "x")
        .id("nw-urgent")
        .priority(0)
        .build()
        .unwrap();
    let sent = Instant::now();
    // run-and-wait: answered through the reply list the moment the job ends
    let r = client.run(&urgent, LIMIT).await.unwrap();
    assert_eq!(r.status, Status::Finished);
    let took = sent.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "started {took:?} after its submit"
    );
}
