//! The broker's repairs: several brokers at once do no double work; the idle pass (XPENDING
//! IDLE, then XCLAIM of each entry not the bridge's: see ARCHITECTURE.md, Broker loops, for
//! why not XAUTOCLAIM) recovers a delivery idle past the lease even while its worker's
//! presence lives; delayed jobs are promoted when due.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::function::FetchReply;
use hero_protocol::{Job, NewJob, Status};
use hero_testkit::keys;
use hero_testkit::{binary, wait_for, InProcBroker, InProcWorker, Proc, RedisServer};
use hero_worker::{Outcome, Worker};
use redis::AsyncCommands;

#[tokio::test]
async fn several_brokers_requeue_each_job_of_a_dead_consumer_exactly_once() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let jobs: Vec<NewJob> = (0..300)
        .map(|_| NewJob::builder("t", "x").build().unwrap())
        .collect();
    client.submit_many(&jobs).await.unwrap();
    // the state a worker leaves when it dies holding jobs: deliveries pending under its name,
    // its liveness deadline in the past
    let stream = client
        .keys()
        .work(jobs[0].target(), hero_protocol::Priority::DEFAULT);
    let cmd = hero_protocol::function::fetch(
        client.keys(),
        std::slice::from_ref(&stream),
        "g:dead:1",
        300,
        "0",
    );
    let got = FetchReply::decode(&client.redis().query(&cmd).await.unwrap()).unwrap();
    assert_eq!(got.jobs.len(), 300);
    let mut raw = server.conn().await;
    let _: () = raw.zadd(keys().consumers(), "g:dead:1", 1).await.unwrap();

    let cfg = BrokerConfig {
        presence_poll: Duration::from_millis(5),
        ..BrokerConfig::default()
    };
    let brokers: Vec<InProcBroker> = spawn_brokers(&url, &cfg, 3).await;
    wait_for(
        "every job back in its queue",
        Duration::from_secs(20),
        || {
            let (client, ids) = (
                client.clone(),
                jobs.iter().map(|j| j.id().clone()).collect::<Vec<_>>(),
            );
            async move {
                for id in &ids {
                    if client.status(id).await.ok()? != Status::Dispatched {
                        return None;
                    }
                }
                Some(())
            }
        },
    )
    .await;
    drop(brokers);
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(entries.len(), 300, "one new entry per job, none twice");
    let named: HashSet<String> = entries.iter().map(|(_, f)| f[0].1.clone()).collect();
    assert_eq!(named.len(), 300);
    for job in &jobs {
        let record = client.get(job.id()).await.unwrap();
        assert_eq!(record.attempts, 1, "the delivery was counted once");
        assert!(
            named.contains(job.id().as_str()),
            "its entry is in the stream"
        );
    }
}

async fn spawn_brokers(url: &str, cfg: &BrokerConfig, n: usize) -> Vec<InProcBroker> {
    let mut brokers = Vec::new();
    for _ in 0..n {
        brokers.push(InProcBroker::spawn(url, cfg.clone()).await);
    }
    brokers
}

#[tokio::test]
async fn idle_delivery_is_reclaimed_after_the_lease_while_presence_is_alive() {
    let server = RedisServer::start();
    let url = server.url();
    let lease = Duration::from_millis(1000);
    let _broker = InProcBroker::spawn(
        &url,
        BrokerConfig {
            lease,
            ..BrokerConfig::default()
        },
    )
    .await;
    // presence lives 60 s: only the idle-time path can take the job back
    let flags = [
        "--types",
        "t",
        "--lease-ms",
        "1000",
        "--presence-ms",
        "60000",
    ];
    let a = Proc::spawn(
        &binary("hero-test-worker"),
        &[&["--url", &url, "--label", "A"][..], &flags].concat(),
        &[],
        None,
    );
    a.expect_line("ready", Duration::from_secs(10)).await;
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "sleep 60000").build().unwrap();
    client.submit(&job).await.unwrap();
    a.expect_line(&format!("started {}", job.id()), Duration::from_secs(10))
        .await;
    a.signal("STOP");
    let stalled_at = Instant::now();
    let b = Proc::spawn(
        &binary("hero-test-worker"),
        &[&["--url", &url, "--label", "B"][..], &flags].concat(),
        &[],
        None,
    );
    b.expect_line(&format!("started {}", job.id()), Duration::from_secs(20))
        .await;
    assert!(
        stalled_at.elapsed() < Duration::from_secs(15),
        "reclaimed soon after the 1 s lease"
    );
    let record = client.get(job.id()).await.unwrap();
    assert_eq!(record.attempts, 2);
    let b_consumer = b
        .output()
        .iter()
        .find_map(|l| l.strip_prefix("ready ").map(str::to_string))
        .unwrap_or_default();
    assert_eq!(record.worker_id, b_consumer, "B holds the job now");
    a.signal("CONT");
}

