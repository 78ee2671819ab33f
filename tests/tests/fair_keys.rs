//! Fair share's per-key controls (issue 52), against a real redis-server, real workers and the
//! `hero` binary: a key's concurrency holds across every worker, one key paused waits while the
//! others flow (and `hero queues --keys` shows it), a job waiting in the gate is requeued out of
//! it and runs once, priority levels stay strict in a fair queue, and what cannot be served
//! fairly is refused with a clear error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hero_client::Client;
use hero_protocol::policy::Policy;
use hero_protocol::{NewJob, Priority};
use hero_testkit::{hero_cli, wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(60);

fn fair(key_concurrency: Option<u32>) -> Policy {
    Policy {
        fair: Some(true),
        key_concurrency,
        ..Policy::default()
    }
}

fn keyed(script_type: &str, key: &str, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| {
            NewJob::builder(script_type, "x")
                .id(format!("{key}-{i}"))
                .limit_key(key)
                .build()
                .unwrap()
        })
        .collect()
}

/// Ids started, in order; running jobs per key now, and the most seen at once.
#[derive(Default)]
struct Seen {
    order: Vec<String>,
    running: HashMap<String, u32>,
    most: HashMap<String, u32>,
}

/// A worker of `types` with `concurrency` slots whose jobs each take `work`, recording into
/// `seen` (the key is the id's part before '-').
fn worker(
    client: &Client,
    types: &[&str],
    concurrency: usize,
    work: Duration,
    seen: &Arc<Mutex<Seen>>,
) -> InProcWorker {
    let seen = seen.clone();
    InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(types.iter().map(|t| t.to_string()).collect::<Vec<_>>())
            .concurrency(concurrency)
            .handler(move |j: hero_protocol::Job, _| {
                let seen = seen.clone();
                async move {
                    let id = j.id.to_string();
                    let key = id.split('-').next().unwrap_or("").to_string();
                    {
                        let mut s = seen.lock().unwrap();
                        s.order.push(id.clone());
                        let n = s.running.entry(key.clone()).or_default();
                        *n += 1;
                        let now = *n;
                        let most = s.most.entry(key.clone()).or_default();
                        *most = (*most).max(now);
                    }
                    tokio::time::sleep(work).await;
                    *seen.lock().unwrap().running.entry(key).or_default() -= 1;
                    Outcome::Done(id)
                }
            }),
    )
}

