//! A job's secrets hidden wherever its text travels over HTTP (issue 61, finding 5): an env
//! value of six characters or more reads `***` in the job's error, trace, log lines, output and
//! history, in the jobs listing, the events API and the live stream, unless the admin reveals
//! the one job; a short value (`1`) is no secret and mangles nothing.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{api_get, http_broker, http_client, wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const TOKEN: &str = "redact-admin-token-0123";
const READ: &str = "redact-read-token-0123";
const SECRET: &str = "hunter2-very-secret";
const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_jobs_secrets_are_hidden_in_every_text_the_read_token_gets() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &["--http-read-token", READ]).await;
    // the live stream, open before the job runs
    let mut stream = http_client()
        .get(format!("{base}/api/events/stream?type=sec"))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap();
    let w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["sec".to_string()])
            .handler(
                |job: hero_protocol::Job, ctx: hero_worker::JobContext| async move {
                    let secret = job.env_vars.get("DB_PASSWORD").cloned().unwrap_or_default();
                    ctx.log(format!("connecting with {secret}"));
                    ctx.trace(format!("at parse({secret})\ncaused by: bad digit"));
                    Outcome::Fail(format!("Error parsing integer number '{secret}' at 1"))
                },
            ),
    );
    let job = NewJob::builder("sec", "x")
        .id("sec-1")
        .env("DB_PASSWORD", SECRET)
        .env("DEBUG", "1")
        .retries(1)
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    let id = JobId::new("sec-1").unwrap();
    wait_for("sec-1 ended", LIMIT, || {
        let client = client.clone();
        let id = id.clone();
        async move { (client.status(&id).await.ok()? == Status::Error).then_some(()) }
    })
    .await;
    w.stop().await;
    // the stream saw the retry and the end
    let mut seen = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(chunk)) = stream.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("\"error\"") {
                break;
            }
        }
    })
    .await;
    assert!(seen.contains("retried"), "the stream saw the job: {seen}");
    assert!(!seen.contains(SECRET), "the live stream: {seen}");
    for path in [
        "/api/jobs/sec-1",
        "/api/jobs?status=error",
        "/api/events?job=sec-1",
    ] {
        for token in [READ, TOKEN] {
            let (code, v) = api_get(&base, path, Some(token)).await;
            assert_eq!(code, 200, "{path}: {v}");
            let text = v.to_string();
            assert!(!text.contains(SECRET), "{path}: {text}");
            // hidden, not dropped; a short value mangles nothing
            assert!(text.contains("'***' at 1"), "{path}: {text}");
        }
    }
    let (_, v) = api_get(&base, "/api/jobs/sec-1", Some(READ)).await;
    assert!(v["trace"].as_str().unwrap().contains("parse(***)"), "{v}");
    assert!(v["log"].to_string().contains("connecting with ***"), "{v}");
    // the admin asks for the one job whole
    let (code, v) = api_get(&base, "/api/jobs/sec-1?reveal=1", Some(TOKEN)).await;
    assert_eq!(code, 200);
    assert!(v["error"].as_str().unwrap().contains(SECRET), "{v}");
    let (code, _) = api_get(&base, "/api/jobs/sec-1?reveal=1", Some(READ)).await;
    assert_eq!(code, 403);
    // its record gone (removed, expired): its events' texts are hidden whole, since nothing can
    // tell its secrets from the rest any more
    let mut raw = server.conn().await;
    redis::cmd("DEL")
        .arg(hero_testkit::job_key("sec-1"))
        .query_async::<i64>(&mut raw)
        .await
        .unwrap();
    for path in ["/api/events?job=sec-1", "/api/events?event=error"] {
        let (code, v) = api_get(&base, path, Some(READ)).await;
        assert_eq!(code, 200, "{path}: {v}");
        let text = v.to_string();
        assert!(
            !text.contains(SECRET) && text.contains("record is gone"),
            "{path}: {text}"
        );
    }
}
