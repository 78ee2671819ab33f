//! The HTTP face against a real `hero broker` process and redis-server: every API endpoint on a
//! known state (JSON shapes), 401/403 on every mutating endpoint, a non-loopback bind without a
//! token refused, bad input answered 4xx with nothing changed, `/metrics` parsed by a real
//! Prometheus parser and equal to the stats, and the health endpoints.

#![allow(clippy::float_cmp)] // the metrics compared are whole counts, exact in f64

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{
    batch_done, dead_letter, hero_cli, http_broker, queue_idle, run_to_finish, wait_for,
    InProcWorker, RedisServer,
};
use hero_worker::{Outcome, Worker};
use serde_json::{json, Value};

const TOKEN: &str = "s3cret-token";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A GET with the admin token.
async fn get(base: &str, path: &str) -> (u16, Value) {
    get_as(base, path, Some(TOKEN)).await
}

/// A GET with `token` (none: no Authorization header).
async fn get_as(base: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = http().get(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}")),
    )
}

async fn post(base: &str, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut req = http()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {path}: {e}: {text}")),
    )
}

/// Known state: q1 has 3 finished jobs (one tagged), idle has 2 waiting, dl holds a dead letter.
async fn known_state(client: &Client) -> InProcWorker {
    let w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["q1"])
            .instance("api")
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("ok".into()) }),
    );
    let jobs: Vec<NewJob> = (0..3)
        .map(|n| {
            let b = NewJob::builder("q1", "x").id(format!("q1-{n}"));
            if n == 0 { b.tag("nightly") } else { b }.build().unwrap()
        })
        .collect();
    run_to_finish(client, &jobs).await;
    queue_idle(client, "idle", "idle", 2).await;
    dead_letter(client, "dl", "dead-1").await;
    w
}

#[tokio::test]
async fn every_read_endpoint_answers_its_json_on_a_known_state() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = known_state(&client).await;
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
    let r = http()
        .get(format!("{base}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// What a state holds, to show that a refused request changed nothing.
async fn snapshot(base: &str) -> (Value, Value, Value) {
    let q = get(base, "/api/queues").await.1;
    // the rates and histograms move with the clock: compare the counts
    let counts = q["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            json!([
                q["queue"],
                q["waiting"],
                q["running"],
                q["delayed"],
                q["finished"],
                q["failed"],
                q["dead"]
            ])
        })
        .collect::<Vec<_>>();
    (
        Value::Array(counts),
        get(base, "/api/dead").await.1,
        get(base, "/api/jobs/idle-0").await.1["status"].clone(),
    )
}