async fn started(seen: &Arc<Mutex<Seen>>, n: usize, what: &str) {
    let s = seen.clone();
    wait_for(what, LIMIT, || {
        let s = s.clone();
        async move { (s.lock().unwrap().order.len() >= n).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_keys_concurrency_holds_across_every_worker() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("kc", &fair(Some(2))).await.unwrap();
    let mut jobs = keyed("kc", "A", 24);
    jobs.extend(keyed("kc", "B", 6));
    client.submit_many(&jobs).await.unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    // two workers of 8 slots each: without the cap A would run up to 16 at once
    let _w1 = worker(&client, &["kc"], 8, Duration::from_millis(30), &seen);
    let _w2 = worker(&client, &["kc"], 8, Duration::from_millis(30), &seen);
    started(&seen, 30, "30 jobs to start").await;
    let s = seen.lock().unwrap();
    assert_eq!(
        s.most.get("A"),
        Some(&2),
        "A ran at most 2 at once, and did reach 2: {:?}",
        s.most
    );
    assert_eq!(s.most.get("B"), Some(&2), "B too: {:?}", s.most);
    let mut ids = s.order.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 30, "every job ran once");
}

#[tokio::test]
async fn a_paused_key_waits_while_the_other_keys_flow() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    // a key of a queue served first in, first out cannot be held
    let (code, _, err) = hero_cli(&url, &["pause", "pk", "--key", "A"]);
    assert_ne!(code, 0);
    assert!(err.contains("is not fair"), "{err}");
    admin.set_policy("pk", &fair(None)).await.unwrap();
    let (code, out, err) = hero_cli(&url, &["pause", "pk", "--key", "A"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut jobs = keyed("pk", "A", 10);
    jobs.extend(keyed("pk", "B", 10));
    jobs.extend(keyed("pk", "C", 5));
    client.submit_many(&jobs).await.unwrap();
    // the keys with work: A's 10 (paused) first, then B's and C's
    let (code, out, err) = hero_cli(&url, &["queues", "--keys", "pk", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["keys"], 3, "{v}");
    assert_eq!(v["top"][0]["key"], "A", "{v}");
    assert_eq!(v["top"][0]["waiting"], 10, "{v}");
    assert_eq!(v["top"][2]["key"], "C", "{v}");
    assert_eq!(v["held"][0], "pk|A", "{v}");
    let (_, table, _) = hero_cli(&url, &["queues"]);
    assert!(
        table.contains("KEYS"),
        "hero queues shows the keys column for a fair queue:\n{table}"
    );
    let seen = Arc::new(Mutex::new(Seen::default()));
    let _w = worker(&client, &["pk"], 4, Duration::ZERO, &seen);
    started(&seen, 15, "B's and C's 15 jobs to start").await;
    // what the worker had found by then, and what it finds on a few more fetches
    tokio::time::sleep(Duration::from_millis(300)).await;
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.order.len(), 15, "none of A's started: {:?}", s.order);
        assert!(s.order.iter().all(|id| !id.starts_with("A-")));
    }
    let counts = admin.job_counts("pk").await.unwrap();
    assert_eq!(counts.waiting, 10, "A's jobs are counted as waiting");
    let (code, _, err) = hero_cli(&url, &["resume", "pk", "--key", "A"]);
    assert_eq!(code, 0, "{err}");
    started(&seen, 25, "A's jobs to start once resumed").await;
    assert_eq!(
        hero_admin::Inspector::from(&client)
            .fair_keys("pk", 10, 0)
            .await
            .unwrap(),
        hero_admin::inspect::FairKeys::default()
    );
}

#[tokio::test]
async fn a_job_in_the_gate_is_requeued_out_of_it_and_runs_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("rq", &fair(None)).await.unwrap();
    admin.pause("rq").await.unwrap();
    let jobs = keyed("rq", "A", 3);
    client.submit_many(&jobs).await.unwrap();
    assert_eq!(admin.job_counts("rq").await.unwrap().waiting, 3);
    let target = hero_protocol::Target::of_type(hero_protocol::ScriptType::new("other").unwrap());
    admin
        .requeue_to(jobs[1].id(), Some(target), None)
        .await
        .unwrap();
    assert_eq!(
        admin.job_counts("rq").await.unwrap().waiting,
        2,
        "it left rq's gate"
    );
    admin.resume("rq").await.unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let _w = worker(&client, &["rq", "other"], 2, Duration::ZERO, &seen);
    started(&seen, 3, "the 3 jobs to start").await;
    for j in &jobs {
        client.wait(j.id(), LIMIT).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut order = seen.lock().unwrap().order.clone();
    order.sort();
    assert_eq!(order, ["A-0", "A-1", "A-2"], "each ran once");
    let job = client.get(jobs[1].id()).await.unwrap();
    assert_eq!(
        job.script_type.map(|t| t.to_string()).as_deref(),
        Some("other")
    );
}

#[tokio::test]
async fn priority_levels_stay_strict_in_a_fair_queue() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("pl", &fair(None)).await.unwrap();
    admin.pause("pl").await.unwrap();
    let mut jobs = keyed("pl", "A", 10);
    jobs.push(
        NewJob::builder("pl", "x")
            .id("B-0")
            .limit_key("B")
            .priority(0)
            .build()
            .unwrap(),
    );
    client.submit_many(&jobs).await.unwrap();
    admin.resume("pl").await.unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let _w = worker(&client, &["pl"], 1, Duration::ZERO, &seen);
    started(&seen, 11, "the 11 jobs to start").await;
    assert_eq!(seen.lock().unwrap().order[0], "B-0", "level 0 first");
}

#[tokio::test]
async fn a_live_worker_older_than_protocol_30_holds_fair_share_back() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    // a worker of protocol 29 in the fleet, as its heartbeat writes it
    let expires = hero_protocol::clock::now_ms() + 60_000;
    let mut raw = server.conn().await;
    redis::cmd("HSET")
        .arg(client.keys().fleet())
        .arg("old:default:w1")
        .arg(format!(
            r#"{{"role":"worker","protocol":29,"version":"0.4.0","expires_ms":{expires}}}"#
        ))
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    let err = admin
        .set_policy("up", &fair(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("old:default:w1"), "{err}");
    assert!(
        admin.policy("up").await.unwrap().is_empty(),
        "nothing stored"
    );
    // gone: fair share is accepted, and a key can be paused
    redis::cmd("HDEL")
        .arg(client.keys().fleet())
        .arg("old:default:w1")
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    admin.set_policy("up", &fair(None)).await.unwrap();
    admin.pause_key("up", "k").await.unwrap();
}

#[tokio::test]
async fn what_cannot_be_served_fairly_is_refused_clearly() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    let keys = client.keys().clone();
    let err = admin
        .set_policy(
            "nf",
            &Policy {
                key_concurrency: Some(2),
                ..Policy::default()
            },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("key_concurrency needs fair share"), "{err}");
    // a queue the legacy bridge dual-pushes
    let stream = keys.work(
        &hero_protocol::Target::of_type(hero_protocol::ScriptType::new("br").unwrap()),
        Priority::DEFAULT,
    );
    let mut raw = server.conn().await;
    redis::cmd("HSET")
        .arg(keys.bridge_registry())
        .arg(&stream)
        .arg("{}")
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    let err = admin
        .set_policy("br", &fair(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("bridged to a legacy list"), "{err}");
    // a live process older than protocol 30, as the brokers' summary names it
    redis::cmd("HSET")
        .arg(keys.config())
        .arg("fleet_lacks")
        .arg(r#"{"fair":{"what":"fair share","since":30,"processes":["osis:old (protocol 29)"]}}"#)
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    let (code, _, err) = hero_cli(&server.url(), &["queue", "set", "old", "--fair"]);
    assert_ne!(code, 0);
    assert!(err.contains("osis:old (protocol 29)"), "{err}");
}

#[tokio::test]
async fn the_counts_see_a_gates_jobs_and_their_age_not_its_wake_up_entry() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("ct", &fair(None)).await.unwrap();
    // not paused, no worker: the first job's gate puts a wake-up entry on the stream
    let mut jobs = keyed("ct", "A", 10);
    jobs.extend(keyed("ct", "B", 6));
    client.submit_many(&jobs).await.unwrap();
    let counts = admin.job_counts("ct").await.unwrap();
    assert_eq!(counts.waiting, 16);
    assert!(
        counts.streams[0].1.oldest_waiting_ms.is_some(),
        "{counts:?}"
    );
    let queues = hero_admin::Inspector::from(&client).queues().await.unwrap();
    let q = queues.iter().find(|q| q.name == "ct").unwrap();
    assert_eq!((q.waiting, q.keys), (16, 2), "{q:?}");
    assert!(q.oldest_waiting_ms.is_some(), "{q:?}");
    // and /metrics: every waiting job, and the keys with work
    let token = "fair-metrics-0123456789";
    let (_broker, base) = hero_testkit::http_broker(&server.url(), Some(token), &[]).await;
    let text = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("hero_queue_waiting_jobs{queue=\"ct\"} 16"),
        "{text}"
    );
    assert!(
        text.contains("hero_queue_fair_keys{queue=\"ct\"} 2"),
        "{text}"
    );
}

