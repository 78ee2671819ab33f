//! Issue 48's server-side guarantees, each against a real broker and worker: a job's own
//! back-off and retention are enforced by the functions whatever worker runs it, combined with
//! its queue policy's (the longer wins); a short retention keeps a waiting `wait` answered; a
//! parent reads its children's results from its own record after the children are gone; a
//! recurring job's payload reaches its handler; a queue's counts, a job promoted and a job
//! removed, through hero-admin and the CLI.

use std::time::Duration;

use hero_admin::Admin;
use hero_broker::config::BrokerConfig;
use hero_client::{Client, Flow};
use hero_protocol::event_log::EventFilter;
use hero_protocol::policy::{Backoff, Policy};
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{hero_cli, wait_for, InProcBroker, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

fn broker() -> BrokerConfig {
    BrokerConfig {
        promote_poll: Duration::from_millis(20),
        ..BrokerConfig::default()
    }
}

/// How long after each failure its retry was due, from the job's `retried` events.
async fn retry_delays(client: &Client, id: &str) -> Vec<i64> {
    let events = hero_admin::Inspector::from(client)
        .events(
            &EventFilter {
                job: Some(id.into()),
                ..EventFilter::default()
            },
            100,
        )
        .await
        .unwrap();
    events
        .iter()
        .filter(|e| e.event == "retried")
        .map(|e| e.due_ms.unwrap() as i64 - e.at_ms() as i64)
        .collect()
}

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    let mut c = server.conn().await;
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_jobs_own_back_off_is_the_servers_and_the_longer_of_it_and_its_queues_applies() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let admin = Admin::from(&client);
    // queue "slow" has a longer back-off than the job asks; queue "own" none at all
    admin
        .set_policy(
            "slow",
            &Policy {
                backoff: Some(Backoff::parse("fixed:900ms,jitter=0").unwrap()),
                ..Policy::default()
            },
        )
        .await
        .unwrap();
    let _broker = InProcBroker::spawn(&url, broker()).await;
    // the worker computes its own 1 s doubling retry time: the server replaces it
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["own", "slow"])
            .handler(|_, _| async { Outcome::Fail("always".into()) }),
    );
    let mine = Backoff::parse("fixed:300ms,jitter=0").unwrap();
    for t in ["own", "slow"] {
        let job = NewJob::builder(t, "x")
            .id(format!("bo-{t}"))
            .retries(2)
            .backoff(mine)
            .build()
            .unwrap();
        client.submit(&job).await.unwrap();
        let r = client.wait(job.id(), LIMIT).await.unwrap();
        assert_eq!(r.status, Status::Error);
    }
    for (id, want) in [("bo-own", 300i64), ("bo-slow", 900)] {
        let due = retry_delays(&client, id).await;
        assert_eq!(due.len(), 2, "{id}: {due:?}");
        for got in &due {
            assert!(
                (got - want).abs() <= 60,
                "{id}: retry due after {got} ms, want {want}: {due:?}"
            );
        }
    }
    // the record says what it was given, as every reader shows it
    let job = client.get(&JobId::new("bo-own").unwrap()).await.unwrap();
    assert_eq!(job.backoff, Some(mine));
}

