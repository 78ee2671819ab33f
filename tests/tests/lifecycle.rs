//! Stop and cancel, graceful shutdown with hand-back, retries, and surviving Redis going away.

use std::time::Duration;

use hero_broker::config::BrokerConfig;
use hero_client::{Client, StopOutcome};
use hero_protocol::{Job, NewJob, Status};
use hero_testkit::keys;
use hero_testkit::{binary, InProcBroker, InProcWorker, Proc, RedisServer};
use hero_worker::{Outcome, Worker, WorkerEvent};

#[tokio::test]
async fn stopped_queued_job_never_starts() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let doomed = NewJob::builder("v", "x").build().unwrap();
    let after = NewJob::builder("v", "x").build().unwrap();
    client.submit(&doomed).await.unwrap();
    assert_eq!(
        client.stop(doomed.id()).await.unwrap(),
        StopOutcome::Cancelled
    );
    client.submit(&after).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async { Outcome::Done("ran".into()) });
    let mut w = InProcWorker::spawn(worker);
    let after_id = after.id().clone();
    let started = w
        .next(Duration::from_secs(10), |e| match e {
            WorkerEvent::Started { job_id, .. } => Some(job_id.clone()),
            _ => None,
        })
        .await;
    assert_eq!(
        started, after_id,
        "the stopped job is skipped, the next one runs"
    );
    let record = client.get(doomed.id()).await.unwrap();
    assert_eq!(
        (record.status, record.error.as_deref(), record.attempts),
        (Status::Error, Some("stopped"), 0)
    );
    w.stop().await;
}

#[tokio::test]
async fn stopped_running_job_is_interrupted_and_the_worker_goes_on() {
    let server = RedisServer::start();
    let url = server.url();
    // the real built-in Rhai worker, concurrency 1, running a script that never ends by itself
    let worker = hero_testkit::hero_worker(&url, &["--concurrency", "1"]);
    let client = Client::connect(&url).await.unwrap();
    let forever = NewJob::builder("rhai", "loop { }").build().unwrap();
    client.submit(&forever).await.unwrap();
    hero_testkit::wait_for("the endless job to start", Duration::from_secs(10), || {
        let client = client.clone();
        let id = forever.id().clone();
        async move { (client.status(&id).await.ok()? == Status::Started).then_some(()) }
    })
    .await;
    assert_eq!(
        client.stop(forever.id()).await.unwrap(),
        StopOutcome::Interrupted
    );
    let record = client.get(forever.id()).await.unwrap();
    assert_eq!(
        (record.status, record.error.as_deref()),
        (Status::Error, Some("stopped"))
    );
    // with its only slot freed the worker runs the next job: the loop was interrupted
    let next = NewJob::builder("rhai", "40 + 2").build().unwrap();
    let r = client.run(&next, Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.output, "42");
    drop(worker);
}

#[tokio::test]
async fn timeout_interrupts_the_handler_and_ends_the_job_error_timeout() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Outcome::Done("too late".into())
        });
    let w = InProcWorker::spawn(worker);
    let job = NewJob::builder("v", "x")
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let r = client.run(&job, Duration::from_secs(10)).await.unwrap();
    assert_eq!((r.status, r.error.as_str()), (Status::Error, "timeout"));
    w.stop().await;
}

#[tokio::test]
async fn a_panicking_handler_ends_its_job_error_and_the_worker_goes_on() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|j: Job, _| async move {
            assert!(j.script != "boom", "boom at {}", j.script.len());
            Outcome::Done("fine".into())
        });
    let w = InProcWorker::spawn(worker);
    let bad = NewJob::builder("v", "boom").build().unwrap();
    let r = client.run(&bad, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (r.status, r.error.as_str()),
        (Status::Error, "handler panicked: boom at 4")
    );
    let good = NewJob::builder("v", "x").build().unwrap();
    let r = client.run(&good, Duration::from_secs(10)).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "fine"));
    w.stop().await;
}

#[tokio::test]
async fn failed_job_is_retried_then_finishes() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|job: Job, _| async move {
            if job.attempts < 2 {
                Outcome::RetryAfter(Duration::from_millis(100), "not yet".into())
            } else {
                Outcome::Done(format!("attempt {}", job.attempts))
            }
        });
    let w = InProcWorker::spawn(worker);
    let job = NewJob::builder("v", "x").retries(3).build().unwrap();
    let r = client.run(&job, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (r.status, r.output.as_str()),
        (Status::Finished, "attempt 2")
    );
    let exhausted = NewJob::builder("v", "x").retries(0).build().unwrap();
    let r = client
        .run(&exhausted, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.error.as_str()),
        (Status::Error, "not yet"),
        "no budget: the reason is kept"
    );
    w.stop().await;
}

