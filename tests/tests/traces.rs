//! A failed attempt's trace, end to end (protocol 30): a Rust handler's error chain given with
//! `ctx.fail`, a panic, a Rhai script's error in `hero worker`, each stored with the job
//! (bounded), kept when a retry then succeeds, and shown by `hero status`, `hero --json status`
//! and the HTTP API; the worker's event says a failure that ended the job was a failure. The
//! dashboard's job page shows it in `dashboard.rs`; Python's and Node's traces are tested in
//! their suites.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{
    api_get, hero_cli, hero_worker, http_broker, wait_for, InProcWorker, RedisServer,
};
use hero_worker::{Outcome, Worker, WorkerEvent};

/// An error with a cause, as a handler's library would return one.
#[derive(Debug)]
struct Render {
    source: std::io::Error,
}

impl std::fmt::Display for Render {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rendering the report failed")
    }
}

impl std::error::Error for Render {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

async fn ended(client: &Client, id: &str) -> hero_protocol::Job {
    let jid = JobId::new(id).unwrap();
    wait_for("the job to end", Duration::from_secs(30), || {
        let c = client.clone();
        let jid = jid.clone();
        async move {
            let j = c.get(&jid).await.ok()?;
            j.status.is_terminal().then_some(j)
        }
    })
    .await
}

#[tokio::test]
async fn a_failed_attempt_keeps_its_error_chain_for_hero_status_the_api_and_its_retry() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (_broker, base) = http_broker(&url, Some("traces-admin-token"), &[]).await;
    let mut w = InProcWorker::spawn(Worker::builder(client.clone()).types(["reports"]).handler(
        |job: hero_protocol::Job, ctx: hero_worker::JobContext| async move {
            let err = Render {
                source: std::io::Error::other("disk full"),
            };
            match job.script.as_str() {
                "flaky" if ctx.attempt == 1 => ctx.fail(&err),
                "broken" => ctx.abort(&err),
                "huge" => {
                    ctx.trace("y".repeat(100_000));
                    Outcome::Fail("huge".into())
                }
                "panics" => panic!("index out of bounds"),
                _ => Outcome::Done(format!("attempt {}", ctx.attempt)),
            }
        },
    ));
    let submit = |id: &str, retries: u32| {
        NewJob::builder("reports", id)
            .id(id)
            .retries(retries)
            .build()
            .unwrap()
    };
    for job in [
        submit("flaky", 1),
        submit("broken", 3),
        submit("huge", 0),
        submit("panics", 0),
    ] {
        client.submit(&job).await.unwrap();
    }

    // a failure that ended the job is reported as one
    let failed = w
        .next(Duration::from_secs(20), |e| match e {
            WorkerEvent::Completed {
                job_id,
                completion,
                failed,
            } if job_id.as_str() == "broken" => Some((*completion, *failed)),
            _ => None,
        })
        .await;
    assert_eq!(
        failed,
        (hero_protocol::function::Completion::Completed, true)
    );

    let broken = ended(&client, "broken").await;
    assert_eq!(broken.status, Status::Error);
    assert_eq!(broken.attempts, 1, "abort: not retried");
    assert_eq!(
        broken.trace.as_deref(),
        Some("rendering the report failed\ncaused by: disk full")
    );
    // retried, then finished: the first attempt's trace stays as the reason of the retry
    let flaky = ended(&client, "flaky").await;
    assert_eq!(
        (flaky.status, flaky.output.as_deref()),
        (Status::Finished, Some("attempt 2"))
    );
    assert_eq!(
        flaky.trace.as_deref(),
        Some("rendering the report failed\ncaused by: disk full")
    );
    let huge = ended(&client, "huge").await;
    assert_eq!(
        huge.trace.map(|t| t.len()),
        Some(hero_protocol::function::TRACE_MAX),
        "bounded"
    );
    let panics = ended(&client, "panics").await;
    assert_eq!(
        panics.trace.as_deref(),
        Some("handler panicked: index out of bounds")
    );

    // hero status shows it under its heading, --json and the API carry it whole
    let (code, out, err) = hero_cli(&url, &["status", "broken"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("trace of the last failed attempt:\n  rendering the report failed\n  caused by: disk full"),
        "{out}"
    );
    let (_, json, _) = hero_cli(&url, &["--json", "status", "broken"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["trace"],
        "rendering the report failed\ncaused by: disk full"
    );
    let (status, v) = api_get(&base, "/api/jobs/flaky", Some("traces-admin-token")).await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "finished");
    assert_eq!(
        v["trace"],
        "rendering the report failed\ncaused by: disk full"
    );
    w.stop().await;

    // the Rhai worker of `hero worker`: the script's error, where it was raised
    let _rhai = hero_worker(&url, &["--types", "rhai"]);
    let (code, _, err) = hero_cli(
        &url,
        &[
            "submit",
            "--id",
            "script-error",
            "let total = 40;\nfn check(x) { if x > 1 { throw \"over budget\" } x }\ncheck(total)",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let job = ended(&client, "script-error").await;
    let trace = job.trace.unwrap_or_default();
    assert!(trace.starts_with("script error: "), "{trace}");
    assert!(trace.contains("over budget"), "{trace}");
    assert!(trace.contains("in function check"), "{trace}");
    assert!(trace.contains("at line 2: fn check(x)"), "{trace}");
}
