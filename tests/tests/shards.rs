//! Sharded namespaces (`hero shards`, docs/sharding.md) with real processes, on one Redis and on
//! a Redis Cluster of 3 masters: every job of a queue spread over shards runs once and a
//! SIGKILLed worker's jobs are recovered on every shard; related jobs share a shard (route key,
//! batch, flow, uniqueness) and keep doing so across a change of K; prerequisites on two shards
//! are refused; K changes 1 → 2 → 4 → 2 while jobs flow with nothing lost, and the drained
//! shards are retired once empty by the worker alone (no broker); short-lived producers spread their jobs over every shard.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::shard::shard_of_id;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{
    all_finished_on_shards, plain_jobs, submit_all, InProcBroker, Proc, RedisCluster, RedisServer,
};

fn broker_config() -> BrokerConfig {
    BrokerConfig {
        presence_poll: Duration::from_millis(100),
        ..BrokerConfig::default()
    }
}

fn worker(url: &str, label: &str, extra: &[&str]) -> Proc {
    let mut flags = vec!["--presence-ms", "1000", "--sleep-ms", "10"];
    flags.extend_from_slice(extra);
    hero_testkit::test_worker(url, "t", label, &flags)
}

fn per_shard(ids: &[String]) -> BTreeMap<u16, usize> {
    let mut m = BTreeMap::new();
    for id in ids {
        *m.entry(shard_of_id(id).unwrap_or(0)).or_insert(0) += 1;
    }
    m
}

/// Every shard's work streams have nothing pending or undelivered.
async fn shards_idle(client: &Client) {
    for (n, shard) in client.all_shard_clients() {
        assert!(shard.holds_no_jobs().await.unwrap(), "shard {n} is idle");
    }
}

