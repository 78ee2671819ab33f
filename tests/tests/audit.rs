//! `hero audit`: one of each inconsistency planted by hand is reported in its class, and --fix
//! leaves the audit clean with no job lost or run twice.

use std::collections::HashMap;
use std::time::Duration;

use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{job_key, keys, work_key, InProcBroker, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker, WorkerEvent};
use redis::AsyncCommands;

fn audit(url: &str, fix: bool) -> (i32, serde_json::Value) {
    let mut args = vec!["--json", "audit"];
    if fix {
        args.push("--fix");
    }
    let (code, text, err) = hero_testkit::hero_cli(url, &args);
    let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text} {err}"));
    (code, v)
}

/// Leases the next entry of `stream` to `consumer` (a plain XREADGROUP, as a fetch would).
async fn lease(raw: &mut redis::aio::MultiplexedConnection, stream: &str, consumer: &str) {
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(hero_protocol::keys::CONSUMER_GROUP)
        .arg(consumer)
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query_async(raw)
        .await
        .unwrap();
}

#[tokio::test]
async fn every_planted_inconsistency_is_reported_in_its_class_and_fix_leaves_the_audit_clean() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut raw = server.conn().await;
    let stream = work_key("au");
    let submit = |id: &str| NewJob::builder("au", "x").id(id).build().unwrap();

    // stale: a pending entry whose job ended
    client.submit(&submit("ended")).await.unwrap();
    lease(&mut raw, &stream, "g:x:1").await;
    let _: () = raw
        .hset(job_key("ended"), "status", "finished")
        .await
        .unwrap();
    // orphaned: a delivery whose worker is gone (recovery's, not an inconsistency)
    client.submit(&submit("orphan")).await.unwrap();
    let fetch = hero_protocol::function::fetch(
        client.keys(),
        std::slice::from_ref(&stream),
        "g:gone:1",
        1,
        "0",
    );
    let _: redis::Value = client.redis().query(&fetch).await.unwrap();
    let _: () = raw.zadd(keys().consumers(), "g:gone:1", 1).await.unwrap(); // its liveness lapsed
                                                                            // foreign: a pending entry that names no job
    let _: String = raw.xadd(&stream, "*", &[("x", "y")]).await.unwrap();
    lease(&mut raw, &stream, "g:x:1").await;
    // missing: a pending entry naming a job with no record
    let _: String = raw.xadd(&stream, "*", &[("j", "ghost")]).await.unwrap();
    lease(&mut raw, &stream, "g:x:1").await;
    // lost: a dispatched job in no stream
    let _: () = raw
        .hset_multiple(
            job_key("lost"),
            &[
                ("status", "dispatched"),
                ("script", "x"),
                ("script_type", "au"),
            ],
        )
        .await
        .unwrap();
    // unleased: a started job whose lease is not pending
    let _: () = raw
        .hset_multiple(
            job_key("unleased"),
            &[
                ("status", "started"),
                ("script", "x"),
                ("script_type", "au"),
                ("lease", "1-0"),
                ("started_at", "2026-11-23T10:00:00.000Z"),
            ],
        )
        .await
        .unwrap();
    // stale delay: a delayed-set member whose job is not waiting
    let _: () = raw.zadd(keys().delayed(), "ended", 1).await.unwrap();
    // a reply list that never expires
    let reply = keys().reply_prefix() + "zz";
    let _: () = raw.lpush(&reply, "x").await.unwrap();
    // a consumer that holds nothing and belongs to no one (g:idle:1); and one that holds
    // nothing and is still in the liveness set (g:dying:1, a worker killed a moment ago): the
    // next presence pass deletes it, so it is no inconsistency
    for consumer in ["g:idle:1", "g:dying:1"] {
        let _: i64 = redis::cmd("XGROUP")
            .arg("CREATECONSUMER")
            .arg(&stream)
            .arg(hero_protocol::keys::CONSUMER_GROUP)
            .arg(consumer)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let _: () = raw.zadd(keys().consumers(), "g:dying:1", 1).await.unwrap();

    let (code, report) = audit(&url, false);
    assert_eq!(code, 1, "inconsistent: {report}");
    let counts = &report["counts"];
    for (class, n) in [
        ("stale", 1),
        ("orphaned", 1),
        ("foreign", 1),
        ("missing", 1),
        ("lost", 1),
        ("unleased", 1),
        ("stale_delay", 1),
        ("reply_without_ttl", 1),
        ("idle_consumer", 1),
        ("running", 0),
    ] {
        assert_eq!(counts[class], n, "{class}: {report:#}");
    }
    let find = |class: &str| {
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["class"] == class)
            .cloned()
            .unwrap()
    };
    assert_eq!(find("stale")["job"], "ended");
    assert_eq!(find("missing")["job"], "ghost");
    assert_eq!(find("orphaned")["consumer"], "g:gone:1");
    assert!(find("orphaned")["detail"]
        .as_str()
        .unwrap()
        .contains("recover"));
    assert_eq!(find("lost")["job"], "lost");
    assert_eq!(find("unleased")["job"], "unleased");
    assert_eq!(find("idle_consumer")["consumer"], "g:idle:1");

    let (code, fixed) = audit(&url, true);
    assert_eq!(code, 0, "clean after --fix: {fixed:#}");
    assert_eq!(fixed["consistent"], true);
    let repaired = fixed["fixed"].as_array().unwrap();
    // the eight planted, and the consumer that held the stale entries and holds nothing now
    assert_eq!(repaired.len(), 9, "{fixed:#}");
    assert!(repaired.iter().all(|f| f["result"] == "fixed"), "{fixed:#}");
    let ttl: i64 = raw.pttl(&reply).await.unwrap();
    assert!(ttl > 0, "the reply list expires now");

    // no job lost or run twice: a worker and a broker take it from here
    let cfg = BrokerConfig {
        lease: Duration::from_secs(1),
        ..BrokerConfig::default()
    };
    let _broker = InProcBroker::spawn(&url, cfg).await;
    let mut w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["au"])
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("ok".into()) }),
    );
    let mut runs: HashMap<String, usize> = HashMap::new();
    while runs.len() < 3 {
        let id = w
            .next(Duration::from_secs(15), |e| match e {
                WorkerEvent::Completed { job_id, .. } => Some(job_id.to_string()),
                _ => None,
            })
            .await;
        *runs.entry(id).or_default() += 1;
    }
    w.stop().await;
    let mut ran: Vec<_> = runs.into_iter().collect();
    ran.sort();
    assert_eq!(
        ran,
        [
            ("lost".to_string(), 1),
            ("orphan".to_string(), 1),
            ("unleased".to_string(), 1)
        ],
        "the lost, unleased and orphaned jobs each ran once; the ended one did not run again"
    );
    let (code, after) = audit(&url, false);
    assert_eq!(code, 0, "{after:#}");
}

