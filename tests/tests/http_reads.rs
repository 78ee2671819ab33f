//! Reads of the HTTP face bounded by the page they answer (issue 61): a job's history reads the
//! part of the event log its life spans, at most a bounded count of entries each way, however
//! long the log; the API says when a long life in a busy log was read only at its ends.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{http_broker, http_client, wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};
use serde_json::Value;

const TOKEN: &str = "reads-admin-token-0123";
const LIMIT: Duration = Duration::from_secs(30);

/// Calls of XRANGE and XREVRANGE Redis has served so far.
async fn range_calls(server: &RedisServer) -> u64 {
    let mut c = server.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_xrange:") || l.starts_with("cmdstat_xrevrange:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `n` entries of other jobs' events appended to the log, with ids from `first_ms` on (`None`:
/// Redis's clock, as the functions write them).
async fn junk_events(server: &RedisServer, n: usize, first_ms: Option<u64>) {
    let mut c = server.conn().await;
    let key = hero_testkit::keys().events();
    for chunk in 0..n.div_ceil(1000) {
        let mut pipe = redis::pipe();
        for i in chunk * 1000..((chunk + 1) * 1000).min(n) {
            let id = first_ms.map_or("*".to_string(), |ms| format!("{}-0", ms + i as u64));
            pipe.cmd("XADD")
                .arg(&key)
                .arg(id)
                .arg("e")
                .arg("submitted")
                .arg("j")
                .arg(format!("junk-{i}"))
                .ignore();
        }
        let () = pipe.query_async(&mut c).await.unwrap();
    }
}

async fn job_view(base: &str, id: &str) -> Value {
    http_client()
        .get(format!("{base}/api/jobs/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn events_of(v: &Value) -> Vec<String> {
    v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_jobs_history_reads_only_its_life_of_the_log() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &["--events-max", "100000"]).await;
    // 20,000 entries logged long before: outside every job's life
    junk_events(&server, 20_000, Some(1_000_000)).await;
    let w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["hist".to_string()])
            .handler(
                |job: hero_protocol::Job, ctx: hero_worker::JobContext| async move {
                    if job.script == "long" {
                        ctx.cancel.cancelled().await;
                    }
                    Outcome::Done("ok".into())
                },
            ),
    );
    let short = client
        .run(
            &NewJob::builder("hist", "short")
                .id("short")
                .build()
                .unwrap(),
            LIMIT,
        )
        .await
        .unwrap();
    assert_eq!(short.status, Status::Finished);
    let before = range_calls(&server).await;
    let v = job_view(&base, "short").await;
    let reads = range_calls(&server).await - before;
    // two reads, and room for the upkeep's own in the same moment (a whole log is 26 or more)
    assert!(reads <= 8, "one view read the log {reads} times");
    assert_eq!(v["history_complete"], true, "{v}");
    let seen = events_of(&v);
    assert!(seen.contains(&"finished".to_string()), "{seen:?}");
    // a long life in a busy log: read at its two ends, and said so
    client
        .submit(&NewJob::builder("hist", "long").id("long").build().unwrap())
        .await
        .unwrap();
    wait_for("long started", LIMIT, || {
        let client = client.clone();
        async move {
            (client.status(&JobId::new("long").ok()?).await.ok()? == Status::Started).then_some(())
        }
    })
    .await;
    junk_events(&server, 6_000, None).await;
    client.stop(&JobId::new("long").unwrap()).await.unwrap();
    let before = range_calls(&server).await;
    let v = job_view(&base, "long").await;
    let reads = range_calls(&server).await - before;
    // two reads, and room for the upkeep's own in the same moment (a whole log is 26 or more)
    assert!(reads <= 8, "one view read the log {reads} times");
    assert_eq!(v["history_complete"], false, "{v}");
    let seen = events_of(&v);
    assert!(
        seen.first().is_some_and(|e| e == "submitted") && seen.len() >= 3,
        "the submit and the end both read: {seen:?}"
    );
    w.stop().await;
    // the CLI reads the same way
    let out = std::process::Command::new(hero_testkit::binary("hero"))
        .args(["--redis-url", &url, "status", "long", "--history"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("around the job's submit and end only"),
        "{text}"
    );
}