#[tokio::test]
async fn a_listing_shows_the_jobs_waiting_in_a_gate() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("ls", &fair(None)).await.unwrap();
    let mut jobs = keyed("ls", "A", 5);
    jobs.extend(keyed("ls", "B", 4));
    client.submit_many(&jobs).await.unwrap();
    let inspector = hero_admin::Inspector::from(&client);
    for filter in [
        hero_admin::inspect::ListFilter::Status(hero_protocol::Status::Dispatched),
        hero_admin::inspect::ListFilter::Queue(
            hero_protocol::Target::of_type(hero_protocol::ScriptType::new("ls").unwrap()),
            Priority::DEFAULT,
        ),
    ] {
        // pages of 2, followed to the end: every queued job once
        let (mut seen, mut cursor) = (Vec::new(), None::<String>);
        for _ in 0..20 {
            let page = inspector.list(&filter, cursor.as_deref(), 2).await.unwrap();
            seen.extend(page.jobs.iter().map(|j| j.id.clone()));
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        seen.sort();
        let mut want: Vec<String> = jobs.iter().map(|j| j.id().to_string()).collect();
        want.sort();
        assert_eq!(seen, want, "{filter:?}");
    }
    let (code, out, err) = hero_cli(&url, &["jobs", "--status", "dispatched"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("B-3"), "{out}");
}

#[tokio::test]
async fn turning_fair_share_off_hands_the_gates_jobs_to_the_stream() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("off", &fair(None)).await.unwrap();
    admin.pause("off").await.unwrap();
    let mut jobs = keyed("off", "A", 5);
    jobs.extend(keyed("off", "B", 3));
    client.submit_many(&jobs).await.unwrap();
    admin.pause_key("off", "B").await.unwrap();
    // cleared while every job waits in the gate, B's held
    admin.clear_policy("off").await.unwrap();
    assert_eq!(admin.job_counts("off").await.unwrap().waiting, 8);
    admin.resume("off").await.unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let _w = worker(&client, &["off"], 2, Duration::ZERO, &seen);
    started(&seen, 8, "the 8 jobs to start with fair share off").await;
    let inspector = hero_admin::Inspector::from(&client);
    assert_eq!(
        inspector.fair_keys("off", 10, 0).await.unwrap(),
        hero_admin::inspect::FairKeys::default()
    );
}

