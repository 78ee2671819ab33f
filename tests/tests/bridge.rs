//! The legacy bridge (SPEC §6, issue 4) with real processes: legacy producers and actors that
//! speak only seed 001's list protocol (HSET, LPUSH, BLPOP, HSET status/output, LPUSH reply)
//! interoperate with the new client and worker; a broker killed with SIGKILL mid-move loses and
//! doubles nothing; a legacy actor killed mid-job has its job handed out again; dual-push runs
//! every job once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hero_broker::bridge::{BridgeMapping, Direction};
use hero_broker::config::BrokerConfig;
use hero_client::{Client, StopOutcome};
use hero_protocol::{clock, Job, NewJob, ScriptType, Status, Target};
use hero_testkit::{
    all_finished, binary, pending, wait_for, InProcBroker, InProcWorker, Proc, RedisServer,
};
use hero_testkit::{bridge_track_key, job_key, keys, work_key};
use hero_worker::{Outcome, Worker};
use redis::AsyncCommands;

const LONG: Duration = Duration::from_secs(30);

fn mapping(legacy: &str, script_type: &str, direction: Direction, dual: bool) -> BridgeMapping {
    let target = Target::of_type(ScriptType::new(script_type).unwrap());
    BridgeMapping::new(legacy, target, direction, dual, Duration::from_secs(60)).unwrap()
}

fn broker_config(bridges: Vec<BridgeMapping>) -> BrokerConfig {
    BrokerConfig {
        bridges,
        bridge_poll: Duration::from_millis(50),
        ..BrokerConfig::default()
    }
}

/// A seed-001 producer: the job hash with seed 001's fields only, then LPUSH of its id.
async fn legacy_submit(
    raw: &mut redis::aio::MultiplexedConnection,
    queue: &str,
    id: &str,
    script: &str,
) {
    let _: () = legacy_hash(id, script, &[]).query_async(raw).await.unwrap();
    let _: () = raw.lpush(queue, id).await.unwrap();
}

fn legacy_hash(id: &str, script: &str, overrides: &[(&str, &str)]) -> redis::Cmd {
    let now = clock::now_iso();
    let mut fields: Vec<(&str, String)> = vec![
        ("id", id.to_string()),
        ("caller_id", "legacy-client".into()),
        ("worker_id", "w".into()),
        ("context_id", "ctx".into()),
        ("script", script.to_string()),
        ("timeout", "30".into()),
        ("retries", "0".into()),
        ("concurrent", "false".into()),
        ("log_path", String::new()),
        ("created_at", now.clone()),
        ("updated_at", now),
        ("status", "dispatched".into()),
        ("env_vars", "{}".into()),
        ("prerequisites", "[]".into()),
        ("dependents", "[]".into()),
    ];
    for (k, v) in overrides {
        fields.retain(|(f, _)| f != k);
        fields.push((k, v.to_string()));
    }
    let mut cmd = redis::cmd("HSET");
    cmd.arg(job_key(id));
    for (k, v) in fields {
        cmd.arg(k).arg(v);
    }
    cmd
}

/// A seed-001 caller waiting for its result: BLPOP hero:reply:<id>.
async fn legacy_reply(url: &str, id: &str) -> String {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let got: Option<(String, String)> = redis::cmd("BLPOP")
        .arg(keys().legacy_reply_prefix() + id)
        .arg(20)
        .query_async(&mut conn)
        .await
        .unwrap();
    got.unwrap_or_else(|| panic!("no legacy reply for {id} within 20 s"))
        .1
}

fn legacy_actor(url: &str, queue: &str, label: &str, hang: bool) -> Proc {
    let hang = if hang { "1" } else { "0" };
    let args = [
        "--url", url, "--queue", queue, "--label", label, "--hang", hang,
    ];
    Proc::spawn(&binary("hero-legacy-actor"), &args, &[], None)
}

type Runs = Arc<Mutex<HashMap<String, usize>>>;

/// A new worker on `script_type` answering `label`, counting how often each job ran.
fn new_worker(client: &Client, script_type: &str, label: &'static str, runs: Runs) -> InProcWorker {
    let builder = Worker::builder(client.clone())
        .types([script_type])
        .concurrency(20)
        .handler(move |job: Job, _| {
            let runs = runs.clone();
            async move {
                *runs.lock().unwrap().entry(job.id.to_string()).or_default() += 1;
                Outcome::Done(label.into())
            }
        });
    InProcWorker::spawn(builder)
}

