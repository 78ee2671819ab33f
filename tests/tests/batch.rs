//! Batches: members counted as they end, and the callbacks submitted exactly once when the last
//! member ends (`on_complete`), or only when every member finished (`on_success`); with worker
//! processes killed with SIGKILL, two brokers, members retried, failed, dead-lettered and
//! retried, and members added after the batch was closed.

use std::time::Duration;

use hero_broker::config::BrokerConfig;
use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{
    batch_done, dead_letter_queued, test_worker, work_key, InProcBroker, Proc, RedisServer,
};
use redis::AsyncCommands;

fn broker_config() -> BrokerConfig {
    BrokerConfig {
        lease: Duration::from_secs(3),
        presence_poll: Duration::from_millis(100),
        ..BrokerConfig::default()
    }
}

fn worker(url: &str, label: &str) -> Proc {
    test_worker(
        url,
        "t",
        label,
        &[
            "--concurrency",
            "16",
            "--presence-ms",
            "1000",
            "--lease-ms",
            "3000",
            "--sleep-ms",
            "1",
        ],
    )
}

/// How many `batch_done` events the log holds for job `id`.
async fn called_back(client: &Client, id: &str) -> usize {
    hero_admin::Inspector::from(client)
        .events(
            &hero_admin::inspect::EventFilter {
                job: Some(id.into()),
                ..Default::default()
            },
            1000,
        )
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event == "batch_done")
        .count()
}

#[tokio::test]
async fn a_batch_of_10000_calls_back_once_when_its_last_member_ends_across_worker_kills() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _b1 = InProcBroker::spawn(&url, broker_config()).await;
    let _b2 = InProcBroker::spawn(&url, broker_config()).await;
    let batch = client.batch("big").unwrap();
    // every 500th member fails every attempt (one retry each): 20 end error
    let member = |n: usize| {
        let b = NewJob::builder("t", if n % 500 == 7 { "fail boom" } else { "sleep 5" })
            .id(format!("m-{n}"));
        if n % 500 == 7 { b.retries(1) } else { b }.build().unwrap()
    };
    let first: Vec<NewJob> = (0..5_000).map(member).collect();
    for chunk in first.chunks(1_000) {
        for r in batch.add(chunk).await.unwrap() {
            assert!(r.unwrap().created);
        }
    }
    // closed while members are pending, and before the rest of them are added
    let complete = NewJob::builder("cb", "report()")
        .id("big-complete")
        .build()
        .unwrap();
    let success = NewJob::builder("cb", "celebrate()")
        .id("big-success")
        .build()
        .unwrap();
    let closed = batch.close(Some(&complete), Some(&success)).await.unwrap();
    assert_eq!((closed.state.as_str(), closed.total), ("open", 5_000));

    let mut workers = vec![worker(&url, "A"), worker(&url, "B")];
    for w in &workers {
        w.expect_line("ready", Duration::from_secs(10)).await;
    }
    let rest: Vec<NewJob> = (5_000..10_000).map(member).collect();
    for chunk in rest.chunks(1_000) {
        batch.add(chunk).await.unwrap();
    }
    // SIGKILL a worker holding jobs, again and again, each replaced at once
    for k in 0..6 {
        let at = k % workers.len();
        workers[at]
            .expect_line("started", Duration::from_secs(10))
            .await;
        workers[at].kill9();
        workers[at] = worker(&url, &format!("R{k}"));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let info = batch_done(&client, "big", Duration::from_secs(120)).await;
    // the kills took jobs from their workers: recovery handed them out again
    let recovered: u64 = hero_admin::Inspector::from(&client)
        .queues()
        .await
        .unwrap()
        .iter()
        .map(|q| q.recovered)
        .sum();
    assert!(
        recovered > 0,
        "no member was recovered: the kills hit nothing"
    );
    assert_eq!(info.total, 10_000);
    assert_eq!(info.pending, 0);
    assert_eq!(info.failed, 20, "the members failing every attempt");
    assert_eq!(info.finished, 9_980);
    assert_eq!(info.complete_id.as_deref(), Some("big-complete"));
    assert_eq!(info.success_id, None, "a member failed: no on_success");
    // submitted exactly once: one entry in its stream, one event, and the counts in its env
    let mut conn = server.conn().await;
    let len: u64 = conn.xlen(work_key("cb")).await.unwrap();
    assert_eq!(len, 1, "one callback job was queued");
    assert_eq!(called_back(&client, "big-complete").await, 1);
    let cb = client
        .get(&JobId::new("big-complete").unwrap())
        .await
        .unwrap();
    assert_eq!(cb.status, Status::Dispatched);
    assert_eq!(cb.env_vars.get("BATCH").map(String::as_str), Some("big"));
    assert_eq!(
        cb.env_vars.get("BATCH_FINISHED").map(String::as_str),
        Some("9980")
    );
    assert_eq!(
        cb.env_vars.get("BATCH_FAILED").map(String::as_str),
        Some("20")
    );
    // every member ended exactly as counted
    let mut finished = 0;
    for n in 0..10_000 {
        let s = client
            .status(&JobId::new(format!("m-{n}")).unwrap())
            .await
            .unwrap();
        assert!(s.is_terminal(), "m-{n} is {s}");
        finished += usize::from(s == Status::Finished);
    }
    assert_eq!(finished, 9_980);
    // a done batch takes no member
    let late = NewJob::builder("t", "ok").id("too-late").build().unwrap();
    let err = batch.add(std::slice::from_ref(&late)).await.unwrap_err();
    assert!(err.to_string().contains("batch big is done"), "{err}");
    for mut w in workers {
        w.kill9();
    }
}

