//! The server-side functions called directly against a real redis-server: seed raw state, call,
//! assert raw state (asynq's style). The worker and broker are built on exactly these calls.

use std::time::Duration;

use hero_client::function::{self, CompleteBatch, Ending, Function, Leased, Recovery};
use hero_client::keys::CONSUMER_GROUP;
use hero_client::reply::{Completion, Expired, FetchReply, Recovered, Renewal};
use hero_client::{
    clock, Client, GroupName, InstanceName, JobId, NewJob, Priority, ScriptType, Target,
};
use hero_tests::RedisServer;
use redis::AsyncCommands;

async fn client(server: &RedisServer) -> Client {
    Client::connect(&server.url()).await.expect("connect")
}

fn t(s: &str) -> ScriptType {
    ScriptType::new(s).unwrap()
}

async fn fetch(c: &Client, consumer: &str, streams: &[String], count: usize) -> FetchReply {
    let cmd = hero_client::function::fetch(
        c.keys(),
        streams,
        consumer,
        count,
        c.redis().caps().xackdel_flag(),
    );
    let v: redis::Value = c.redis().query(&cmd).await.expect("fetch");
    FetchReply::decode(&v).expect("decode fetch")
}

async fn complete(
    c: &Client,
    stream: &str,
    id: &str,
    lease: &str,
    outcome: &str,
    text: &str,
) -> Completion {
    let id = JobId::new(id).unwrap();
    let ending = match outcome {
        "done" => Ending::Done,
        "fail" => Ending::Fail,
        "retry" => Ending::Retry,
        "abort" => Ending::Abort,
        other => panic!("no outcome {other}"),
    };
    // as a worker does: the `reply` field comes from the record it read after the fetch
    let mut raw = c.redis().conn();
    let reply: Option<String> = redis::AsyncCommands::hget(&mut raw, c.keys().job(&id), "reply")
        .await
        .unwrap_or_default();
    let reply = reply.unwrap_or_default();
    complete_batch(c, stream, &[(id.as_str(), lease, &reply, ending, text)]).await[0]
}

/// One `hero_complete` call for a batch of (job, lease, its `reply` field, outcome, text), as
/// a worker sends it; a failure may run again in a minute.
async fn complete_batch(
    c: &Client,
    stream: &str,
    batch: &[(&str, &str, &str, Ending, &str)],
) -> Vec<Completion> {
    let now = clock::now_iso();
    let mut call = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag());
    for &(job, lease, reply, ending, text) in batch {
        let job = JobId::new(job).unwrap();
        let held = Leased {
            id: &job,
            stream,
            lease,
            reply,
        };
        call.push(held, ending, text, clock::now_ms() + 60_000);
    }
    let v: redis::Value = c.redis().query(&call.cmd()).await.expect("complete");
    Completion::decode_many(&v, batch.len()).expect("decode complete")
}

async fn recover_consumer(
    c: &Client,
    stream: &str,
    consumer: &str,
    max_attempts: u32,
) -> Recovered {
    recover_as(c, stream, consumer, max_attempts, "0").await
}

/// `hero_recover` in consumer mode; `handback` "1" is a worker giving its own jobs back.
async fn recover_as(
    c: &Client,
    stream: &str,
    consumer: &str,
    max_attempts: u32,
    handback: &str,
) -> Recovered {
    let which = if handback == "1" {
        Recovery::HandBack(consumer)
    } else {
        Recovery::Consumer(consumer)
    };
    let cmd = function::recover(
        c.keys(),
        stream,
        which,
        100,
        max_attempts,
        "0-0",
        c.redis().caps().xackdel_flag(),
    );
    let v: redis::Value = c.redis().query(&cmd).await.expect("recover");
    Recovered::decode(&v).expect("decode recover")
}

