//! One vocabulary (issue 48): on one scenario, the Rust crates, hero-py and the Node package
//! answer the same counts, the same policy shown and the same children's results, each through
//! its own name for the capability (docs/clients.md): `Admin::job_counts` / `Queue.job_counts` /
//! `Queue.getJobCounts`, `Admin::policy` / `Queue.policy` / `Queue.getPolicy`, and
//! `Client::children` in all three.

use std::time::Duration;

use hero_admin::Admin;
use hero_broker::config::BrokerConfig;
use hero_client::{Client, Flow};
use hero_protocol::policy::{Backoff, Policy, Rate};
use hero_protocol::{JobId, NewJob};
use hero_testkit::{
    node, python, run_script, workspace_root, InProcBroker, InProcWorker, RedisServer,
};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

/// Numbers as f64, so that `0` (JavaScript), `0.0` (Python, serde) compare equal.
fn normal(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Number(n) => serde_json::json!(n.as_f64()),
        serde_json::Value::Array(a) => a.into_iter().map(normal).collect(),
        serde_json::Value::Object(o) => o.into_iter().map(|(k, v)| (k, normal(v))).collect(),
        other => other,
    }
}

#[tokio::test]
async fn the_three_languages_answer_one_scenario_alike() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let admin = Admin::from(&client);
    admin
        .set_policy(
            "voc",
            &Policy {
                retries: Some(2),
                backoff: Some(Backoff::parse("exponential:100ms:1s,jitter=0").unwrap()),
                timeout_ms: Some(30_000),
                rate: Some(Rate::parse("50/s").unwrap()),
                key_rate: Some(Rate::parse("5/1s").unwrap()),
                concurrency: Some(3),
                retention_ms: Some(3_600_000),
                aging_ms: Some(60_000),
                lease_ms: Some(45_000),
                ..Policy::default()
            },
        )
        .await
        .unwrap();
    let broker = InProcBroker::spawn(&url, BrokerConfig::default()).await;
    let worker = InProcWorker::spawn(Worker::builder(client.clone()).types(["voc"]).handler(
        |j: hero_protocol::Job, _| async move {
            if j.script == "bad" {
                Outcome::Abort("no".into())
            } else {
                Outcome::Done(format!("v-{}", j.script))
            }
        },
    ));
    let flow = Flow::new(
        NewJob::builder("voc", "parent")
            .id("flow-p")
            .build()
            .unwrap(),
    )
    .child(NewJob::builder("voc", "one").id("flow-c1").build().unwrap())
    .child(
        NewJob::builder("voc", "two")
            .id("flow-c2")
            .keep(Duration::ZERO)
            .build()
            .unwrap(),
    );
    client.submit_flow(&flow).await.unwrap();
    client
        .wait(&JobId::new("flow-p").unwrap(), LIMIT)
        .await
        .unwrap();
    let bad = NewJob::builder("voc", "bad").id("bad").build().unwrap();
    client.submit(&bad).await.unwrap();
    client.wait(bad.id(), LIMIT).await.unwrap();
    drop(worker);
    drop(broker);
    // now sizes too: two waiting at two priorities, one delayed, under a pause
    admin.pause("voc").await.unwrap();
    for (id, prio) in [("w1", 5), ("w2", 2)] {
        client
            .submit(
                &NewJob::builder("voc", "x")
                    .id(id)
                    .priority(prio)
                    .build()
                    .unwrap(),
            )
            .await
            .unwrap();
    }
    let later = NewJob::builder("voc", "x")
        .id("later")
        .delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    client.submit(&later).await.unwrap();

    let counts = admin.job_counts("voc").await.unwrap();
    let children: serde_json::Map<String, serde_json::Value> = client
        .children(&JobId::new("flow-p").unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, v.to_json()))
        .collect();
    let rust = normal(serde_json::json!({
        "counts": {
            "waiting": counts.waiting, "delayed": counts.delayed, "running": counts.running,
            "finished": counts.finished, "failed": counts.failed, "dead": counts.dead,
        },
        "policy": serde_json::to_value(admin.policy("voc").await.unwrap()).unwrap(),
        "children": children,
    }));
    assert_eq!(rust["counts"]["waiting"], 2.0, "{rust}");
    assert_eq!(rust["counts"]["finished"], 3.0, "{rust}");
    assert_eq!(rust["children"]["flow-c2"]["output"], "v-two", "{rust}");

    let root = workspace_root();
    for (lang, program, script) in [
        ("Python", python(), root.join("tests/interop/vocabulary.py")),
        ("Node", node(), root.join("tests/interop/vocabulary.mjs")),
    ] {
        let (code, out, err) = run_script(&program, &[script.to_str().unwrap(), &url], LIMIT);
        assert_eq!(code, 0, "{lang}: {err}");
        let theirs: serde_json::Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("{lang} printed no JSON ({e}): {out}{err}"));
        assert_eq!(normal(theirs), rust, "{lang}'s answers differ from Rust's");
    }
}
