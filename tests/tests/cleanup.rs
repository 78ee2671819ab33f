//! Failed-job tooling and a queue's cleanup (issue 60), through the server functions every
//! language calls: a failed job retried runs again; clean deletes ended jobs by queue, status
//! and age and nothing else; drain deletes a queue's waiting jobs (and, asked, its delayed ones)
//! and leaves other queues; obliterate is refused while a job of the queue runs, then removes
//! the queue whole; is-paused answers what pause and resume did.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hero_admin::Admin;
use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{record, wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

fn job(ty: &str, id: &str, script: &str) -> NewJob {
    NewJob::builder(ty, script).id(id).build().unwrap()
}

async fn ended(client: &Client, id: &str) -> hero_protocol::Job {
    wait_for(&format!("{id} ended"), LIMIT, || {
        let client = client.clone();
        let id = id.to_string();
        async move {
            let j = client.get(&JobId::new(&id).ok()?).await.ok()?;
            matches!(j.status, Status::Finished | Status::Error).then_some(j)
        }
    })
    .await
}

async fn exists(server: &RedisServer, key: &str) -> bool {
    let mut raw = server.conn().await;
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(&mut raw)
        .await
        .unwrap()
        == 1
}

/// A worker of `types` whose handler fails a script `fail` the first time it sees each job,
/// and succeeds on `ok` (and on a `fail` job's later runs).
fn worker(client: &Client, types: &[&str], runs: Arc<AtomicU32>) -> InProcWorker {
    InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(types.iter().map(|s| s.to_string()))
            .handler(move |job: hero_protocol::Job, _| {
                let runs = runs.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    if job.script == "fail" && n == 0 {
                        Outcome::Abort("first time fails".into())
                    } else if job.script == "always-fail" {
                        Outcome::Abort("fails".into())
                    } else {
                        Outcome::Done("ok".into())
                    }
                }
            }),
    )
}

#[tokio::test]
async fn a_failed_job_retried_runs_again_and_another_status_is_refused() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = Admin::from(&client);
    let runs = Arc::new(AtomicU32::new(0));
    let w = worker(&client, &["rt"], runs.clone());
    client.submit(&job("rt", "f1", "fail")).await.unwrap();
    assert_eq!(ended(&client, "f1").await.status, Status::Error);
    admin.retry(&JobId::new("f1").unwrap()).await.unwrap();
    wait_for("the retried job finished", LIMIT, || {
        let client = client.clone();
        async move { (record(&client, "f1").await.status == Status::Finished).then_some(()) }
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let err = admin
        .retry(&JobId::new("f1").unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("finished, not failed"), "{err}");
    w.stop().await;
}

#[tokio::test]
async fn clean_deletes_ended_jobs_by_queue_status_and_age_and_nothing_else() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = Admin::from(&client);
    let w = worker(&client, &["ca", "cb"], Arc::new(AtomicU32::new(1)));
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push((format!("a-ok-{i}"), "ca", "ok"));
    }
    for i in 0..5 {
        ids.push((format!("a-bad-{i}"), "ca", "always-fail"));
    }
    for i in 0..3 {
        ids.push((format!("b-bad-{i}"), "cb", "always-fail"));
    }
    for (id, ty, script) in &ids {
        client.submit(&job(ty, id, script)).await.unwrap();
    }
    for (id, _, _) in &ids {
        ended(&client, id).await;
    }
    w.stop().await;
    // younger than an hour: nothing
    let none = admin
        .clean(
            Some("ca"),
            Duration::from_secs(3600),
            Some(Status::Error),
            100,
        )
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:?}");
    let mut gone = admin
        .clean(Some("ca"), Duration::ZERO, Some(Status::Error), 100)
        .await
        .unwrap();
    gone.sort();
    assert_eq!(
        gone,
        (0..5).map(|i| format!("a-bad-{i}")).collect::<Vec<_>>()
    );
    for (id, _, _) in &ids {
        let kept = !gone.contains(id);
        assert_eq!(
            exists(&server, &hero_testkit::job_key(id)).await,
            kept,
            "{id}"
        );
    }
    // a limit, then everything ended of every queue
    assert_eq!(
        admin
            .clean(None, Duration::ZERO, None, 4)
            .await
            .unwrap()
            .len(),
        4
    );
    assert_eq!(
        admin
            .clean(None, Duration::ZERO, None, 100)
            .await
            .unwrap()
            .len(),
        9
    );
}

