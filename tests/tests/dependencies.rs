//! Dependencies: a job with prerequisites waits until every one finished and is queued by the
//! call that finished the last one; a prerequisite that ends error fails its dependents,
//! transitively, with the reason; a flow (a parent and its children) is one call; a fan-in of
//! 5,000 releases its dependent once; a worker SIGKILLed while running the last prerequisite
//! still leads to the dependent running once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hero_broker::config::BrokerConfig;
use hero_client::{Client, Flow};
use hero_protocol::{Job, JobId, NewJob, Status};
use hero_testkit::{test_worker, InProcBroker, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

fn job(id: &str, script: &str) -> hero_protocol::NewJobBuilder {
    NewJob::builder("dep", script).id(id)
}

/// A worker of type `dep` that records the order it ran jobs in; `fail` scripts fail.
fn recording_worker(client: &Client, ran: Arc<Mutex<Vec<String>>>) -> InProcWorker {
    InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["dep"])
            .concurrency(4)
            .handler(move |j: Job, _| {
                let ran = ran.clone();
                async move {
                    ran.lock().unwrap().push(j.id.to_string());
                    if j.script == "fail" {
                        Outcome::Abort("boom".into())
                    } else {
                        Outcome::Done(j.id.to_string())
                    }
                }
            }),
    )
}

#[tokio::test]
async fn a_diamond_runs_in_order_and_a_failed_root_fails_every_dependent_with_the_reason() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // D waits on B and C, which wait on A: submitted as one flow, one call
    let a = job("a", "x").build().unwrap();
    let b = job("b", "x").after("a").build().unwrap();
    let c = job("c", "x").after("a").build().unwrap();
    let d = Flow::new(job("d", "x").build().unwrap())
        .child(b.clone())
        .child(c.clone());
    // a is submitted first, on its own: d's flow names it through b and c
    client.submit(&a).await.unwrap();
    let root = client.submit_flow(&d).await.unwrap();
    assert_eq!(root.status, "waiting", "d waits on b and c");
    let dj = hero_testkit::record(&client, "d").await;
    assert_eq!(dj.prerequisites, vec!["b".to_string(), "c".to_string()]);
    assert_eq!(dj.prerequisites_left, 2);

    let ran = Arc::new(Mutex::new(Vec::new()));
    let _w = recording_worker(&client, ran.clone());
    let r = client.wait(&JobId::new("d").unwrap(), LIMIT).await.unwrap();
    assert_eq!(r.status, Status::Finished, "{r:?}");
    let order = ran.lock().unwrap().clone();
    let at = |id: &str| order.iter().position(|x| x == id).unwrap();
    assert_eq!(order.len(), 4, "each ran once: {order:?}");
    assert!(at("a") < at("b") && at("a") < at("c"), "{order:?}");
    assert!(at("b") < at("d") && at("c") < at("d"), "{order:?}");
    for (before, after) in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")] {
        let (x, y) = (
            hero_testkit::record(&client, before).await,
            hero_testkit::record(&client, after).await,
        );
        assert!(
            x.finished_at.unwrap() <= y.started_at.unwrap(),
            "{after} started after {before} finished"
        );
    }

    // the same diamond with a failing root: nothing after it runs, each ends error
    let fa = job("fa", "fail").build().unwrap();
    client.submit(&fa).await.unwrap();
    let flow = Flow::new(job("fd", "x").build().unwrap())
        .child(job("fb", "x").after("fa").build().unwrap())
        .child(job("fc", "x").after("fa").build().unwrap());
    client.submit_flow(&flow).await.unwrap();
    let r = client
        .wait(&JobId::new("fd").unwrap(), LIMIT)
        .await
        .unwrap();
    assert_eq!(r.status, Status::Error);
    for (id, because) in [("fb", "fa"), ("fc", "fa"), ("fd", "fb")] {
        let j = hero_testkit::record(&client, id).await;
        assert_eq!(j.status, Status::Error, "{id}");
        assert_eq!(
            j.error.as_deref(),
            Some(format!("dependency failed: {because}").as_str()),
            "{id} names the prerequisite that failed it"
        );
        assert!(
            !ran.lock().unwrap().contains(&id.to_string()),
            "{id} never ran"
        );
    }

    // a dependent of a job that ended error already fails at submit; one of a finished job
    // runs at once; one of a job that does not exist is refused
    let late = client
        .submit(&job("late", "x").after("fa").build().unwrap())
        .await
        .unwrap();
    assert_eq!(late.status, "error");
    assert_eq!(
        hero_testkit::record(&client, "late").await.error.as_deref(),
        Some("dependency failed: fa")
    );
    let after_done = client
        .submit(&job("after-done", "x").after("a").build().unwrap())
        .await
        .unwrap();
    assert_eq!(after_done.status, "dispatched");
    let missing = client
        .submit(&job("orphan", "x").after("no-such-job").build().unwrap())
        .await
        .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("prerequisite no-such-job does not exist"),
        "{missing}"
    );
    // a job cannot wait on itself: it does not exist before it is submitted
    let cycle = client
        .submit(&job("self", "x").after("self").build().unwrap())
        .await
        .unwrap_err();
    assert!(cycle.to_string().contains("does not exist"), "{cycle}");
}