/// Submits a job `id` of type `osis` and leases it to consumer `g:a:1`: (stream, lease).
async fn submit_and_fetch(c: &Client, id: &str) -> (String, String) {
    c.submit(&NewJob::builder("osis", "x").id(id).build().unwrap())
        .await
        .unwrap();
    let stream = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    let got = fetch(c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(got.jobs.len(), 1, "{id} leased");
    (stream, got.jobs[0].entry.clone())
}

#[tokio::test]
async fn submit_takes_a_batch_and_refuses_a_malformed_one_whole() {
    let server = RedisServer::start();
    let c = client(&server).await;
    c.submit(&NewJob::builder("osis", "old").id("taken").build().unwrap())
        .await
        .unwrap();
    let jobs = [
        NewJob::builder("osis", "1").id("n1").build().unwrap(),
        NewJob::builder("osis", "2").id("taken").build().unwrap(),
        NewJob::builder("osis", "3")
            .id("later")
            .delay(Duration::from_secs(60))
            .build()
            .unwrap(),
    ];
    let got: Vec<(bool, String)> = c
        .submit_many(&jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.map(|s| (s.created, s.status)).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            (true, "dispatched".to_string()),
            (false, "dispatched".to_string()),
            (true, "waiting".to_string())
        ]
    );
    let mut raw = server.conn().await;
    let script: String = raw.hget("hero:job:taken", "script").await.unwrap();
    assert_eq!(script, "old", "an existing id is left as it was");

    // the second job's field count runs past the end: nothing of the batch is written
    let mut bad = Function::Submit.call(&[
        c.keys().delayed(),
        c.keys().queues(),
        c.keys().bridge_registry(),
        "hero:job:b1".to_string(),
        "hero:q:work:type:osis".to_string(),
        "hero:job:b2".to_string(),
        "hero:q:work:type:osis".to_string(),
    ]);
    bad.arg(CONSUMER_GROUP)
        .arg("b1")
        .arg(0)
        .arg(2)
        .arg("script")
        .arg("x")
        .arg("b2")
        .arg(0)
        .arg(4)
        .arg("script")
        .arg("y");
    let err = c.redis().query::<redis::Value>(&bad).await.unwrap_err();
    assert!(err.to_string().contains("HERO_BAD_ARG"), "{err}");
    let exists: bool = raw.exists("hero:job:b1").await.unwrap();
    assert!(
        !exists,
        "the well-formed job of a refused batch is not written"
    );
}

#[tokio::test]
async fn submit_is_idempotent_when_the_id_exists() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "1").id("same").build().unwrap();
    assert!(c.submit(&job).await.unwrap().created);
    let again = NewJob::builder("osis", "2").id("same").build().unwrap();
    let r = c.submit(&again).await.unwrap();
    assert!(!r.created);
    let mut raw = server.conn().await;
    let script: String = raw.hget("hero:job:same", "script").await.unwrap();
    assert_eq!(script, "1");
    let len: usize = raw.xlen("hero:q:work:type:osis").await.unwrap();
    assert_eq!(len, 1, "one stream entry, not two");
}

#[tokio::test]
async fn submit_many_writes_every_job_in_one_call() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let jobs: Vec<NewJob> = (0..50)
        .map(|i| NewJob::builder("v", format!("{i}")).build().unwrap())
        .collect();
    let mut raw = server.conn().await;
    let reads = |raw: redis::aio::MultiplexedConnection| async move {
        let mut raw = raw;
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut raw)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_reads_processed:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("total_reads_processed")
    };
    let before = reads(raw.clone()).await;
    let results = c.submit_many(&jobs).await.unwrap();
    // one round trip: the 50 calls reach Redis in a read or two, not 50 (the INFO calls add 2)
    let used = reads(raw.clone()).await - before;
    assert!(
        used <= 6,
        "{used} socket reads for one submit_many of 50 jobs"
    );
    assert!(results
        .iter()
        .all(|r| r.as_ref().map(|s| s.created).unwrap_or(false)));
    let len: usize = raw.xlen("hero:q:work:type:v").await.unwrap();
    assert_eq!(len, 50);
}

