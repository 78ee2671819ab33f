//! Job events for producers (`Client::events`) and `wait`, against real redis-servers, a broker
//! and worker processes: a subscriber sees every job of a 10,000-job run end exactly once, with
//! its output, while jobs are retried and recovered after a worker's SIGKILL; one that stops
//! reading past the log's cap is told how many entries it missed; a subscription is refused with
//! the log off; `wait` after a plain submit returns within milliseconds of the job's end (no reply
//! list, so no worker had to pass one), on one Redis, on shards, and with the log off.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hero_broker::config::BrokerConfig;
use hero_client::{Client, Since, Watched};
use hero_protocol::event_log::EventFilter;
use hero_protocol::name::ScriptType;
use hero_protocol::{Error, JobId, NewJob, Status};
use hero_testkit::{test_worker, InProcBroker, RedisServer};

fn of_type(t: &str) -> EventFilter {
    EventFilter {
        script_type: Some(ScriptType::new(t).unwrap()),
        ..EventFilter::default()
    }
}

/// The next item within `limit`, or a failure naming what was awaited.
async fn next(stream: &mut hero_client::EventStream, what: &str) -> Watched {
    tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .unwrap_or_else(|_| panic!("no event within 30 s while waiting for {what}"))
        .expect("the subscription ended")
        .expect("a readable event")
}

