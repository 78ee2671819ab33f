//! docs/clients.md's Rust column against a real broker and worker: every capability the table
//! names in Rust is called here once, and a name the table gives that this file never calls
//! fails the check (so the table cannot promise what the crates do not have).

use std::time::Duration;

use hero_admin::{Admin, Inspector, ListFilter};
use hero_broker::config::BrokerConfig;
use hero_client::{Client, Flow, Since, Watched};
use hero_protocol::cron::Missed;
use hero_protocol::event_log::EventFilter;
use hero_protocol::policy::Policy;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{cron_job, dead_letter, InProcBroker, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(20);

/// The names a column of the doc's tables gives (the first backticked name of each cell), one
/// per row that has one.
pub fn column(doc: &str, header: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = None;
    for line in doc.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.first() == Some(&"capability") {
            at = cells.iter().position(|c| *c == header);
            continue;
        }
        let (Some(i), true) = (at, line.starts_with('|')) else {
            if !line.starts_with('|') {
                at = None;
            }
            continue;
        };
        if let Some(name) = cells.get(i).and_then(|c| c.split('`').nth(1)) {
            out.push(name.to_string());
        }
    }
    out
}

/// What a call of `name` looks like in source: its last segment, before any argument list.
pub fn call_token(name: &str) -> String {
    let bare = name.split('(').next().unwrap_or(name);
    bare.rsplit(['.', ':']).next().unwrap_or(bare).to_string()
}