/// Submits osis jobs with these ids at these priority levels; returns the streams a worker of
/// group `default`, instance `1` reads, in precedence order.
async fn submit_osis_at(c: &Client, jobs: &[(&str, u8)]) -> Vec<String> {
    for &(id, prio) in jobs {
        c.submit(
            &NewJob::builder("osis", "x")
                .id(id)
                .priority(prio)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    }
    c.keys().precedence(
        &[t("osis")],
        &GroupName::default_group(),
        &InstanceName::new("1").unwrap(),
    )
}

#[tokio::test]
async fn fetch_takes_streams_in_the_order_given_and_leases_the_job() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let streams = submit_osis_at(&c, &[("low", 9), ("high", 0), ("mid", 5)]).await;
    let got = fetch(&c, "default:1:s", &streams, 2).await;
    let ids: Vec<_> = got.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["high", "mid"]);
    assert!(got.cursors.is_empty(), "no cursors when the count was met");
    let mut raw = server.conn().await;
    let (status, lease, attempts, worker): (String, String, Option<u32>, String) =
        redis::cmd("HMGET")
            .arg("hero:job:high")
            .arg(&["status", "lease", "attempts", "worker_id"])
            .query_async(&mut raw)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), attempts, worker.as_str()),
        ("started", None, "default:1:s"),
        "a first delivery writes no count"
    );
    assert_eq!(lease, got.jobs[0].entry);
    let high = c.get(&JobId::new("high").unwrap()).await.unwrap();
    assert_eq!(high.attempts, 1, "read as the first attempt");
    let rest = fetch(&c, "default:1:s", &streams, 5).await;
    assert_eq!(rest.jobs.len(), 1);
    assert_eq!(
        rest.cursors.len(),
        streams.len(),
        "short fetch returns wake-up cursors"
    );
}

