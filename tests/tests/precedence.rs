//! SPEC §4.4: a worker takes instance → group → type, priority 0 first within each, exactly,
//! under a backlog; concurrency N means at most N handlers at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hero_client::Client;
use hero_protocol::{Job, NewJob};
use hero_testkit::{InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker, WorkerEvent};

#[tokio::test]
async fn worker_takes_instance_then_group_then_type_and_priority_0_first_when_backlogged() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // (id, group, instance, priority); submitted in an order that is none of the expected one
    let backlog = [
        ("type-p5", None, None, 5u8),
        ("group-p1", Some("g"), None, 1),
        ("inst-p5", Some("g"), Some("i1"), 5),
        ("type-p0", None, None, 0),
        ("group-p5", Some("g"), None, 5),
        ("inst-p1", Some("g"), Some("i1"), 1),
        ("type-p1", None, None, 1),
        ("group-p0", Some("g"), None, 0),
        ("inst-p0", Some("g"), Some("i1"), 0),
        ("other-inst", Some("g"), Some("i2"), 0),
        ("other-group", Some("h"), None, 0),
    ];
    let mut jobs = Vec::new();
    for (id, group, instance, prio) in backlog {
        let mut b = NewJob::builder("osis", "x").id(id).priority(prio);
        if let Some(g) = group {
            b = b.group(g);
        }
        if let Some(i) = instance {
            b = b.instance(i);
        }
        jobs.push(b.build().unwrap());
    }
    client.submit_many(&jobs).await.unwrap();

    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let producer = client.clone();
    let worker = Worker::builder(client.clone())
        .types(["osis"])
        .group("g")
        .instance("i1")
        .concurrency(1)
        .handler(move |job: Job, _| {
            let seen = seen.clone();
            let producer = producer.clone();
            async move {
                let first = {
                    let mut s = seen.lock().unwrap();
                    s.push(job.id.to_string());
                    s.len() == 1
                };
                if first {
                    // arrives while the backlog waits: it must be the very next job started
                    let late = NewJob::builder("osis", "x")
                        .id("late-inst-p0")
                        .group("g")
                        .instance("i1")
                        .priority(0);
                    producer.submit(&late.build().unwrap()).await.unwrap();
                }
                Outcome::Done(String::new())
            }
        });
    let mut w = InProcWorker::spawn(worker);
    for _ in 0..10 {
        w.next(Duration::from_secs(10), |e| {
            matches!(e, WorkerEvent::Completed { .. }).then_some(())
        })
        .await;
    }
    let got = order.lock().unwrap().clone();
    assert_eq!(
        got,
        [
            "inst-p0",
            "late-inst-p0",
            "inst-p1",
            "inst-p5",
            "group-p0",
            "group-p1",
            "group-p5",
            "type-p0",
            "type-p1",
            "type-p5"
        ]
    );
    w.stop().await;
    // other instances' and groups' jobs were never this worker's
    for id in ["other-inst", "other-group"] {
        let status = client
            .status(&hero_protocol::JobId::new(id).unwrap())
            .await
            .unwrap();
        assert_eq!(status, hero_protocol::Status::Dispatched, "{id}");
    }
}

#[tokio::test]
async fn worker_runs_at_most_concurrency_handlers_at_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let jobs: Vec<NewJob> = (0..40)
        .map(|_| NewJob::builder("v", "x").build().unwrap())
        .collect();
    client.submit_many(&jobs).await.unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .concurrency(3)
        .handler(move |_job: Job, _| {
            let (r, p) = (r.clone(), p.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Outcome::Done(String::new())
            }
        });
    let mut w = InProcWorker::spawn(worker);
    for _ in 0..40 {
        w.next(Duration::from_secs(10), |e| {
            matches!(e, WorkerEvent::Completed { .. }).then_some(())
        })
        .await;
    }
    assert_eq!(peak.load(Ordering::SeqCst), 3, "three at once, never more");
    w.stop().await;
}