#[test]
fn every_rust_name_the_table_gives_is_called_here() {
    let root = hero_testkit::workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/clients.md")).unwrap();
    let here = std::fs::read_to_string(root.join("tests/tests/clients.rs")).unwrap();
    let names = column(&doc, "Rust");
    assert!(names.len() >= 30, "the table's Rust column: {names:?}");
    let body = here
        .rsplit("fn every_capability_of_the_rust_column")
        .next()
        .unwrap();
    let missing: Vec<_> = names
        .iter()
        .filter(|n| {
            let t = call_token(n);
            // a call, a path, or a field read (`job.results.len()`)
            !body.contains(&format!("{t}("))
                && !body.contains(&format!("{t}::"))
                && !body.contains(&format!(".{t}."))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "named in docs/clients.md, never called: {missing:?}"
    );
    assert_eq!(call_token("Client::submit_many"), "submit_many");
    assert_eq!(call_token("Client.submit(batch=)"), "submit");
}

#[tokio::test]
async fn every_capability_of_the_rust_column_answers_against_a_real_broker() {
    let server = RedisServer::start();
    let url = server.url();
    let _broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let client = Client::connect(&url).await.unwrap();
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["c"])
            .duties(true)
            .handler(
                |job: hero_protocol::Job, ctx: hero_worker::JobContext| async move {
                    ctx.progress(50.0, "half");
                    ctx.log("a line");
                    match job.script.as_str() {
                        "retry" if job.attempts < 2 => {
                            Outcome::RetryAfter(Duration::from_millis(10), "again".into())
                        }
                        "abort" => Outcome::Abort("no".into()),
                        "fail" => ctx.fail(&std::io::Error::other("disk full")),
                        "parent" => Outcome::Done(format!("{} children", job.results.len())),
                        s => Outcome::Done(s.to_uppercase()),
                    }
                },
            ),
    );
    let job = |script: &str| NewJob::builder("c", script).build().unwrap();

    // producer
    let mut events = client
        .events(EventFilter::default(), Since::Now)
        .await
        .unwrap();
    let s = client.submit(&job("one")).await.unwrap();
    assert!(client.submit_many(&[job("two")]).await.unwrap()[0].is_ok());
    let ran = client.run(&job("ran"), LIMIT).await.unwrap();
    assert_eq!(ran.output, "RAN");
    assert_eq!(
        ran.output_as::<String>().unwrap(),
        "RAN",
        "text reads as a String"
    );
    assert_eq!(client.wait(&s.id, LIMIT).await.unwrap().output, "ONE");
    assert_eq!(client.status(&s.id).await.unwrap(), Status::Finished);
    assert_eq!(
        client.get(&s.id).await.unwrap().output.as_deref(),
        Some("ONE")
    );
    assert_eq!(
        client
            .run(
                &NewJob::builder("c", "retry").retries(1).build().unwrap(),
                LIMIT
            )
            .await
            .unwrap()
            .status,
        Status::Finished
    );
    assert_eq!(
        client.run(&job("abort"), LIMIT).await.unwrap().status,
        Status::Error
    );
    let failed = client.run(&job("fail"), LIMIT).await.unwrap();
    let failed = client.get(&failed.id).await.unwrap();
    assert_eq!(failed.trace.as_deref(), Some("disk full"));
    let later = NewJob::builder("c", "x")
        .delay(Duration::from_secs(600))
        .build()
        .unwrap();
    let later = client.submit(&later).await.unwrap().id;
    client.stop(&later).await.unwrap();
    let finished = loop {
        match tokio::time::timeout(LIMIT, events.next()).await.unwrap() {
            Some(Ok(Watched::Event { event, output })) if event.event == "finished" => {
                break output
            }
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    };
    assert!(finished.is_some());
    let batch = client.batch("b1").unwrap();
    batch.add(&[job("member")]).await.unwrap();
    batch.close(Some(&job("done")), None).await.unwrap();
    assert!(batch.show().await.unwrap().is_some());
    let flow = Flow::new(job("parent")).child(job("child"));
    let parent = client.submit_flow(&flow).await.unwrap().id;
    assert_eq!(
        client.wait(&parent, LIMIT).await.unwrap().output,
        "1 children"
    );
    assert_eq!(client.children(&parent).await.unwrap().len(), 1);
    let own = NewJob::builder("c", "own")
        .backoff(hero_protocol::Backoff::parse("fixed:1s").unwrap())
        .keep(Duration::from_secs(60))
        .build()
        .unwrap();
    client.run(&own, LIMIT).await.unwrap();
    assert_eq!(client.shard_map().k, 1);

    // operator
    let admin = Admin::from(&client);
    let inspector = Inspector::from(&client);
    admin.pause("c").await.unwrap();
    admin.resume("c").await.unwrap();
    assert!(!inspector.queues().await.unwrap().is_empty());
    let policy = Policy {
        retries: Some(2),
        ..Policy::default()
    };
    admin.set_policy("c", &policy).await.unwrap();
    assert_eq!(admin.policy("c").await.unwrap().retries, Some(2));
    assert!(admin.clear_policy("c").await.unwrap());
    // fair share: a key paused and resumed, the keys with work
    let fair = Policy {
        fair: Some(true),
        ..Policy::default()
    };
    admin.set_policy("fq", &fair).await.unwrap();
    admin.pause_key("fq", "acme").await.unwrap();
    admin.resume_key("fq", "acme").await.unwrap();
    assert_eq!(inspector.fair_keys("fq", 10, 0).await.unwrap().keys, 0);
    dead_letter(&client, "dl", "dead-1").await;
    dead_letter(&client, "dl", "dead-2").await;
    let letters = inspector.dead_letters(None, 10).await.unwrap();
    assert_eq!(letters.len(), 2);
    admin.retry_dead(&letters[..1]).await.unwrap();
    admin.purge_dead(&letters[1..]).await.unwrap();
    let waiting = client
        .submit(&NewJob::builder("idle", "x").build().unwrap())
        .await
        .unwrap();
    admin.requeue(&waiting.id, None).await.ok();
    assert!(admin.job_counts("idle").await.unwrap().waiting >= 1);
    let delayed = NewJob::builder("idle", "x")
        .delay(Duration::from_secs(600))
        .build()
        .unwrap();
    let delayed = client.submit(&delayed).await.unwrap().id;
    admin.promote(&delayed).await.unwrap();
    admin.remove(&delayed).await.unwrap();
    // failed-job tooling and cleanup (the failing job is retried, the rest cleaned or drained)
    assert!(
        admin.retry(&delayed).await.is_err(),
        "a removed job is no failed one"
    );
    assert!(admin
        .clean(None, Duration::from_secs(3600), None, 10)
        .await
        .unwrap()
        .is_empty());
    client
        .submit(&NewJob::builder("gone", "x").build().unwrap())
        .await
        .unwrap();
    assert_eq!(admin.drain("gone", false).await.unwrap(), 1);
    assert!(!admin.is_paused("gone").await.unwrap());
    assert!(admin
        .jobs_in(Some("gone"), "waiting", 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(admin.obliterate("gone").await.unwrap(), 0);
    client
        .cron_add(&cron_job("nightly", "0 3 * * *", "c", Missed::Skip))
        .await
        .unwrap();
    assert_eq!(admin.cron_list().await.unwrap().len(), 1);
    // 2026-11-28T00:00:00Z: 03:00 in Amsterdam (CET, UTC+1) is 02:00Z
    let ticks = client
        .cron_next("0 3 * * *", "Europe/Amsterdam", 1_795_824_000_000, 2)
        .await
        .unwrap();
    assert_eq!(ticks, vec![1_795_831_200_000, 1_795_917_600_000]);
    assert!(admin.cron_remove("nightly").await.unwrap());
    let page = inspector.list(&ListFilter::All, None, 10).await.unwrap();
    assert!(!page.jobs.is_empty());
    assert!(!inspector
        .events(&EventFilter::default(), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(!inspector.actors().await.unwrap().is_empty());
    admin.audit(false, &|_| {}).await.unwrap();
    assert!(JobId::new("x").is_ok());
}
