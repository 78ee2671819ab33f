//! Progress and logs of a running job: a handler reports a percent with a message and appends
//! log lines; the job keeps them (bounded), `hero status` shows them, `hero status --follow`
//! follows them live, scripts of the built-in Rhai worker have `progress()` and `log()`, and a
//! handler reporting in a tight loop is coalesced into a few calls.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{
    binary, hero_cli, hero_worker, run_to_finish, stepped_reporter, InProcWorker, Proc, RedisServer,
};
use hero_worker::{JobContext, Outcome, Worker};

#[tokio::test]
async fn a_rhai_script_reports_progress_and_log_lines_that_hero_status_shows() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut w = hero_worker(&url, &["--types", "rhai"]);
    let job = NewJob::builder(
        "rhai",
        r#"log("step one"); progress(40, "copying"); log("step two"); progress(75.5, "indexing"); 6 * 7"#,
    )
    .id("rhai-progress")
    .build()
    .unwrap();
    run_to_finish(&client, std::slice::from_ref(&job)).await;

    let (code, out, err) = hero_cli(&url, &["--json", "status", "rhai-progress"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["status"], "finished");
    assert_eq!(v["output"], "42");
    assert_eq!(
        v["progress"],
        serde_json::json!({"percent": 75.5, "message": "indexing"})
    );
    assert_eq!(v["log"], serde_json::json!(["step one", "step two"]));

    let (code, out, _) = hero_cli(&url, &["status", "rhai-progress"]);
    assert_eq!(code, 0);
    assert!(out.contains("progress 75.5% indexing"), "{out}");
    assert!(out.contains("  step one\n  step two"), "{out}");
    w.signal("TERM");
    assert_eq!(w.wait_exit(Duration::from_secs(30)).await, 0);
}

#[tokio::test]
async fn hero_status_follow_prints_each_step_as_it_happens_and_exits_when_the_job_ends() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (_w, step_tx) = stepped_reporter(&client);
    client
        .submit(&NewJob::builder("long", "x").id("long-1").build().unwrap())
        .await
        .unwrap();
    let mut follow = Proc::spawn(
        &binary("hero"),
        &["--redis-url", &url, "status", "long-1", "--follow"],
        &[],
        None,
    );
    follow
        .expect_line("progress 10% copying files", Duration::from_secs(10))
        .await;
    follow
        .expect_line("  began copying", Duration::from_secs(5))
        .await;
    step_tx.send(1).unwrap();
    follow
        .expect_line("progress 60% indexing", Duration::from_secs(10))
        .await;
    follow
        .expect_line("  indexing began", Duration::from_secs(5))
        .await;
    step_tx.send(2).unwrap();
    follow
        .expect_line("output: indexed", Duration::from_secs(10))
        .await;
    assert_eq!(follow.wait_exit(Duration::from_secs(10)).await, 0);
    let out = follow.output();
    assert_eq!(
        out.iter().filter(|l| l.trim() == "began copying").count(),
        1,
        "each log line is printed once: {out:?}"
    );
}

/// How many reports reached the job's events, by kind (`progress`, `logged`): one of each per call
/// that carried one.
async fn reports(client: &Client, kind: &str) -> usize {
    hero_admin::Inspector::from(client)
        .events(&hero_admin::inspect::EventFilter::default(), 100_000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event == kind)
        .count()
}

#[tokio::test]
async fn a_handler_reporting_in_a_tight_loop_is_coalesced_and_a_silent_one_reports_nothing() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let _w = InProcWorker::spawn(Worker::builder(client.clone()).types(["t"]).handler(
        |j: hero_protocol::Job, ctx: JobContext| async move {
            if j.script == "chatty" {
                // 20,000 reports over about a second
                for n in 0..20_000u32 {
                    ctx.progress(f64::from(n) / 200.0, format!("item {n}"));
                    ctx.log(format!("item {n}"));
                    if n % 1_000 == 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            Outcome::Done(String::new())
        },
    ));
    let silent: Vec<NewJob> = (0..50)
        .map(|n| {
            NewJob::builder("t", "quiet")
                .id(format!("quiet-{n}"))
                .build()
                .unwrap()
        })
        .collect();
    run_to_finish(&client, &silent).await;
    assert_eq!(
        reports(&client, "progress").await + reports(&client, "logged").await,
        0,
        "a handler that reports nothing sends no report"
    );
    // nor any renewal: hero_renew is the only call on the job path that XCLAIMs (no broker
    // runs here to reclaim idle deliveries), and Redis counts the commands a function runs
    let stats: String = client
        .redis()
        .query(redis::cmd("INFO").arg("commandstats"))
        .await
        .unwrap();
    assert!(
        !stats.contains("cmdstat_xclaim"),
        "a silent handler's job made a renewal call: {stats}"
    );
    let chatty = NewJob::builder("t", "chatty").id("chatty").build().unwrap();
    run_to_finish(&client, std::slice::from_ref(&chatty)).await;
    let job = client.get(&JobId::new("chatty").unwrap()).await.unwrap();
    assert_eq!(job.status, Status::Finished);
    // the last report is recorded, whatever was coalesced before it
    let p = job.progress.expect("progress");
    assert_eq!(p.message, "item 19999");
    assert_eq!(job.log.len(), hero_protocol::LOG_LINES);
    assert_eq!(job.log.last().map(String::as_str), Some("item 19999"));
    // the probe above sees renewals: the chatty job's reports rode on them
    let stats: String = client
        .redis()
        .query(redis::cmd("INFO").arg("commandstats"))
        .await
        .unwrap();
    assert!(stats.contains("cmdstat_xclaim"), "{stats}");
    let calls = reports(&client, "progress").await;
    // one flush per half second (and the last one before the outcome): a handful, not 20,000
    assert!(
        (1..=20).contains(&calls),
        "{calls} calls carried the 20,000 progress reports"
    );
}