#[tokio::test]
async fn idle_worker_wakes_within_milliseconds_of_a_submit() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // its duties off: the FCALLs counted below are its fetches (the duty holder calls
    // hero_duties every 100 ms, which is the upkeep's cost, measured by benches/idle-duties)
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .duties(false)
        .handler(|_job: Job, _| async { Outcome::Done("ok".into()) });
    let mut w = InProcWorker::spawn(worker);
    w.next(Duration::from_secs(5), |e| {
        matches!(e, WorkerEvent::Ready { .. }).then_some(())
    })
    .await;
    // the worker is parked in its blocking wait (XREAD BLOCK) before the job arrives
    let raw = server.conn().await;
    hero_testkit::wait_for(
        "the worker blocked in XREAD",
        Duration::from_secs(5),
        || {
            let mut raw = raw.clone();
            async move {
                let clients: String = redis::cmd("CLIENT")
                    .arg("LIST")
                    .query_async(&mut raw)
                    .await
                    .ok()?;
                clients.contains("cmd=xread").then_some(())
            }
        },
    )
    .await;
    // parked, it sends no fetches: at most one per 2 s wake-up timeout
    let fcalls = |raw: redis::aio::MultiplexedConnection| async move {
        let mut raw = raw;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut raw)
            .await
            .unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = fcalls(raw.clone()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_calls = fcalls(raw.clone()).await - before;
    assert!(
        idle_calls <= 1,
        "{idle_calls} fetches in 1 s of idling: busy polling"
    );
    let job = NewJob::builder("v", "x").build().unwrap();
    let start = std::time::Instant::now();
    let r = client.run(&job, Duration::from_secs(5)).await.unwrap();
    let took = start.elapsed();
    assert_eq!(r.output, "ok");
    // the worker blocks up to 2 s per wait: well under that means it was woken, not polling
    assert!(took < Duration::from_millis(500), "took {took:?}");
    w.stop().await;
}

/// Group commit (a durable Redis, `appendfsync always`): under a backlog the completer fetches
/// the next jobs in the round trip that records each batch, handing the freed slots straight
/// on. It is on by itself when the server says it fsyncs every write, and it keeps the
/// worker's promises: priority 0 first, at most N handlers at once, every job run and recorded
/// exactly once.
#[tokio::test]
async fn group_commit_on_a_durable_redis_keeps_precedence_the_concurrency_bound_and_every_job() {
    let plain = RedisServer::start();
    let plain_client = Client::connect(&plain.url()).await.unwrap();
    assert!(
        !plain_client.redis().caps().fsync_always,
        "a Redis without an AOF is not durable"
    );
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = Client::connect(&server.url()).await.unwrap();
    assert!(
        client.redis().caps().fsync_always,
        "appendfsync always is detected"
    );
    // a backlog at two priorities, the low one submitted first
    let low: Vec<NewJob> = (0..300)
        .map(|i| {
            NewJob::builder("v", "x")
                .id(format!("low-{i}"))
                .priority(7)
                .build()
                .unwrap()
        })
        .collect();
    let high: Vec<NewJob> = (0..300)
        .map(|i| {
            NewJob::builder("v", "x")
                .id(format!("high-{i}"))
                .priority(2)
                .build()
                .unwrap()
        })
        .collect();
    client.submit_many(&low).await.unwrap();
    client.submit_many(&high).await.unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (r, p, o) = (running.clone(), peak.clone(), order.clone());
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .concurrency(4)
        .handler(move |job: Job, _| {
            let (r, p, o) = (r.clone(), p.clone(), o.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                o.lock().unwrap().push(job.id.to_string());
                tokio::task::yield_now().await;
                r.fetch_sub(1, Ordering::SeqCst);
                Outcome::Done(String::new())
            }
        });
    let mut w = InProcWorker::spawn(worker);
    let mut recorded = std::collections::HashSet::new();
    while recorded.len() < 600 {
        let (id, completion) = w
            .next(Duration::from_secs(20), |e| match e {
                WorkerEvent::Completed {
                    job_id, completion, ..
                } => Some((job_id.to_string(), *completion)),
                _ => None,
            })
            .await;
        assert_eq!(
            completion,
            hero_protocol::function::Completion::Completed,
            "{id}"
        );
        assert!(recorded.insert(id.clone()), "{id} recorded twice");
    }
    w.stop().await;
    assert!(
        peak.load(Ordering::SeqCst) <= 4,
        "never more than 4 at once"
    );
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 600, "every job ran once");
    let first_low = order.iter().position(|id| id.starts_with("low-")).unwrap();
    assert!(
        order[..first_low].len() >= 300 - 4,
        "priority 2 is served before priority 7 (a low job can only start once the high ones \
         were all leased): first low job at {first_low}"
    );
}