#[tokio::test]
async fn shutdown_hands_back_unfinished_jobs_so_another_worker_takes_them_at_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let slow = Worker::builder(client.clone())
        .types(["v"])
        .shutdown_deadline(Duration::from_millis(300))
        .handler(|_j: Job, _| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Outcome::Done("slow".into())
        });
    let mut a = InProcWorker::spawn(slow);
    let job = NewJob::builder("v", "x").build().unwrap();
    client.submit(&job).await.unwrap();
    a.next(Duration::from_secs(10), |e| {
        matches!(e, WorkerEvent::Started { .. }).then_some(())
    })
    .await;
    a.stop().await;
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(
        (record.status, record.attempts),
        (Status::Dispatched, 0),
        "handed back, attempt not counted"
    );
    // no broker runs here: only the hand-back can have put it back
    let fast = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async { Outcome::Done("fast".into()) });
    let b = InProcWorker::spawn(fast);
    let r = client
        .wait(job.id(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.output, "fast");
    b.stop().await;
}

#[tokio::test]
async fn graceful_shutdown_lets_a_running_job_finish_within_the_deadline() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Outcome::Done("done".into())
        });
    let mut w = InProcWorker::spawn(worker);
    let job = NewJob::builder("v", "x").build().unwrap();
    client.submit(&job).await.unwrap();
    w.next(Duration::from_secs(10), |e| {
        matches!(e, WorkerEvent::Started { .. }).then_some(())
    })
    .await;
    w.stop().await;
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(
        (record.status, record.output.as_deref()),
        (Status::Finished, Some("done"))
    );
    let presence: Vec<String> = {
        let mut raw = server.conn().await;
        redis::cmd("KEYS")
            .arg(keys().presence_pattern())
            .query_async(&mut raw)
            .await
            .unwrap()
    };
    assert!(presence.is_empty(), "presence removed on clean exit");
}

#[tokio::test]
async fn worker_carries_on_when_redis_restarts_and_connections_drop() {
    let mut server = RedisServer::start_durable();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async { Outcome::Done("ok".into()) });
    let w = InProcWorker::spawn(worker);
    let first = NewJob::builder("v", "x").build().unwrap();
    assert_eq!(
        client
            .run(&first, Duration::from_secs(10))
            .await
            .unwrap()
            .output,
        "ok"
    );

    let mut raw = server.conn().await;
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut raw)
        .await
        .unwrap();
    let second = NewJob::builder("v", "x").build().unwrap();
    let r = hero_testkit::wait_for(
        "a submit after the connections dropped",
        Duration::from_secs(15),
        || {
            let (client, job) = (client.clone(), second.clone());
            async move { client.run(&job, Duration::from_secs(10)).await.ok() }
        },
    )
    .await;
    assert_eq!(r.output, "ok");

    server.restart();
    let third = NewJob::builder("v", "x").build().unwrap();
    let r = hero_testkit::wait_for(
        "a submit after Redis restarted",
        Duration::from_secs(30),
        || {
            let (client, job) = (client.clone(), third.clone());
            async move { client.run(&job, Duration::from_secs(10)).await.ok() }
        },
    )
    .await;
    assert_eq!(r.output, "ok", "the worker reconnected and carried on");
    w.stop().await;
}

#[tokio::test]
async fn sigterm_stops_a_worker_process_cleanly_and_hands_back_its_job() {
    let server = RedisServer::start();
    let url = server.url();
    let args = [
        "--url",
        url.as_str(),
        "--types",
        "t",
        "--shutdown-ms",
        "300",
    ];
    let mut worker = Proc::spawn(&binary("hero-test-worker"), &args, &[], None);
    worker.expect_line("ready", Duration::from_secs(10)).await;
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "sleep 60000").build().unwrap();
    client.submit(&job).await.unwrap();
    worker
        .expect_line(&format!("started {}", job.id()), Duration::from_secs(10))
        .await;
    worker.signal("TERM");
    worker
        .expect_line("stopped 1", Duration::from_secs(10))
        .await;
    assert_eq!(
        worker.wait_exit(Duration::from_secs(10)).await,
        0,
        "a clean exit"
    );
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(
        (record.status, record.attempts),
        (Status::Dispatched, 0),
        "back in its queue, no attempt counted"
    );
}
