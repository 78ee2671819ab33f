//! hero_expire: retention entries, and the TTL fallback of a legacy id.

use super::*;
use hero_testkit::{job_key, keys, work_key};

/// The retention stream's entries as (t, ids).
async fn retention_entries(raw: &mut redis::aio::MultiplexedConnection) -> Vec<(String, String)> {
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(keys().retention())
        .arg("-")
        .arg("+")
        .query_async(raw)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|(_, f)| {
            let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            (get("t").unwrap_or_default(), get("j").unwrap_or_default())
        })
        .collect()
}

/// SPEC §4.6: an ended job has no TTL of its own; the call that ended it names it in a retention
/// entry, and hero_expire deletes it once the retention time has passed, unless it ran again.
#[tokio::test]
async fn an_ended_job_is_deleted_once_its_retention_passed_unless_it_ran_again() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let (stream, lease) = submit_and_fetch(&c, "r1").await;
    let (_, lease2) = submit_and_fetch(&c, "r2").await;
    submit_and_fetch(&c, "r3").await;
    let ended = complete_batch(
        &c,
        &stream,
        &[
            ("r1", lease.as_str(), "", Ending::Done, "ok"),
            ("r2", lease2.as_str(), "", Ending::Abort, "no"),
            ("r3", "0-1", "", Ending::Done, "not the lease"),
        ],
    )
    .await;
    assert_eq!(
        ended,
        [
            Completion::Completed,
            Completion::Completed,
            Completion::LeaseLost
        ]
    );
    let stopped = NewJob::builder("osis", "x").id("r4").build().unwrap();
    c.submit(&stopped).await.unwrap();
    c.stop(stopped.id()).await.unwrap();
    let pttl: i64 = raw.pttl(job_key("r1")).await.unwrap();
    assert_eq!(pttl, -1, "no TTL per job");
    let finished_at: String = raw.hget(job_key("r1"), "finished_at").await.unwrap();
    let stopped_at: String = raw.hget(job_key("r4"), "finished_at").await.unwrap();
    assert_eq!(
        retention_entries(&mut raw).await,
        [
            (finished_at.clone(), "r1 r2 r3".to_string()),
            (stopped_at, "r4".to_string())
        ],
        "one entry per call, naming the batch"
    );

    assert_eq!(
        expire(&c, Duration::from_secs(60), 10).await,
        Expired::default(),
        "nothing is due before the retention time"
    );
    // r2 is ended again later (a retry by hand), r3 (whose completion lost its lease) runs
    // elsewhere, and an entry names a key of another type
    let _: () = raw
        .hset(job_key("r2"), "finished_at", "2099-01-01T00:00:00.000Z")
        .await
        .unwrap();
    let _: () = raw.set(job_key("r5"), "foreign").await.unwrap();
    let _: () = redis::cmd("XADD")
        .arg(keys().retention())
        .arg("*")
        .arg("t")
        .arg(&finished_at)
        .arg("j")
        .arg("r5")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        expire(&c, Duration::ZERO, 2).await,
        Expired {
            entries: 2,
            jobs: 2,
            more: true
        },
        "r1 and the stopped r4 go; a call takes at most the entries asked for"
    );
    assert_eq!(
        expire(&c, Duration::ZERO, 2).await,
        Expired {
            entries: 1,
            jobs: 0,
            more: false
        }
    );
    let exists: Vec<bool> = redis::pipe()
        .exists(job_key("r1"))
        .exists(job_key("r2"))
        .exists(job_key("r3"))
        .exists(job_key("r4"))
        .exists(job_key("r5"))
        .exists(keys().retention())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        exists,
        [false, true, true, false, true, false],
        "r2 ended again and r3 still runs: kept; the foreign key is left alone; the empty \
         stream goes"
    );
}

/// A legacy job id may hold a space, which cannot go into a retention entry's space-joined list:
/// such a job, dead-lettered here by recovery, gets a TTL of the retention time instead.
#[tokio::test]
async fn an_ended_legacy_job_whose_id_holds_a_space_gets_a_ttl_instead() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let stream = &work_key("osis");
    hero_testkit::create_group(&mut raw, stream).await;
    let entry: String = raw.xadd(stream, "*", &[("j", "old job")]).await.unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(CONSUMER_GROUP)
        .arg("g:a:1")
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = raw
        .hset_multiple(
            job_key("old job"),
            &[
                ("status", "started"),
                ("lease", entry.as_str()),
                ("attempts", "1"),
            ],
        )
        .await
        .unwrap();
    let r = recover_consumer(&c, stream, "g:a:1", 1).await;
    assert_eq!(r.dead, 1);
    let status: String = raw.hget(job_key("old job"), "status").await.unwrap();
    assert_eq!(status, "error");
    let pttl: i64 = raw.pttl(job_key("old job")).await.unwrap();
    assert!(pttl > 0, "the job expires by itself");
    let entries: bool = raw.exists(keys().retention()).await.unwrap();
    assert!(!entries, "no retention entry names it");
}
