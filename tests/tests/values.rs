//! Results as values (issue 60, protocol 33): a handler's returned value travels as the payload
//! does (MessagePack, the record's `value`) and every reader gives it back as the value, while
//! the record's `output` keeps its JSON text for older readers; a plain-text result stays text;
//! a parent reads its prerequisites' values. And `hero_list` (`Admin::jobs_in`), the one
//! listing of a queue's jobs by state every language calls.

use std::time::Duration;

use hero_admin::Admin;
use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{wait_for, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Report {
    total: u64,
    names: Vec<String>,
    note: Option<String>,
}

fn report() -> Report {
    Report {
        total: 7,
        names: vec!["a".into(), "b".into()],
        note: None,
    }
}

/// A worker of `types`: a script `value` returns [`report`], `nil` returns `()`, `fail` fails,
/// `block` waits to be cancelled, anything else returns its script as text.
fn worker(client: &Client, types: &[&str]) -> InProcWorker {
    InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(types.iter().map(|s| s.to_string()))
            .concurrency(4)
            .handler(
                |job: hero_protocol::Job, ctx: hero_worker::JobContext| async move {
                    match job.script.as_str() {
                        "value" => Outcome::value(&report()),
                        "nil" => Outcome::value(&()),
                        "fail" => Outcome::Abort("fails".into()),
                        "block" => {
                            ctx.cancel.cancelled().await;
                            Outcome::Done("cancelled".into())
                        }
                        text => Outcome::Done(text.to_string()),
                    }
                },
            ),
    )
}

fn job(ty: &str, id: &str, script: &str) -> NewJob {
    NewJob::builder(ty, script).id(id).build().unwrap()
}

#[tokio::test]
async fn a_returned_value_reads_back_as_the_value_and_its_output_is_json_text() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let w = worker(&client, &["val"]);
    let v = client.run(&job("val", "v1", "value"), LIMIT).await.unwrap();
    assert_eq!(v.status, Status::Finished);
    assert_eq!(v.output_as::<Report>().unwrap(), report());
    // older readers get the JSON text
    let text: serde_json::Value = serde_json::from_str(&v.output).unwrap();
    assert_eq!(
        text,
        serde_json::json!({"total": 7, "names": ["a", "b"], "note": null})
    );
    let record = client.get(&JobId::new("v1").unwrap()).await.unwrap();
    assert_eq!(record.output_as::<Report>().unwrap(), report());
    assert!(record.value.is_some());
    // null stays null
    let n = client.run(&job("val", "n1", "nil"), LIMIT).await.unwrap();
    assert_eq!(n.output_as::<Option<u32>>().unwrap(), None);
    // text stays text, JSON-looking text too, with no value stored
    let t = client
        .run(&job("val", "t1", r#"{"a":1}"#), LIMIT)
        .await
        .unwrap();
    assert!(t.value.is_none());
    assert_eq!(t.output_as::<String>().unwrap(), r#"{"a":1}"#);
    // a value that is not the type asked says so
    let e = v.output_as::<Vec<u8>>().unwrap_err().to_string();
    assert!(e.contains("does not decode"), "{e}");
    // the operator's views show the value as JSON
    let json = record.to_json();
    assert_eq!(json["value"]["names"], serde_json::json!(["a", "b"]));
    w.stop().await;
}

#[tokio::test]
async fn a_parent_reads_its_prerequisites_values() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let w = worker(&client, &["fl"]);
    client.submit(&job("fl", "c-value", "value")).await.unwrap();
    client.submit(&job("fl", "c-text", "plain")).await.unwrap();
    let parent = NewJob::builder("fl", "done")
        .id("parent")
        .after("c-value")
        .after("c-text")
        .build()
        .unwrap();
    client.submit(&parent).await.unwrap();
    let p = client
        .wait(&JobId::new("parent").unwrap(), LIMIT)
        .await
        .unwrap();
    assert_eq!(p.status, Status::Finished);
    let children = client
        .children(&JobId::new("parent").unwrap())
        .await
        .unwrap();
    assert_eq!(children["c-value"].output_as::<Report>().unwrap(), report());
    assert_eq!(children["c-text"].output_as::<String>().unwrap(), "plain");
    assert!(children["c-text"].value.is_none());
    w.stop().await;
}

#[tokio::test]
async fn jobs_are_listed_by_state_and_queue_through_every_page() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let admin = Admin::from(&client);
    let w = worker(&client, &["ls", "other"]);
    // 1,500 finished, 5 failed among them: more than one call reads (1,000 candidates a call)
    let mut jobs: Vec<NewJob> = (0..1500)
        .map(|i| job("ls", &format!("ok-{i}"), "x"))
        .collect();
    jobs.extend((0..5).map(|i| job("ls", &format!("bad-{i}"), "fail")));
    jobs.push(job("other", "bad-other", "fail"));
    client.submit_many(&jobs).await.unwrap();
    // every job ended: the finished ones and the failed ones (a failure may end after the
    // last success)
    wait_for("every job ended", LIMIT, || {
        let admin = admin.clone();
        async move {
            let n = admin
                .jobs_in(Some("ls"), "finished", 2000)
                .await
                .ok()?
                .len();
            let failed = admin.jobs_in(None, "error", 100).await.ok()?.len();
            (n == 1500 && failed == 6).then_some(())
        }
    })
    .await;
    let mut failed = admin.jobs_in(Some("ls"), "error", 100).await.unwrap();
    failed.sort();
    assert_eq!(
        failed,
        (0..5).map(|i| format!("bad-{i}")).collect::<Vec<_>>()
    );
    assert_eq!(admin.jobs_in(None, "error", 100).await.unwrap().len(), 6);
    assert_eq!(
        admin
            .jobs_in(Some("ls"), "finished", 10)
            .await
            .unwrap()
            .len(),
        10
    );
    // running, then waiting behind it (one slot), then delayed
    client.submit(&job("ls", "run-1", "block")).await.unwrap();
    wait_for("run-1 running", LIMIT, || {
        let admin = admin.clone();
        async move {
            let r = admin.jobs_in(Some("ls"), "running", 10).await.ok()?;
            (r == vec!["run-1".to_string()]).then_some(())
        }
    })
    .await;
    client.stop(&JobId::new("run-1").unwrap()).await.unwrap();
    w.stop().await;
    let queued = NewJob::builder("ls", "x").id("queued").build().unwrap();
    client.submit(&queued).await.unwrap();
    let later = NewJob::builder("ls", "x")
        .id("later")
        .delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    client.submit(&later).await.unwrap();
    assert!(admin
        .jobs_in(Some("ls"), "waiting", 10)
        .await
        .unwrap()
        .contains(&"queued".to_string()));
    assert_eq!(
        admin.jobs_in(Some("ls"), "delayed", 10).await.unwrap(),
        vec!["later".to_string()]
    );
    assert!(admin
        .jobs_in(Some("other"), "delayed", 10)
        .await
        .unwrap()
        .is_empty());
    let e = admin
        .jobs_in(None, "failed", 10)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("finished, error, delayed, waiting, running"),
        "{e}"
    );
}