#[tokio::test]
async fn a_jobs_own_retention_expires_it_and_a_waiting_wait_still_reads_its_end() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    Admin::from(&client)
        .set_policy(
            "kept",
            &Policy {
                retention_ms: Some(3_600_000),
                ..Policy::default()
            },
        )
        .await
        .unwrap();
    let _broker = InProcBroker::spawn(&url, broker()).await;
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["ret", "kept"])
            .handler(|j: hero_protocol::Job, _| async move {
                if j.script == "fail" {
                    Outcome::Abort("no".into())
                } else {
                    Outcome::Done(format!("out-{}", j.script))
                }
            }),
    );
    // keep 0 (BullMQ's removeOnComplete: true), waited on from before it runs
    let now = NewJob::builder("ret", "a")
        .id("ret-0")
        .keep(Duration::ZERO)
        .delay(Duration::from_millis(300))
        .build()
        .unwrap();
    client.submit(&now).await.unwrap();
    let r = client.wait(now.id(), LIMIT).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "out-a"));
    let ttl = pttl(&server, &client.keys().job(now.id())).await;
    assert!(
        ttl > 0 && ttl <= 10_000,
        "keep 0 expires within the 10 s floor: {ttl}"
    );
    // its own retention once failed, apart from once finished
    let failed = NewJob::builder("ret", "fail")
        .id("ret-f")
        .keep(Duration::ZERO)
        .keep_failed(Duration::from_secs(7200))
        .build()
        .unwrap();
    client.submit(&failed).await.unwrap();
    assert_eq!(
        client.wait(failed.id(), LIMIT).await.unwrap().status,
        Status::Error
    );
    let ttl = pttl(&server, &client.keys().job(failed.id())).await;
    assert!(ttl > 7_100_000 && ttl <= 7_200_000, "keep_failed 2h: {ttl}");
    // requeued, it is no longer an ended job: its TTL goes (it would expire while it runs);
    // the queue is paused meanwhile so the worker cannot end it again before the TTL is read
    let admin = Admin::from(&client);
    admin.pause("ret").await.unwrap();
    admin.requeue(failed.id(), None).await.unwrap();
    assert_eq!(pttl(&server, &client.keys().job(failed.id())).await, -1);
    admin.resume("ret").await.unwrap();
    assert_eq!(
        client.wait(failed.id(), LIMIT).await.unwrap().status,
        Status::Error
    );
    // the queue's retention (1 h) is longer than the job's (1 min): the longer holds
    let short = NewJob::builder("kept", "b")
        .id("kept-1")
        .keep(Duration::from_secs(60))
        .build()
        .unwrap();
    client.submit(&short).await.unwrap();
    client.wait(short.id(), LIMIT).await.unwrap();
    let ttl = pttl(&server, &client.keys().job(short.id())).await;
    assert!(ttl > 3_500_000, "the queue's longer retention wins: {ttl}");
    // a job kept longer than the broker's retention outlives the broker's retention pass
    let long = NewJob::builder("ret", "c")
        .id("ret-long")
        .keep(Duration::from_secs(7200))
        .build()
        .unwrap();
    let plain = NewJob::builder("ret", "d").id("ret-plain").build().unwrap();
    for j in [&long, &plain] {
        client.submit(j).await.unwrap();
        client.wait(j.id(), LIMIT).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let v: redis::Value = client
        .redis()
        .query(&hero_protocol::function::expire(
            client.keys(),
            Duration::from_millis(1),
            1000,
            Duration::ZERO,
        ))
        .await
        .unwrap();
    let expired = hero_protocol::function::Expired::decode(&v).unwrap();
    assert!(expired.jobs >= 1, "{expired:?}");
    assert!(
        client.get(long.id()).await.is_ok(),
        "its own 2 h keep holds"
    );
    assert!(
        client.get(plain.id()).await.is_err(),
        "the broker's retention deletes the rest"
    );
    // the CLI submits the same options
    let (code, out, err) = hero_cli(
        &url,
        &[
            "submit",
            "--type",
            "ret",
            "--keep",
            "0s",
            "--keep-failed",
            "1h",
            "--backoff",
            "exponential:1s:1m",
            "--id",
            "cli-1",
            "z",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let job = client.get(&JobId::new("cli-1").unwrap()).await.unwrap();
    assert_eq!(
        (job.keep, job.keep_failed),
        (Some(Duration::ZERO), Some(Duration::from_secs(3600)))
    );
    assert_eq!(job.backoff.map(|b| b.base_ms), Some(1000));
    // a bad value is refused by the server, for any client
    let mut c = server.conn().await;
    let bad: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
        .arg(hero_protocol::function::Function::Submit.name())
        .arg(7)
        .arg(client.keys().delayed())
        .arg(client.keys().queues())
        .arg(format!("{}:meta:bridge", client.keys().prefix()))
        .arg(client.keys().config())
        .arg(client.keys().events())
        .arg(client.keys().stats())
        .arg(format!("{}:q:work:type:ret", client.keys().prefix()))
        .arg("workers")
        .arg(client.keys().job_prefix())
        .arg(0)
        .arg("b1")
        .arg("1.6")
        .arg("script")
        .arg("x")
        .arg("script_type")
        .arg("ret")
        .arg("backoff")
        .arg(r#"{"kind":"linear","base_ms":1}"#)
        .query_async(&mut c)
        .await;
    let e = bad.unwrap_err().to_string();
    assert!(
        e.contains("backoff") && e.contains("fixed or exponential"),
        "{e}"
    );
}

#[tokio::test]
async fn a_parent_reads_its_childrens_results_after_the_children_are_gone() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _broker = InProcBroker::spawn(&url, broker()).await;
    // the parent's handler answers what it read of its children, from its own record
    let _w = InProcWorker::spawn(Worker::builder(client.clone()).types(["fl"]).handler(
        |j: hero_protocol::Job, _| async move {
            if j.script == "parent" {
                let seen: Vec<String> = j
                    .results
                    .iter()
                    .map(|(id, r)| format!("{id}={}", r.output.clone().unwrap_or_default()))
                    .collect();
                Outcome::Done(seen.join(","))
            } else {
                Outcome::Done(format!("v-{}", j.script))
            }
        },
    ));
    // one child ended before its parent is submitted (`after`), two come in the flow
    let early = NewJob::builder("fl", "early").id("c0").build().unwrap();
    client.submit(&early).await.unwrap();
    client.wait(early.id(), LIMIT).await.unwrap();
    let parent = NewJob::builder("fl", "parent")
        .id("p")
        .after("c0")
        .build()
        .unwrap();
    let flow = Flow::new(parent)
        .child(
            NewJob::builder("fl", "one")
                .id("c1")
                .keep(Duration::ZERO)
                .build()
                .unwrap(),
        )
        .child(NewJob::builder("fl", "two").id("c2").build().unwrap());
    client.submit_flow(&flow).await.unwrap();
    let r = client.wait(&JobId::new("p").unwrap(), LIMIT).await.unwrap();
    assert_eq!(r.output, "c0=v-early,c1=v-one,c2=v-two");
    // the children's records gone (their retention passed): the parent still holds them
    let mut c = server.conn().await;
    for id in ["c0", "c1", "c2"] {
        let _: () = redis::cmd("DEL")
            .arg(client.keys().job(&JobId::new(id).unwrap()))
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let kids = client.children(&JobId::new("p").unwrap()).await.unwrap();
    let got: Vec<(String, Status, Option<String>)> = kids
        .into_iter()
        .map(|(k, v)| (k, v.status, v.output))
        .collect();
    assert_eq!(
        got,
        vec![
            ("c0".into(), Status::Finished, Some("v-early".into())),
            ("c1".into(), Status::Finished, Some("v-one".into())),
            ("c2".into(), Status::Finished, Some("v-two".into())),
        ]
    );
    let (code, out, err) = hero_cli(&url, &["--json", "children", "p"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["c1"]["output"], "v-one", "{v}");
}

#[tokio::test]
async fn a_recurring_jobs_payload_reaches_its_handler() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (code, out, err) = hero_cli(
        &url,
        &[
            "cron",
            "add",
            "tick",
            "every 1s",
            "s",
            "--type",
            "rc",
            "--payload",
            r#"{"n":7,"to":"a@b.c"}"#,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let _broker = InProcBroker::spawn(&url, broker()).await;
    let _w = InProcWorker::spawn(Worker::builder(client.clone()).types(["rc"]).handler(
        |j: hero_protocol::Job, _| async move {
            match j.payload::<serde_json::Value>() {
                Ok(v) => Outcome::Done(format!("{}{}", v["to"].as_str().unwrap_or(""), v["n"])),
                Err(e) => Outcome::Abort(e.to_string()),
            }
        },
    ));
    let output = wait_for("a tick of the recurring job to finish", LIMIT, || {
        let client = client.clone();
        async move {
            let page = hero_admin::Inspector::from(&client)
                .list_tagged(&hero_admin::ListFilter::All, Some("cron:tick"), None, 10)
                .await
                .ok()?;
            for s in page.jobs {
                if let Ok(j) = client.get(&JobId::new(&s.id).ok()?).await {
                    if j.status == Status::Finished {
                        return j.output;
                    }
                }
            }
            None
        }
    })
    .await;
    assert_eq!(output, "a@b.c7");
}

#[tokio::test]
async fn counts_promote_and_remove_through_hero_admin_and_the_cli() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let admin = Admin::from(&client);
    for (id, delay) in [("w1", None), ("w2", None), ("d1", Some(3600))] {
        let mut b = NewJob::builder("cnt", "x").id(id);
        if let Some(s) = delay {
            b = b.delay(Duration::from_secs(s));
        }
        client.submit(&b.build().unwrap()).await.unwrap();
    }
    let hi = NewJob::builder("cnt", "x")
        .id("w0")
        .priority(1)
        .build()
        .unwrap();
    client.submit(&hi).await.unwrap();
    let c = admin.job_counts("cnt").await.unwrap();
    assert_eq!(
        (c.waiting, c.delayed, c.running, c.finished),
        (3, 1, 0, 0),
        "{c:?}"
    );
    assert_eq!(c.streams.len(), 2, "two priorities, two streams: {c:?}");
    // a queue whose only job waits in the delayed set has no stream yet: counted all the same
    let only = NewJob::builder("cnt2", "x")
        .delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    client.submit(&only).await.unwrap();
    assert_eq!(admin.job_counts("cnt2").await.unwrap().delayed, 1);
    let (code, out, err) = hero_cli(&url, &["promote", "w1"]);
    assert_ne!(code, 0, "a job that is not delayed is refused: {out}");
    assert!(err.contains("not delayed (it is dispatched)"), "{err}");
    admin.promote(&JobId::new("d1").unwrap()).await.unwrap();
    let c = admin.job_counts("cnt").await.unwrap();
    assert_eq!((c.waiting, c.delayed), (4, 0), "{c:?}");
    // remove: a queued job is stopped and deleted, and never starts
    let (code, out, err) = hero_cli(&url, &["remove", "w2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(client.get(&JobId::new("w2").unwrap()).await.is_err());
    let _broker = InProcBroker::spawn(&url, broker()).await;
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["cnt"])
            .handler(|_, _| async { Outcome::Done("ok".into()) }),
    );
    for id in ["w0", "w1", "d1"] {
        client.wait(&JobId::new(id).unwrap(), LIMIT).await.unwrap();
    }
    let c = admin.job_counts("cnt").await.unwrap();
    assert_eq!(
        (c.waiting, c.finished, c.failed),
        (0, 3, 1),
        "the removed one was stopped: {c:?}"
    );
    admin.remove(&JobId::new("w0").unwrap()).await.unwrap();
    assert!(matches!(
        admin.remove(&JobId::new("w0").unwrap()).await,
        Err(hero_protocol::Error::JobNotFound(_))
    ));
}

/// BullMQ's `delay: 0` and a run-at already past are no delay (issue 60): the job is queued at
/// once, with no trip through the delayed set (which waited for the next promotion, and for a
/// process doing the duties at all), in every language, since the server decides it.
#[tokio::test]
async fn a_zero_delay_or_a_past_run_at_queues_the_job_at_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let zero = NewJob::builder("zd", "x")
        .id("zero")
        .delay(Duration::ZERO)
        .build()
        .unwrap();
    let past = NewJob::builder("zd", "x")
        .id("past")
        .run_at(std::time::SystemTime::now() - Duration::from_secs(5))
        .build()
        .unwrap();
    let after = NewJob::builder("zd", "x")
        .id("after-zero")
        .delay(Duration::ZERO)
        .after("zero")
        .build()
        .unwrap();
    for j in [&zero, &past, &after] {
        client.submit(j).await.unwrap();
    }
    for id in ["zero", "past"] {
        let j = hero_testkit::record(&client, id).await;
        assert_eq!(j.status, Status::Dispatched, "{id} queued at once: {j:?}");
    }
    let mut raw = server.conn().await;
    let delayed: u64 = redis::cmd("ZCARD")
        .arg(client.keys().delayed())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(delayed, 0, "nothing in the delayed set");
    assert_eq!(
        hero_testkit::record(&client, "after-zero").await.status,
        Status::Waiting,
        "waits on its prerequisite, as any job with one"
    );
}

/// The rule between a job's own retry budget, its queue's and the namespace's `max_attempts`
/// is said where an operator looks: `hero status` (issue 60; a job's `retries: 5` outliving
/// `--max-attempts 3` surprised a team porting from BullMQ).
#[tokio::test]
async fn hero_status_says_the_retry_budget_and_the_rule_it_comes_from() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let job = NewJob::builder("budget", "x")
        .id("b5")
        .retries(5)
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    let (code, out, err) = hero_testkit::hero_cli(&server.url(), &["status", "b5"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("attempts 0 of 6")
            && out.contains("its own 5")
            && out.contains("max_attempts 5"),
        "{out}"
    );
}
