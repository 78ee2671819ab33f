//! Workers listed without a walk of the keyspace per request: `/api/actors` and `/metrics` read
//! the registered workers' presence by name, and the one bounded SCAN for workers that register
//! nowhere is shared by every request of the process and continued at most every 10 s
//! (`hero_admin::inspect::PresenceScan`), however many foreign keys the Redis holds.

use std::time::Instant;

use hero_admin::inspect::{SCAN_CALLS, SCAN_REFRESH};
use hero_client::Client;
use hero_protocol::{GroupName, InstanceName, NewJob, ScriptType};
use hero_testkit::{
    api_get, http_broker, http_client, keys, run_to_finish, InProcWorker, RedisServer,
};
use hero_worker::{Outcome, Worker};

const TOKEN: &str = "s3cret-token-0123456789";

/// How many times Redis ran SCAN since the last `CONFIG RESETSTAT`.
async fn scans(client: &Client) -> u64 {
    let stats: String = client
        .redis()
        .query(redis::cmd("INFO").arg("commandstats"))
        .await
        .unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn reset_stats(client: &Client) {
    let _: redis::Value = client
        .redis()
        .query(redis::cmd("CONFIG").arg("RESETSTAT"))
        .await
        .unwrap();
}

/// A worker's presence under `script_type` for `ttl`, as a worker of `version` writes it; with
/// `registered`, also its entry in the consumers registry (every protocol's workers write one;
/// a worker that skips it registers nowhere).
async fn presence(
    client: &Client,
    script_type: &str,
    instance: &str,
    version: &str,
    registered: bool,
) -> String {
    let consumer = format!("default:{instance}:0000beef");
    let key = keys().presence(
        &ScriptType::new(script_type).unwrap(),
        &GroupName::new("default").unwrap(),
        &InstanceName::new(instance).unwrap(),
    );
    let json = serde_json::json!({
        "consumer": consumer, "version": version, "pid": 1, "hostname": "elsewhere",
        "capabilities": [script_type], "concurrency": 1, "running": 0,
    });
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg(&key)
        .arg(json.to_string())
        .arg("PX")
        .arg(120_000)
        .ignore();
    if registered {
        pipe.cmd("ZADD")
            .arg(keys().consumers())
            .arg(hero_protocol::clock::now_ms() + 120_000)
            .arg(&consumer)
            .ignore();
    }
    for r in client.redis().pipeline(&pipe).await.unwrap() {
        r.unwrap();
    }
    consumer
}

#[tokio::test]
async fn actors_and_metrics_cost_one_bounded_scan_among_300000_foreign_keys() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _: redis::Value = client
        .redis()
        .query(
            redis::cmd("DEBUG")
                .arg("POPULATE")
                .arg(300_000)
                .arg("foreign:"),
        )
        .await
        .unwrap();
    // a live worker of this protocol (fleet and consumers registry), its type queued to once
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["q1"])
            .instance("now")
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("ok".into()) }),
    );
    run_to_finish(
        &client,
        &[NewJob::builder("q1", "x").id("q1-0").build().unwrap()],
    )
    .await;
    // a worker of release 0.3.0 (protocol 28): presence and the consumers registry, no fleet
    let older = presence(&client, "q1", "older", "0.3.0", true).await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;

    reset_stats(&client).await;
    let started = Instant::now();
    for n in 0..20 {
        let (code, v) = api_get(&base, "/api/actors", Some(TOKEN)).await;
        assert_eq!(code, 200, "{v}");
        let live: Vec<&serde_json::Value> = v["actors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["state"] == "live")
            .collect();
        assert_eq!(live.len(), 2, "request {n}: both workers live: {v}");
        assert!(
            live.iter().any(
                |a| a["consumer"].as_str().unwrap().starts_with("default:now:")
                    && a["protocol"] == hero_protocol::fleet::protocol()
            ),
            "{v}"
        );
        assert!(
            live.iter()
                .any(|a| a["consumer"] == older.as_str() && a["protocol"] == 28),
            "{v}"
        );
        let r = http_client()
            .get(format!("{base}/metrics"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let text = r.text().await.unwrap();
        assert!(
            text.lines().any(|l| l == "hero_workers{state=\"live\"} 2"),
            "request {n}: {text}"
        );
    }
    let scans = scans(&client).await;
    // one bounded refresh per SCAN_REFRESH at most (a slow machine may cross one)
    let refreshes = 1 + (started.elapsed().as_secs() / SCAN_REFRESH.as_secs()) as usize;
    assert!(
        scans as usize <= SCAN_CALLS * refreshes,
        "40 requests made {scans} SCAN calls among 300,000 keys (a full walk per request: ~300 each)"
    );
}

#[tokio::test]
async fn a_worker_that_registers_nowhere_is_found_by_the_shared_scan_of_its_own_server() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let ca = Client::connect(&a.url()).await.unwrap();
    let cb = Client::connect(&b.url()).await.unwrap();
    let on_a = presence(&ca, "qa", "hidden", "my own worker", false).await;
    let inspector = hero_admin::Inspector::from(&ca);
    let live = |actors: Vec<hero_admin::inspect::Actor>| {
        actors
            .into_iter()
            .filter(|x| x.live)
            .map(|x| x.consumer)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        live(inspector.actors().await.unwrap()),
        std::slice::from_ref(&on_a)
    );
    // the next questions within the refresh time share that scan
    reset_stats(&ca).await;
    for _ in 0..5 {
        assert_eq!(
            live(inspector.actors().await.unwrap()),
            std::slice::from_ref(&on_a)
        );
    }
    assert_eq!(scans(&ca).await, 0, "the scan is shared, not made per call");
    // another server in the same process has its own scan (same namespace, same key names)
    let on_b = presence(&cb, "qb", "hidden", "my own worker", false).await;
    let ib = hero_admin::Inspector::from(&cb);
    assert_eq!(live(ib.actors().await.unwrap()), [on_b]);
    // a presence gone since the scan is read again by name: not live
    let _: i64 = ca
        .redis()
        .query(redis::cmd("DEL").arg(keys().presence(
            &ScriptType::new("qa").unwrap(),
            &GroupName::new("default").unwrap(),
            &InstanceName::new("hidden").unwrap(),
        )))
        .await
        .unwrap();
    assert!(live(inspector.actors().await.unwrap()).is_empty());
}