#[tokio::test]
async fn a_fan_in_of_5000_releases_its_dependent_once_and_a_chain_of_1000_fails_in_one_call() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let prereqs: Vec<NewJob> = (0..5000)
        .map(|i| job(&format!("p{i}"), "x").build().unwrap())
        .collect();
    for chunk in prereqs.chunks(500) {
        for r in client.submit_many(chunk).await.unwrap() {
            r.unwrap();
        }
    }
    let mut fan = job("fan", "x");
    for p in &prereqs {
        fan = fan.after(p.id().as_str());
    }
    assert_eq!(
        client.submit(&fan.build().unwrap()).await.unwrap().status,
        "waiting"
    );
    let ran = Arc::new(Mutex::new(Vec::new()));
    let w = recording_worker(&client, ran.clone());
    let r = client
        .wait(&JobId::new("fan").unwrap(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished);
    let fan_runs = ran.lock().unwrap().iter().filter(|x| *x == "fan").count();
    assert_eq!(fan_runs, 1, "released and run exactly once");
    assert_eq!(hero_testkit::record(&client, "fan").await.attempts, 1);
    let mut raw = server.conn().await;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("hero:deps:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "no dependents hash outlives its release: {left:?}"
    );
    w.stop().await;

    // a chain c0 <- c1 <- ... <- c999: its head failing ends all of them in that one call
    let mut chain = vec![job("c0", "fail").build().unwrap()];
    for i in 1..1000 {
        chain.push(
            job(&format!("c{i}"), "x")
                .after(format!("c{}", i - 1))
                .build()
                .unwrap(),
        );
    }
    for r in client.submit_many(&chain).await.unwrap() {
        r.unwrap();
    }
    let _w = recording_worker(&client, ran.clone());
    let r = client
        .wait(&JobId::new("c999").unwrap(), LIMIT)
        .await
        .unwrap();
    assert_eq!(r.status, Status::Error);
    assert_eq!(
        hero_testkit::record(&client, "c999").await.error.as_deref(),
        Some("dependency failed: c998")
    );
}

#[tokio::test]
async fn a_worker_killed_while_running_the_last_prerequisite_still_leads_to_one_run_of_the_dependent(
) {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(
        &url,
        BrokerConfig {
            presence_poll: Duration::from_millis(100),
            ..BrokerConfig::default()
        },
    )
    .await;
    let client = Client::connect(&url).await.unwrap();
    let flags = ["--presence-ms", "1000", "--lease-ms", "60000"];
    let mut a = test_worker(&url, "dep", "A", &flags);
    a.expect_line("ready", LIMIT).await;
    let flow = Flow::new(job("after-kill", "x").build().unwrap())
        .child(job("slow", "sleep 60000").build().unwrap());
    client.submit_flow(&flow).await.unwrap();
    a.expect_line("started slow", LIMIT).await;
    a.kill9();
    // a second worker takes the recovered prerequisite, finishes it, then the dependent
    let b = test_worker(&url, "dep", "B", &flags);
    b.expect_line("ready", LIMIT).await;
    // B would run the recovered job's 60 s sleep in full: it is shortened in the record
    let mut raw = server.conn().await;
    let _: () = redis::cmd("HSET")
        .arg(hero_testkit::job_key("slow"))
        .arg("script")
        .arg("sleep 10")
        .query_async(&mut raw)
        .await
        .unwrap();
    let r = client
        .wait(&JobId::new("after-kill").unwrap(), LIMIT)
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished, "{r:?}");
    assert_eq!(r.output, "B");
    assert_eq!(
        b.starts_seen("after-kill", 1).await,
        1,
        "the dependent ran once"
    );
    assert_eq!(
        hero_testkit::record(&client, "after-kill").await.attempts,
        1
    );
    assert_eq!(hero_testkit::record(&client, "slow").await.attempts, 2);
}

/// A prerequisite's record names its dependents (docs/protocol.md §3), in submit order,
/// whether they wait on it or it had finished already.
#[tokio::test]
async fn a_prerequisites_record_names_its_dependents() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .submit(&job("root", "x").build().unwrap())
        .await
        .unwrap();
    for d in ["d1", "d2"] {
        client
            .submit(&job(d, "x").after("root").build().unwrap())
            .await
            .unwrap();
    }
    let root = hero_testkit::record(&client, "root").await;
    assert_eq!(root.dependents, ["d1", "d2"]);
    let d1 = hero_testkit::record(&client, "d1").await;
    assert!(d1.dependents.is_empty());
    assert_eq!(d1.prerequisites, ["root"]);
}
