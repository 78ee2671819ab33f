//! A second language speaks the protocol (SPEC §7, issue 4): the Python producer and worker of
//! `tests/interop/hero_interop.py`, on the repository's `hero` Python package (python/, its
//! producer and its protocol calls), against the real broker and the Rust client and worker,
//! both ways, with run-and-wait and fenced completion. `scripts/interop-setup` makes the Python
//! environment and installs the package into it.

use std::time::Duration;

use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::{Job, JobId, NewJob, Status};
use hero_testkit::work_key;
use hero_testkit::{python, InProcBroker, InProcWorker, Proc, RedisServer};
use hero_worker::{Outcome, Worker};

const LONG: Duration = Duration::from_secs(30);

/// A throwaway Redis, a broker whose time-limit pass runs every 200 ms, and a client.
async fn with_time_limits() -> (RedisServer, InProcBroker, Client) {
    let server = RedisServer::start();
    let cfg = BrokerConfig {
        ..BrokerConfig::default()
    };
    let broker = InProcBroker::spawn(&server.url(), cfg).await;
    let client = Client::connect(&server.url()).await.unwrap();
    (server, broker, client)
}

fn py(args: &[&str]) -> Proc {
    let script = hero_testkit::workspace_root().join("tests/interop/hero_interop.py");
    let mut all = vec![script.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    Proc::spawn(&python(), &all, &[], None)
}

#[tokio::test]
async fn python_submits_with_run_and_wait_and_the_rust_worker_runs_it() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["pyt"])
        .handler(|job: Job, _| async move {
            Outcome::Done(format!("rust ran {} for {}", job.script, job.caller_id))
        });
    let _w = InProcWorker::spawn(worker);

    let mut p = py(&[
        "submit", "--url", &url, "--type", "pyt", "--script", "hello", "--wait", "20",
    ]);
    let line = p.expect_line("\"id\"", LONG).await;
    assert_eq!(p.wait_exit(LONG).await, 0);
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["status"], "finished", "{line}");
    assert_eq!(reply["output"], "rust ran hello for python", "{line}");
    let job = client
        .get(&JobId::new(reply["id"].as_str().unwrap()).unwrap())
        .await
        .unwrap();
    assert_eq!(job.status, Status::Finished);
    assert_eq!(job.attempts, 1);
}

#[tokio::test]
async fn rust_submits_with_run_and_wait_and_the_python_worker_runs_it_with_fenced_completion() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let mut w = py(&[
        "worker", "--url", &url, "--type", "pyw", "--label", "py", "--jobs", "3",
    ]);
    w.expect_line("ready", LONG).await;

    for script in ["one", "two", "three"] {
        let job = NewJob::builder("pyw", script).build().unwrap();
        let r = client.run(&job, LONG).await.unwrap();
        assert_eq!(
            (r.status, r.output.as_str()),
            (Status::Finished, format!("py:{script}").as_str())
        );
        w.expect_line(&format!("completion {} completed", job.id()), LONG)
            .await;
        // the same completion sent again is fenced: recorded once
        w.expect_line(&format!("resend {} already_completed", job.id()), LONG)
            .await;
        let rec = client.get(job.id()).await.unwrap();
        assert_eq!(rec.lease.as_deref().map(|l| l.contains('-')), Some(true));
    }
    assert_eq!(
        w.wait_exit(LONG).await,
        0,
        "the worker stops after its 3 jobs"
    );
    let mut raw = server.conn().await;
    assert_eq!(hero_testkit::pending(&mut raw, work_key("pyw")).await, 0);
}

/// The time limit holds whatever the worker does (issue 27): a Python worker that ignores it
/// and keeps renewing its lease has its job ended `error`/`timeout` by the broker shortly after
/// the limit; its renewals from then on answer `stopped`, and its late completion is fenced
/// (nothing it sends changes the record). Without the broker's time-limit pass the job ran
/// as long as the worker pleased.
#[tokio::test]
async fn a_worker_that_ignores_the_time_limit_and_keeps_renewing_has_its_job_ended_timeout() {
    let (server, _broker, client) = with_time_limits().await;
    let url = server.url();
    let job = NewJob::builder("pylong", "forever")
        .id("too-long")
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    let started = std::time::Instant::now();
    let w = py(&[
        "worker",
        "--url",
        &url,
        "--type",
        "pylong",
        "--label",
        "py",
        "--hold-ms",
        "6000",
    ]);
    w.expect_line("ready", LONG).await;
    let id = JobId::new("too-long").unwrap();
    let ended = hero_testkit::wait_for("the job ended by its time limit", LONG, || {
        let client = client.clone();
        let id = id.clone();
        async move {
            let j = client.get(&id).await.ok()?;
            (j.status == Status::Error).then_some(j)
        }
    })
    .await;
    let took = started.elapsed();
    assert_eq!(ended.error.as_deref(), Some("timeout"), "{ended:?}");
    assert!(
        took < Duration::from_millis(5500),
        "ended at the limit (1 s) plus the grace, not when the worker let go: {took:?}"
    );
    // the worker keeps renewing: refused from now on; then its completion is fenced
    w.expect_line("renew too-long stopped", LONG).await;
    let answer = w.expect_line("completion too-long", LONG).await;
    assert!(
        answer.contains("already_completed") || answer.contains("lease_lost"),
        "{answer}"
    );
    let after = client.get(&id).await.unwrap();
    assert_eq!(
        (after.status, after.error.as_deref()),
        (Status::Error, Some("timeout"))
    );
    assert_eq!(after.output, None, "the late output is not recorded");
}

