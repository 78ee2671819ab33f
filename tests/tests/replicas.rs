//! Acknowledged means replicated, when asked: with `min_replicas` a submit (any call that
//! writes) returns Ok only once that many replicas hold it, and fails loudly, naming what was
//! missing, when they do not within the timeout; without it, nothing waits.

use std::time::{Duration, Instant};

use hero_client::{Client, ClientOptions};
use hero_protocol::conn::Replicas;
use hero_protocol::NewJob;
use hero_testkit::{hero_cli, wait_for, RedisServer};

async fn client(url: &str, wanted: u32) -> Client {
    let mut opts = ClientOptions::new(url);
    opts.replicas = Replicas {
        wanted,
        timeout: Duration::from_millis(500),
        fsync: false,
    };
    Client::with_options(opts).await.unwrap()
}

#[tokio::test]
async fn a_submit_waits_for_its_replicas_and_fails_loudly_without_them() {
    let master = RedisServer::start();
    let port = master.url().rsplit(':').next().unwrap().to_string();
    let mut replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut raw = replica.conn().await;
    wait_for("the replica to sync", Duration::from_secs(20), || {
        let mut raw = raw.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut raw)
                .await
                .ok()?;
            info.contains("master_link_status:up").then_some(())
        }
    })
    .await;
    let c = client(&master.url(), 1).await;
    let job = NewJob::builder("rep", "x").id("rep-1").build().unwrap();
    assert!(c.submit(&job).await.unwrap().created);
    // the replica holds it when the submit returned
    let on_replica: Option<String> = redis::cmd("HGET")
        .arg(hero_testkit::job_key("rep-1"))
        .arg("status")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(on_replica.as_deref(), Some("dispatched"));

    replica.kill();
    let began = Instant::now();
    let lost = NewJob::builder("rep", "x").id("rep-2").build().unwrap();
    let e = c.submit(&lost).await.unwrap_err();
    assert!(
        matches!(
            e,
            hero_protocol::Error::NotReplicated {
                wanted: 1,
                got: 0,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("acknowledged by 0 of 1 replicas"),
        "{e}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "it waited for the timeout, not forever"
    );
    let (code, _, err) = hero_cli(
        &master.url(),
        &[
            "--min-replicas",
            "1",
            "--replica-timeout-ms",
            "200",
            "submit",
            "--type",
            "rep",
            "x",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("replicas"), "{err}");
    // without the option nothing waits
    let plain = client(&master.url(), 0).await;
    assert!(
        plain
            .submit(&NewJob::builder("rep", "x").build().unwrap())
            .await
            .unwrap()
            .created
    );
}

/// `--replica-fsync` asks for WAITAOF, which Redis 7.0 does not have: the server is asked
/// (COMMAND INFO) at connect, and the client refuses at once, naming what to change, rather
/// than failing every write later.
#[tokio::test]
async fn acknowledgements_on_disk_are_refused_by_a_server_without_waitaof() {
    let server = RedisServer::start();
    let mut raw = server.conn().await;
    let info: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query_async(&mut raw)
        .await
        .unwrap();
    let has_waitaof = matches!(&info, redis::Value::Array(v) if !matches!(v.first(), Some(redis::Value::Nil) | None));
    let mut opts = ClientOptions::new(server.url());
    opts.replicas = Replicas {
        wanted: 1,
        timeout: Duration::from_millis(200),
        fsync: true,
    };
    match Client::with_options(opts).await {
        Err(e) => {
            assert!(!has_waitaof, "refused by a server that has WAITAOF: {e}");
            let text = e.to_string();
            assert!(
                text.contains("WAITAOF") && text.contains("--replica-fsync"),
                "{text}"
            );
        }
        Ok(c) => {
            // a newer server: a write waits for a replica's fsync, and without one fails loudly
            assert!(has_waitaof);
            let job = NewJob::builder("rep", "x").build().unwrap();
            let e = c.submit(&job).await.unwrap_err();
            assert!(
                matches!(e, hero_protocol::Error::NotReplicated { .. }),
                "{e}"
            );
        }
    }
}