#[tokio::test]
async fn a_sharded_queue_runs_every_job_once_and_recovers_a_killed_workers_jobs() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let map = client.set_shards(4).await.unwrap();
    assert_eq!((map.k, map.served()), (4, vec![0, 1, 2, 3]));
    let _broker = InProcBroker::spawn(&url, broker_config()).await;
    let mut a = worker(&url, "A", &["--concurrency", "10"]);
    let b = worker(&url, "B", &["--concurrency", "10"]);
    a.expect_line("ready", Duration::from_secs(10)).await;
    b.expect_line("ready", Duration::from_secs(10)).await;

    let mut ids = submit_all(&client, &plain_jobs(1200)).await;
    for j in plain_jobs(40) {
        ids.push(client.submit(&j).await.unwrap().id.to_string());
    }
    let spread = per_shard(&ids);
    assert_eq!(spread.len(), 4, "every shard got jobs: {spread:?}");
    assert!(
        spread.values().all(|&n| n >= 250),
        "spread evenly: {spread:?}"
    );

    for _ in 0..60 {
        a.expect_line("completion", Duration::from_secs(20)).await;
    }
    a.kill9();
    let attempts = all_finished_on_shards(&client, &ids, Duration::from_secs(60)).await;
    assert!(
        attempts.iter().any(|&n| n > 1),
        "A held jobs when it was killed"
    );
    // nothing recorded twice: every completion line names a distinct job
    let mut seen = HashSet::new();
    for line in a.output().into_iter().chain(b.output()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["completion", id, "completed"] = w[..] {
            assert!(seen.insert(id.to_string()), "{id} recorded twice");
        }
    }
    shards_idle(&client).await;

    // stop on a shard: a delayed job never starts
    let later = NewJob::builder("t", "x")
        .delay(Duration::from_secs(60))
        .build()
        .unwrap();
    let id = client.submit(&later).await.unwrap().id;
    assert_eq!(
        client.stop(&id).await.unwrap(),
        hero_client::StopOutcome::Cancelled
    );
    assert_eq!(client.status(&id).await.unwrap(), Status::Error);

    // a listing walks every shard, a page at a time
    let inspector = hero_admin::Inspector::from(&client);
    let mut listed = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = inspector
            .list(
                &hero_admin::ListFilter::Status(Status::Finished),
                cursor.as_deref(),
                500,
            )
            .await
            .unwrap();
        listed.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert!(
        ids.iter().all(|id| listed.contains(id)),
        "every finished job listed"
    );

    // dead letters on every shard: listed together, each retried on its own shard
    for (n, shard) in client.shard_clients() {
        hero_testkit::dead_letter(&shard, "dl", &format!("dl-{n}")).await;
    }
    let letters = inspector.all_dead_letters().await.unwrap();
    let shards_of: Vec<u16> = letters.iter().map(|d| d.shard).collect();
    assert_eq!(
        shards_of
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        4,
        "a letter from each shard: {letters:?}"
    );
    let found = inspector.dead_letter("dl-3").await.unwrap().unwrap();
    assert_eq!(found.shard, 3);
    let outcomes = hero_admin::Admin::from(&client)
        .retry_dead(&letters)
        .await
        .unwrap();
    assert!(
        outcomes.iter().all(|o| o.answer == "requeued"),
        "{outcomes:?}"
    );
    for n in 0..4 {
        let id = JobId::new(format!("dl-{n}")).unwrap();
        assert_eq!(
            client.status(&id).await.unwrap(),
            Status::Dispatched,
            "dl-{n}"
        );
    }
    assert!(inspector.all_dead_letters().await.unwrap().is_empty());

    // hero shards show: per shard counts that add up
    let (code, out, err) = hero_testkit::hero_cli(&url, &["--json", "shards", "show"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let shards = v["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4);
    let finished: u64 = shards.iter().map(|s| s["finished"].as_u64().unwrap()).sum();
    assert_eq!(finished, ids.len() as u64, "{out}");
    assert!(shards.iter().all(|s| s["finished"].as_u64().unwrap() > 0));
}

#[tokio::test]
async fn related_jobs_share_a_shard_across_a_change_of_k() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client.set_shards(2).await.unwrap();
    let delayed =
        |b: hero_protocol::NewJobBuilder| b.delay(Duration::from_secs(600)).build().unwrap();

    // route key: every job with it on one shard
    let routed: Vec<NewJob> = (0..20)
        .map(|_| NewJob::builder("t", "x").route("acct-7").build().unwrap())
        .collect();
    let ids = submit_all(&client, &routed).await;
    assert_eq!(per_shard(&ids).len(), 1, "one route key, one shard");

    // many uniqueness keys and batches made under K = 2 ...
    let mut held = Vec::new();
    for i in 0..24 {
        let j = delayed(NewJob::builder("t", "x").unique(format!("u{i}")));
        held.push(client.submit(&j).await.unwrap().id);
        let m = delayed(NewJob::builder("t", "x").batch(format!("b{i}")));
        client.submit(&m).await.unwrap();
    }
    // ... still hold, and still gather their members, under K = 4, where about half of the
    // keys have another home
    client.set_shards(4).await.unwrap();
    let mut moved = 0;
    for (i, holder) in held.iter().enumerate() {
        let map = client.shard_map();
        if !map.older_homes(&format!("u{i}")).is_empty() {
            moved += 1;
        }
        let again = delayed(NewJob::builder("t", "x").unique(format!("u{i}")));
        let s = client.submit(&again).await.unwrap();
        assert!(!s.created, "u{i} is still held after K changed");
        assert_eq!(&s.id, holder, "the holder of u{i} answers");
        let m = delayed(NewJob::builder("t", "x").batch(format!("b{i}")));
        client.submit(&m).await.unwrap();
        let info = client
            .batch(format!("b{i}"))
            .unwrap()
            .show()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(info.total, 2, "batch b{i} has both members on one shard");
    }
    assert!(moved > 0, "some keys' homes changed with K");

    // a flow goes where its first job goes
    let leaf = NewJob::builder("t", "x").build().unwrap();
    let flow = hero_client::Flow::new(NewJob::builder("t", "x").build().unwrap())
        .child(leaf)
        .child(NewJob::builder("t", "x").build().unwrap());
    let jobs = flow.jobs();
    let answers = client.submit_many(&jobs).await.unwrap();
    let flow_ids: Vec<String> = answers
        .into_iter()
        .map(|a| a.unwrap().id.to_string())
        .collect();
    assert_eq!(
        per_shard(&flow_ids).len(),
        1,
        "one flow, one shard: {flow_ids:?}"
    );
    let root = client
        .get(&JobId::new(&flow_ids[2]).unwrap())
        .await
        .unwrap();
    assert_eq!(
        root.prerequisites,
        flow_ids[..2].to_vec(),
        "the root names its children by their shard-naming ids"
    );

    // prerequisites on two shards are refused, saying why
    let map = client.shard_map();
    let (ka, kb) = (0..100).map(|i| format!("r{i}")).fold(
        (None, None),
        |(a, b): (Option<String>, Option<String>), k| match (&a, &b) {
            (None, _) => (Some(k), b),
            (Some(x), None) if map.home(x) != map.home(&k) => (a, Some(k)),
            _ => (a, b),
        },
    );
    let first = client
        .submit(&delayed(NewJob::builder("t", "x").route(ka.unwrap())))
        .await
        .unwrap();
    let second = client
        .submit(&delayed(NewJob::builder("t", "x").route(kb.unwrap())))
        .await
        .unwrap();
    let both = NewJob::builder("t", "x")
        .after(first.id.as_str())
        .after(second.id.as_str())
        .build()
        .unwrap();
    let err = client.submit(&both).await.unwrap_err().to_string();
    assert!(err.contains("prerequisites must share a shard"), "{err}");
}

#[tokio::test]
async fn k_changes_while_jobs_flow_and_drained_shards_retire_once_empty() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    // no broker: the worker's duties run on every shard, and it retires the drained ones
    // started at K = 1: it serves the shards added later
    let a = worker(&url, "A", &["--concurrency", "8"]);
    a.expect_line("ready", Duration::from_secs(10)).await;

    let producer = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(9) {
                ids.extend(submit_all(&client, &plain_jobs(20)).await);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            ids
        })
    };
    for k in [2u16, 4, 2] {
        tokio::time::sleep(Duration::from_secs(2)).await;
        client.set_shards(k).await.unwrap();
    }
    let ids = producer.await.unwrap();
    let spread = per_shard(&ids);
    assert_eq!(
        spread.len(),
        4,
        "jobs landed on all four shards: {spread:?}"
    );
    all_finished_on_shards(&client, &ids, Duration::from_secs(60)).await;

    // shards 2 and 3 drained, and once empty (and past the grace) are retired
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let map = client.refresh_shards().await.unwrap();
        if map.draining.is_empty() {
            assert_eq!(map.served(), vec![0, 1]);
            break;
        }
        assert!(Instant::now() < deadline, "shards retired: {map:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // a job of a retired shard is still found
    let on_3 = ids.iter().find(|id| shard_of_id(id) == Some(3)).unwrap();
    assert_eq!(
        client.status(&JobId::new(on_3).unwrap()).await.unwrap(),
        Status::Finished
    );
}