#[tokio::test]
async fn fetch_reads_only_registered_streams_and_skips_one_broken_by_hand() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let streams = submit_osis_at(&c, &[("p0", 0), ("p1", 1), ("p5", 5)]).await;
    let p0 = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::new(0).unwrap());
    let p1 = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::new(1).unwrap());
    let mut raw = server.conn().await;
    // an entry added by hand to a stream no submit created is not a queue: not registered
    let stray = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::new(2).unwrap());
    let _: String = raw.xadd(&stray, "*", &[("j", "p5")]).await.unwrap();
    // a registered stream deleted by hand, and one whose group was destroyed, read as empty
    let _: () = raw.del(&p0).await.unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(&p1)
        .arg(CONSUMER_GROUP)
        .query_async(&mut raw)
        .await
        .unwrap();
    let got = fetch(&c, "default:1:s", &streams, 5).await;
    let ids: Vec<_> = got.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["p5"], "the fetch goes on past the broken streams");
    assert!(got.dropped.is_empty(), "{:?}", got.dropped);
    assert_eq!(got.cursors.len(), streams.len());
    let at = |key: &str| streams.iter().position(|s| s == key).unwrap();
    assert_eq!(got.cursors[at(&p0)], "0-0");
    assert_ne!(
        got.cursors[at(&stray)],
        "0-0",
        "a wake-up from past the entries a stray stream holds"
    );
    // submitting again re-creates the deleted stream with its group, and registers the stray one
    submit_osis_at(&c, &[("again", 0), ("stray", 2)]).await;
    let again = fetch(&c, "default:1:s", &streams, 5).await;
    let ids: Vec<_> = again.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["again", "stray"]);
    let dropped: Vec<_> = again
        .dropped
        .iter()
        .map(|d| (d.job_id.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(
        dropped,
        [("p5", "stale")],
        "the entry added by hand names a job that ran"
    );
}

#[tokio::test]
async fn fetch_drops_an_entry_naming_a_missing_job() {
    let server = RedisServer::start();
    let c = client(&server).await;
    c.submit(&NewJob::builder("osis", "x").id("real").build().unwrap())
        .await
        .unwrap();
    let mut raw = server.conn().await;
    let _: String = raw
        .xadd("hero:q:work:type:osis", "*", &[("j", "ghost")])
        .await
        .unwrap();
    // a job key holding a string, not a hash: foreign data must not stop the fetch
    let alien = c.keys().job(&JobId::new("alien").unwrap());
    let _: () = raw.set(&alien, "not a job").await.unwrap();
    let _: String = raw
        .xadd("hero:q:work:type:osis", "*", &[("j", "alien")])
        .await
        .unwrap();
    let streams = vec![c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT)];
    let got = fetch(&c, "g:i:s", &streams, 5).await;
    assert_eq!(got.jobs.len(), 1);
    let dropped: Vec<(&str, &str)> = got
        .dropped
        .iter()
        .map(|d| (d.job_id.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(dropped, [("ghost", "missing"), ("alien", "foreign")]);
    let len: usize = raw.xlen(&streams[0]).await.unwrap();
    assert_eq!(
        len, 1,
        "the ghost and alien entries are deleted, the real one stays until completed"
    );
    let untouched: String = raw.get(&alien).await.unwrap();
    assert_eq!(untouched, "not a job");
}

#[tokio::test]
async fn complete_records_a_batch_with_one_answer_per_job() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, a) = submit_and_fetch(&c, "ba").await;
    let (_, b) = submit_and_fetch(&c, "bb").await;
    let (_, lost) = submit_and_fetch(&c, "bc").await;
    let (_, overwritten) = submit_and_fetch(&c, "bd").await;
    let mut raw = server.conn().await;
    // someone replaced a running job's hash with a string: foreign data, lost for this delivery,
    // and the rest of the batch is recorded all the same
    let bd = c.keys().job(&JobId::new("bd").unwrap());
    let _: () = raw.set(&bd, "not a job").await.unwrap();
    let now = clock::now_iso();
    let id = |s: &str| JobId::new(s).unwrap();
    let answers = complete_batch(
        &c,
        &stream,
        &[
            ("ba", &a, "", Ending::Done, "out-a"),
            ("bb", &b, "", Ending::Abort, "bad-b"),
            ("bc", "0-1", "", Ending::Done, "never"),
            ("nope", "0-2", "", Ending::Done, "never"),
            ("bd", &overwritten, "", Ending::Done, "never"),
        ],
    )
    .await;
    assert_eq!(
        answers,
        [
            Completion::Completed,
            Completion::Completed,
            Completion::LeaseLost,
            Completion::LeaseLost,
            Completion::LeaseLost
        ]
    );
    let (sa, oa): (String, String) = redis::cmd("HMGET")
        .arg("hero:job:ba")
        .arg("status")
        .arg("output")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!((sa.as_str(), oa.as_str()), ("finished", "out-a"));
    let (sb, eb): (String, String) = redis::cmd("HMGET")
        .arg("hero:job:bb")
        .arg("status")
        .arg("error")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!((sb.as_str(), eb.as_str()), ("error", "bad-b"));
    let sc: String = raw.hget("hero:job:bc", "status").await.unwrap();
    assert_eq!(sc, "started", "a lost lease changes nothing");
    assert_eq!(
        hero_tests::pending(&mut raw, &stream).await,
        1,
        "only bc's real delivery stays pending: bd's entry named foreign data and went with the batch"
    );
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(
        len, 2,
        "the done entries ahead of bc's are trimmed; bd's stays behind it until bc ends"
    );

    // a batch with one unknown outcome is refused whole, before anything is written
    let mut bad = Function::Complete.call(&[
        c.keys().delayed(),
        c.keys().config(),
        c.keys().retention(),
        c.keys().job(&id("bc")),
        stream.clone(),
        c.keys().reply(&id("bc")),
    ]);
    bad.arg(CONSUMER_GROUP)
        .arg(&now)
        .arg("0")
        .arg("bc")
        .arg(&lost)
        .arg("explode")
        .arg("x")
        .arg(0)
        .arg("bc")
        .arg("");
    let err = c.redis().query::<redis::Value>(&bad).await.unwrap_err();
    assert!(err.to_string().contains("unknown outcome"), "{err}");
    let sc: String = raw.hget("hero:job:bc", "status").await.unwrap();
    assert_eq!(sc, "started");
    let untouched: String = raw.get(&bd).await.unwrap();
    assert_eq!(untouched, "not a job");
    // recovery drops the entry of a running job whose hash was overwritten the same way, instead
    // of failing on it, and requeues bc
    let (_, _) = submit_and_fetch(&c, "be").await;
    let be = c.keys().job(&JobId::new("be").unwrap());
    let _: () = raw.set(&be, "not a job either").await.unwrap();
    let got = recover_consumer(&c, &stream, "g:a:1", 5).await;
    assert_eq!((got.requeued, got.dropped), (1, 1), "{got:?}");
}

