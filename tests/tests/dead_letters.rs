//! Dead letters found through the index the functions keep (protocol 30): a dead-lettered job's
//! record names its letter (`dead`, the entry id), so `Inspector::dead_letter` and
//! `dead_letters_of` cost a read of the record and of that entry, however many letters the
//! stream holds; a retry removes the index, a purge the record; a letter written without one (a
//! process older than 30) is found among the newest letters, and only there. A dead letter
//! kept longer than the ended jobs keeps its record (issue 58).

use std::time::Duration;

use hero_admin::Admin;
use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{
    dead_letter, hero_broker_logged, hero_cli, job_key, keys, test_worker, wait_for, RedisServer,
};
use redis::AsyncCommands;

/// How many times Redis ran `command` since the last `CONFIG RESETSTAT` (its commandstats).
async fn calls(client: &Client, command: &str) -> u64 {
    let stats: String = client
        .redis()
        .query(redis::cmd("INFO").arg("commandstats"))
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
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

/// Reads of the dead-letter stream since the last reset.
async fn stream_reads(client: &Client) -> u64 {
    calls(client, "xrange").await + calls(client, "xrevrange").await
}

/// `n` letters naming filler jobs (no records), added after every letter already there.
async fn filler_letters(server: &RedisServer, n: usize) {
    let mut raw = server.conn().await;
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("XADD")
                .arg(keys().dead_letter())
                .arg("*")
                .arg("j")
                .arg(format!("filler-{i}"))
                .arg("reason")
                .arg("filler")
                .arg("queue")
                .arg("q")
                .ignore();
        }
        let _: () = pipe.query_async(&mut raw).await.unwrap();
    }
}

#[tokio::test]
async fn a_dead_letter_is_found_by_its_record_when_20000_newer_letters_follow() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for id in ["real-1", "real-2", "real-3"] {
        dead_letter(&client, "dl", id).await;
    }
    filler_letters(&server, 20_000).await;
    let inspector = hero_admin::Inspector::from(&client);

    reset_stats(&client).await;
    let d = inspector
        .dead_letter("real-2")
        .await
        .unwrap()
        .expect("real-2's letter, behind 20,000 newer ones");
    assert_eq!(d.job_id, "real-2");
    assert!(d.reason.starts_with("abandoned after"), "{d:?}");
    let mut raw = server.conn().await;
    let named: String = redis::cmd("HGET")
        .arg(job_key("real-2"))
        .arg("dead")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(named, d.entry, "the record names its letter's entry");
    let reads = stream_reads(&client).await;
    assert!(
        reads <= 1,
        "finding one letter read the stream {reads} times (a scan of 20,000 letters reads it 21 times)"
    );

    // three ids: one pipelined read of their entries, not a scan per id
    reset_stats(&client).await;
    let ids: Vec<String> = ["real-1", "real-2", "real-3"].map(String::from).to_vec();
    let letters = inspector.dead_letters_of(&ids).await.unwrap().unwrap();
    assert_eq!(
        letters
            .iter()
            .map(|d| d.job_id.as_str())
            .collect::<Vec<_>>(),
        ["real-1", "real-2", "real-3"]
    );
    let reads = stream_reads(&client).await;
    assert!(reads <= 3, "three letters read the stream {reads} times");

    // a job with no letter: its record names none and it ended no error, so the stream is not
    // read at all; an id with neither record nor letter costs one bounded read
    let missing = inspector
        .dead_letters_of(&["real-1".to_string(), "nobody".to_string()])
        .await
        .unwrap();
    assert_eq!(missing.unwrap_err(), "nobody");
}

#[tokio::test]
async fn a_retry_removes_the_index_and_a_purge_the_record() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    dead_letter(&client, "dl", "again").await;
    dead_letter(&client, "dl", "gone").await;
    let inspector = hero_admin::Inspector::from(&client);
    let admin = Admin::from(&client);
    let mut raw = server.conn().await;

    let letter = inspector.dead_letter("again").await.unwrap().unwrap();
    admin.retry_dead(&[letter]).await.unwrap();
    let (status, named): (String, Option<String>) = redis::cmd("HMGET")
        .arg(job_key("again"))
        .arg("status")
        .arg("dead")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!((status.as_str(), named), ("dispatched", None));
    assert_eq!(inspector.dead_letter("again").await.unwrap(), None);

    let letter = inspector.dead_letter("gone").await.unwrap().unwrap();
    admin.purge_dead(&[letter]).await.unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg(job_key("gone"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!exists, "a purge deletes the record, its index with it");
    assert_eq!(inspector.dead_letter("gone").await.unwrap(), None);
}

