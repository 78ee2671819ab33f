//! One clock (issue 58): workers whose clocks are 30 s off Redis's (libfaketime, preloaded
//! into the real worker process) change nothing: a live one is not declared dead, a dead one
//! is recovered as soon as a true one, and `hero actors` shows how far off each is.

use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{
    all_finished, binary, hero_broker_logged, hero_cli, job_key, test_worker, Proc, RedisServer,
};
use redis::AsyncCommands;

fn job(id: &str, ty: &str, script: &str) -> NewJob {
    NewJob::builder(ty, script).id(id).build().unwrap()
}

/// A test worker whose clock is `offset` off (libfaketime preloaded into the worker itself,
/// so a kill -9 kills the worker: the `faketime` wrapper would fork).
fn skewed_worker(url: &str, offset: &str, types: &str, label: &str, extra: &[&str]) -> Proc {
    let lib = hero_testkit::FAKETIME_LIB;
    assert!(
        std::path::Path::new(lib).exists(),
        "libfaketime is missing: scripts/setup installs it (apt-get install faketime)"
    );
    let mut args = vec!["--url", url, "--types", types, "--label", label];
    args.extend_from_slice(extra);
    Proc::spawn(
        &binary("hero-test-worker"),
        &args,
        &[
            ("LD_PRELOAD", lib),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        None,
    )
}

/// One clock: a worker 30 s behind Redis is not declared dead while it runs a job, and a
/// worker 30 s ahead that dies is recovered as soon as a true one would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_30_s_off_redis_clock_change_nothing() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut b = hero_broker_logged(&server.url(), &[]);
    let mut behind = skewed_worker(
        &server.url(),
        "-30s",
        "behind",
        "b",
        &["--presence-ms", "3000"],
    );
    behind.saw("ready", Duration::from_secs(20)).await;
    client
        .submit(&job("slow", "behind", "sleep 7000"))
        .await
        .unwrap();
    all_finished(&server, &["slow".to_string()], Duration::from_secs(30)).await;
    assert_eq!(
        behind.starts_seen("slow", 1).await,
        1,
        "{:?}",
        behind.output()
    );
    // and `hero actors` shows how far off it is
    let (code, out, err) = hero_cli(&server.url(), &["actors"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("CLOCK") && out.contains(" s behind"), "{out}");
    let attempts: Option<String> = server
        .conn()
        .await
        .hget(job_key("slow"), "attempts")
        .await
        .unwrap();
    assert!(
        attempts.is_none() || attempts.as_deref() == Some("1"),
        "{attempts:?}"
    );

    let mut ahead = skewed_worker(
        &server.url(),
        "+30s",
        "ahead",
        "a",
        &["--presence-ms", "3000"],
    );
    ahead.saw("ready", Duration::from_secs(20)).await;
    client
        .submit(&job("orphan", "ahead", "sleep 60000"))
        .await
        .unwrap();
    ahead.saw("started orphan ", Duration::from_secs(20)).await;
    ahead.kill9();
    let killed = Instant::now();
    let mut fresh = test_worker(&server.url(), "ahead", "f", &[]);
    fresh.saw("started orphan ", Duration::from_secs(25)).await;
    assert!(
        killed.elapsed() < Duration::from_secs(12),
        "recovered after its 3 s presence, not 30 s later: {:?}",
        killed.elapsed()
    );
    fresh.kill9();
    behind.kill9();
    b.kill9();
}

/// One clock for a job's whole life: its end is stamped on Redis's clock as its start is, so a
/// completion whose caller's clock is an hour ahead (or a few ms off, as an offset estimated
/// over a round trip may be) never records a `finished_at` after Redis's now, and a dependent
/// released by it never starts "before" its prerequisite finished.
#[tokio::test]
async fn an_end_is_stamped_on_redis_clock_whatever_the_callers() {
    use hero_protocol::function::{self, CompleteBatch, Completion, Ended, Ending, Leased};
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client.submit(&job("c1", "clk", "x")).await.unwrap();
    let stream = hero_testkit::work_key("clk");
    let fetch = function::fetch(
        client.keys(),
        std::slice::from_ref(&stream),
        "g:clk:1",
        1,
        "0",
    );
    let v: redis::Value = client.redis().query(&fetch).await.unwrap();
    let leased = function::FetchReply::decode(&v).unwrap();
    let lease = leased.jobs[0].entry.clone();
    let hour_ahead = hero_protocol::clock::iso(hero_protocol::clock::local_ms() + 3_600_000);
    let mut end = CompleteBatch::new(client.keys(), &hour_ahead, "0", "g:clk:1");
    let id = hero_protocol::JobId::new("c1").unwrap();
    end.push(Ended {
        held: Leased {
            id: &id,
            stream: &stream,
            lease: &lease,
            reply: "",
        },
        ending: Ending::Done,
        text: "ok",
        retry_at_ms: 0,
        ran: None,
    });
    let v: redis::Value = client.redis().query(&end.call()).await.unwrap();
    assert_eq!(end.answers(&v).unwrap(), [Completion::Completed]);
    let (secs, _): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    let rec = hero_testkit::record(&client, "c1").await;
    let (started, finished) = (rec.started_at.unwrap(), rec.finished_at.unwrap());
    assert!(started <= finished, "{started} then {finished}");
    let finished_ms = hero_protocol::clock::parse_iso_ms(&finished).unwrap();
    assert!(
        finished_ms <= secs * 1000 + 1000 && finished_ms + 10_000 > secs * 1000,
        "finished_at {finished} is Redis's time ({secs} s), not the caller's hour ahead"
    );
}
