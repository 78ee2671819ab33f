//! hero_submit: batches, idempotent ids, a malformed batch refused whole.

use super::*;
use hero_testkit::{job_key, work_key};

#[tokio::test]
async fn submit_takes_a_batch_and_refuses_a_malformed_one_whole() {
    let server = RedisServer::start();
    let c = client(&server).await;
    c.submit(&NewJob::builder("osis", "old").id("taken").build().unwrap())
        .await
        .unwrap();
    let jobs = [
        NewJob::builder("osis", "1").id("n1").build().unwrap(),
        NewJob::builder("osis", "2").id("taken").build().unwrap(),
        NewJob::builder("osis", "3")
            .id("later")
            .delay(Duration::from_secs(60))
            .build()
            .unwrap(),
    ];
    let got: Vec<(bool, String)> = c
        .submit_many(&jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.map(|s| (s.created, s.status)).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            (true, "dispatched".to_string()),
            (false, "dispatched".to_string()),
            (true, "waiting".to_string())
        ]
    );
    let mut raw = server.conn().await;
    let script: String = raw
        .hget(c.keys().job_unchecked("taken"), "script")
        .await
        .unwrap();
    assert_eq!(script, "old", "an existing id is left as it was");

    // the second job's field count runs past the end: nothing of the batch is written
    let osis = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    let mut bad = Function::Submit.unchecked(&[
        c.keys().delayed(),
        c.keys().queues(),
        c.keys().bridge_registry(),
        c.keys().config(),
        c.keys().events(),
        c.keys().stats(),
        c.keys().job_unchecked("b1"),
        osis.clone(),
        c.keys().job_unchecked("b2"),
        osis.clone(),
    ]);
    bad.arg(CONSUMER_GROUP)
        .arg("b1")
        .arg(0)
        .arg(2)
        .arg("script")
        .arg("x")
        .arg("b2")
        .arg(0)
        .arg(4)
        .arg("script")
        .arg("y");
    let err = c.redis().query::<redis::Value>(&bad).await.unwrap_err();
    assert!(err.to_string().contains("HERO_BAD_ARG"), "{err}");
    let exists: bool = raw.exists(c.keys().job_unchecked("b1")).await.unwrap();
    assert!(
        !exists,
        "the well-formed job of a refused batch is not written"
    );
}

#[tokio::test]
async fn submit_is_idempotent_when_the_id_exists() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "1").id("same").build().unwrap();
    assert!(c.submit(&job).await.unwrap().created);
    let again = NewJob::builder("osis", "2").id("same").build().unwrap();
    let r = c.submit(&again).await.unwrap();
    assert!(!r.created);
    let mut raw = server.conn().await;
    let script: String = raw.hget(job_key("same"), "script").await.unwrap();
    assert_eq!(script, "1");
    let len: usize = raw.xlen(work_key("osis")).await.unwrap();
    assert_eq!(len, 1, "one stream entry, not two");
}

#[tokio::test]
async fn submit_many_writes_every_job_in_one_call() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let jobs: Vec<NewJob> = (0..50)
        .map(|i| NewJob::builder("v", format!("{i}")).build().unwrap())
        .collect();
    let mut raw = server.conn().await;
    let reads = |raw: redis::aio::MultiplexedConnection| async move {
        let mut raw = raw;
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut raw)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_reads_processed:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("total_reads_processed")
    };
    let before = reads(raw.clone()).await;
    let results = c.submit_many(&jobs).await.unwrap();
    // one round trip: the 50 calls reach Redis in a read or two, not 50 (the INFO calls add 2)
    let used = reads(raw.clone()).await - before;
    assert!(
        used <= 6,
        "{used} socket reads for one submit_many of 50 jobs"
    );
    assert!(results
        .iter()
        .all(|r| r.as_ref().map(|s| s.created).unwrap_or(false)));
    let len: usize = raw.xlen(work_key("v")).await.unwrap();
    assert_eq!(len, 50);
}