#[tokio::test]
async fn delayed_job_runs_once_its_time_has_come() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async { Outcome::Done("on time".into()) });
    let w = InProcWorker::spawn(worker);
    let submitted = Instant::now();
    let job = NewJob::builder("v", "x")
        .delay(Duration::from_millis(700))
        .build()
        .unwrap();
    let r = client.run(&job, Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.output, "on time");
    assert!(
        submitted.elapsed() >= Duration::from_millis(700),
        "not before its time"
    );
    w.stop().await;
}

/// The names of the consumers of `stream`'s group.
async fn consumers(client: &Client, stream: &str) -> Vec<String> {
    let v: redis::Value = client
        .redis()
        .query(
            redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg(stream)
                .arg("workers"),
        )
        .await
        .unwrap();
    let redis::Value::Array(items) = v else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|c| {
            let pairs: Vec<redis::Value> = redis::from_redis_value(c).ok()?;
            let name_at = pairs.iter().position(|p| {
                redis::from_redis_value::<String>(p.clone()).ok().as_deref() == Some("name")
            })?;
            redis::from_redis_value(pairs.get(name_at + 1)?.clone()).ok()
        })
        .collect()
}

#[tokio::test]
async fn a_consumer_of_a_gone_worker_that_holds_nothing_is_deleted_after_a_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "x").id("j").build().unwrap();
    client.submit(&job).await.unwrap();
    let stream = client
        .keys()
        .work(job.target(), hero_protocol::Priority::DEFAULT);
    let mut conn = server.conn().await;
    // what a worker killed with a read in flight leaves: its read reached Redis after the
    // presence pass had removed its consumer, so the consumer is back, in no liveness entry;
    // what it claimed was reclaimed since, so it holds nothing
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg("default:ghost:1")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg(&stream)
        .arg("workers")
        .arg("default:live:1")
        .query_async(&mut conn)
        .await
        .unwrap();
    // a live worker's consumer holding nothing: its liveness entry names it
    let _: () = conn
        .zadd(client.keys().consumers(), "default:live:1", u64::MAX / 2)
        .await
        .unwrap();
    let _b = InProcBroker::spawn(
        &url,
        BrokerConfig {
            lease: Duration::from_millis(400),
            presence_poll: Duration::from_millis(100),
            ..BrokerConfig::default()
        },
    )
    .await;
    // the ghost held the job: recovery takes it back after the lease, then the sweep the ghost
    wait_for("the ghost consumer to go", Duration::from_secs(10), || {
        let client = client.clone();
        let stream = stream.clone();
        async move {
            (!consumers(&client, &stream)
                .await
                .contains(&"default:ghost:1".to_string()))
            .then_some(())
        }
    })
    .await;
    assert!(consumers(&client, &stream)
        .await
        .contains(&"default:live:1".to_string()));
    let report = hero_admin::Inspector::from(&client)
        .audit(&|_| {})
        .await
        .unwrap();
    assert!(
        report
            .findings
            .iter()
            .all(|f| f.consumer.as_deref() != Some("default:ghost:1")),
        "{report:?}"
    );
}