/// A batch whose entries are all still pending is acknowledged before any record is written;
/// foreign data met after that (a job key or a reply list holding another type) costs only its
/// own job, never the jobs behind it in the batch, which would otherwise stay started with no
/// pending entry for recovery to find.
#[tokio::test]
async fn foreign_data_in_a_held_batch_costs_only_its_own_job() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let mut leases = Vec::new();
    let mut stream = String::new();
    for job in ["ha", "hb", "hr", "hd"] {
        let (s, lease) = submit_and_fetch(&c, job).await;
        stream = s;
        leases.push(lease);
    }
    let hb = c.keys().job(&JobId::new("hb").unwrap());
    let _: () = raw.set(&hb, "not a job").await.unwrap();
    let hr_reply = c.keys().reply(&JobId::new("hr").unwrap());
    let _: () = raw.set(&hr_reply, "not a list").await.unwrap();
    let answers = complete_batch(
        &c,
        &stream,
        &[
            ("ha", &leases[0], "", Ending::Done, "text"),
            ("hb", &leases[1], "", Ending::Done, "text"),
            ("hr", &leases[2], "1", Ending::Done, "text"),
            ("hd", &leases[3], "", Ending::Fail, "text"),
        ],
    )
    .await;
    assert_eq!(
        answers,
        [
            Completion::Completed,
            Completion::LeaseLost,
            Completion::Completed,
            Completion::Completed
        ]
    );
    assert_eq!(hero_tests::pending(&mut raw, &stream).await, 0);
    for (job, status) in [("hr", "finished"), ("hd", "error")] {
        let got: String = raw.hget(format!("hero:job:{job}"), "status").await.unwrap();
        assert_eq!(got, status, "{job}");
    }
    let untouched: String = raw.get(&hr_reply).await.unwrap();
    assert_eq!(untouched, "not a list");
}

#[tokio::test]
async fn complete_trims_done_entries_but_never_a_running_or_waiting_one() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, old) = submit_and_fetch(&c, "old").await;
    let (_, new) = submit_and_fetch(&c, "new").await;
    c.submit(&NewJob::builder("osis", "w").id("waiting").build().unwrap())
        .await
        .unwrap();
    let mut raw = server.conn().await;
    assert_eq!(
        complete(&c, &stream, "new", &new, "done", "ok").await,
        Completion::Completed
    );
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 3, "the done entry behind a running job stays for now");
    assert_eq!(
        complete(&c, &stream, "old", &old, "done", "ok").await,
        Completion::Completed
    );
    let ids: Vec<String> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query_async::<Vec<(String, Vec<(String, String)>)>>(&mut raw)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, f)| f[0].1.clone())
        .collect();
    assert_eq!(
        ids,
        ["waiting"],
        "both done entries went, the waiting job stayed"
    );
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(got.jobs[0].job_id, "waiting");
}

#[tokio::test]
async fn complete_is_fenced_by_the_lease() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, lease) = submit_and_fetch(&c, "f").await;
    assert_eq!(
        complete(&c, &stream, "f", "0-1", "done", "wrong").await,
        Completion::LeaseLost
    );
    assert_eq!(
        complete(&c, &stream, "f", &lease, "done", "first").await,
        Completion::Completed
    );
    assert_eq!(
        complete(&c, &stream, "f", &lease, "done", "second").await,
        Completion::AlreadyCompleted
    );
    let mut raw = server.conn().await;
    let output: String = raw.hget("hero:job:f", "output").await.unwrap();
    assert_eq!(output, "first");
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 0, "a done entry is deleted from the work stream");
}