#[tokio::test]
async fn mutating_endpoints_need_the_token_and_bad_input_changes_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = known_state(&client).await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let before = snapshot(&base).await;
    let mutating = [
        ("/api/jobs/idle-0/stop", "{}"),
        ("/api/jobs/idle-0/requeue", "{}"),
        ("/api/jobs/idle-0/track", "{}"),
        ("/api/dead/retry", "{\"ids\":[\"dead-1\"]}"),
        ("/api/dead/purge", "{\"all\":true}"),
        ("/api/audit", "{\"fix\":true}"),
    ];
    for (path, body) in mutating {
        let (code, v) = post(&base, path, None, body).await;
        assert_eq!(code, 401, "{path} without a token: {v}");
        assert!(v["error"].as_str().unwrap().contains("Bearer"), "{v}");
        let (code, v) = post(&base, path, Some("wrong"), body).await;
        assert_eq!(code, 403, "{path} with a wrong token: {v}");
    }
    // bad input: 4xx with a JSON message, nothing changed
    let bad: [(&str, &str, u16); 7] = [
        ("/api/jobs/no-such-job/stop", "{}", 404),
        ("/api/jobs/idle-0/requeue", "{not json", 400),
        ("/api/jobs/idle-0/requeue", "{\"type\":\"has space\"}", 400),
        ("/api/jobs/idle-0/requeue", "{\"priority\":12}", 400),
        ("/api/dead/retry", "{\"ids\":[\"nobody\"]}", 404),
        ("/api/dead/retry", "{}", 400),
        (
            "/api/dead/purge",
            "{\"ids\":[\"dead-1\"],\"all\":true}",
            400,
        ),
    ];
    for (path, body, want) in bad {
        let (code, v) = post(&base, path, Some(TOKEN), body).await;
        assert_eq!(code, want, "{path} {body}: {v}");
        assert!(v["error"].is_string(), "{path}: a JSON error: {v}");
    }
    let (code, v) = get(&base, "/api/jobs?status=bogus").await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = get(&base, "/api/jobs/bad%20id").await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = get(&base, "/api/jobs/never-was").await;
    assert_eq!(code, 404, "{v}");
    let (code, _) = get(&base, "/api/no-such-endpoint").await;
    assert_eq!(code, 404);
    let huge = format!("{{\"ids\":[\"{}\"]}}", "x".repeat(200 * 1024));
    let r = http()
        .post(format!("{base}/api/dead/retry"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413, "an oversized body is refused");
    assert_eq!(snapshot(&base).await, before, "nothing changed");

    // with the token: each mutating endpoint does its work
    let (code, v) = post(&base, "/api/jobs/idle-0/stop", Some(TOKEN), "").await;
    assert_eq!((code, v["stop"].as_str()), (200, Some("cancelled")), "{v}");
    let (code, v) = post(
        &base,
        "/api/jobs/idle-1/requeue",
        Some(TOKEN),
        "{\"type\":\"q1\"}",
    )
    .await;
    assert_eq!((code, v["queue"].as_str()), (200, Some("q1")), "{v}");
    let r = client
        .wait(&JobId::new("idle-1").unwrap(), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished, "the requeued job ran in q1");
    let (code, v) = post(
        &base,
        "/api/dead/retry",
        Some(TOKEN),
        "{\"ids\":[\"dead-1\"]}",
    )
    .await;
    assert_eq!(
        (code, v["results"][0]["answer"].as_str()),
        (200, Some("requeued")),
        "{v}"
    );
    let (code, v) = post(&base, "/api/audit", Some(TOKEN), "{\"fix\":true}").await;
    assert_eq!(code, 200);
    assert_eq!(v["consistent"], true, "{v}");
    let (code, v) = post(&base, "/api/jobs/q1-0/track", Some(TOKEN), "").await;
    assert_eq!((code, v["tracked"].as_bool()), (200, Some(true)), "{v}");
    let (_, v) = get(&base, "/api/jobs?tracked=1").await;
    assert_eq!(v["jobs"][0]["id"], "q1-0");
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1);
    dead_letter(&client, "dl2", "dead-2").await;
    let (code, v) = post(&base, "/api/dead/purge", Some(TOKEN), "{\"all\":true}").await;
    assert_eq!(code, 200, "{v}");
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["job"] == "dead-2" && r["answer"] == "purged"),
        "{v}"
    );
}

