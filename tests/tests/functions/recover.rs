//! hero_recover: back to the same stream, dead-lettered past the budget, hand-back.

use super::*;
use hero_testkit::{job_key, keys};

#[tokio::test]
async fn recover_requeues_to_the_same_stream_then_dead_letters_past_the_budget() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let target = Target::new(
        t("sal"),
        Some(GroupName::new("io").unwrap()),
        Some(InstanceName::new("3").unwrap()),
    );
    c.submit(
        &NewJob::builder("sal", "x")
            .id("d")
            .group("io")
            .instance("3")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let stream = c.keys().work(&target, Priority::DEFAULT);
    for round in 1..=2 {
        let got = fetch(&c, "io:3:s", std::slice::from_ref(&stream), 1).await;
        assert_eq!(
            got.jobs.len(),
            1,
            "round {round}: the job is back in the same stream"
        );
        let r = recover_consumer(&c, &stream, "io:3:s", 2).await;
        if round == 1 {
            assert_eq!((r.requeued, r.dead), (1, 0));
        } else {
            assert_eq!((r.requeued, r.dead), (0, 1));
        }
    }
    let mut raw = server.conn().await;
    let (status, error): (String, String) = redis::cmd("HMGET")
        .arg(job_key("d"))
        .arg("status")
        .arg("error")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        (status.as_str(), error.as_str()),
        ("error", "abandoned after 2 attempts")
    );
    let dead: usize = raw.xlen(keys().dead_letter()).await.unwrap();
    assert_eq!(dead, 1);
    let groups: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(&stream)
        .arg(CONSUMER_GROUP)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(groups.is_empty(), "a consumer that owns nothing is deleted");
}

#[tokio::test]
async fn hand_back_requeues_even_when_the_attempt_count_is_corrupt() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "x").id("hb").build().unwrap();
    c.submit(&job).await.unwrap();
    let stream = c.keys().work(job.target(), Priority::DEFAULT);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(got.jobs.len(), 1);
    let mut raw = server.conn().await;
    let _: () = raw.hset(job_key("hb"), "attempts", "many").await.unwrap();
    let r = recover_as(&c, &stream, "g:a:1", 5, "1").await;
    assert_eq!(r.requeued, 1, "back in its stream, not lost");
    let status: String = raw.hget(job_key("hb"), "status").await.unwrap();
    assert_eq!(status, "dispatched");
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 1);
}