/// The retention stream's entries as (t, ids).
async fn retention_entries(raw: &mut redis::aio::MultiplexedConnection) -> Vec<(String, String)> {
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("hero:meta:retention")
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

async fn expire(c: &Client, retention: Duration, entries: usize) -> Expired {
    let v: redis::Value = c
        .redis()
        .query(&function::expire(c.keys(), retention, entries))
        .await
        .expect("expire");
    Expired::decode(&v).expect("decode expire")
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
    let pttl: i64 = raw.pttl("hero:job:r1").await.unwrap();
    assert_eq!(pttl, -1, "no TTL per job");
    let finished_at: String = raw.hget("hero:job:r1", "finished_at").await.unwrap();
    let stopped_at: String = raw.hget("hero:job:r4", "finished_at").await.unwrap();
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
        .hset("hero:job:r2", "finished_at", "2099-01-01T00:00:00.000Z")
        .await
        .unwrap();
    let _: () = raw.set("hero:job:r5", "foreign").await.unwrap();
    let _: () = redis::cmd("XADD")
        .arg("hero:meta:retention")
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
        .exists("hero:job:r1")
        .exists("hero:job:r2")
        .exists("hero:job:r3")
        .exists("hero:job:r4")
        .exists("hero:job:r5")
        .exists("hero:meta:retention")
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
    let stream = "hero:q:work:type:osis";
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(CONSUMER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut raw)
        .await
        .unwrap();
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
            "hero:job:old job",
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
    let status: String = raw.hget("hero:job:old job", "status").await.unwrap();
    assert_eq!(status, "error");
    let pttl: i64 = raw.pttl("hero:job:old job").await.unwrap();
    assert!(pttl > 0, "the job expires by itself");
    let entries: bool = raw.exists("hero:meta:retention").await.unwrap();
    assert!(!entries, "no retention entry names it");
}

/// The fence of a batch is one XACK: recovery and stop acknowledge the entry of the delivery
/// they take a job from, so that delivery's completion finds it no longer pending, and the
/// record tells which answer it gets.
#[tokio::test]
async fn a_delivery_taken_away_by_recovery_or_stop_records_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let (stream, old) = submit_and_fetch(&c, "rec").await;
    assert_eq!(recover_consumer(&c, &stream, "g:a:1", 5).await.requeued, 1);
    let got = fetch(&c, "g:b:1", std::slice::from_ref(&stream), 1).await;
    let new = got.jobs[0].entry.clone();
    assert_eq!(
        complete(&c, &stream, "rec", &old, "done", "late").await,
        Completion::LeaseLost
    );
    assert_eq!(
        complete(&c, &stream, "rec", &new, "done", "ok").await,
        Completion::Completed
    );
    let output: String = raw.hget("hero:job:rec", "output").await.unwrap();
    assert_eq!(
        output, "ok",
        "only the current delivery's result is recorded"
    );

    let (stream, lease) = submit_and_fetch(&c, "stp").await;
    let stopped = JobId::new("stp").unwrap();
    assert_eq!(
        c.stop(&stopped).await.unwrap(),
        hero_client::StopOutcome::Interrupted
    );
    assert_eq!(
        hero_tests::pending(&mut raw, &stream).await,
        0,
        "the stop acknowledged the delivery"
    );
    assert_eq!(
        complete(&c, &stream, "stp", &lease, "done", "late").await,
        Completion::AlreadyCompleted
    );
    let r = c.get(&stopped).await.unwrap();
    assert_eq!(
        (r.status, r.error.as_deref(), r.output),
        (hero_client::Status::Error, Some("stopped"), None)
    );
}