#[tokio::test]
async fn a_letter_without_an_index_is_found_only_among_the_newest_1000() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let inspector = hero_admin::Inspector::from(&client);
    let mut raw = server.conn().await;
    // what a recovery older than protocol 30 leaves: a record ended error, a letter, no index
    let older = |id: &str| {
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(job_key(id))
            .arg("id")
            .arg(id)
            .arg("status")
            .arg("error")
            .arg("error")
            .arg("abandoned after 3 attempts")
            .ignore();
        pipe.cmd("XADD")
            .arg(keys().dead_letter())
            .arg("*")
            .arg("j")
            .arg(id)
            .arg("reason")
            .arg("abandoned after 3 attempts")
            .arg("queue")
            .arg("q")
            .ignore();
        pipe
    };
    let _: () = older("old-far").query_async(&mut raw).await.unwrap();
    filler_letters(&server, 1_500).await;
    let _: () = older("old-near").query_async(&mut raw).await.unwrap();
    // the bridge's refusal of a legacy push of an id with no record: a letter, no record
    let _: () = redis::cmd("XADD")
        .arg(keys().dead_letter())
        .arg("*")
        .arg("j")
        .arg("no-record")
        .arg("reason")
        .arg("no job hash")
        .arg("queue")
        .arg("q")
        .query_async(&mut raw)
        .await
        .unwrap();
    filler_letters(&server, 500).await;

    reset_stats(&client).await;
    let near = inspector.dead_letter("old-near").await.unwrap();
    assert_eq!(
        near.map(|d| d.reason),
        Some("abandoned after 3 attempts".to_string())
    );
    assert_eq!(stream_reads(&client).await, 1, "one bounded read");
    assert!(inspector.dead_letter("no-record").await.unwrap().is_some());
    // 2,000 letters newer than it: past the bounded look, listed but not found by id
    reset_stats(&client).await;
    assert_eq!(inspector.dead_letter("old-far").await.unwrap(), None);
    assert_eq!(
        stream_reads(&client).await,
        1,
        "one bounded read, never a scan"
    );
    let listed = inspector.dead_letters(None, 1).await.unwrap();
    assert_eq!(listed[0].job_id, "old-far", "hero dead list still shows it");
}

#[tokio::test]
async fn a_dead_letter_is_not_indexed_while_a_reader_older_than_29_is_live() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = server.conn().await;
    // what the brokers publish while a process of 28 lives: such a reader refuses an unknown field
    let lacks = r#"{"trace":{"what":"a failed attempt's trace","since":29,"processes":["worker w (0.3.0, protocol 28)"]}}"#;
    let _: () = redis::cmd("HSET")
        .arg(keys().config())
        .arg("fleet_lacks")
        .arg(lacks)
        .query_async(&mut raw)
        .await
        .unwrap();
    dead_letter(&client, "dl", "unindexed").await;
    let named: Option<String> = redis::cmd("HGET")
        .arg(job_key("unindexed"))
        .arg("dead")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(named, None, "no field an older reader would refuse");
    let found = hero_admin::Inspector::from(&client)
        .dead_letter("unindexed")
        .await
        .unwrap();
    assert!(found.is_some(), "found among the newest letters");
}

/// A dead letter kept longer than the ended jobs keeps its record, so it can be retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_keep_their_records_as_long_as_themselves() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut b = hero_broker_logged(
        &server.url(),
        &[
            "--retention-secs",
            "1",
            "--dead-retention-secs",
            "3600",
            "--max-attempts",
            "1",
        ],
    );
    let mut w = test_worker(&server.url(), "letters", "w", &["--presence-ms", "1000"]);
    w.saw("ready", Duration::from_secs(20)).await;
    client
        .submit(
            &NewJob::builder("letters", "sleep 60000")
                .id("poison")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    w.saw("started poison ", Duration::from_secs(20)).await;
    w.kill9();
    let mut raw = server.conn().await;
    wait_for("dead-lettered", Duration::from_secs(20), || {
        let mut raw = raw.clone();
        async move {
            let dead: Option<String> = raw.hget(job_key("poison"), "dead").await.ok()?;
            dead.filter(|d| !d.is_empty())
        }
    })
    .await;
    // past the retention time, and a few retention passes
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        raw.exists::<_, bool>(job_key("poison")).await.unwrap(),
        "the record outlived the job retention"
    );
    let (code, out, err) = hero_cli(&server.url(), &["dead", "retry", "--all"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !out.contains("no record") && !err.contains("no record"),
        "{out}{err}"
    );
    let status: String = raw.hget(job_key("poison"), "status").await.unwrap();
    assert_eq!(status, "dispatched");
    b.kill9();
}