#[tokio::test]
async fn a_subscriber_sees_every_job_end_once_with_its_output_through_retries_and_a_sigkill() {
    let server = RedisServer::start();
    let url = server.url();
    let cfg = BrokerConfig {
        presence_poll: Duration::from_millis(100),
        ..BrokerConfig::default()
    };
    let _broker = InProcBroker::spawn(&url, cfg).await;
    let client = Client::connect(&url).await.unwrap();
    let mut events = client.events(of_type("t"), Since::Now).await.unwrap();
    let flags = ["--presence-ms", "1000", "--concurrency", "8"];
    let mut a = test_worker(&url, "t", "A", &flags);
    let b = test_worker(&url, "t", "B", &flags);
    a.expect_line("ready", Duration::from_secs(10)).await;
    b.expect_line("ready", Duration::from_secs(10)).await;

    // 10,000 jobs: every 100th fails and is retried once, then ends `error`
    let n = 10_000;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            let script = if i % 100 == 0 { "fail on purpose" } else { "x" };
            NewJob::builder("t", script)
                .id(format!("sub-{i}"))
                .retries(1)
                .build()
                .unwrap()
        })
        .collect();
    let mut submitted = 0;
    let mut ends: HashMap<String, Vec<(String, Option<String>)>> = HashMap::new();
    let (mut retried, mut recovered, mut killed) = (0, 0, false);
    // a failing job's second attempt follows its retry or, when the SIGKILL took its first
    // attempt, its recovery (which spends the attempt, so no `retried` follows)
    let mut second_attempt = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while ends.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} jobs ended",
            ends.len()
        );
        if submitted < n {
            let chunk = &jobs[submitted..(submitted + 500).min(n)];
            client.submit_many(chunk).await.unwrap();
            submitted += chunk.len();
        }
        if !killed && ends.len() > n / 4 {
            a.kill9();
            killed = true;
        }
        let item = if submitted < n {
            match tokio::time::timeout(Duration::from_millis(5), events.next()).await {
                Ok(i) => i.unwrap().unwrap(),
                Err(_) => continue,
            }
        } else {
            next(&mut events, "the run's ends").await
        };
        let Watched::Event { event, output } = item else {
            panic!("a gap in a subscription that kept up: {item:?}");
        };
        match event.event.as_str() {
            "finished" | "error" => ends
                .entry(event.job_id.clone())
                .or_default()
                .push((event.event.clone(), output)),
            "retried" => {
                retried += 1;
                second_attempt.insert(event.job_id.clone());
            }
            "recovered" => {
                recovered += 1;
                second_attempt.insert(event.job_id.clone());
            }
            _ => {}
        }
    }
    // a moment for anything logged twice to arrive
    while let Ok(Some(Ok(Watched::Event { event, output }))) =
        tokio::time::timeout(Duration::from_millis(500), events.next()).await
    {
        if matches!(event.event.as_str(), "finished" | "error") {
            ends.entry(event.job_id.clone())
                .or_default()
                .push((event.event, output));
        }
    }
    let twice: Vec<_> = ends.iter().filter(|(_, e)| e.len() != 1).collect();
    assert!(
        twice.is_empty(),
        "jobs that ended other than once: {twice:?}"
    );
    let failed = ends.values().filter(|e| e[0].0 == "error").count();
    assert_eq!(failed, n / 100, "every 100th job failed");
    let not_again: Vec<_> = (0..n)
        .step_by(100)
        .map(|i| format!("sub-{i}"))
        .filter(|id| !second_attempt.contains(id))
        .collect();
    assert!(
        not_again.is_empty(),
        "failing jobs never retried or recovered: {not_again:?}"
    );
    assert!(recovered > 0, "the killed worker's jobs were recovered");
    // each finished event carries the output the record holds
    for i in (1..n).step_by(997) {
        let id = format!("sub-{i}");
        if i % 100 == 0 {
            continue;
        }
        let job = client.get(&JobId::new(&id).unwrap()).await.unwrap();
        assert_eq!(ends[&id][0].1.as_deref(), job.output.as_deref(), "{id}");
    }
    hero_testkit::say(&format!(
        "10,000 jobs: {retried} retried, {recovered} recovered events, each end seen once"
    ));
    drop(b);
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_past_the_cap_is_told_how_many_it_missed() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut raw = server.conn().await;
    let keys = hero_testkit::keys();
    let _: () = redis::cmd("HSET")
        .arg(keys.config())
        .arg("events_max")
        .arg(100)
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut events = client
        .events(EventFilter::default(), Since::Now)
        .await
        .unwrap();
    // one submit a call: one log entry each, while the subscriber reads nothing
    let n = 2000;
    for i in 0..n {
        let job = NewJob::builder("t", "x")
            .id(format!("g-{i}"))
            .build()
            .unwrap();
        client.submit(&job).await.unwrap();
    }
    let (mut seen, mut missed, mut gaps) = (0u64, 0u64, 0);
    while seen + missed < n {
        match next(&mut events, "the submits' events").await {
            Watched::Event { event, .. } => {
                assert_eq!(event.event, "submitted");
                seen += 1;
            }
            Watched::Gap { missed: m, shard } => {
                assert_eq!(shard, 0);
                missed += m.expect("the count is known for a subscription started now");
                gaps += 1;
            }
        }
    }
    assert_eq!(
        seen + missed,
        n,
        "each event delivered or counted as missed"
    );
    assert!(
        gaps >= 1 && missed > 0,
        "a gap was told: {gaps} gaps, {missed} missed"
    );
    hero_testkit::say(&format!(
        "{seen} delivered, {missed} missed in {gaps} gap(s)"
    ));
    // and it keeps up again from there
    let job = NewJob::builder("t", "x").id("after").build().unwrap();
    client.submit(&job).await.unwrap();
    let Watched::Event { event, .. } = next(&mut events, "the next event").await else {
        panic!("a second gap");
    };
    assert_eq!(event.job_id, "after");
}

#[tokio::test]
async fn with_the_log_off_a_subscription_is_refused_and_wait_still_works() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut raw = server.conn().await;
    let _: () = redis::cmd("HSET")
        .arg(hero_testkit::keys().config())
        .arg("events_max")
        .arg(0)
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = client
        .events(EventFilter::default(), Since::Now)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, Error::EventLogOff { .. }), "{err}");
    assert!(err.to_string().contains("events_max"), "{err}");
    let w = test_worker(&url, "t", "A", &["--sleep-ms", "200"]);
    w.expect_line("ready", Duration::from_secs(10)).await;
    let id = client
        .submit(&NewJob::builder("t", "x").build().unwrap())
        .await
        .unwrap()
        .id;
    let r = client.wait(&id, Duration::from_secs(20)).await.unwrap();
    assert_eq!(r.status, Status::Finished);
}