/// A throwaway Redis, a broker in this process serving one mapping, and a client.
async fn one_mapping(m: BridgeMapping) -> (RedisServer, InProcBroker, Client) {
    let server = RedisServer::start();
    let broker = InProcBroker::spawn(&server.url(), broker_config(vec![m])).await;
    let client = Client::connect(&server.url()).await.unwrap();
    (server, broker, client)
}

/// Waits until the bridge settled everything it tracked for a legacy queue.
async fn bridge_settled(server: &RedisServer, track: &str, stream: &str) {
    let raw = server.conn().await;
    wait_for("the bridge settled its legacy jobs", LONG, || {
        let mut raw = raw.clone();
        let (track, stream) = (track.to_string(), stream.to_string());
        async move {
            let tracked: i64 = raw.zcard(&track).await.ok()?;
            let held = pending(&mut raw, &stream).await;
            (tracked == 0 && held == 0).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn legacy_and_new_producers_and_actors_interoperate_in_all_four_combinations() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(
        &url,
        broker_config(vec![
            mapping(
                &keys().legacy_work_queue("in_a"),
                "newt",
                Direction::Inbound,
                false,
            ),
            mapping(
                &keys().legacy_work_queue("out_b"),
                "oldt",
                Direction::Outbound,
                false,
            ),
            mapping(
                &keys().legacy_work_queue("in_c"),
                "relay",
                Direction::Inbound,
                false,
            ),
            mapping(
                &keys().legacy_actor("actor_c"),
                "relay",
                Direction::Outbound,
                false,
            ),
        ]),
    )
    .await;
    let client = Client::connect(&url).await.unwrap();
    let runs = Runs::default();
    let _w = new_worker(&client, "newt", "new", runs.clone());
    let b = legacy_actor(&url, &keys().legacy_work_queue("out_b"), "legacyB", false);
    let c = legacy_actor(&url, &keys().legacy_actor("actor_c"), "legacyC", false);
    b.expect_line("ready", LONG).await;
    c.expect_line("ready", LONG).await;
    let mut raw = server.conn().await;

    // legacy producer -> new worker
    legacy_submit(&mut raw, &keys().legacy_work_queue("in_a"), "lp-new", "x").await;
    assert_eq!(legacy_reply(&url, "lp-new").await, "new");
    let job = hero_testkit::record(&client, "lp-new").await;
    assert_eq!(
        (job.status, job.output.as_deref()),
        (Status::Finished, Some("new"))
    );
    assert_eq!(
        job.caller_id, "legacy-client",
        "the legacy producer's fields are kept"
    );
    let canonical: bool = raw.exists(keys().reply_prefix() + "lp-new").await.unwrap();
    assert!(
        !canonical,
        "no one waits on the canonical reply of a legacy job"
    );

    // new client -> legacy actor (through the outbound hand-out)
    let to_legacy = NewJob::builder("oldt", "x").build().unwrap();
    let r = client.run(&to_legacy, LONG).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "legacyB"));
    b.expect_line(&format!("ran {}", to_legacy.id()), LONG)
        .await;

    // legacy producer -> legacy actor, in through one legacy queue and out through another
    legacy_submit(&mut raw, &keys().legacy_work_queue("in_c"), "lp-old", "x").await;
    assert_eq!(legacy_reply(&url, "lp-old").await, "legacyC");
    c.expect_line("ran lp-old", LONG).await;

    // new client -> new worker
    let plain = NewJob::builder("newt", "x").build().unwrap();
    let r = client.run(&plain, LONG).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "new"));

    // the outbound jobs stayed pending on the canonical side until their hash said finished,
    // and nothing is left behind once they did
    bridge_settled(
        &server,
        &bridge_track_key(&keys().legacy_work_queue("out_b")),
        &work_key("oldt"),
    )
    .await;
    bridge_settled(
        &server,
        &bridge_track_key(&keys().legacy_actor("actor_c")),
        &work_key("relay"),
    )
    .await;
    for list in [
        keys().legacy_work_queue("in_a"),
        keys().legacy_work_queue("out_b"),
        keys().legacy_work_queue("in_c"),
        keys().legacy_actor("actor_c"),
    ] {
        let n: i64 = raw.llen(&list).await.unwrap();
        assert_eq!(n, 0, "{list} is empty");
    }
    let done = hero_testkit::record(&client, to_legacy.id().as_str()).await;
    assert!(
        done.finished_at.is_some(),
        "the bridge stamped the legacy actor's finish"
    );
    assert!(runs.lock().unwrap().values().all(|&n| n == 1));
}