/// A due delayed job whose record can no longer be queued (its script type edited by hand into
/// one no queue can have, or its key replaced by another type) ends through `hero_promote`: the
/// record `error` with the reason, an `error` event, the minute's failed count, its retention
/// entry; a dependent of it fails too. Nothing stays in the delayed set. (Before, the pass wrote
/// the status with a raw HSET: no event, no count, no retention, and its dependents waited
/// forever.)
#[tokio::test]
async fn a_due_job_that_names_no_queue_ends_error_with_its_event_count_and_dependents() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // parked for a minute, then made due by hand below: a delay of a millisecond was already
    // past when a loaded machine's submit reached Redis, which then queued the job at once
    let bad = NewJob::builder("t", "x")
        .id("no-queue")
        .delay(Duration::from_secs(60))
        .build()
        .unwrap();
    let dependent = NewJob::builder("t", "y")
        .id("after-it")
        .after("no-queue")
        .build()
        .unwrap();
    client.submit(&bad).await.unwrap();
    client.submit(&dependent).await.unwrap();
    let mut raw = server.conn().await;
    let _: () = raw
        .hset(
            hero_testkit::job_key("no-queue"),
            "script_type",
            "not a type!",
        )
        .await
        .unwrap();
    let before = hero_admin::Inspector::from(&client)
        .history(1)
        .await
        .unwrap();
    let failed_before: u64 = before.iter().map(|m| m.failed).sum();
    // due now
    let _: () = raw.zadd(keys().delayed(), "no-queue", 1).await.unwrap();
    // one step of the queue's upkeep, as a worker or broker holding the duties makes it
    hero_protocol::duties::step(
        client.redis(),
        client.keys(),
        "test",
        Duration::from_secs(3),
    )
    .await
    .unwrap();

    // read raw: the record names a script type no decoder accepts
    let (status, error): (String, String) = redis::cmd("HMGET")
        .arg(hero_testkit::job_key("no-queue"))
        .arg(&["status", "error"])
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(status, "error");
    assert!(error.contains("no valid script_type"), "{error}");
    let delayed: i64 = raw.zcard(keys().delayed()).await.unwrap();
    assert_eq!(delayed, 0, "nothing left in the delayed set");
    let events = hero_admin::Inspector::from(&client)
        .events(
            &hero_admin::inspect::EventFilter {
                job: Some("no-queue".into()),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
    assert!(
        events.iter().any(|e| e.event == "error"
            && e.reason
                .as_deref()
                .is_some_and(|r| r.contains("no valid script_type"))),
        "{events:?}"
    );
    let after = hero_admin::Inspector::from(&client)
        .history(1)
        .await
        .unwrap();
    let failed_after: u64 = after.iter().map(|m| m.failed).sum();
    assert_eq!(
        failed_after,
        failed_before + 2,
        "the job and its dependent counted failed"
    );
    let retained: String = redis::cmd("XREVRANGE")
        .arg(keys().retention())
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async::<redis::Value>(&mut raw)
        .await
        .map(|v| format!("{v:?}"))
        .unwrap();
    assert!(retained.contains("no-queue"), "{retained}");
    let dep = client.get(&dependent.id().clone()).await.unwrap();
    assert_eq!(dep.status, Status::Error, "its dependent fails with it");
}

/// While Redis is away (a restart of 2 s), a running broker with its HTTP face says so in a few
/// lines, not a line per pass of each loop (it was ~22 WARN lines a second): every loop backs
/// off, an unreachable Redis is warned about once for the whole process and then at most every
/// 30 s, and one line says when it is reachable again. A short outage is the one that leaves
/// pooled connections unused through it, stale once Redis is back (it fails without SETTLE).
#[tokio::test]
async fn a_broker_under_a_redis_outage_warns_a_few_times_and_says_once_when_redis_is_back() {
    let mut server = RedisServer::start();
    let url = server.url();
    let log_path = std::env::temp_dir().join(format!("hero-outage-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).unwrap();
    let broker = hero_testkit::hero_command()
        .args(["--redis-url", &url, "broker", "--http", "127.0.0.1:0"])
        .env("RUST_LOG", "warn,hero_broker=info,hero_protocol=info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    // killed however the test ends
    let _broker = hero_testkit::KillOnDrop(broker);
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // the broker is up once it published its settings
    let client = Client::connect(&url).await.unwrap();
    wait_for("the broker's settings", Duration::from_secs(20), || {
        let c = client.clone();
        async move {
            let n: i64 = c
                .redis()
                .query(redis::cmd("HLEN").arg(keys().config()))
                .await
                .ok()?;
            (n > 0).then_some(())
        }
    })
    .await;
    server.outage(Duration::from_secs(2)).await;
    let during = read();
    wait_for(
        "the line saying Redis is back",
        Duration::from_secs(30),
        || {
            let text = read();
            async move { text.contains("reachable again").then_some(()) }
        },
    )
    .await;
    // quiet once back: the pooled connections made before the outage fail once each as they
    // are next used (a broken pipe while Redis is up), and say nothing (issue 58; they warned
    // 4 and 8 s later); 10 s covers the blocking pool's and the loops' next uses. Checked: with
    // outage::SETTLE at 0 this fails on "reaching Redis failed … broken pipe".
    tokio::time::sleep(Duration::from_secs(10)).await;
    let text = read();
    let _ = std::fs::remove_file(&log_path);
    let after: Vec<&str> = text
        .split_once("reachable again")
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" WARN") && l.contains("hero_"))
        .collect();
    assert!(after.is_empty(), "warned after Redis was back: {after:#?}");
    let warns = during
        .lines()
        .filter(|l| l.contains(" WARN") && l.contains("hero_"))
        .count();
    assert!(
        (1..=15).contains(&warns),
        "{warns} WARN lines in a 2 s outage:\n{during}"
    );
    let back = text
        .lines()
        .filter(|l| l.contains("reachable again"))
        .count();
    assert_eq!(back, 1, "{text}");
}
