//! SPEC §4.7: bad input fails loudly and harms nothing: invalid names and oversized scripts are
//! typed errors before anything is written; a corrupt job hash ends the job `error` with the
//! reason; a stream entry naming a missing job is dropped; the worker keeps running.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{Error, Job, JobId, NewJob, Status};
use hero_testkit::{job_key, work_key};
use hero_testkit::{InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker, WorkerEvent};
use redis::AsyncCommands;

async fn dbsize(server: &RedisServer) -> usize {
    let mut raw = server.conn().await;
    redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap()
}

#[tokio::test]
async fn submit_is_rejected_before_anything_is_written_when_input_is_invalid() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let cases = [
        NewJob::builder("bad type", "x").build(),
        NewJob::builder("osis", "x").group("a:b").build(),
        NewJob::builder("osis", "x").instance("").build(),
        NewJob::builder("osis", "x").id("has space").build(),
        NewJob::builder("osis", "x").priority(10).build(),
        NewJob::builder("osis", "x".repeat(hero_protocol::MAX_SCRIPT_BYTES + 1)).build(),
        NewJob::builder("osis", "x")
            .log_path("../../etc/passwd")
            .build(),
        NewJob::builder("osis", "x").log_path("/var/log/x").build(),
        NewJob::builder("osis", "x").env("", "v").build(),
    ];
    for (i, case) in cases.into_iter().enumerate() {
        let err = case.expect_err(&format!("case {i} must be rejected"));
        assert!(
            matches!(err, Error::InvalidName { .. } | Error::InvalidInput(_)),
            "case {i}: {err:?}"
        );
        assert!(!err.to_string().is_empty());
    }
    let msg = NewJob::builder("osis", "x")
        .group("a:b")
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("group") && msg.contains("a:b") && msg.contains("A-Z"),
        "says what and how: {msg}"
    );
    assert_eq!(dbsize(&server).await, 0, "nothing written");
    let _ = client;
}

#[tokio::test]
async fn corrupt_job_hash_ends_error_with_the_reason_and_the_worker_keeps_running_and_an_unknown_field_is_no_error(
) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let corrupt = NewJob::builder("v", "x").build().unwrap();
    let foreign = NewJob::builder("v", "x").build().unwrap();
    let counted = NewJob::builder("v", "x").build().unwrap();
    client.submit(&corrupt).await.unwrap();
    client.submit(&foreign).await.unwrap();
    client.submit(&counted).await.unwrap();
    let mut raw = server.conn().await;
    let _: () = raw
        .hset(job_key(corrupt.id()), "timeout", "banana")
        .await
        .unwrap();
    let _: () = raw
        .hset(job_key(foreign.id()), "color", "blue")
        .await
        .unwrap();
    // a field the server function itself counts with
    let _: () = raw
        .hset(job_key(counted.id()), "attempts", "many")
        .await
        .unwrap();
    let _: String = raw
        .xadd(work_key("v"), "*", &[("j", "ghost")])
        .await
        .unwrap();
    let good = NewJob::builder("v", "x").build().unwrap();
    client.submit(&good).await.unwrap();

    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async { Outcome::Done("ok".into()) });
    let mut w = InProcWorker::spawn(worker);
    let dropped = w
        .next(Duration::from_secs(10), |e| match e {
            WorkerEvent::Dropped { job_id, reason } => Some((job_id.clone(), reason.clone())),
            _ => None,
        })
        .await;
    assert_eq!(dropped, ("ghost".to_string(), "missing".to_string()));
    let r = client
        .wait(good.id(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.output, "ok", "the worker kept running");

    // a field the worker does not know is a newer version's (SPEC §4.7): the job runs, and
    // the field stays as it was
    let r = client
        .wait(foreign.id(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "ok"));
    let color: String = raw.hget(job_key(foreign.id()), "color").await.unwrap();
    assert_eq!(color, "blue");
    for (job, field) in [(&corrupt, "timeout"), (&counted, "attempts")] {
        let r = client
            .wait(job.id(), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(r.status, Status::Error, "{field}: {r:?}");
        assert!(
            r.error.starts_with("invalid job:") && r.error.contains(field),
            "{}",
            r.error
        );
    }
    // reading the corrupt record through the API is a typed error naming key and field
    match client.get(corrupt.id()).await {
        Err(Error::InvalidJob(e)) => {
            assert_eq!((e.key, e.field), (job_key(corrupt.id()), "timeout".into()));
        }
        other => panic!("expected InvalidJob, got {other:?}"),
    }
    match client.get(&JobId::new("nope").unwrap()).await {
        Err(Error::JobNotFound(_)) => {}
        other => panic!("expected JobNotFound, got {other:?}"),
    }
    w.stop().await;
}