#[tokio::test]
async fn a_legacy_job_with_garbage_fields_ends_error_and_one_without_a_hash_is_dead_lettered() {
    let (server, _broker, client) = one_mapping(mapping(
        &keys().legacy_work_queue("g"),
        "gt",
        Direction::Inbound,
        false,
    ))
    .await;
    let url = server.url();
    let _w = new_worker(&client, "gt", "new", Runs::default());
    let mut raw = server.conn().await;
    let _: () = legacy_hash("bad", "x", &[("timeout", "soon"), ("colour", "blue")])
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = raw
        .lpush(keys().legacy_work_queue("g"), "bad")
        .await
        .unwrap();
    let _: () = raw
        .lpush(keys().legacy_work_queue("g"), "nohash")
        .await
        .unwrap();

    let err = legacy_reply(&url, "bad").await;
    assert!(err.starts_with("invalid job:"), "{err}");
    let job: HashMap<String, String> = raw.hgetall(job_key("bad")).await.unwrap();
    assert_eq!(job.get("status").map(String::as_str), Some("error"));
    assert!(job["error"].contains("invalid job"), "{:?}", job["error"]);

    let dead: Vec<redis::Value> = wait_for("the id without a hash is dead-lettered", LONG, || {
        let mut raw = raw.clone();
        async move {
            let v: Vec<redis::Value> = raw.xrange_all(keys().dead_letter()).await.ok()?;
            (!v.is_empty()).then_some(v)
        }
    })
    .await;
    assert!(format!("{dead:?}").contains("no job hash"), "{dead:?}");
    let left: i64 = raw.llen(keys().legacy_work_queue("g")).await.unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn a_stop_for_a_job_held_by_a_legacy_actor_reaches_its_stop_queue() {
    let (server, _broker, client) = one_mapping(mapping(
        &keys().legacy_work_queue("ws"),
        "st",
        Direction::Outbound,
        false,
    ))
    .await;
    let url = server.url();
    let actor = legacy_actor(&url, &keys().legacy_work_queue("ws"), "L", true);
    actor.expect_line("ready", LONG).await;
    let job = NewJob::builder("st", "x").build().unwrap();
    client.submit(&job).await.unwrap();
    actor.expect_line(&format!("took {}", job.id()), LONG).await;
    // the bridge has seen it taken once its record says started
    let raw = server.conn().await;
    wait_for("the legacy actor's job is started", LONG, || {
        let mut raw = raw.clone();
        let key = job_key(job.id());
        async move {
            let s: Option<String> = raw.hget(&key, "status").await.ok()?;
            (s.as_deref() == Some("started")).then_some(())
        }
    })
    .await;
    assert_eq!(
        client.stop(job.id()).await.unwrap(),
        StopOutcome::Interrupted
    );
    let mut raw = raw.clone();
    let stops: Vec<String> = raw
        .lrange(keys().legacy_stop_queue("ws"), 0, -1)
        .await
        .unwrap();
    assert_eq!(
        stops,
        vec![job.id().to_string()],
        "the seed's format: the bare job id"
    );
    let rec = hero_testkit::record(&client, job.id().as_str()).await;
    assert_eq!(
        (rec.status, rec.error.as_deref()),
        (Status::Error, Some("stopped"))
    );
    bridge_settled(
        &server,
        &bridge_track_key(&keys().legacy_work_queue("ws")),
        &work_key("st"),
    )
    .await;
}

#[tokio::test]
async fn kill_9_of_the_broker_while_5000_legacy_ids_flow_inbound_loses_and_doubles_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let hero = binary("hero");
    let args = [
        "--redis-url",
        url.as_str(),
        "broker",
        "--http",
        "off",
        "--bridge",
        &format!("{}=bulk,in", keys().legacy_work_queue("bulk")),
    ];
    let mut broker = Proc::spawn(&hero, &args, &[], None);
    let client = Client::connect(&url).await.unwrap();
    let runs = Runs::default();
    let _w = new_worker(&client, "bulk", "new", runs.clone());
    let mut raw = server.conn().await;
    let ids: Vec<String> = (0..5000).map(|i| format!("bulk-{i}")).collect();
    let push = |chunk: &[String]| {
        let mut p = redis::pipe();
        for id in chunk {
            p.add_command(legacy_hash(id, "x", &[])).ignore();
            p.lpush(keys().legacy_work_queue("bulk"), id).ignore();
        }
        p
    };
    for chunk in ids[..2500].chunks(250) {
        let _: () = push(chunk).query_async(&mut raw).await.unwrap();
    }
    // kill it while it moves: some jobs ran, some ids still wait in the list
    let r = runs.clone();
    wait_for("the broker moved and workers ran some", LONG, || {
        let n = r.lock().unwrap().len();
        std::future::ready((n >= 300).then_some(()))
    })
    .await;
    broker.kill9();
    for chunk in ids[2500..].chunks(250) {
        let _: () = push(chunk).query_async(&mut raw).await.unwrap();
    }
    let _broker2 = Proc::spawn(&hero, &args, &[], None);
    let r = runs.clone();
    wait_for("all 5000 legacy jobs ran", Duration::from_secs(90), || {
        let n = r.lock().unwrap().len();
        std::future::ready((n == 5000).then_some(()))
    })
    .await;
    all_finished(&server, &ids, LONG).await;
    let counts = runs.lock().unwrap().clone();
    assert_eq!(counts.len(), 5000);
    assert!(
        counts.values().all(|&n| n == 1),
        "every job ran exactly once"
    );
    let left: i64 = raw.llen(keys().legacy_work_queue("bulk")).await.unwrap();
    assert_eq!(left, 0, "none left in the legacy list");
    let raw2 = raw.clone();
    wait_for("the stream is trimmed of every done entry", LONG, || {
        let mut raw = raw2.clone();
        async move {
            let n: i64 = raw.xlen(work_key("bulk")).await.ok()?;
            (n == 0).then_some(())
        }
    })
    .await;
    let dead: i64 = raw.xlen(keys().dead_letter()).await.unwrap();
    assert_eq!(dead, 0);
    hero_testkit::audit_consistent(&server.url(), LONG).await;
}

