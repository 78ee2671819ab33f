//! The job path's guarantees hold on a sharded queue, on one Redis and on a Redis Cluster of 3
//! masters: a stalled worker's late result is fenced off, a time limit holds, a batch spread by
//! routing calls back exactly once, a queue rate holds across the shards, a pause reaches every
//! shard, a flow runs in order.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::shard::shard_of_id;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{
    all_finished_on_shards, plain_jobs, submit_all, InProcBroker, RedisCluster, RedisServer,
};

/// The job path's guarantees on a sharded queue at `url` (K shards already set): a stalled
/// worker's late result is fenced off, a time limit holds, a batch spread by routing calls back
/// exactly once, a queue rate holds across the shards within its split bound, a pause reaches
/// every shard, a flow runs in order.
async fn guarantees_hold_on_shards(url: &str, k: u16) {
    let client = Client::connect(url).await.unwrap();
    assert_eq!(client.shard_map().k, k);
    let cfg = BrokerConfig {
        presence_poll: Duration::from_millis(100),
        ..BrokerConfig::default()
    };
    let _broker = InProcBroker::spawn(url, cfg).await;
    let flags = [
        "--presence-ms",
        "1000",
        "--lease-ms",
        "30000",
        "--concurrency",
        "4",
    ];
    let a = hero_testkit::test_worker(url, "t", "A", &flags);
    a.expect_line("ready", Duration::from_secs(10)).await;

    // fenced completion: A stalls (SIGSTOP) holding a job on the last shard; B runs it; A's
    // late result is refused
    let route = (0..100)
        .map(|i| format!("f{i}"))
        .find(|r| client.shard_map().home(r) == k - 1)
        .unwrap();
    let slow = NewJob::builder("t", "sleep 1500")
        .route(&route)
        .build()
        .unwrap();
    let id = client.submit(&slow).await.unwrap().id;
    assert_eq!(shard_of_id(id.as_str()), Some(k - 1));
    a.expect_line(&format!("started {id}"), Duration::from_secs(10))
        .await;
    a.signal("STOP");
    let b = hero_testkit::test_worker(url, "t", "B", &flags);
    b.expect_line(
        &format!("completion {id} completed"),
        Duration::from_secs(20),
    )
    .await;
    a.signal("CONT");
    a.expect_line(
        &format!("completion {id} lease_lost"),
        Duration::from_secs(20),
    )
    .await;
    let rec = client.get(&id).await.unwrap();
    assert_eq!(
        (rec.status, rec.output.as_deref(), rec.attempts),
        (Status::Finished, Some("B"), 2)
    );

    // a time limit on every shard
    let mut limited = Vec::new();
    for n in 0..k {
        let r = (0..100)
            .map(|i| format!("t{i}"))
            .find(|r| client.shard_map().home(r) == n)
            .unwrap();
        let j = NewJob::builder("t", "sleep 5000")
            .route(r)
            .timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        limited.push(client.submit(&j).await.unwrap().id);
    }
    for id in &limited {
        let r = client.wait(id, Duration::from_secs(20)).await.unwrap();
        assert_eq!(r.status, Status::Error, "{id}");
        assert!(r.error.contains("timeout"), "{id}: {}", r.error);
    }

    // a batch calls back exactly once
    let batch = client.batch("nightly").unwrap();
    let members: Vec<NewJob> = (0..10)
        .map(|_| NewJob::builder("t", "x").build().unwrap())
        .collect();
    for r in batch.add(&members).await.unwrap() {
        r.unwrap();
    }
    let callback = NewJob::builder("t", "x")
        .id("nightly-done")
        .build()
        .unwrap();
    batch.close(Some(&callback), None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while batch
        .show()
        .await
        .unwrap()
        .and_then(|b| b.complete_id)
        .is_none()
    {
        assert!(Instant::now() < deadline, "the batch called back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = client
        .wait(
            &JobId::new("nightly-done").unwrap(),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished);
    let info = batch.show().await.unwrap().unwrap();
    assert_eq!((info.total, info.finished, info.pending), (10, 10, 0));
    assert_eq!(
        info.complete_id.as_deref(),
        Some("nightly-done"),
        "one callback"
    );

    // a pause reaches every shard; a resume wakes them
    let admin = hero_admin::Admin::from(&client);
    assert!(admin.pause("t").await.unwrap() >= u64::from(k));
    let paused = submit_all(&client, &plain_jobs(2 * k as usize)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    for id in &paused {
        let st = client.status(&JobId::new(id).unwrap()).await.unwrap();
        assert_ne!(st, Status::Finished, "{id} ran while its queue was paused");
    }
    admin.resume("t").await.unwrap();
    all_finished_on_shards(&client, &paused, Duration::from_secs(20)).await;

    // a rate of 6 a second split over the shards: no second starts more than max(6, K)
    admin
        .set_policy(
            "t",
            &hero_protocol::policy::Policy {
                rate: Some(hero_protocol::policy::Rate::parse("6/s").unwrap()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let rated = submit_all(&client, &plain_jobs(18)).await;
    all_finished_on_shards(&client, &rated, Duration::from_secs(30)).await;
    let started = hero_admin::inspect::EventFilter {
        event: Some(hero_protocol::EventKind::Started),
        ..Default::default()
    };
    let rated_set: HashSet<&String> = rated.iter().collect();
    let mut starts: Vec<u64> = hero_admin::Inspector::from(&client)
        .events(&started, 2000)
        .await
        .unwrap()
        .iter()
        .filter(|e| rated_set.contains(&e.job_id))
        .map(hero_admin::inspect::Event::at_ms)
        .collect();
    starts.sort_unstable();
    assert_eq!(starts.len(), 18, "each rated job started once");
    let bound = 6.max(k as usize);
    for (i, t) in starts.iter().enumerate() {
        let window = starts[i..].iter().take_while(|s| **s < t + 1000).count();
        assert!(window <= bound, "{window} starts within a second of {t}");
    }
    admin.clear_policy("t").await.unwrap();

    // a concurrency limit of 4 split over the shards: never more than max(4, K) at once
    admin
        .set_policy(
            "t",
            &hero_protocol::policy::Policy {
                concurrency: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let limited_jobs: Vec<NewJob> = (0..12)
        .map(|_| NewJob::builder("t", "sleep 300").build().unwrap())
        .collect();
    let capped = submit_all(&client, &limited_jobs).await;
    all_finished_on_shards(&client, &capped, Duration::from_secs(30)).await;
    let capped_set: HashSet<&String> = capped.iter().collect();
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for kind in [
        hero_protocol::EventKind::Started,
        hero_protocol::EventKind::Finished,
    ] {
        let only = hero_admin::inspect::EventFilter {
            event: Some(kind),
            ..Default::default()
        };
        for e in hero_admin::Inspector::from(&client)
            .events(&only, 5000)
            .await
            .unwrap()
            .iter()
            .filter(|e| capped_set.contains(&e.job_id))
        {
            edges.push((
                e.at_ms(),
                if kind == hero_protocol::EventKind::Started {
                    1
                } else {
                    -1
                },
            ));
        }
    }
    // an end before a start of the same millisecond
    edges.sort_unstable();
    let (mut now, mut most) = (0, 0);
    for (_, d) in &edges {
        now += d;
        most = most.max(now);
    }
    assert_eq!(edges.len(), 24, "each capped job started and finished once");
    assert!(
        most <= 4.max(i32::from(k)),
        "{most} of the capped queue ran at once (limit 4 over {k} shards)"
    );
    admin.clear_policy("t").await.unwrap();

    // stop reaches a running job on any shard; uniqueness holds on its key's shard
    let long = NewJob::builder("t", "sleep 5000")
        .route(&route)
        .build()
        .unwrap();
    let long_id = client.submit(&long).await.unwrap().id;
    let started = format!("started {long_id}");
    hero_testkit::wait_for("the long job to start", Duration::from_secs(10), || {
        let seen = a
            .output()
            .iter()
            .chain(b.output().iter())
            .any(|l| l.contains(&started));
        async move { seen.then_some(()) }
    })
    .await;
    assert_eq!(
        client.stop(&long_id).await.unwrap(),
        hero_client::StopOutcome::Interrupted
    );
    assert_eq!(client.status(&long_id).await.unwrap(), Status::Error);
    let once = || {
        NewJob::builder("t", "sleep 2000")
            .unique("nightly-report")
            .build()
            .unwrap()
    };
    let first = client.submit(&once()).await.unwrap();
    let second = client.submit(&once()).await.unwrap();
    assert!(first.created && !second.created);
    assert_eq!(second.id, first.id, "the holder answers");

    // a flow runs its children before its root
    let flow = hero_client::Flow::new(NewJob::builder("t", "x").build().unwrap())
        .child(NewJob::builder("t", "x").build().unwrap());
    let root = client.submit_flow(&flow).await.unwrap();
    let r = client
        .wait(&root.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished);
    drop(b);
}

#[tokio::test]
async fn the_job_paths_guarantees_hold_on_a_sharded_queue_on_one_redis() {
    let server = RedisServer::start();
    let url = server.url();
    Client::connect(&url)
        .await
        .unwrap()
        .set_shards(2)
        .await
        .unwrap();
    guarantees_hold_on_shards(&url, 2).await;
}

#[tokio::test]
async fn the_job_paths_guarantees_hold_on_a_sharded_queue_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0).await;
    let url = cluster.url();
    Client::connect(&url)
        .await
        .unwrap()
        .set_shards(3)
        .await
        .unwrap();
    guarantees_hold_on_shards(&url, 3).await;
}
