//! The event log (SPEC §5): every change of a job's state is logged by the call that makes it, in
//! order, capped, and readable live.

use std::time::{Duration, Instant};

use hero_admin::inspect::EventFilter;
use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{all_finished, binary, keys, InProcBroker, InProcWorker, Proc, RedisServer};
use hero_worker::{Outcome, Worker};
use redis::AsyncCommands;

fn worker(url: &str, label: &str, sleep_ms: &str) -> Proc {
    let flags = [
        "--presence-ms",
        "1000",
        "--lease-ms",
        "60000",
        "--sleep-ms",
        sleep_ms,
    ];
    hero_testkit::test_worker(url, "t", label, &flags)
}

#[tokio::test]
async fn a_job_recovered_from_a_killed_worker_has_exactly_its_events_in_order() {
    let server = RedisServer::start();
    let url = server.url();
    let cfg = BrokerConfig {
        lease: Duration::from_secs(60),
        presence_poll: Duration::from_millis(100),
        ..BrokerConfig::default()
    };
    let _broker = InProcBroker::spawn(&url, cfg).await;
    let mut a = worker(&url, "A", "600000");
    let ready = a.expect_line("ready", Duration::from_secs(10)).await;
    let a_consumer = ready.trim_start_matches("ready ").to_string();
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("t", "x").id("ev1").build().unwrap();
    client.submit(&job).await.unwrap();
    a.expect_line("started ev1", Duration::from_secs(10)).await;
    a.kill9();
    let b = worker(&url, "B", "0");
    let ready = b.expect_line("ready", Duration::from_secs(10)).await;
    let b_consumer = ready.trim_start_matches("ready ").to_string();
    all_finished(&server, &["ev1".to_string()], Duration::from_secs(20)).await;

    let only = EventFilter {
        job: Some("ev1".into()),
        ..EventFilter::default()
    };
    let events = hero_admin::Inspector::from(&client)
        .events(&only, 100)
        .await
        .unwrap();
    // (event, worker, attempt, reason) of each entry
    type Seen<'a> = (&'a str, Option<&'a str>, Option<u32>, Option<&'a str>);
    let seen: Vec<Seen> = events
        .iter()
        .map(|e| {
            (
                e.event.as_str(),
                e.worker.as_deref(),
                e.attempt,
                e.reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("submitted", None, None, None),
            ("started", Some(a_consumer.as_str()), Some(1), None),
            (
                "recovered",
                Some(a_consumer.as_str()),
                Some(1),
                Some("presence")
            ),
            ("started", Some(b_consumer.as_str()), Some(2), None),
            ("finished", Some(b_consumer.as_str()), None, None),
        ],
        "{events:#?}"
    );
    let stream = hero_testkit::work_key("t");
    assert!(
        events
            .iter()
            .all(|e| e.queue.as_deref() == Some(stream.as_str())),
        "every event names the job's queue"
    );
    assert!(
        events.windows(2).all(|w| w[0].at_ms() <= w[1].at_ms()),
        "in the order they happened"
    );
}

#[tokio::test]
async fn follow_prints_a_new_jobs_events_within_100_ms_of_the_change() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    // one event before the follower starts: it prints it, then follows from that very entry, so
    // nothing submitted after the line is seen can be missed
    let warm = NewJob::builder("t", "x").id("warm").build().unwrap();
    client.submit(&warm).await.unwrap();
    let follower = Proc::spawn(
        &binary("hero"),
        &["events", "--follow", "--json", "--last", "1"],
        &[("HERO_REDIS_URL", url.as_str())],
        None,
    );
    follower
        .expect_line("\"warm\"", Duration::from_secs(10))
        .await;
    let mut worst = Duration::ZERO;
    for n in 0..5 {
        let id = format!("live{n}");
        let job = NewJob::builder("t", "x").id(&id).build().unwrap();
        let before = Instant::now();
        client.submit(&job).await.unwrap();
        let line = follower
            .expect_line(&format!("\"{id}\""), Duration::from_secs(5))
            .await;
        worst = worst.max(before.elapsed());
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["event"], "submitted");
        assert_eq!(v["queue"], hero_testkit::work_key("t"));
    }
    assert!(
        worst < Duration::from_millis(100),
        "the slowest event took {worst:?} from the submit to the follower's line"
    );
}

#[tokio::test]
async fn the_event_log_stays_within_its_cap_after_200000_jobs_and_is_off_at_zero() {
    let server = RedisServer::start();
    let url = server.url();
    let cap = 1_000u64;
    let cfg = BrokerConfig {
        events_max: cap,
        ..BrokerConfig::default()
    };
    let broker = InProcBroker::spawn(&url, cfg).await;
    let client = Client::connect(&url).await.unwrap();
    let w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["c"])
            .concurrency(200)
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done(String::new()) }),
    );
    let mut raw = server.conn().await;
    let total = 200_000;
    let mut ids = Vec::with_capacity(total);
    for chunk in 0..total / 1000 {
        let jobs: Vec<NewJob> = (0..1000)
            .map(|n| {
                NewJob::builder("c", "x")
                    .id(format!("c{chunk}-{n}"))
                    .build()
                    .unwrap()
            })
            .collect();
        ids.extend(jobs.iter().map(|j| j.id().to_string()));
        for r in client.submit_many(&jobs).await.unwrap() {
            r.unwrap();
        }
    }
    all_finished(&server, &ids, Duration::from_secs(120)).await;
    w.stop().await;
    let len: u64 = raw.xlen(keys().events()).await.unwrap();
    let info: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(keys().events())
        .query_async(&mut raw)
        .await
        .unwrap();
    let added = info
        .chunks(2)
        .find_map(|kv| match kv {
            [redis::Value::BulkString(k), redis::Value::Int(n)] if k == b"entries-added" => {
                Some(*n as u64)
            }
            _ => None,
        })
        .expect("entries-added in XINFO STREAM");
    assert!(
        added > 2 * cap,
        "the run wrote {added} entries, well past the cap"
    );
    // MAXLEN ~ trims whole nodes (100 entries each by default), never below the cap
    assert!(
        (cap..=cap + 100).contains(&len),
        "{len} entries left of {added} written"
    );

    drop(broker);
    let off = BrokerConfig {
        events_max: 0,
        ..BrokerConfig::default()
    };
    let _broker = InProcBroker::spawn(&url, off).await;
    let before: u64 = raw.xlen(keys().events()).await.unwrap();
    client
        .submit(&NewJob::builder("c", "x").id("quiet").build().unwrap())
        .await
        .unwrap();
    let after: u64 = raw.xlen(keys().events()).await.unwrap();
    assert_eq!(before, after, "events_max 0 turns the log off");
}