/// A retention entry names every job of a completion batch: a limit is kept inside one entry,
/// and the next call goes on from that entry without answering a job twice.
#[tokio::test]
async fn clean_keeps_its_limit_inside_one_retention_entry_naming_many_jobs() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = Admin::from(&client);
    let w = worker(&client, &["cm"], Arc::new(AtomicU32::new(1)));
    let ids: Vec<String> = (0..10).map(|i| format!("m-{i}")).collect();
    for id in &ids {
        client.submit(&job("cm", id, "ok")).await.unwrap();
    }
    for id in &ids {
        ended(&client, id).await;
    }
    w.stop().await;
    // one entry naming all ten, as one completion batch writes it
    let retention = hero_testkit::keys().retention();
    let mut raw = server.conn().await;
    redis::cmd("DEL")
        .arg(&retention)
        .query_async::<i64>(&mut raw)
        .await
        .unwrap();
    redis::cmd("XADD")
        .arg(&retention)
        .arg("*")
        .arg("t")
        .arg("2026-01-01T00:00:00Z")
        .arg("j")
        .arg(ids.join(" "))
        .query_async::<String>(&mut raw)
        .await
        .unwrap();
    let first = admin.clean(None, Duration::ZERO, None, 4).await.unwrap();
    assert_eq!(first.len(), 4, "{first:?}");
    let mut rest = admin.clean(None, Duration::ZERO, None, 100).await.unwrap();
    assert_eq!(rest.len(), 6, "{rest:?}");
    rest.extend(first);
    rest.sort();
    rest.dedup();
    assert_eq!(rest.len(), 10);
}

#[tokio::test]
async fn drain_deletes_a_queues_waiting_jobs_and_delayed_ones_when_asked() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = Admin::from(&client);
    // jobs run first: the group has read entries, so Redis keeps a lag the drain's deletions do
    // not lower (the counts must not read it alone)
    let w = worker(&client, &["dr"], Arc::new(AtomicU32::new(1)));
    for i in 0..30 {
        client
            .submit(&job("dr", &format!("r{i}"), "ok"))
            .await
            .unwrap();
    }
    for i in 0..30 {
        ended(&client, &format!("r{i}")).await;
    }
    w.stop().await;
    for i in 0..1200 {
        client
            .submit(&job("dr", &format!("w{i}"), "x"))
            .await
            .unwrap();
    }
    for i in 0..3 {
        let later = NewJob::builder("dr", "x")
            .id(format!("d{i}"))
            .delay(Duration::from_secs(3600))
            .build()
            .unwrap();
        client.submit(&later).await.unwrap();
    }
    client.submit(&job("other", "o1", "x")).await.unwrap();
    assert_eq!(admin.drain("dr", false).await.unwrap(), 1200);
    let counts = admin.job_counts("dr").await.unwrap();
    assert_eq!((counts.waiting, counts.delayed), (0, 3), "{counts:?}");
    let shown = hero_admin::Inspector::from(&client).queues().await.unwrap();
    let dr = shown.iter().find(|q| q.name == "dr").unwrap();
    assert_eq!(dr.waiting, 0, "hero queues after a drain: {dr:?}");
    assert!(!exists(&server, &hero_testkit::job_key("w7")).await);
    assert_eq!(admin.drain("dr", true).await.unwrap(), 3);
    assert_eq!(admin.job_counts("dr").await.unwrap().delayed, 0);
    assert_eq!(
        record(&client, "o1").await.status,
        Status::Dispatched,
        "another queue's job stays"
    );
}