/// Calls of `cmd` Redis has served so far.
async fn calls_of(server: &RedisServer, cmd: &str) -> u64 {
    let mut c = server.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:")))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Issue 61, finding 4: a fair queue with 3,000 keys is counted without reading them, and one
/// view reads the jobs waiting of one page of keys (1,000), paged by a cursor to the last.
#[tokio::test]
async fn a_queue_of_many_keys_is_counted_and_paged_not_read_whole() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("many", &fair(None)).await.unwrap();
    let mut jobs = Vec::new();
    for k in 0..3000 {
        jobs.extend(keyed("many", &format!("k{k}"), 1));
    }
    // the busiest key is read on the last page
    jobs.extend(keyed("many", "k2999", 4).into_iter().skip(1));
    client.submit_many(&jobs).await.unwrap();
    let inspector = hero_admin::Inspector::from(&client);
    let before = calls_of(&server, "llen").await;
    let first = inspector.fair_keys("many", 5, 0).await.unwrap();
    let llen = calls_of(&server, "llen").await - before;
    assert_eq!(first.keys, 3000);
    assert_eq!(first.read, hero_admin::inspect::KEY_PAGE as u64);
    assert_eq!(first.next, Some(1000));
    assert!(llen <= 1010, "one view asked {llen} LLEN (3,000 keys)");
    let (mut read, mut cursor, mut busiest) = (first.read, first.next, 0);
    while let Some(from) = cursor {
        let page = inspector.fair_keys("many", 5, from).await.unwrap();
        read += page.read;
        cursor = page.next;
        busiest = busiest.max(page.top.first().map_or(0, |k| k.waiting));
    }
    assert_eq!(read, 3000);
    assert_eq!(busiest, 4);
}

/// Every waiting job of a fair queue is listed, from every language (they all page through
/// `hero_list`): those in its gate's lanes too, the ring's keys and a held key's alike, once
/// each, and a page's cursor goes on inside the gate.
#[tokio::test]
async fn the_jobs_waiting_in_a_fair_gate_are_listed_once_each() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin.set_policy("lw", &fair(None)).await.unwrap();
    let mut jobs = keyed("lw", "A", 3);
    jobs.extend(keyed("lw", "B", 2));
    jobs.push(NewJob::builder("lw", "x").id("plain").build().unwrap());
    client.submit_many(&jobs).await.unwrap();
    admin.pause_key("lw", "B").await.unwrap();
    let mut want: Vec<String> = jobs.iter().map(|j| j.id().to_string()).collect();
    want.sort();
    let mut all = admin.jobs_in(Some("lw"), "waiting", 100).await.unwrap();
    all.sort();
    assert_eq!(all, want, "every job in the gate, the held key's too");
    // pages of two: the cursor goes on inside the gate, and no job comes twice
    let (mut paged, mut cursor) = (Vec::new(), String::new());
    for _ in 0..20 {
        let call = hero_protocol::function::list(client.keys(), "waiting", "lw", &cursor, 2);
        let v: redis::Value = client.redis().query(&call).await.unwrap();
        let page = hero_protocol::function::Listed::parse(&v).unwrap();
        paged.extend(page.ids);
        match page.next {
            Some(n) => cursor = n,
            None => break,
        }
    }
    paged.sort();
    assert_eq!(paged, want);
    assert!(admin
        .jobs_in(Some("lw"), "running", 100)
        .await
        .unwrap()
        .is_empty());
    // a ring of 250 keys is read a window at a time: every job once
    admin.set_policy("many", &fair(None)).await.unwrap();
    let many: Vec<NewJob> = (0..250)
        .flat_map(|k| keyed("many", &format!("k{k}"), 1))
        .collect();
    client.submit_many(&many).await.unwrap();
    let mut listed = admin.jobs_in(Some("many"), "waiting", 1000).await.unwrap();
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), 250);
}
