//! Priority aging (a queue policy's `aging_ms`): under a steady flow of higher-priority work, a
//! job at a lower level is served once it has waited long enough to rank one level up per period,
//! decided inside the fetch, so it holds for workers of any language (and in a fair queue, whose
//! jobs wait in a gate); without aging it starves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hero_client::Client;
use hero_protocol::policy::Policy;
use hero_protocol::{Job, JobId, NewJob, Status};
use hero_testkit::{wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const PERIOD_MS: u64 = 400;

/// Runs a worker of concurrency 1 over a level-5 backlog that refills itself (every level-5 job
/// submits the next), with one job at level 7 among it; returns the ids in the order they ran
/// once `done` says so of them (within `within`, or the test fails).
async fn serve_under_a_steady_flow(
    client: &Client,
    what: &str,
    within: Duration,
    done: fn(&[String]) -> bool,
) -> Vec<String> {
    serve_under_a_steady_flow_with(client, what, within, done, false).await
}

/// As [`serve_under_a_steady_flow`]; with `drop_wake_up`, the level-7 stream's entries are
/// trimmed once its job is queued, as a fetch that visited the level leaves it: in a fair queue
/// the job then waits in the gate alone, with no entry on the stream to date it.
async fn serve_under_a_steady_flow_with(
    client: &Client,
    what: &str,
    within: Duration,
    done: fn(&[String]) -> bool,
    drop_wake_up: bool,
) -> Vec<String> {
    let mut backlog = Vec::new();
    for n in 0..20 {
        backlog.push(
            NewJob::builder("osis", "x")
                .id(format!("p5-{n}"))
                .priority(5)
                .build()
                .unwrap(),
        );
    }
    client.submit_many(&backlog).await.unwrap();
    client
        .submit(
            &NewJob::builder("osis", "x")
                .id("p7")
                .priority(7)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    if drop_wake_up {
        let level7 = client.keys().work(
            &hero_protocol::Target::of_type(hero_protocol::ScriptType::new("osis").unwrap()),
            hero_protocol::Priority::new(7).unwrap(),
        );
        let _: i64 = client
            .redis()
            .query(redis::cmd("XTRIM").arg(level7).arg("MAXLEN").arg(0))
            .await
            .unwrap();
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let producer = client.clone();
    let worker = Worker::builder(client.clone())
        .types(["osis"])
        .concurrency(1)
        .handler(move |job: Job, _| {
            let seen = seen.clone();
            let producer = producer.clone();
            async move {
                let n = {
                    let mut s = seen.lock().unwrap();
                    s.push(job.id.to_string());
                    s.len()
                };
                if job.priority.level() == 5 {
                    // the flow of higher-priority work never runs dry
                    let next = NewJob::builder("osis", "x")
                        .id(format!("p5-more-{n}"))
                        .priority(5)
                        .build()
                        .unwrap();
                    producer.submit(&next).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Outcome::Done(String::new())
            }
        });
    let w = InProcWorker::spawn(worker);
    let seen = order.clone();
    wait_for(what, within, move || {
        let seen = seen.clone();
        async move { done(&seen.lock().unwrap()).then_some(()) }
    })
    .await;
    w.stop().await;
    let got = order.lock().unwrap().clone();
    got
}

/// A fresh Redis whose `osis` queue ages by [`PERIOD_MS`] (and is fair when `fair`).
async fn aged_queue(fair: bool) -> (RedisServer, Client) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    hero_admin::Admin::from(&client)
        .set_policy(
            "osis",
            &Policy {
                aging_ms: Some(PERIOD_MS),
                fair: fair.then_some(true),
                ..Policy::default()
            },
        )
        .await
        .unwrap();
    (server, client)
}

#[tokio::test]
async fn a_low_priority_job_rises_a_level_per_aging_period_when_higher_work_never_stops() {
    let (_server, client) = aged_queue(false).await;
    let order = serve_under_a_steady_flow(
        &client,
        "the level-7 job to run under the level-5 flow",
        Duration::from_secs(20),
        |ran| ran.iter().any(|id| id == "p7"),
    )
    .await;
    let at = order.iter().position(|id| id == "p7");
    // two levels up (7 -> 5) takes two periods: it may not overtake the flow before that, by
    // Redis's own clock (the record's timestamps)
    let job = client.get(&JobId::new("p7").unwrap()).await.unwrap();
    assert!(matches!(job.status, Status::Started | Status::Finished));
    let created = hero_protocol::clock::parse_iso_ms(&job.created_at).unwrap();
    let started = hero_protocol::clock::parse_iso_ms(job.started_at.as_deref().unwrap()).unwrap();
    assert!(
        started.saturating_sub(created) + 50 >= 2 * PERIOD_MS,
        "served after {} ms, before two aging periods ({} ms) had passed",
        started - created,
        2 * PERIOD_MS
    );
    assert!(
        at.unwrap() > 0,
        "the level-7 job ran first: it must wait behind the flow for two periods"
    );
}

#[tokio::test]
async fn a_low_priority_job_starves_under_higher_work_when_its_queue_has_no_aging() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // 300 jobs of at least 5 ms each: longer than the periods the other test waits
    let order = serve_under_a_steady_flow(
        &client,
        "300 jobs of the flow",
        Duration::from_secs(30),
        |ran| ran.len() >= 300,
    )
    .await;
    assert!(
        !order.iter().any(|id| id == "p7"),
        "strict priority served the level-7 job while level 5 still had work"
    );
}

#[tokio::test]
async fn in_a_fair_queue_a_low_priority_job_rises_too() {
    // the level-7 job waits in its level's fair gate, not on the stream: aging reads the gate
    let (_server, client) = aged_queue(true).await;
    let order = serve_under_a_steady_flow_with(
        &client,
        "the level-7 job of a fair queue to run under the level-5 flow",
        Duration::from_secs(20),
        |ran| ran.iter().any(|id| id == "p7"),
        true,
    )
    .await;
    assert!(order.iter().position(|id| id == "p7").unwrap() > 0);
}
