//! Fair share within a queue (issue 52), against a real redis-server and a real worker: with the
//! queue paused, 200 jobs of key A then 20 of B and 20 of C submitted, and the queue resumed
//! with one job running at a time, every job of B and C starts within the first 80 starts when
//! the queue is fair, and only after A's 200 when it is not. Every job runs once, and the counts
//! see the jobs waiting in the gate.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hero_client::Client;
use hero_protocol::policy::Policy;
use hero_protocol::NewJob;
use hero_testkit::{wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

/// The order in which one worker at a time starts 200 jobs of A, then 20 of B and 20 of C.
async fn start_order(fair: bool) -> (Vec<String>, u64) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    if fair {
        admin
            .set_policy(
                "tenants",
                &Policy {
                    fair: Some(true),
                    ..Policy::default()
                },
            )
            .await
            .unwrap();
    }
    admin.pause("tenants").await.unwrap();
    let mut jobs = Vec::new();
    for (key, n) in [("A", 200), ("B", 20), ("C", 20)] {
        for i in 0..n {
            jobs.push(
                NewJob::builder("tenants", "x")
                    .id(format!("{key}-{i}"))
                    .limit_key(key)
                    .build()
                    .unwrap(),
            );
        }
    }
    client.submit_many(&jobs).await.unwrap();
    let counts = admin.job_counts("tenants").await.unwrap();
    let waiting = counts.waiting;
    admin.resume("tenants").await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["tenants"])
            .concurrency(1)
            .handler(move |j: hero_protocol::Job, _| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(j.id.to_string());
                    Outcome::Done(String::new())
                }
            }),
    );
    let done = order.clone();
    wait_for("240 jobs to start", Duration::from_secs(60), || {
        let done = done.clone();
        async move { (done.lock().unwrap().len() >= 240).then_some(()) }
    })
    .await;
    let order = order.lock().unwrap().clone();
    if fair {
        // a key with nothing waiting costs no memory: no lane, no ring left
        let mut raw = server.conn().await;
        let left: Vec<String> = redis::cmd("KEYS")
            .arg("*:fair*")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
    (order, waiting)
}

#[tokio::test]
async fn a_fair_queue_serves_every_small_key_within_the_first_rounds() {
    let (order, waiting) = start_order(true).await;
    // the jobs in the gate (a paused stream gets no wake-up entry to count)
    assert_eq!(waiting, 240, "the counts see the jobs in the gate");
    let mut unique = order.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 240, "every job ran once: {order:?}");
    let small_by = order.iter().rposition(|id| !id.starts_with("A-")).unwrap();
    assert!(
        small_by < 80,
        "B and C all started within the first 80 starts, the last at {small_by}: {order:?}"
    );
    // A's jobs keep their own order
    let a: Vec<&String> = order.iter().filter(|id| id.starts_with("A-")).collect();
    assert!(a
        .windows(2)
        .all(|w| { w[0][2..].parse::<u32>().unwrap() < w[1][2..].parse::<u32>().unwrap() }));
}

#[tokio::test]
async fn a_queue_without_fair_share_serves_first_in_first_out() {
    let (order, _) = start_order(false).await;
    let first_small = order.iter().position(|id| !id.starts_with("A-")).unwrap();
    assert_eq!(first_small, 200, "B and C after A's 200: {order:?}");
}