/// An error reading Redis fails the audit loudly; it never reads as a clean audit. A
/// registered queue whose key holds a string answers XPENDING with WRONGTYPE: before, the audit
/// took that for "nothing pending" and called the system consistent.
#[tokio::test]
async fn an_error_reading_redis_fails_the_audit_instead_of_passing_it() {
    let server = RedisServer::start();
    let mut raw = server.conn().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let stream = work_key("audited");
    let _: () = raw.sadd(keys().queues(), &stream).await.unwrap();
    let _: () = raw.set(&stream, "not a stream").await.unwrap();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        hero_admin::Inspector::from(&client).audit(&|_: &str| {}),
    )
    .await
    .expect("the audit answers")
    .expect_err("an audit that could not read a queue is not clean");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let (code, _, stderr) = hero_testkit::hero_cli(&server.url(), &["audit"]);
    assert_ne!(code, 0, "hero audit exits non-zero");
    assert!(stderr.contains("WRONGTYPE"), "and says why: {stderr}");
}

/// A dependent still waiting on prerequisites that have all ended is flagged: nothing would
/// ever release it. One whose prerequisite is still queued is not.
#[tokio::test]
async fn a_dependent_waiting_on_prerequisites_that_all_ended_is_flagged() {
    let server = RedisServer::start();
    let mut raw = server.conn().await;
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .submit(&NewJob::builder("pre", "x").id("p-open").build().unwrap())
        .await
        .unwrap();
    client
        .submit(
            &NewJob::builder("dep", "x")
                .id("d-fine")
                .after("p-open")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    // planted: a dependent whose only prerequisite finished without releasing it
    let _: () = redis::cmd("HSET")
        .arg(job_key("p-done"))
        .arg(&["status", "finished", "script", "x", "script_type", "pre"])
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(job_key("d-stuck"))
        .arg(&[
            ("status", "waiting"),
            ("script", "x"),
            ("script_type", "dep"),
            ("deps_left", "1"),
            ("prerequisites", "[\"p-done\"]"),
        ])
        .query_async(&mut raw)
        .await
        .unwrap();
    let (code, v) = audit(&server.url(), false);
    assert_eq!(code, 1, "{v}");
    let stuck: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["class"] == "stuck_dependent")
        .collect();
    assert_eq!(stuck.len(), 1, "{v}");
    assert_eq!(stuck[0]["job"], "d-stuck");
    assert!(
        stuck[0]["detail"]
            .as_str()
            .unwrap()
            .contains("p-done finished"),
        "{v}"
    );
}
