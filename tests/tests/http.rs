//! The HTTP face against a real `hero broker` process and redis-server: every API endpoint on a
//! known state (JSON shapes), `/metrics` parsed by a real Prometheus parser and equal to the
//! stats, the live event stream, and the health endpoints. Who may do what: `http_auth.rs`.

#![allow(clippy::float_cmp)] // the metrics compared are whole counts, exact in f64

use std::time::Duration;

use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{
    api_get, batch_done, http_broker, http_client, known_api_state, wait_for, RedisServer,
};
use serde_json::Value;

const TOKEN: &str = "s3cret-token-0123456789";

/// A GET with the admin token.
async fn get(base: &str, path: &str) -> (u16, Value) {
    api_get(base, path, Some(TOKEN)).await
}

#[tokio::test]
async fn every_read_endpoint_answers_its_json_on_a_known_state() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = known_api_state(&client).await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;

    let (code, v) = get(&base, "/api/queues").await;
    assert_eq!(code, 200);
    let queues = v["queues"].as_array().unwrap();
    let q = |name: &str| {
        queues
            .iter()
            .find(|q| q["queue"] == name)
            .unwrap_or_else(|| panic!("queue {name} in {v}"))
            .clone()
    };
    assert_eq!(
        (q("q1")["finished"].as_u64(), q("q1")["waiting"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(q("idle")["waiting"], 2);
    assert_eq!(q("dl")["dead"], 1);
    assert_eq!(q("q1")["run"]["count"], 3);
    assert_eq!(q("q1")["paused"], false);

    let (code, v) = get(&base, "/api/actors").await;
    assert_eq!(code, 200);
    let actors = v["actors"].as_array().unwrap();
    assert!(
        actors
            .iter()
            .any(|a| a["state"] == "live" && a["consumer"].as_str().unwrap().contains(":api:")),
        "{v}"
    );

    let (code, v) = get(&base, "/api/jobs?status=finished").await;
    assert_eq!(code, 200);
    let mut ids: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    // a SCAN page may be short: follow the cursor to the end
    let mut next = v["next"].as_str().map(str::to_string);
    let mut more = Vec::new();
    while let Some(c) = next {
        let (_, p) = get(&base, &format!("/api/jobs?status=finished&cursor={c}")).await;
        more.extend(
            p["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_string()),
        );
        next = p["next"].as_str().map(str::to_string);
    }
    ids.extend(more.iter().map(String::as_str));
    ids.sort_unstable();
    assert_eq!(ids, ["q1-0", "q1-1", "q1-2"]);

    let (_, v) = get(&base, "/api/jobs?queue=idle").await;
    let ids: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["idle-0", "idle-1"],
        "a queue lists its entries, oldest first"
    );
    assert_eq!(v["jobs"][0]["status"], "dispatched");

    let (_, v) = get(&base, "/api/jobs?tag=nightly&limit=1000").await;
    let tagged: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(tagged, ["q1-0"]);

    let (code, v) = get(&base, "/api/jobs/q1-1").await;
    assert_eq!(code, 200);
    assert_eq!(
        (v["id"].as_str(), v["status"].as_str()),
        (Some("q1-1"), Some("finished"))
    );
    assert_eq!(v["output"], "ok");
    let events: Vec<&str> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["submitted", "started", "finished"]);

    let (code, v) = get(&base, "/api/events?limit=5").await;
    assert_eq!(code, 200);
    assert_eq!(v["events"].as_array().unwrap().len(), 5);
    let (_, v) = get(&base, "/api/events?job=idle-0").await;
    assert_eq!(v["events"][0]["event"], "submitted");
    assert_eq!(v["events"].as_array().unwrap().len(), 1);

    let (code, v) = get(&base, "/api/dead").await;
    assert_eq!(code, 200);
    assert_eq!(v["dead"][0]["job"], "dead-1");
    let (code, v) = get(&base, "/api/dead/dead-1").await;
    assert_eq!((code, v["job"].as_str()), (200, Some("dead-1")));

    let (code, v) = get(&base, "/api/audit").await;
    assert_eq!(code, 200);
    assert_eq!(v["consistent"], true, "{v}");
    assert_eq!(v["counts"]["dead"], 1);

    let (code, v) = get(&base, "/api/history?minutes=5").await;
    assert_eq!(code, 200);
    let minutes = v["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 6);
    let ended: u64 = minutes
        .iter()
        .map(|m| m["finished"].as_u64().unwrap())
        .sum();
    assert_eq!(ended, 3);

    let (code, text) = get_text(&base, "/healthz").await;
    assert_eq!((code, text.trim()), (200, "ok"));
    let (code, v) = get(&base, "/readyz").await;
    assert_eq!((code, v["ready"].as_bool()), (200, Some(true)));
    assert_eq!(v["functions"], hero_protocol::function::LIBRARY_NAME);

    // a batch: its counts and callback job, and the member names it
    let batch = client.batch("api-batch").unwrap();
    let member = NewJob::builder("q1", "x").id("q1-member").build().unwrap();
    batch.add(std::slice::from_ref(&member)).await.unwrap();
    let cb = NewJob::builder("cbq", "y")
        .id("api-batch-cb")
        .build()
        .unwrap();
    batch.close(Some(&cb), None).await.unwrap();
    batch_done(&client, "api-batch", Duration::from_secs(20)).await;
    let (code, v) = get(&base, "/api/batches/api-batch").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["state"], "done");
    assert_eq!(
        (v["total"].as_u64(), v["finished"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["complete_id"], "api-batch-cb");
    let (code, v) = get(&base, "/api/batches").await;
    assert_eq!(code, 200);
    assert_eq!(v["batches"][0]["name"], "api-batch");
    let (code, _) = get(&base, "/api/batches/none-such").await;
    assert_eq!(code, 404);
    let (code, v) = get(&base, "/api/jobs/q1-member").await;
    assert_eq!((code, v["batch"].as_str()), (200, Some("api-batch")));
}

async fn get_text(base: &str, path: &str) -> (u16, String) {
    let r = http_client()
        .get(format!("{base}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The value of the sample `name` whose labels include `label` = `value`.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, label: (&str, &str)) -> f64 {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(h) => h.iter().map(|b| b.count).fold(0.0, f64::max),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        })
        .unwrap_or_else(|| panic!("no sample {name}{{{}={}}}", label.0, label.1))
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_equal_the_stats() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = known_api_state(&client).await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let (code, text) = get_text(&base, "/metrics").await;
    assert_eq!(code, 200);
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("the text format parses");
    let stats = hero_admin::Inspector::from(&client).queues().await.unwrap();
    for q in &stats {
        let l = ("queue", q.name.as_str());
        let pairs = [
            ("hero_queue_waiting_jobs", q.waiting),
            ("hero_queue_running_jobs", q.running),
            ("hero_jobs_finished_total", q.finished),
            ("hero_jobs_failed_total", q.failed),
            ("hero_jobs_dead_lettered_total", q.dead),
            ("hero_jobs_recovered_total", q.recovered),
            // the +Inf bucket counts every run
            ("hero_job_run_seconds", q.run.count()),
        ];
        for (name, want) in pairs {
            assert_eq!(
                sample(&scrape, name, l),
                want as f64,
                "{name} of {}",
                q.name
            );
        }
    }
    assert_eq!(
        sample(&scrape, "hero_jobs_finished_total", ("queue", "q1")),
        3.0
    );
    assert_eq!(
        sample(&scrape, "hero_queue_waiting_jobs", ("queue", "idle")),
        2.0
    );
    assert_eq!(sample(&scrape, "hero_workers", ("state", "live")), 1.0);
    let dead = scrape
        .samples
        .iter()
        .find(|s| s.metric == "hero_dead_letters")
        .expect("hero_dead_letters");
    assert!(matches!(dead.value, prometheus_parse::Value::Gauge(v) if v == 1.0));
    // the broker's own loops, through the metrics facade
    wait_for("a loop timing in /metrics", Duration::from_secs(20), || {
        let base = base.clone();
        async move {
            let (_, text) = get_text(&base, "/metrics").await;
            text.contains("hero_broker_loop_seconds").then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn the_event_stream_sends_a_new_jobs_events_as_they_happen() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let mut r = http_client()
        .get(format!("{base}/api/events/stream?job=live-1"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    // the stream's start was fixed before its headers came: what is logged from here is sent
    let job = NewJob::builder("live", "x").id("live-1").build().unwrap();
    client.submit(&job).await.unwrap();
    let mut seen = String::new();
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = r.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("\"submitted\"") {
                return;
            }
        }
    })
    .await;
    assert!(got.is_ok(), "no submitted event on the stream: {seen:?}");
    assert!(seen.contains("event: event"), "{seen}");
    assert!(seen.contains("\"job\":\"live-1\""), "{seen}");
}