/// How long after the job's end (`finished_at`, Redis's clock on this machine) `wait` returned.
async fn wait_lag(client: &Client, script: &str) -> Duration {
    let id = client
        .submit(&NewJob::builder("t", script).build().unwrap())
        .await
        .unwrap()
        .id;
    let r = client.wait(&id, Duration::from_secs(20)).await.unwrap();
    let back = std::time::SystemTime::now();
    assert_eq!(r.status, Status::Finished);
    let job = client.get(&id).await.unwrap();
    let end = humantime::parse_rfc3339_weak(&job.finished_at.expect("finished_at")).unwrap();
    back.duration_since(end).unwrap_or_default()
}

#[tokio::test]
async fn wait_after_a_plain_submit_returns_within_milliseconds_of_the_end_on_one_redis_and_shards()
{
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let w = test_worker(&url, "t", "A", &["--concurrency", "4"]);
    w.expect_line("ready", Duration::from_secs(10)).await;
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        worst = worst.max(wait_lag(&client, "sleep 200").await);
    }
    // many waits at once share the one follower
    let waits: Vec<_> = (0..20)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { wait_lag(&client, "sleep 200").await })
        })
        .collect();
    for w in waits {
        worst = worst.max(w.await.unwrap());
    }
    hero_testkit::say(&format!("worst wait after the end: {worst:?}"));
    assert!(
        worst < Duration::from_millis(150),
        "wait returned {worst:?} after a job's end (the 1 s slices of before would show here)"
    );
    drop(w);

    client.set_shards(3).await.unwrap();
    let client = Client::connect(&url).await.unwrap();
    let w = test_worker(&url, "t", "B", &["--concurrency", "4"]);
    w.expect_line("ready", Duration::from_secs(10)).await;
    let mut worst = Duration::ZERO;
    for _ in 0..9 {
        worst = worst.max(wait_lag(&client, "sleep 100").await);
    }
    assert!(worst < Duration::from_millis(150), "on 3 shards: {worst:?}");
    let mut events = client.events(of_type("t"), Since::Oldest).await.unwrap();
    let mut shards = std::collections::BTreeSet::new();
    while shards.len() < 3 {
        if let Watched::Event { event, .. } = next(&mut events, "events of every shard").await {
            if event.event == "finished" {
                shards.insert(hero_protocol::shard::shard_of_id(&event.job_id).unwrap_or(0));
            }
        }
    }
}

/// A subscription resumes after an event id it was given, and `Since::Oldest` replays what the
/// log keeps.
#[tokio::test]
async fn a_subscription_resumes_after_an_event_id() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for i in 0..3 {
        let job = NewJob::builder("t", "x")
            .id(format!("r{i}"))
            .build()
            .unwrap();
        client.submit(&job).await.unwrap();
    }
    let mut all = client
        .events(EventFilter::default(), Since::Oldest)
        .await
        .unwrap();
    let mut ids = Vec::new();
    while ids.len() < 3 {
        if let Watched::Event { event, .. } = next(&mut all, "the three submits").await {
            ids.push((event.id, event.job_id));
        }
    }
    assert_eq!(
        ids.iter().map(|i| i.1.as_str()).collect::<Vec<_>>(),
        ["r0", "r1", "r2"]
    );
    let mut resumed = client
        .events(EventFilter::default(), Since::parse(&ids[0].0).unwrap())
        .await
        .unwrap();
    let Watched::Event { event, .. } = next(&mut resumed, "the event after r0's").await else {
        panic!("a gap on a log that was not trimmed");
    };
    assert_eq!(event.job_id, "r1");
}