/// A concurrency limit holds for workers that pass none (issue 27): Python workers written from
/// protocol.md call `hero_fetch` without the limits argument, and with a limit of 1 on their
/// queue three of them never run two of its jobs at once; every job still runs. Without the
/// fetch reading the policies itself they ran three at once.
#[tokio::test]
async fn a_concurrency_limit_holds_for_workers_that_pass_no_limits() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let limit = hero_protocol::policy::Policy {
        concurrency: Some(1),
        ..hero_protocol::policy::Policy::default()
    };
    hero_admin::Admin::from(&client)
        .set_policy("pyc", &limit)
        .await
        .unwrap();
    let ids: Vec<String> = (0..4).map(|i| format!("lim-{i}")).collect();
    for id in &ids {
        let job = NewJob::builder("pyc", "x").id(id.as_str()).build().unwrap();
        client.submit(&job).await.unwrap();
    }
    let workers: Vec<Proc> = (0..3)
        .map(|_| {
            py(&[
                "worker",
                "--url",
                &url,
                "--type",
                "pyc",
                "--label",
                "p",
                "--jobs",
                "4",
                "--hold-ms",
                "600",
            ])
        })
        .collect();
    for w in &workers {
        w.expect_line("ready", LONG).await;
    }
    let mut raw = server.conn().await;
    let keys: Vec<String> = ids.iter().map(hero_testkit::job_key).collect();
    // the statuses of all four read at one instant
    let count = redis::Script::new(
        "local s, f = 0, 0 for _, k in ipairs(KEYS) do local x = redis.call('HGET', k, 'status') \
         if x == 'started' then s = s + 1 elseif x == 'finished' then f = f + 1 end end return {s, f}",
    );
    let deadline = std::time::Instant::now() + LONG;
    let mut most = 0;
    loop {
        let (started, finished): (u32, u32) =
            count.key(&keys).invoke_async(&mut raw).await.unwrap();
        most = most.max(started);
        if finished == 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "4 jobs finish; {finished} did"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(most, 1, "at most one of the queue's jobs ran at once");
}

/// A queue's policy is applied by the server for a worker of any language (issue 27): a
/// Python worker that fails every attempt, and knows nothing of policies (it asks for a retry
/// at once), has its job retried on the policy's back-off (fixed 400 ms) within the policy's
/// budget (2 retries, where the record has none), then ended `error`.
#[tokio::test]
async fn a_python_workers_failing_job_retries_on_the_policys_back_off_and_ends_after_its_budget() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let policy = hero_protocol::policy::Policy {
        retries: Some(2),
        backoff: Some(hero_protocol::policy::Backoff::parse("fixed:400ms,jitter=0").unwrap()),
        ..hero_protocol::policy::Policy::default()
    };
    hero_admin::Admin::from(&client)
        .set_policy("pyf", &policy)
        .await
        .unwrap();
    let job = NewJob::builder("pyf", "x").id("py-fails").build().unwrap();
    client.submit(&job).await.unwrap();
    let w = py(&[
        "worker", "--url", &url, "--type", "pyf", "--label", "p", "--jobs", "3", "--fail",
    ]);
    w.expect_line("ready", LONG).await;
    let id = JobId::new("py-fails").unwrap();
    let r = client.wait(&id, LONG).await.unwrap();
    assert_eq!(r.status, Status::Error, "{r:?}");
    let rec = client.get(&id).await.unwrap();
    assert_eq!(
        rec.attempts, 3,
        "the first attempt and the policy's two retries"
    );
    // each retry was due 400 ms after the failure that asked for it (Redis's clock: the event id)
    let only = hero_admin::inspect::EventFilter {
        job: Some("py-fails".into()),
        event: Some(hero_protocol::EventKind::Retried),
        ..Default::default()
    };
    let retried = hero_admin::Inspector::from(&client)
        .events(&only, 100)
        .await
        .unwrap();
    assert_eq!(retried.len(), 2, "{retried:?}");
    for e in &retried {
        let due = e.due_ms.expect("a retry's due time");
        let after = due.saturating_sub(e.at_ms());
        assert!(
            (380..=450).contains(&after),
            "due {after} ms after the failure: {e:?}"
        );
    }
}

/// A timeout is a failed attempt: a job with one retry whose worker ignores the limit twice is
/// retried once by the server (a `retried` event, reason `timeout`) and ended `timeout` the
/// second time, with 2 attempts.
#[tokio::test]
async fn a_job_past_its_time_limit_is_retried_within_its_budget_then_ended_timeout() {
    let (server, _broker, client) = with_time_limits().await;
    let url = server.url();
    let job = NewJob::builder("pyslow", "forever")
        .id("slow-twice")
        .timeout(Duration::from_secs(1))
        .retries(1)
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    let w = py(&[
        "worker",
        "--url",
        &url,
        "--type",
        "pyslow",
        "--label",
        "py",
        "--jobs",
        "2",
        "--hold-ms",
        "5000",
    ]);
    w.expect_line("ready", LONG).await;
    let id = JobId::new("slow-twice").unwrap();
    let r = client.wait(&id, Duration::from_secs(40)).await.unwrap();
    assert_eq!(
        (r.status, r.error.as_str()),
        (Status::Error, "timeout"),
        "{r:?}"
    );
    let rec = client.get(&id).await.unwrap();
    assert_eq!(rec.attempts, 2, "{rec:?}");
    let only = hero_admin::inspect::EventFilter {
        job: Some("slow-twice".into()),
        event: Some(hero_protocol::EventKind::Retried),
        ..Default::default()
    };
    let retried = hero_admin::Inspector::from(&client)
        .events(&only, 100)
        .await
        .unwrap();
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(retried[0].reason.as_deref(), Some("timeout"));
}