#[tokio::test]
async fn a_sharded_queue_spreads_over_a_cluster_and_recovers_a_killed_worker() {
    let cluster = RedisCluster::start(3, 0).await;
    let url = cluster.url();
    let client = Client::connect(&url).await.unwrap();
    client.set_shards(4).await.unwrap();
    let mut masters = HashSet::new();
    for (_, shard) in client.shard_clients() {
        masters.insert(cluster.master_of(shard.keys().prefix()).await);
    }
    assert!(masters.len() >= 2, "the shards spread over the masters");
    let _broker = InProcBroker::spawn(&url, broker_config()).await;
    let mut a = worker(&url, "A", &["--concurrency", "10"]);
    let b = worker(&url, "B", &["--concurrency", "10"]);
    a.expect_line("ready", Duration::from_secs(10)).await;
    b.expect_line("ready", Duration::from_secs(10)).await;
    let ids = submit_all(&client, &plain_jobs(800)).await;
    assert_eq!(per_shard(&ids).len(), 4);
    for _ in 0..40 {
        a.expect_line("completion", Duration::from_secs(20)).await;
    }
    a.kill9();
    let attempts = all_finished_on_shards(&client, &ids, Duration::from_secs(60)).await;
    assert!(
        attempts.iter().any(|&n| n > 1),
        "A held jobs when it was killed"
    );
    shards_idle(&client).await;
}

