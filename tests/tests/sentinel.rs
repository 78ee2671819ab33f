//! Sentinel: clients, workers and the broker find the master through `redis+sentinel://` and,
//! when it is killed, follow the failover to the promoted replica and carry on. With replicated
//! acknowledgements every acknowledged job survives the failover (counted); without them the
//! loss is counted too, and stays within what docs/configuration.md promises: at most what the
//! master acknowledged in the moment before it died.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hero_client::{Client, ClientOptions};
use hero_protocol::conn::Replicas;
use hero_protocol::{NewJob, Status};
use hero_testkit::{http_broker, say, test_worker, wait_for, SentinelSet};
use tokio_util::sync::CancellationToken;

/// Jobs a producer saw acknowledged, with when.
type Acked = Arc<Mutex<Vec<(String, Instant)>>>;

async fn client(url: &str, replicas: u32) -> Client {
    let mut opts = ClientOptions::new(url);
    opts.replicas = Replicas {
        wanted: replicas,
        timeout: Duration::from_millis(1000),
        fsync: false,
    };
    Client::with_options(opts).await.unwrap()
}

/// Submits a job every 2 ms until `stop`, recording each one acknowledged; a refused or failed
/// submit (the master is gone) is not acknowledged, and the producer carries on.
fn produce(
    c: Client,
    prefix: &'static str,
    stop: CancellationToken,
) -> (Acked, tokio::task::JoinHandle<()>) {
    let acked: Acked = Arc::default();
    let out = acked.clone();
    let task = tokio::spawn(async move {
        let mut i = 0u64;
        loop {
            i += 1;
            let job = NewJob::builder("sent", "x")
                .id(format!("{prefix}-{i}"))
                .build()
                .unwrap();
            tokio::select! {
                _ = stop.cancelled() => return,
                r = c.submit(&job) => {
                    if r.is_ok() {
                        out.lock().unwrap().push((job.id().to_string(), Instant::now()));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    (acked, task)
}

#[tokio::test]
async fn a_failover_is_followed_and_replicated_acks_lose_nothing() {
    let mut set = SentinelSet::start(&[]).await;
    let url = set.url();
    let old_master = set.master.port;
    let (_broker, _) = http_broker(&url, None, &["--lease-ms", "2000"]).await;
    let workers: Vec<_> = (0..2)
        .map(|i| {
            test_worker(
                &url,
                "sent",
                &format!("w{i}"),
                &["--concurrency", "8", "--lease-ms", "2000"],
            )
        })
        .collect();
    for w in &workers {
        w.expect_line("ready", Duration::from_secs(20)).await;
    }
    let safe = client(&url, 1).await;
    let plain = client(&url, 0).await;
    let stop = CancellationToken::new();
    let (acked_safe, t1) = produce(safe.clone(), "safe", stop.clone());
    let (acked_plain, t2) = produce(plain.clone(), "plain", stop.clone());

    // a second of work on the first master, then it dies
    wait_for(
        "jobs to finish on the first master",
        Duration::from_secs(20),
        || {
            let c = safe.clone();
            async move {
                let s = c.status(&"safe-20".parse().ok()?).await.ok()?;
                (s == Status::Finished).then_some(())
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    set.master.kill();
    let killed = Instant::now();
    say(&format!("killed the master on port {old_master}"));
    let new_master = wait_for(
        "the Sentinels to promote the replica",
        Duration::from_secs(30),
        || {
            let set = &set;
            async move { set.master_port().await.filter(|p| *p != old_master) }
        },
    )
    .await;
    let promoted = Instant::now();
    say(&format!(
        "failover to port {new_master} after {:?}",
        promoted - killed
    ));
    assert!(set.replicas.iter().any(|r| r.port == new_master));

    // the workers carry on: a job submitted after the failover finishes within 10 s
    let after = NewJob::builder("sent", "x")
        .id("after-failover")
        .build()
        .unwrap();
    let resumed = wait_for(
        "a submit to reach the new master",
        Duration::from_secs(10),
        || {
            let (c, j) = (safe.clone(), after.clone());
            async move { c.submit(&j).await.ok() }
        },
    )
    .await;
    assert!(resumed.created);
    let r = safe
        .wait(after.id(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished);
    say(&format!(
        "work resumed {:?} after the failover",
        promoted.elapsed()
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let _ = (t1.await, t2.await);

    // with replicated acknowledgements: every acknowledged job is on the new master and ends
    let safe_ids: Vec<String> = acked_safe
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    assert!(safe_ids.len() > 200, "only {} acknowledged", safe_ids.len());
    let mut lost_safe = Vec::new();
    for id in &safe_ids {
        match safe
            .wait(&id.parse().unwrap(), Duration::from_secs(30))
            .await
        {
            Ok(r) => assert_eq!(r.status, Status::Finished, "{id}"),
            Err(e) => lost_safe.push(format!("{id}: {e}")),
        }
    }
    assert!(
        lost_safe.is_empty(),
        "{} of {} replicated-acknowledged jobs lost: {:?}",
        lost_safe.len(),
        safe_ids.len(),
        &lost_safe[..lost_safe.len().min(5)]
    );

    // without: count what the failover lost; at most what the master acknowledged in the
    // second before it died
    let plain_acked = acked_plain.lock().unwrap().clone();
    let mut lost = 0usize;
    for (id, _) in &plain_acked {
        if plain.status(&id.parse().unwrap()).await.is_err() {
            lost += 1;
        }
    }
    let last_second = plain_acked
        .iter()
        .filter(|(_, at)| *at <= killed && killed - *at < Duration::from_secs(1))
        .count();
    say(&format!(
        "replicated acks: {} acknowledged, 0 lost; plain acks: {} acknowledged, {lost} lost (bound {last_second})",
        safe_ids.len(),
        plain_acked.len()
    ));
    assert!(
        lost <= last_second,
        "{lost} lost, more than the last second's {last_second}"
    );
}