#[tokio::test]
async fn obliterate_is_refused_while_a_job_runs_then_removes_the_queue_whole() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = Admin::from(&client);
    let release = Arc::new(tokio::sync::Notify::new());
    let w = {
        let release = release.clone();
        InProcWorker::spawn(Worker::builder(client.clone()).types(["ob"]).handler(
            move |job: hero_protocol::Job, _| {
                let release = release.clone();
                async move {
                    if job.script == "hold" {
                        release.notified().await;
                    }
                    Outcome::Done("ok".into())
                }
            },
        ))
    };
    for i in 0..5 {
        client
            .submit(&job("ob", &format!("e{i}"), "x"))
            .await
            .unwrap();
    }
    for i in 0..5 {
        ended(&client, &format!("e{i}")).await;
    }
    client.submit(&job("ob", "held", "hold")).await.unwrap();
    wait_for("the held job runs", LIMIT, || {
        let client = client.clone();
        async move { (record(&client, "held").await.status == Status::Started).then_some(()) }
    })
    .await;
    admin.pause("ob").await.unwrap();
    for i in 0..4 {
        client
            .submit(&job("ob", &format!("q{i}"), "x"))
            .await
            .unwrap();
    }
    assert!(admin.is_paused("ob").await.unwrap());
    let err = admin.obliterate("ob").await.unwrap_err().to_string();
    assert!(err.contains("1 jobs of ob are running"), "{err}");
    assert_eq!(
        record(&client, "q0").await.status,
        Status::Dispatched,
        "nothing deleted"
    );
    release.notify_one();
    ended(&client, "held").await;
    w.stop().await;
    let deleted = admin.obliterate("ob").await.unwrap();
    assert_eq!(deleted, 10, "4 waiting, 6 ended");
    let stream = hero_testkit::work_key("ob");
    assert!(!exists(&server, &stream).await, "its stream is gone");
    let mut raw = server.conn().await;
    let registered: Vec<String> = redis::cmd("SUNION")
        .arg(client.keys().queues())
        .arg(client.keys().paused_queues())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!registered.contains(&stream), "{registered:?}");
    assert!(!admin.is_paused("ob").await.unwrap());
    assert_eq!(admin.job_counts("ob").await.unwrap().waiting, 0);
}

/// The same from the command line: `hero retry`, `hero queue clean|drain|obliterate`.
#[tokio::test]
async fn the_cli_retries_cleans_drains_and_obliterates() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let w = worker(&client, &["cl"], Arc::new(AtomicU32::new(1)));
    client
        .submit(&job("cl", "bad", "always-fail"))
        .await
        .unwrap();
    client.submit(&job("cl", "good", "ok")).await.unwrap();
    ended(&client, "bad").await;
    ended(&client, "good").await;
    w.stop().await;
    let cli = |args: &[&str]| {
        let (code, out, err) = hero_testkit::hero_cli(&url, args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        out
    };
    assert!(cli(&["retry", "bad"]).contains("bad: retried"));
    assert_eq!(record(&client, "bad").await.status, Status::Dispatched);
    let (code, _, err) = hero_testkit::hero_cli(&url, &["retry", "good"]);
    assert_ne!(code, 0);
    assert!(err.contains("not failed"), "{err}");
    client.submit(&job("cl", "waiting", "x")).await.unwrap();
    assert!(cli(&["queue", "drain", "cl"]).contains("deleted 2 waiting jobs"));
    assert!(cli(&["queue", "clean", "cl", "--status", "finished"]).contains("deleted 1 ended"));
    assert!(cli(&["queue", "obliterate", "cl"]).contains("cl: removed"));
    assert!(!exists(&server, &hero_testkit::work_key("cl")).await);
}

/// A queued job stopped leaves its stream (issue 60: it was counted waiting and failed at once),
/// so its record removed afterwards is not taken for a lost job when a worker reaches its place.
#[tokio::test]
async fn a_stopped_queued_job_is_counted_once_and_its_removal_loses_nothing() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = Admin::from(&client);
    for id in ["s1", "s2", "s3"] {
        client.submit(&job("st", id, "x")).await.unwrap();
    }
    client.stop(&JobId::new("s2").unwrap()).await.unwrap();
    let c = admin.job_counts("st").await.unwrap();
    assert_eq!((c.waiting, c.failed), (2, 1), "{c:?}");
    admin.remove(&JobId::new("s2").unwrap()).await.unwrap();
    let w = worker(&client, &["st"], Arc::new(AtomicU32::new(1)));
    ended(&client, "s1").await;
    ended(&client, "s3").await;
    w.stop().await;
    let mut raw = server.conn().await;
    let lost: Option<String> = redis::cmd("HGET")
        .arg(client.keys().stats())
        .arg(format!("{}|lost", hero_testkit::work_key("st")))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(lost, None, "no job counted lost");
}