/// A master killed under load on a sharded queue whose producers ask for one replica per write
/// (`--min-replicas 1`; replication is asynchronous without it): the cluster fails over, the
/// shard's processes follow, and every submit that was acknowledged runs to the end.
#[tokio::test]
async fn a_master_killed_under_sharded_load_loses_no_acknowledged_job() {
    let mut cluster = RedisCluster::start(3, 1).await;
    cluster.wait_replicas_synced().await;
    let url = cluster.url();
    let mut opts = hero_client::ClientOptions::new(&url);
    opts.replicas = hero_protocol::conn::Replicas {
        wanted: 1,
        timeout: Duration::from_secs(2),
        fsync: false,
    };
    let client = Client::with_options(opts).await.unwrap();
    client.set_shards(3).await.unwrap();
    let victim_prefix = client
        .shard_clients()
        .into_iter()
        .find(|(n, _)| *n == 1)
        .map(|(_, c)| c.keys().prefix().to_string())
        .unwrap();
    let victim = cluster.master_of(&victim_prefix).await;
    let _broker = InProcBroker::spawn(&url, broker_config()).await;
    let w = worker(&url, "A", &["--concurrency", "8"]);
    w.expect_line("ready", Duration::from_secs(10)).await;

    let producer = {
        let client = client.clone();
        tokio::spawn(async move {
            let (mut acked, mut refused) = (Vec::new(), 0u32);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(8) {
                match client.submit_many(&plain_jobs(10)).await {
                    Ok(answers) => {
                        for a in answers {
                            match a {
                                Ok(s) => acked.push(s.id.to_string()),
                                Err(_) => refused += 1,
                            }
                        }
                    }
                    Err(_) => refused += 10,
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (acked, refused)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.nodes[victim].kill();
    let killed = Instant::now();
    hero_testkit::wait_for("a replica to take over", Duration::from_secs(30), || {
        let cluster = &cluster;
        let tag = victim_prefix.clone();
        async move { (cluster.master_of(&tag).await != victim).then_some(()) }
    })
    .await;
    hero_testkit::say(&format!(
        "shard 1's replica took over {:?} after the kill",
        killed.elapsed()
    ));
    let (acked, refused) = producer.await.unwrap();
    hero_testkit::say(&format!(
        "{} submits acknowledged, {refused} refused during the failover",
        acked.len()
    ));
    assert!(per_shard(&acked).get(&1).copied().unwrap_or(0) > 0);
    all_finished_on_shards(&client, &acked, Duration::from_secs(90)).await;
}

/// A change of K is remembered (old homes asked) for the brokers' retention time, then
/// forgotten: keyed state made before it has ended by then.
#[tokio::test]
async fn the_brokers_forget_earlier_ks_after_their_retention_time() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client.set_shards(2).await.unwrap();
    client.set_shards(4).await.unwrap();
    let map = client.refresh_shards().await.unwrap();
    assert_eq!(
        map.history.iter().map(|h| h.0).collect::<Vec<_>>(),
        vec![1, 2]
    );
    let cfg = BrokerConfig {
        retention: Duration::from_secs(1),
        ..broker_config()
    };
    let _broker = InProcBroker::spawn(&url, cfg).await;
    hero_testkit::wait_for("the broker to forget", Duration::from_secs(15), || {
        let client = client.clone();
        async move {
            let map = client.refresh_shards().await.ok()?;
            map.history.is_empty().then_some(())
        }
    })
    .await;
    assert!(client.shard_map().older_homes("any-key").is_empty());
}

/// Producers that live for one job each (`hero submit` from a script, a serverless function)
/// spread unkeyed jobs over every shard: each process starts its turn at a random shard, not at
/// shard 0. 40 processes over 4 shards miss one with a chance of 4 × (3/4)^40 ≈ 4 in 100,000.
#[tokio::test]
async fn short_lived_producers_spread_unkeyed_jobs_over_every_shard() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client.set_shards(4).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..40 {
        let (code, out, err) = hero_testkit::hero_cli(&url, &["submit", "--type", "t", "x"]);
        assert_eq!(code, 0, "hero submit: {err}");
        ids.push(out.trim().to_string());
    }
    let spread = per_shard(&ids);
    assert_eq!(
        spread.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3],
        "40 one-job producers over 4 shards: {spread:?}"
    );
}
