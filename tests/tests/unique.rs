//! Unique jobs: while a job holding a uniqueness key is queued or running, a submit with the
//! same key queues nothing and answers that job's id, atomically (one server function call);
//! once the holder ended, or its key's TTL passed, the next submit queues a new job.

use std::collections::HashSet;
use std::time::Duration;

use hero_client::Client;
use hero_protocol::{NewJob, Status};
use hero_testkit::{hero_cli, keys, wait_for, work_key, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};
use redis::AsyncCommands;

#[tokio::test]
async fn concurrent_submits_with_one_key_queue_one_job_and_the_next_comes_after_it_ends() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..100 {
        let client = client.clone();
        tasks.spawn(async move {
            let job = NewJob::builder("uq", "x")
                .id(format!("uq-{n}"))
                .unique("nightly-report")
                .build()
                .unwrap();
            client.submit(&job).await.unwrap()
        });
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    while let Some(r) = tasks.join_next().await {
        let s = r.unwrap();
        ids.insert(s.id.to_string());
        if s.created {
            created += 1;
        } else {
            assert!(s.duplicate, "{s:?}");
        }
    }
    assert_eq!(created, 1, "one job queued");
    assert_eq!(ids.len(), 1, "every submit answered the one job's id");
    let holder = ids.into_iter().next().unwrap();
    let mut raw = server.conn().await;
    let len: usize = raw.xlen(work_key("uq")).await.unwrap();
    assert_eq!(len, 1, "one entry in the queue");
    let key: String = raw.get(keys().unique("nightly-report")).await.unwrap();
    assert_eq!(key, holder);

    // the holder runs and ends: the key is free for the next submit
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["uq"])
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("ok".into()) }),
    );
    let r = client
        .wait(
            &hero_protocol::JobId::new(&holder).unwrap(),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished);
    let next = NewJob::builder("uq", "x")
        .id("uq-next")
        .unique("nightly-report")
        .build()
        .unwrap();
    let s = client.submit(&next).await.unwrap();
    assert!(s.created && !s.duplicate, "{s:?}");
    assert_eq!(s.id.as_str(), "uq-next");
}

#[tokio::test]
async fn a_key_is_held_no_longer_than_its_ttl_and_the_cli_reports_a_duplicate() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let first = NewJob::builder("nobody", "x")
        .id("t-1")
        .unique("k")
        .unique_ttl(Duration::from_millis(300))
        .build()
        .unwrap();
    assert!(client.submit(&first).await.unwrap().created);
    let again = || {
        NewJob::builder("nobody", "x")
            .id("t-2")
            .unique("k")
            .build()
            .unwrap()
    };
    let s = client.submit(&again()).await.unwrap();
    assert!(s.duplicate && s.id.as_str() == "t-1", "{s:?}");
    // t-1 is still queued (no worker), but its key's TTL passes
    let mut raw = server.conn().await;
    wait_for("the key's TTL to pass", Duration::from_secs(5), || {
        let mut raw = raw.clone();
        async move {
            let left: bool = raw.exists(keys().unique("k")).await.ok()?;
            (!left).then_some(())
        }
    })
    .await;
    let s = client.submit(&again()).await.unwrap();
    assert!(s.created && s.id.as_str() == "t-2", "{s:?}");
    let _: () = raw.del(keys().unique("k")).await.unwrap();

    // the CLI: the second submit with the key prints the first job's id and says so
    let sub = |id: &str| {
        hero_cli(
            &url,
            &[
                "--json", "submit", "--type", "cli", "--id", id, "--unique", "c", "x",
            ],
        )
    };
    let (code, out, _) = sub("c-1");
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["id"].as_str(), v["duplicate"].as_bool()),
        (Some("c-1"), Some(false))
    );
    let (code, out, _) = sub("c-2");
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["id"].as_str(), v["duplicate"].as_bool()),
        (Some("c-1"), Some(true))
    );
    let (code, _, err) = hero_cli(&url, &["submit", "--type", "cli", "--unique-ttl", "5", "x"]);
    assert_eq!(code, 2, "a TTL without a key is refused: {err}");
    // a bad key is refused before anything is sent
    let long = "k".repeat(300);
    let bad = NewJob::builder("cli", "x").unique(long).build();
    assert!(bad.is_err());
}
