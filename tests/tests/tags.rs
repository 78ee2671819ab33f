//! Tags: listing by tag pages through a tag's index kept on write (never a scan of every job),
//! and retention takes ended jobs out of the index with them.

use std::collections::HashSet;
use std::time::Duration;

use hero_admin::ListFilter;
use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{keys, wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};
use redis::AsyncCommands;

#[tokio::test]
async fn listing_by_tag_pages_through_10000_jobs_and_retention_empties_the_index() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let tagged: Vec<NewJob> = (0..10_000)
        .map(|n| {
            NewJob::builder("tg", "x")
                .id(format!("t-{n}"))
                .tag("batch")
                .tag(if n % 2 == 0 { "even" } else { "odd" })
                .build()
                .unwrap()
        })
        .collect();
    for chunk in tagged.chunks(500) {
        for r in client.submit_many(chunk).await.unwrap() {
            assert!(r.unwrap().created);
        }
    }
    let plain: Vec<NewJob> = (0..100)
        .map(|n| {
            NewJob::builder("tg", "x")
                .id(format!("p-{n}"))
                .build()
                .unwrap()
        })
        .collect();
    client.submit_many(&plain).await.unwrap();

    // page through the tag, 1,000 at a time
    let inspector = hero_admin::Inspector::from(&client);
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = inspector
            .list_tagged(&ListFilter::All, Some("batch"), cursor.as_deref(), 1000)
            .await
            .unwrap();
        pages += 1;
        for j in &page.jobs {
            assert!(j.tags.iter().any(|t| t == "batch"), "{j:?}");
            assert!(seen.insert(j.id.clone()), "{} listed twice", j.id);
        }
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
        assert!(pages < 100, "the listing ends");
    }
    assert_eq!(seen.len(), 10_000, "every tagged job, none untagged");
    let mut raw = server.conn().await;
    let even: usize = raw.scard(keys().tag("even")).await.unwrap();
    assert_eq!(even, 5_000);

    // run them all, then let retention delete them: the index empties with them (the worker's
    // duties apply the config hash's retention, a millisecond here)
    let _: () = raw.hset(keys().config(), "retention_ms", 1).await.unwrap();
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["tg"])
            .concurrency(100)
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done(String::new()) }),
    );
    wait_for("every job to finish", Duration::from_secs(120), || {
        let client = client.clone();
        async move {
            let q = hero_admin::Inspector::from(&client).queues().await.ok()?;
            (q.iter().map(|q| q.finished).sum::<u64>() == 10_100).then_some(())
        }
    })
    .await;
    wait_for("retention to delete them", Duration::from_secs(60), || {
        let client = client.clone();
        async move {
            let mut raw = client
                .redis()
                .dedicated(Duration::from_secs(1))
                .await
                .ok()?;
            let left: usize = raw.scard(keys().tag("batch")).await.ok()?;
            (left == 0).then_some(())
        }
    })
    .await;
    for t in ["batch", "even", "odd"] {
        let exists: bool = raw.exists(keys().tag(t)).await.unwrap();
        assert!(!exists, "the index of {t} is gone with its jobs");
    }
}