#[tokio::test]
async fn on_success_waits_for_a_retried_dead_letter_and_runs_once_every_member_finished() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let batch = client.batch("small").unwrap();
    let members: Vec<NewJob> = ["s-1", "s-2"]
        .iter()
        .map(|id| NewJob::builder("t", "ok").id(*id).build().unwrap())
        .collect();
    batch.add(&members).await.unwrap();
    // s-1's worker vanished and recovery dead-lettered it: a failed member
    dead_letter_queued(&client, "t", "s-1").await;
    let info = batch.show().await.unwrap().unwrap();
    assert_eq!((info.pending, info.failed), (1, 1));
    let success = NewJob::builder("cb", "celebrate()")
        .id("small-success")
        .build()
        .unwrap();
    let closed = batch.close(None, Some(&success)).await.unwrap();
    assert_eq!(closed.state, "open");
    // the dead letter retried: pending again, no longer failed
    let dead = hero_admin::Inspector::from(&client)
        .dead_letters(None, 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let retried = hero_admin::Admin::from(&client)
        .retry_dead(&dead)
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);
    let info = batch.show().await.unwrap().unwrap();
    assert_eq!((info.pending, info.failed), (2, 0));
    // a member added while the batch is closed but not done counts too
    let extra = NewJob::builder("t", "ok").id("s-3").build().unwrap();
    batch.add(std::slice::from_ref(&extra)).await.unwrap();
    let mut w = worker(&url, "A");
    let info = batch_done(&client, "small", Duration::from_secs(30)).await;
    assert_eq!((info.total, info.finished, info.failed), (3, 3, 0));
    assert_eq!(info.success_id.as_deref(), Some("small-success"));
    assert_eq!(info.complete_id, None);
    assert_eq!(called_back(&client, "small-success").await, 1);
    w.kill9();
}

#[tokio::test]
async fn hero_batch_close_and_show_give_the_counts_and_the_callback_id() {
    let server = RedisServer::start();
    let url = server.url();
    for n in 0..3 {
        let (code, _, err) = hero_testkit::hero_cli(
            &url,
            &[
                "submit",
                "--type",
                "t",
                "--batch",
                "cli",
                "--id",
                &format!("c-{n}"),
                "ok",
            ],
        );
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = hero_testkit::hero_cli(
        &url,
        &[
            "batch",
            "close",
            "cli",
            "--on-complete",
            "report()",
            "--type",
            "cb",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("3 of 3 members pending"), "{out}");
    let mut w = worker(&url, "A");
    let client = Client::connect(&url).await.unwrap();
    batch_done(&client, "cli", Duration::from_secs(30)).await;
    let (code, out, err) = hero_testkit::hero_cli(&url, &["--json", "batch", "show", "cli"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["state"], "done");
    assert_eq!(
        (v["total"].as_u64(), v["pending"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(
        (v["finished"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(v["complete_id"], "batch-cli-complete");
    let (code, out, _) = hero_testkit::hero_cli(&url, &["batch", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("cli  done  total 3"), "{out}");
    let (code, _, err) = hero_testkit::hero_cli(&url, &["batch", "show", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("no batch nope"), "{err}");
    w.kill9();
}