#[tokio::test]
async fn a_legacy_actor_killed_mid_job_has_the_job_handed_out_again_after_its_timeout() {
    let (server, _broker, client) = one_mapping(mapping(
        &keys().legacy_work_queue("lw"),
        "lt",
        Direction::Outbound,
        false,
    ))
    .await;
    let url = server.url();
    let mut doomed = legacy_actor(&url, &keys().legacy_work_queue("lw"), "A", true);
    doomed.expect_line("ready", LONG).await;
    let job = NewJob::builder("lt", "x")
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    doomed
        .expect_line(&format!("took {}", job.id()), LONG)
        .await;
    doomed.kill9();
    let b = legacy_actor(&url, &keys().legacy_work_queue("lw"), "B", false);
    let r = client.wait(job.id(), LONG).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "B"));
    b.expect_line(&format!("ran {}", job.id()), LONG).await;
    let rec = hero_testkit::record(&client, job.id().as_str()).await;
    assert_eq!(rec.attempts, 2, "handed out twice");
    bridge_settled(
        &server,
        &bridge_track_key(&keys().legacy_work_queue("lw")),
        &work_key("lt"),
    )
    .await;
}

#[tokio::test]
async fn dual_push_on_then_off_with_jobs_flowing_runs_every_job_once() {
    let server = RedisServer::start();
    let url = server.url();
    let dual = |on| {
        broker_config(vec![mapping(
            &keys().legacy_work_queue("dp"),
            "dp",
            Direction::Outbound,
            on,
        )])
    };
    let broker = InProcBroker::spawn(&url, dual(true)).await;
    let client = Client::connect(&url).await.unwrap();
    let runs = Runs::default();
    let _w = new_worker(&client, "dp", "new", runs.clone());
    let actor = legacy_actor(&url, &keys().legacy_work_queue("dp"), "legacy", false);
    actor.expect_line("ready", LONG).await;

    let mut ids = Vec::new();
    let submit_some = |n: usize| {
        let client = client.clone();
        async move {
            let mut ids = Vec::new();
            for _ in 0..n / 10 {
                let batch: Vec<NewJob> = (0..10)
                    .map(|_| NewJob::builder("dp", "x").build().unwrap())
                    .collect();
                client.submit_many(&batch).await.unwrap();
                ids.extend(batch.iter().map(|j| j.id().to_string()));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ids
        }
    };
    ids.extend(submit_some(300).await);
    // switch dual-push off while the first jobs are still flowing
    drop(broker);
    let _broker = InProcBroker::spawn(&url, dual(false)).await;
    ids.extend(submit_some(300).await);

    let mut raw = server.conn().await;
    all_finished(&server, &ids, Duration::from_secs(60)).await;
    bridge_settled(
        &server,
        &bridge_track_key(&keys().legacy_work_queue("dp")),
        &work_key("dp"),
    )
    .await;
    // the legacy actor prints `ran` just after it records the result: wait for its lines
    let mut by_legacy = Vec::new();
    for id in &ids {
        if hero_testkit::record(&client, id).await.output.as_deref() == Some("legacy") {
            by_legacy.push(format!("ran {id}"));
        }
    }
    let legacy_ran = by_legacy.len();
    wait_for("the legacy actor printed every job it ran", LONG, || {
        let out = actor.output();
        std::future::ready(by_legacy.iter().all(|l| out.contains(l)).then_some(()))
    })
    .await;
    let mut total: HashMap<String, usize> = runs.lock().unwrap().clone();
    let new_side = total.len();
    for line in actor.output() {
        if let Some(id) = line.strip_prefix("ran ") {
            *total.entry(id.to_string()).or_default() += 1;
        }
    }
    eprintln!("new workers ran {new_side}, the legacy actor {legacy_ran}");
    for id in &ids {
        assert_eq!(total.get(id), Some(&1), "{id} ran exactly once");
    }
    assert_eq!(total.len(), 600);
    let left: i64 = raw.llen(keys().legacy_work_queue("dp")).await.unwrap();
    assert_eq!(left, 0);
}

/// A dependent released into a dual-pushed stream goes to the legacy list too, as a submit
/// into that stream would: the call that finishes its prerequisite queues it in both places.
#[tokio::test]
async fn a_dependent_released_into_a_dual_pushed_stream_is_pushed_to_the_legacy_list() {
    let legacy = keys().legacy_work_queue("dd");
    let (server, _broker, client) =
        one_mapping(mapping(&legacy, "dd", Direction::Outbound, true)).await;
    let mut raw = server.conn().await;
    // the broker publishes the mapping before the first submit counts on it
    wait_for("the dual-push registry", LONG, || {
        let mut raw = raw.clone();
        async move {
            let n: i64 = raw.hlen(keys().bridge_registry()).await.ok()?;
            (n > 0).then_some(())
        }
    })
    .await;
    let first = NewJob::builder("pre", "x").id("dd-first").build().unwrap();
    let then = NewJob::builder("dd", "y")
        .id("dd-then")
        .after("dd-first")
        .build()
        .unwrap();
    client.submit(&first).await.unwrap();
    client.submit(&then).await.unwrap();
    let listed: Vec<String> = raw.lrange(&legacy, 0, -1).await.unwrap();
    assert!(
        listed.is_empty(),
        "a waiting dependent is nowhere yet: {listed:?}"
    );
    let _w = new_worker(&client, "pre", "new", Runs::default());
    wait_for("the dependent on the legacy list", LONG, || {
        let mut raw = raw.clone();
        let legacy = legacy.clone();
        async move {
            let listed: Vec<String> = raw.lrange(&legacy, 0, -1).await.ok()?;
            listed.contains(&"dd-then".to_string()).then_some(())
        }
    })
    .await;
    let (status, bridge): (String, String) = redis::cmd("HMGET")
        .arg(job_key("dd-then"))
        .arg("status")
        .arg("bridge")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        (status.as_str(), bridge.as_str()),
        ("dispatched", legacy.as_str())
    );
}
