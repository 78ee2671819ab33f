//! Per-queue policy: a failing job's retries follow the queue's back-off and retry budget;
//! a concurrency limit of 3 across 4 worker processes never has 4 of the queue's jobs running;
//! a queue's default time limit applies to a job that names none; workers pick a change up
//! within seconds.

use std::time::Duration;

use hero_admin::inspect::EventFilter;
use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::policy::{Backoff, Policy};
use hero_protocol::{clock, JobId, NewJob, Status};
use hero_testkit::{hero_cli, test_worker, InProcBroker, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

fn broker() -> BrokerConfig {
    BrokerConfig {
        promote_poll: Duration::from_millis(20),
        ..BrokerConfig::default()
    }
}

#[tokio::test]
async fn a_failing_jobs_retries_follow_the_queues_back_off_and_budget() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (code, out, err) = hero_cli(
        &url,
        &[
            "queue",
            "set",
            "bo",
            "--retries",
            "3",
            "--backoff",
            "exponential:300ms:2s,jitter=0",
            "--timeout",
            "1s",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("retries 3"), "{out}");
    let _broker = InProcBroker::spawn(&url, broker()).await;
    let _w = InProcWorker::spawn(Worker::builder(client.clone()).types(["bo"]).handler(
        |j: hero_protocol::Job, _| async move {
            if j.script == "hang" {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Outcome::Fail("always".into())
        },
    ));
    // the job names no retries: the queue's budget of 3 gives it 4 attempts
    let job = NewJob::builder("bo", "x").id("bo-1").build().unwrap();
    client.submit(&job).await.unwrap();
    let r = client.wait(job.id(), LIMIT).await.unwrap();
    assert_eq!(r.status, Status::Error);
    assert_eq!(client.get(job.id()).await.unwrap().attempts, 4);
    let events = hero_admin::Inspector::from(&client)
        .events(
            &EventFilter {
                job: Some("bo-1".into()),
                ..EventFilter::default()
            },
            100,
        )
        .await
        .unwrap();
    // each retry is due base * 2^(attempt-1) after its failure (the event's time is Redis's,
    // the due time the worker's clock: a few ms apart on one machine)
    let due: Vec<i64> = events
        .iter()
        .filter(|e| e.event == "retried")
        .map(|e| e.due_ms.unwrap() as i64 - e.at_ms() as i64)
        .collect();
    assert_eq!(due.len(), 3, "{events:?}");
    for (got, want) in due.iter().zip([300i64, 600, 1200]) {
        assert!(
            (got - want).abs() <= 60,
            "retry due after {got} ms, policy says {want}: {due:?}"
        );
    }
    // and each attempt started once its retry was due, not long after (promotion polls 20 ms)
    let starts: Vec<u64> = events
        .iter()
        .filter(|e| e.event == "started")
        .map(|e| e.at_ms())
        .collect();
    let retried: Vec<u64> = events
        .iter()
        .filter(|e| e.event == "retried")
        .map(|e| e.due_ms.unwrap())
        .collect();
    for (start, due) in starts.iter().skip(1).zip(&retried) {
        assert!(
            *start + 10 >= *due && *start < due + 500,
            "started at {start}, due {due}"
        );
    }

    // the queue's time limit applies to a job that names none
    let hang = NewJob::builder("bo", "hang").id("bo-hang").build().unwrap();
    let began = clock::now_ms();
    client.submit(&hang).await.unwrap();
    let first_error = hero_testkit::wait_for("the first attempt to time out", LIMIT, || {
        let client = client.clone();
        async move {
            let j = client.get(&JobId::new("bo-hang").unwrap()).await.ok()?;
            j.error.filter(|e| e == "timeout").map(|_| clock::now_ms())
        }
    })
    .await;
    assert!(
        first_error - began < 5_000,
        "timed out after {} ms",
        first_error - began
    );

    let (_, shown, _) = hero_cli(&url, &["queue", "show", "bo", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["policies"][0]["policy"]["retries"], 3, "{shown}");
    let (code, _, err) = hero_cli(&url, &["queue", "set", "bo", "--backoff", "linear:1s"]);
    assert_eq!(code, 2, "a bad back-off is refused: {err}");
    assert!(err.contains("fixed:<delay> or exponential"), "{err}");
}

#[tokio::test]
async fn a_concurrency_limit_of_3_across_4_worker_processes_never_has_4_running() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    hero_admin::Admin::from(&client)
        .set_policy(
            "cl",
            &Policy {
                concurrency: Some(3),
                ..Policy::default()
            },
        )
        .await
        .unwrap();
    let mut workers = Vec::new();
    for label in ["A", "B", "C", "D"] {
        let w = test_worker(&url, "cl", label, &["--concurrency", "2"]);
        w.expect_line("ready", LIMIT).await;
        workers.push(w);
    }
    let jobs: Vec<NewJob> = (0..30)
        .map(|i| {
            NewJob::builder("cl", "sleep 150")
                .id(format!("cl-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    for r in client.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    let mut spans = Vec::new();
    for j in &jobs {
        let r = client.wait(j.id(), LIMIT).await.unwrap();
        assert_eq!(r.status, Status::Finished);
        let rec = client.get(j.id()).await.unwrap();
        let ms = |t: Option<String>| {
            humantime::parse_rfc3339_weak(&t.unwrap())
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64
        };
        spans.push((ms(rec.started_at), ms(rec.finished_at)));
    }
    // the most jobs running at one moment, each span narrowed by 20 ms at both ends (a start
    // and an end are stamped with the clocks of two processes, each before its call)
    let mut points: Vec<(i64, i32)> = spans
        .iter()
        .flat_map(|(s, f)| [(s + 20, 1), (f - 20, -1)])
        .collect();
    points.sort_unstable();
    let (mut now, mut most) = (0, 0);
    for (_, d) in points {
        now += d;
        most = most.max(now);
    }
    assert_eq!(
        most, 3,
        "at most 3 at once, and the limit was used: {spans:?}"
    );
    let who: std::collections::HashSet<String> = jobs
        .iter()
        .map(|j| completed_by(&workers, j.id()))
        .collect();
    assert!(who.len() >= 2, "more than one worker took part: {who:?}");
}

fn completed_by(workers: &[hero_testkit::Proc], id: &JobId) -> String {
    for (w, label) in workers.iter().zip(["A", "B", "C", "D"]) {
        if w.output()
            .iter()
            .any(|l| l.starts_with(&format!("completion {id} ")))
        {
            return label.to_string();
        }
    }
    String::new()
}

#[tokio::test]
async fn a_back_off_is_checked_when_it_is_set() {
    assert!(Backoff::parse("fixed:0s").is_ok());
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let zero = hero_admin::Admin::from(&client)
        .set_policy(
            "z",
            &Policy {
                concurrency: Some(0),
                ..Policy::default()
            },
        )
        .await
        .unwrap_err();
    assert!(zero.to_string().contains("hero pause"), "{zero}");
    let inst = hero_admin::Admin::from(&client)
        .set_policy("z/g/i", &Policy::default())
        .await
        .unwrap_err();
    assert!(inst.to_string().contains("not per instance"), "{inst}");
}

/// A rate of 5 a second on a queue, across 3 worker processes: in no window of a second do more
/// than 5 of its jobs start (their `started` events, stamped by Redis in the fetch that started
/// them), the rest waits, and none is lost. The CLI sets it as `--rate 5/s`.
#[tokio::test]
async fn a_rate_of_5_a_second_across_3_worker_processes_never_starts_6_in_a_second() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (code, _, err) = hero_cli(&url, &["queue", "set", "rt", "--rate", "5/s"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = hero_cli(&url, &["queue", "set", "rt", "--rate", "0/s"]);
    assert_eq!(code, 2, "a rate of 0 is refused: {err}");
    // the text form shows the rate and the key rate as the JSON form does
    hero_cli(
        &url,
        &[
            "queue",
            "set",
            "shown",
            "--rate",
            "5/s",
            "--key-rate",
            "2/1m",
        ],
    );
    let (code, shown, err) = hero_cli(&url, &["queue", "show", "shown"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        shown.contains("rate 5/1s") && shown.contains("key rate 2/1m"),
        "hero queue show shown: {shown}"
    );
    assert!(hero_admin::Admin::from(&client)
        .policy("rt")
        .await
        .unwrap()
        .rate
        .is_some());
    let mut workers = Vec::new();
    for label in ["A", "B", "C"] {
        let w = test_worker(&url, "rt", label, &["--concurrency", "4"]);
        w.expect_line("ready", LIMIT).await;
        workers.push(w);
    }
    let jobs: Vec<NewJob> = (0..20)
        .map(|i| {
            NewJob::builder("rt", "x")
                .id(format!("rt-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    let t0 = std::time::Instant::now();
    for r in client.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    for j in &jobs {
        let r = client.wait(j.id(), LIMIT).await.unwrap();
        assert_eq!(r.status, Status::Finished, "{}", j.id());
    }
    let took = t0.elapsed();
    // every start, by Redis's clock (the event's id)
    let only = EventFilter {
        event: Some(hero_protocol::EventKind::Started),
        ..EventFilter::default()
    };
    let mut starts: Vec<u64> = hero_admin::Inspector::from(&client)
        .events(&only, 1000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.job_id.starts_with("rt-"))
        .map(|e| e.at_ms())
        .collect();
    starts.sort_unstable();
    assert_eq!(starts.len(), 20, "each job started once");
    for (k, t) in starts.iter().enumerate() {
        let in_window = starts[k..].iter().take_while(|s| **s < t + 1000).count();
        assert!(
            in_window <= 5,
            "{in_window} starts within a second of {t}: {starts:?}"
        );
    }
    assert!(
        took >= Duration::from_secs(3),
        "20 jobs at 5 a second take at least 3 s: {took:?}"
    );
}

/// A key rate of 2 a second: of the jobs sharing a limit key (one customer), no more than 2
/// start in any second across 2 worker processes; the others wait in the delayed set until
/// their key has room and then run, none lost; another key's jobs are not held back by it.
#[tokio::test]
async fn a_key_rate_holds_each_limit_key_to_its_rate_across_worker_processes() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let (code, _, err) = hero_cli(&url, &["queue", "set", "kr", "--key-rate", "2/s"]);
    assert_eq!(code, 0, "{err}");
    let mut workers = Vec::new();
    for label in ["A", "B"] {
        let w = test_worker(&url, "kr", label, &["--concurrency", "4"]);
        w.expect_line("ready", LIMIT).await;
        workers.push(w);
    }
    let mut jobs: Vec<NewJob> = (0..6)
        .map(|i| {
            NewJob::builder("kr", "x")
                .id(format!("kr-a-{i}"))
                .limit_key("cust-a")
                .build()
                .unwrap()
        })
        .collect();
    jobs.extend((0..2).map(|i| {
        NewJob::builder("kr", "x")
            .id(format!("kr-b-{i}"))
            .limit_key("cust-b")
            .build()
            .unwrap()
    }));
    for r in client.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    for j in &jobs {
        let r = client.wait(j.id(), LIMIT).await.unwrap();
        assert_eq!(r.status, Status::Finished, "{}", j.id());
    }
    let only = EventFilter {
        event: Some(hero_protocol::EventKind::Started),
        ..EventFilter::default()
    };
    let events = hero_admin::Inspector::from(&client)
        .events(&only, 1000)
        .await
        .unwrap();
    let starts = |prefix: &str| {
        let mut t: Vec<u64> = events
            .iter()
            .filter(|e| e.job_id.starts_with(prefix))
            .map(|e| e.at_ms())
            .collect();
        t.sort_unstable();
        t
    };
    let a = starts("kr-a-");
    assert_eq!(a.len(), 6, "each of cust-a's jobs started once: {a:?}");
    for (k, t) in a.iter().enumerate() {
        let in_window = a[k..].iter().take_while(|s| **s < t + 1000).count();
        assert!(
            in_window <= 2,
            "{in_window} of cust-a's jobs started within a second: {a:?}"
        );
    }
    assert!(
        a[5] - a[0] >= 2000,
        "six at two a second span two windows: {a:?}"
    );
    let b = starts("kr-b-");
    assert_eq!(b.len(), 2);
    assert!(
        b[1] < a[0] + 1000,
        "cust-b is not held back by cust-a: {b:?} {a:?}"
    );
}