#[tokio::test]
async fn failed_job_is_parked_for_retry_while_budget_lasts() {
    let server = RedisServer::start();
    let c = client(&server).await;
    c.submit(
        &NewJob::builder("osis", "x")
            .id("r")
            .retries(1)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let stream = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(
        complete(&c, &stream, "r", &got.jobs[0].entry, "fail", "boom").await,
        Completion::Retrying
    );
    let mut raw = server.conn().await;
    let score: Option<f64> = raw.zscore("hero:meta:delayed", "r").await.unwrap();
    assert!(score.is_some());
    let status: String = raw.hget("hero:job:r", "status").await.unwrap();
    assert_eq!(status, "waiting");
}

#[tokio::test]
async fn renew_reports_lost_when_another_delivery_owns_the_job() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, lease) = submit_and_fetch(&c, "n").await;
    let renew = |lease: String| {
        let mut cmd =
            Function::Renew.call(&[c.keys().job(&JobId::new("n").unwrap()), stream.clone()]);
        cmd.arg(lease).arg(CONSUMER_GROUP).arg("g:a:1");
        cmd
    };
    let v: redis::Value = c.redis().query(&renew(lease.clone())).await.unwrap();
    assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Ok);
    let r = recover_consumer(&c, &stream, "g:a:1", 5).await;
    assert_eq!(r.requeued, 1);
    let v: redis::Value = c.redis().query(&renew(lease)).await.unwrap();
    assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Lost);
}

#[tokio::test]
async fn recover_requeues_to_the_same_stream_then_dead_letters_past_the_budget() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let target = Target::new(
        t("sal"),
        Some(GroupName::new("io").unwrap()),
        Some(InstanceName::new("3").unwrap()),
    );
    c.submit(
        &NewJob::builder("sal", "x")
            .id("d")
            .group("io")
            .instance("3")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let stream = c.keys().work(&target, Priority::DEFAULT);
    for round in 1..=2 {
        let got = fetch(&c, "io:3:s", std::slice::from_ref(&stream), 1).await;
        assert_eq!(
            got.jobs.len(),
            1,
            "round {round}: the job is back in the same stream"
        );
        let r = recover_consumer(&c, &stream, "io:3:s", 2).await;
        if round == 1 {
            assert_eq!((r.requeued, r.dead), (1, 0));
        } else {
            assert_eq!((r.requeued, r.dead), (0, 1));
        }
    }
    let mut raw = server.conn().await;
    let (status, error): (String, String) = redis::cmd("HMGET")
        .arg("hero:job:d")
        .arg("status")
        .arg("error")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        (status.as_str(), error.as_str()),
        ("error", "abandoned after 2 attempts")
    );
    let dead: usize = raw.xlen("hero:meta:dead").await.unwrap();
    assert_eq!(dead, 1);
    let groups: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(&stream)
        .arg(CONSUMER_GROUP)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(groups.is_empty(), "a consumer that owns nothing is deleted");
}

#[tokio::test]
async fn stop_cancels_a_queued_job_so_no_fetch_gets_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "x").id("s").build().unwrap();
    c.submit(&job).await.unwrap();
    assert_eq!(
        c.stop(job.id()).await.unwrap(),
        hero_client::StopOutcome::Cancelled
    );
    let stream = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    // the record does not name a queued job's entry: the stop leaves it, the next fetch drops it
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert!(got.jobs.is_empty());
    let dropped: Vec<(&str, &str)> = got
        .dropped
        .iter()
        .map(|d| (d.job_id.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(dropped, [("s", "stale")]);
    let mut raw = server.conn().await;
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 0, "the stale entry is deleted");
    let r = c.get(job.id()).await.unwrap();
    assert_eq!(
        (r.status, r.error.as_deref()),
        (hero_client::Status::Error, Some("stopped"))
    );
}