#[tokio::test]
async fn a_non_loopback_bind_without_a_token_is_refused_and_without_one_configured_nothing_mutates()
{
    let server = RedisServer::start();
    let url = server.url();
    let (code, _, err) = hero_cli(&url, &["broker", "--http", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("without a token"), "{err}");
    let (code, _, err) = hero_cli(&url, &["broker", "--http", "not-an-address"]);
    assert_ne!(code, 0);
    assert!(err.contains("is not an address"), "{err}");
    let (code, _, err) = hero_cli(
        &url,
        &[
            "broker",
            "--http",
            "0.0.0.0:0",
            "--http-token",
            "t",
            "--http-open",
        ],
    );
    assert_eq!(code, 2, "--http-open is for a loopback only: {err}");
    assert!(err.contains("trusted loopback"), "{err}");
    // loopback without a token: the broker makes one, prints it in its link, and nothing is
    // read or changed without it
    let (mut broker, base) = hero_testkit::http_broker(&url, None, &[]).await;
    assert_eq!(get_as(&base, "/api/queues", None).await.0, 401);
    assert_eq!(get_as(&base, "/api/queues", Some("anything")).await.0, 403);
    let (code, v) = post(&base, "/api/dead/purge", Some("anything"), "{\"all\":true}").await;
    assert_eq!(code, 403, "{v}");
    let link = broker
        .output()
        .into_iter()
        .find(|l| l.starts_with("http: "))
        .unwrap();
    let made = link
        .split("?token=")
        .nth(1)
        .expect("the link carries the token it made")
        .trim();
    assert_eq!(made.len(), 32, "{link}");
    assert_eq!(get_as(&base, "/api/queues", Some(made)).await.0, 200);
    broker.kill9();
    // --http-open: reads without a token on loopback, changes still refused
    let (_open, base) = hero_testkit::http_broker(&url, Some(TOKEN), &["--http-open"]).await;
    assert_eq!(get_as(&base, "/api/queues", None).await.0, 200);
    let (code, _) = post(&base, "/api/dead/purge", None, "{\"all\":true}").await;
    assert_eq!(code, 401);
}

/// Nobody reads a job's secrets without the admin token asking for them: without a token a
/// read is refused, the read-only token sees `env_vars` values as `***` and may not run the
/// audit or change anything, the admin token sees them only with `?reveal=1`; a browser that
/// opens the printed link gets a cookie and the page without the token in its address.
#[tokio::test]
async fn reads_need_a_token_and_env_values_stay_redacted_unless_the_admin_asks() {
    const READ: &str = "read-only-token";
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let job = hero_protocol::NewJob::builder("sec", "x")
        .id("secret-1")
        .env("DB_PASSWORD", "hunter2")
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    let (_broker, base) =
        hero_testkit::http_broker(&url, Some(TOKEN), &["--http-read-token", READ]).await;
    let path = "/api/jobs/secret-1";
    let (code, v) = get_as(&base, path, None).await;
    assert_eq!(code, 401, "{v}");
    assert!(!v.to_string().contains("hunter2"), "{v}");
    let (code, v) = get_as(&base, path, Some(READ)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["env_vars"]["DB_PASSWORD"], "***", "{v}");
    assert!(!v.to_string().contains("hunter2"), "{v}");
    assert_eq!(
        get_as(&base, &format!("{path}?reveal=1"), Some(READ))
            .await
            .0,
        403
    );
    assert_eq!(get_as(&base, "/api/audit", Some(READ)).await.0, 403);
    assert_eq!(get_as(&base, "/api/audit", None).await.0, 401);
    let (code, _) = post(&base, "/api/jobs/secret-1/stop", Some(READ), "").await;
    assert_eq!(code, 403);
    let (_, v) = get_as(&base, path, Some(TOKEN)).await;
    assert_eq!(
        v["env_vars"]["DB_PASSWORD"], "***",
        "the admin sees it only on request: {v}"
    );
    let (_, v) = get_as(&base, &format!("{path}?reveal=1"), Some(TOKEN)).await;
    assert_eq!(v["env_vars"]["DB_PASSWORD"], "hunter2", "{v}");
    let (code, v) = get_as(&base, "/api/audit", Some(TOKEN)).await;
    assert_eq!((code, v["truncated"].as_bool()), (200, Some(false)), "{v}");
    // a page without a token answers a page that asks for one; the link sets a cookie
    let (code, page) = {
        let r = http()
            .get(format!("{base}/jobs/secret-1"))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(code, 401);
    assert!(
        page.contains("sign-in") && !page.contains("hunter2"),
        "{page}"
    );
    let no_redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_redirect
        .get(format!("{base}/jobs/secret-1?token={READ}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/jobs/secret-1");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with("hero_token=") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let r = http()
        .get(format!("{base}/jobs/secret-1"))
        .header("cookie", cookie.split(';').next().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(!r.text().await.unwrap().contains("hunter2"));
    // health checks stay open for probes
    let r = http().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
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
    let _w = known_state(&client).await;
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
    let mut r = http()
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
