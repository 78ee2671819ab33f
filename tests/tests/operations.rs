//! The operator's commands on a small known state: `hero queues`, `hero actors`, `hero events`,
//! `hero status --history`, `hero dead list|show|retry|purge`, `hero jobs`, `hero submit --file`,
//! each as a table and as `--json`, and a clear non-zero exit for bad arguments.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{keys, work_key, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker, WorkerEvent};

use hero_testkit::hero_cli as hero;

fn json(url: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = hero(url, &all);
    assert_eq!(code, 0, "hero {args:?} failed: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("hero {args:?}: {e}: {out}"))
}

async fn dead_letter(client: &Client, id: &str) {
    hero_testkit::dead_letter(client, "dl", id).await;
}

#[tokio::test]
async fn queues_actors_events_and_jobs_report_a_known_state() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["q1"])
            .instance("ops")
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("ok".into()) }),
    );
    for n in 0..3 {
        let job = NewJob::builder("q1", "x")
            .id(format!("j{n}"))
            .tag(if n == 1 { "blue" } else { "green" })
            .build()
            .unwrap();
        client.submit(&job).await.unwrap();
    }
    for _ in 0..3 {
        w.next(Duration::from_secs(10), |e| {
            matches!(e, WorkerEvent::Completed { .. }).then_some(())
        })
        .await;
    }
    let waiting = NewJob::builder("q2", "x").id("w0").build().unwrap();
    client.submit(&waiting).await.unwrap();

    let q = json(&url, &["queues"]);
    let queues = q["queues"].as_array().unwrap();
    let q1 = queues.iter().find(|q| q["queue"] == "q1").unwrap();
    assert_eq!(
        (
            &q1["finished"],
            &q1["failed"],
            &q1["waiting"],
            &q1["running"],
            &q1["delayed"]
        ),
        (&3.into(), &0.into(), &0.into(), &0.into(), &0.into())
    );
    assert_eq!(q1["run"]["count"], 3);
    assert_eq!(q1["wait"]["count"], 3);
    let q2 = queues.iter().find(|q| q["queue"] == "q2").unwrap();
    assert_eq!(q2["waiting"], 1);
    assert!(q2["oldest_waiting_ms"].as_u64().is_some(), "{q2}");
    let (code, table, _) = hero(&url, &["queues"]);
    assert_eq!(code, 0);
    assert!(table.starts_with("QUEUE"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("q1 ") && l.contains(" 3 ")),
        "{table}"
    );

    let a = json(&url, &["actors"]);
    let actors = a["actors"].as_array().unwrap();
    assert_eq!(actors.len(), 1, "{a}");
    assert_eq!(actors[0]["state"], "live");
    assert_eq!(actors[0]["consumer"], w.consumer.as_str());
    assert_eq!(actors[0]["presence"]["capabilities"][0], "q1");

    let (code, out, _) = hero(&url, &["--json", "events", "--job", "j1"]);
    assert_eq!(code, 0);
    let kinds: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["submitted", "started", "finished"]);
    let st = json(&url, &["status", "j1", "--history"]);
    assert_eq!(st["status"], "finished");
    assert_eq!(st["history"].as_array().unwrap().len(), 3);

    let jobs = json(&url, &["jobs", "--status", "finished"]);
    let rows = jobs["jobs"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for r in rows {
        // numbers, as `hero status --json` gives them: one JSON shape per record
        assert_eq!(
            (&r["queue"], &r["attempts"], &r["priority"]),
            (&"q1".into(), &1.into(), &5.into())
        );
        let one = json(&url, &["status", r["id"].as_str().unwrap()]);
        assert_eq!(
            (&one["attempts"], &one["priority"]),
            (&r["attempts"], &r["priority"])
        );
        assert!(
            !r["updated_at"].as_str().unwrap().is_empty(),
            "every column filled: {r}"
        );
        assert_eq!(r["worker"], w.consumer.as_str());
    }
    let blue = json(&url, &["jobs", "--tag", "blue", "--limit", "1000"]);
    let ids: Vec<&str> = blue["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["j1"], "only the job tagged blue");

    // a script from a file, larger than an argument may carry
    let dir = std::env::temp_dir().join(format!("hero-ops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("big.rhai");
    std::fs::write(&file, "x".repeat(200 * 1024)).unwrap();
    let s = json(
        &url,
        &["submit", "--type", "q3", "--file", file.to_str().unwrap()],
    );
    let id = JobId::new(s["id"].as_str().unwrap()).unwrap();
    assert_eq!(client.get(&id).await.unwrap().script.len(), 200 * 1024);
    let _ = std::fs::remove_dir_all(&dir);
    w.stop().await;

    for bad in [
        vec!["events", "--event", "exploded"],
        vec!["events", "--queue", "a/b/c/d"],
        vec!["dead", "retry"],
        vec!["submit", "--type", "q3"],
        vec!["status", "no such id"],
    ] {
        let (code, _, err) = hero(&url, &bad);
        assert_eq!(code, 2, "hero {bad:?} exits 2: {err}");
        assert!(!err.trim().is_empty(), "hero {bad:?} says why");
    }
}

#[tokio::test]
async fn a_dead_letter_retried_runs_once_more_and_a_purged_one_is_gone() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    dead_letter(&client, "d1").await;
    dead_letter(&client, "d2").await;

    let list = json(&url, &["dead", "list"]);
    let dead = list["dead"].as_array().unwrap();
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0]["job"], "d1");
    assert!(
        dead[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("abandoned after 1"),
        "{list}"
    );
    let show = json(&url, &["dead", "show", "d1"]);
    assert_eq!(show["record"]["status"], "error");

    let retried = json(&url, &["dead", "retry", "d1"]);
    assert_eq!(retried["results"][0]["answer"], "requeued");
    let job = client.get(&JobId::new("d1").unwrap()).await.unwrap();
    assert_eq!(
        (job.status, job.attempts, job.error),
        (Status::Dispatched, 0, None),
        "a fresh start"
    );
    let (code, _, err) = hero(&url, &["dead", "retry", "d1"]);
    assert_eq!(code, 2, "no letter left to retry");
    assert!(err.contains("has no dead letter"), "{err}");

    let mut w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["dl"])
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("again".into()) }),
    );
    let ran = w
        .next(Duration::from_secs(10), |e| match e {
            WorkerEvent::Completed {
                job_id, completion, ..
            } => Some((job_id.to_string(), *completion)),
            _ => None,
        })
        .await;
    assert_eq!(
        ran,
        (
            "d1".to_string(),
            hero_protocol::function::Completion::Completed
        )
    );
    w.stop().await;
    let job = client.get(&JobId::new("d1").unwrap()).await.unwrap();
    assert_eq!(
        (job.status, job.output.as_deref()),
        (Status::Finished, Some("again"))
    );
    let history = hero_admin::Inspector::from(&client)
        .events(
            &hero_admin::inspect::EventFilter {
                job: Some("d1".into()),
                ..Default::default()
            },
            100,
        )
        .await
        .unwrap();
    let kinds: Vec<&str> = history.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "submitted",
            "started",
            "dead",
            "requeued",
            "started",
            "finished"
        ]
    );

    let purged = json(&url, &["dead", "purge", "--all"]);
    assert_eq!(purged["results"][0]["answer"], "purged");
    let mut raw = server.conn().await;
    let left: usize = redis::AsyncCommands::xlen(&mut raw, keys().dead_letter())
        .await
        .unwrap();
    assert_eq!(left, 0, "the dead-letter stream is empty");
    let exists: bool = redis::AsyncCommands::exists(&mut raw, keys().job_unchecked("d2"))
        .await
        .unwrap();
    assert!(!exists, "a purged letter's job is deleted");
    let (code, _, err) = hero(&url, &["dead", "show", "d2"]);
    assert_eq!(code, 2, "{err}");
    hero_testkit::audit_consistent(&url, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn requeue_moves_a_job_wherever_it_is_and_a_revoked_lease_records_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut raw = server.conn().await;

    // running: leased to a consumer, then moved; that delivery's completion is refused
    let job = NewJob::builder("ra", "x").id("r1").build().unwrap();
    client.submit(&job).await.unwrap();
    let old = work_key("ra");
    let fetch = hero_protocol::function::fetch(
        client.keys(),
        std::slice::from_ref(&old),
        "g:slow:1",
        1,
        "0",
    );
    let v: redis::Value = client.redis().query(&fetch).await.unwrap();
    let leased = hero_protocol::function::FetchReply::decode(&v).unwrap();
    let lease = leased.jobs[0].entry.clone();
    let moved = json(&url, &["requeue", "r1", "--type", "rb"]);
    assert_eq!(
        (&moved["requeued"], &moved["queue"]),
        (&true.into(), &"rb".into())
    );
    let mut late = hero_protocol::function::CompleteBatch::new(
        client.keys(),
        &hero_protocol::clock::now_iso(),
        "0",
        "g:slow:1",
    );
    let r1 = JobId::new("r1").unwrap();
    late.push(hero_protocol::function::Ended {
        held: hero_protocol::function::Leased {
            id: &r1,
            stream: &old,
            lease: &lease,
            reply: "",
        },
        ending: hero_protocol::function::Ending::Done,
        text: "too late",
        retry_at_ms: 0,
        ran: None,
    });
    let v: redis::Value = client.redis().query(&late.call()).await.unwrap();
    assert_eq!(
        late.answers(&v).unwrap(),
        [hero_protocol::function::Completion::LeaseLost],
        "the revoked delivery records nothing"
    );
    assert_eq!(
        hero_testkit::pending(&mut raw, &old).await,
        0,
        "the old delivery is gone"
    );

    // queued: moved out of its queue, not copied
    let queued = NewJob::builder("ra", "x").id("r2").build().unwrap();
    client.submit(&queued).await.unwrap();
    json(&url, &["requeue", "r2", "--type", "rb", "--priority", "0"]);
    let left: usize = redis::AsyncCommands::xlen(&mut raw, &old).await.unwrap();
    assert_eq!(left, 0, "no entry of r2 is left in its old queue");

    // delayed: out of the delayed set, queued now
    let later = NewJob::builder("ra", "x")
        .id("r3")
        .delay(Duration::from_secs(600))
        .build()
        .unwrap();
    client.submit(&later).await.unwrap();
    json(&url, &["requeue", "r3", "--type", "rb"]);
    let delayed: Option<f64> = redis::AsyncCommands::zscore(&mut raw, keys().delayed(), "r3")
        .await
        .unwrap();
    assert_eq!(delayed, None);

    // each runs once in its new queue
    let mut b = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["rb"])
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("moved".into()) }),
    );
    let mut done = Vec::new();
    while done.len() < 3 {
        let id = b
            .next(Duration::from_secs(10), |e| match e {
                WorkerEvent::Completed { job_id, .. } => Some(job_id.to_string()),
                _ => None,
            })
            .await;
        done.push(id);
    }
    done.sort();
    assert_eq!(done, ["r1", "r2", "r3"], "each ran once");
    let r1 = client.get(&JobId::new("r1").unwrap()).await.unwrap();
    assert_eq!(
        (r1.status, r1.output.as_deref(), r1.attempts),
        (Status::Finished, Some("moved"), 2),
        "the revoked attempt counts"
    );

    // ended: starts over with a fresh budget in its own queue
    json(&url, &["requeue", "r1"]);
    let again = b
        .next(Duration::from_secs(10), |e| match e {
            WorkerEvent::Started { job_id, attempt } => Some((job_id.to_string(), *attempt)),
            _ => None,
        })
        .await;
    assert_eq!(again, ("r1".to_string(), 1));
    b.stop().await;
    let (code, _, err) = hero(&url, &["requeue", "nobody"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not found"), "{err}");
    // the slow consumer goes away as a worker does on exit; then nothing is out of place
    let _: i64 = redis::cmd("XGROUP")
        .arg("DELCONSUMER")
        .arg(&old)
        .arg(hero_protocol::keys::CONSUMER_GROUP)
        .arg("g:slow:1")
        .query_async(&mut raw)
        .await
        .unwrap();
    hero_testkit::audit_consistent(&url, Duration::from_secs(10)).await;
}

/// `hero track` marks jobs; `hero jobs --tracked` (and the API's `tracked=1`) shows their state
/// at a glance; the broker's retention pass drops ids whose record is gone.
#[tokio::test]
async fn tracked_jobs_are_listed_with_their_state_and_pruned_when_gone() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    for id in ["a", "b", "c"] {
        let job = NewJob::builder("tr", "x").id(id).build().unwrap();
        client.submit(&job).await.unwrap();
    }
    for id in ["a", "c"] {
        let v = json(&url, &["track", id]);
        assert_eq!(v["tracked"], true);
    }
    let (code, _, err) = hero(&url, &["track", "never-was"]);
    assert_ne!(code, 0);
    assert!(err.contains("not found"), "{err}");
    let listed = json(&url, &["jobs", "--tracked"]);
    let rows: Vec<(&str, &str)> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap(), j["status"].as_str().unwrap()))
        .collect();
    assert_eq!(rows, [("a", "dispatched"), ("c", "dispatched")]);
    json(&url, &["track", "c", "--off"]);
    // a tracked job whose record is gone (retention) is dropped by the prune pass
    let mut raw = server.conn().await;
    let _: () = redis::AsyncCommands::del(&mut raw, keys().job_unchecked("a"))
        .await
        .unwrap();
    assert_eq!(
        hero_admin::Admin::from(&client)
            .prune_tracked()
            .await
            .unwrap(),
        1
    );
    let listed = json(&url, &["jobs", "--tracked"]);
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 0, "{listed}");
}