#[tokio::test]
async fn delayed_job_waits_then_promote_queues_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "x")
        .id("later")
        .delay(Duration::from_secs(60))
        .build()
        .unwrap();
    assert_eq!(c.submit(&job).await.unwrap().status, "waiting");
    let target = Target::of_type(t("osis"));
    let stream = c.keys().work(&target, Priority::DEFAULT);
    let mut cmd = Function::Promote.call(&[
        c.keys().delayed(),
        c.keys().job(job.id()),
        stream.clone(),
        c.keys().queues(),
    ]);
    cmd.arg("later").arg(CONSUMER_GROUP).arg(clock::now_iso());
    let first: String = c.redis().query(&cmd).await.unwrap();
    let second: String = c.redis().query(&cmd).await.unwrap();
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("promoted", "gone"),
        "a second broker's promote is a no-op"
    );
    assert_eq!(fetch(&c, "g:a:1", &[stream], 1).await.jobs.len(), 1);
}

#[tokio::test]
async fn functions_reload_when_the_server_lost_them() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let job = NewJob::builder("osis", "x").build().unwrap();
    assert!(c.submit(&job).await.unwrap().created);
}

/// Redis in cluster mode (one node holding every slot) refuses an FCALL whose declared keys
/// span two slots (CROSSSLOT), so running each function here proves its KEYS share the
/// namespace's slot. Keys a function derives (job hash, reply list) come from prefixes in the
/// same hash tag: `keys::tests::cluster_keys_share_the_namespace_hash_tag` pins those.
#[tokio::test]
async fn every_function_touches_one_slot_in_cluster_mode() {
    let server = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ]);
    let mut raw = server.conn().await;
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut raw)
        .await
        .unwrap();
    hero_tests::wait_for("cluster state ok", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut raw)
                .await
                .ok()?;
            info.contains("cluster_state:ok").then_some(())
        }
    })
    .await;
    let mut opts = hero_client::ClientOptions::new(server.url());
    opts.cluster = true;
    let c = Client::with_options(opts).await.unwrap();
    let job = NewJob::builder("osis", "x")
        .id("cl")
        .retries(1)
        .build()
        .unwrap();
    c.submit(&job).await.unwrap();
    let stream = c.keys().work(job.target(), Priority::DEFAULT);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(got.jobs.len(), 1);
    let r = recover_consumer(&c, &stream, "g:a:1", 5).await;
    assert_eq!(r.requeued, 1);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(
        complete(&c, &stream, "cl", &got.jobs[0].entry, "done", "ok").await,
        Completion::Completed
    );
    let late = NewJob::builder("osis", "x").id("cl2").build().unwrap();
    c.submit(&late).await.unwrap();
    assert_eq!(
        c.stop(late.id()).await.unwrap(),
        hero_client::StopOutcome::Cancelled
    );
    assert_eq!(expire(&c, Duration::ZERO, 10).await.jobs, 2);
}

#[tokio::test]
async fn xackdel_is_used_only_when_the_server_has_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut raw)
        .await
        .unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap()
        .trim()
        .to_string();
    let (major, minor) = {
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    // XACKDEL arrived in 8.2; the client asks the server instead of reading the version
    assert_eq!(
        c.redis().caps().xackdel,
        (major, minor) >= (8, 2),
        "redis {version}"
    );
    // and the functions run with the flag the client detected
    let job = NewJob::builder("osis", "x").id("ack").build().unwrap();
    c.submit(&job).await.unwrap();
    let stream = c.keys().work(job.target(), Priority::DEFAULT);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(
        complete(&c, &stream, "ack", &got.jobs[0].entry, "done", "ok").await,
        Completion::Completed
    );
}

#[tokio::test]
async fn hand_back_requeues_even_when_the_attempt_count_is_corrupt() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "x").id("hb").build().unwrap();
    c.submit(&job).await.unwrap();
    let stream = c.keys().work(job.target(), Priority::DEFAULT);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(got.jobs.len(), 1);
    let mut raw = server.conn().await;
    let _: () = raw.hset("hero:job:hb", "attempts", "many").await.unwrap();
    let r = recover_as(&c, &stream, "g:a:1", 5, "1").await;
    assert_eq!(r.requeued, 1, "back in its stream, not lost");
    let status: String = raw.hget("hero:job:hb", "status").await.unwrap();
    assert_eq!(status, "dispatched");
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 1);
}
