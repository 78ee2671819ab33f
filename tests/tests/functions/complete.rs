//! hero_complete: batches, the fence, trimming, retries, foreign data.

use super::*;
use hero_testkit::{job_key, keys};

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
        .arg(job_key("ba"))
        .arg("status")
        .arg("output")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!((sa.as_str(), oa.as_str()), ("finished", "out-a"));
    let (sb, eb): (String, String) = redis::cmd("HMGET")
        .arg(job_key("bb"))
        .arg("status")
        .arg("error")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!((sb.as_str(), eb.as_str()), ("error", "bad-b"));
    let sc: String = raw.hget(job_key("bc"), "status").await.unwrap();
    assert_eq!(sc, "started", "a lost lease changes nothing");
    assert_eq!(
        hero_testkit::pending(&mut raw, &stream).await,
        1,
        "only bc's real delivery stays pending: bd's entry named foreign data and went with the batch"
    );
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(
        len, 1,
        "every done entry goes with its completion (bd's behind bc's too): only bc's is left"
    );

    // a batch with one unknown outcome is refused whole, before anything is written
    let bad = complete_by_hand(&c, "bc", &stream, &lost, "explode");
    let err = c.redis().query::<redis::Value>(&bad).await.unwrap_err();
    assert!(err.to_string().contains("unknown outcome"), "{err}");
    let sc: String = raw.hget(job_key("bc"), "status").await.unwrap();
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
    assert_eq!(hero_testkit::pending(&mut raw, &stream).await, 0);
    for (job, status) in [("hr", "finished"), ("hd", "error")] {
        let got: String = raw.hget(job_key(job), "status").await.unwrap();
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
    assert_eq!(
        len, 2,
        "the done entry goes with its completion, even behind a running job; the running and \
         the waiting one stay"
    );
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
    assert_eq!(got.jobs[0].job_id.as_str(), "waiting");
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
    let output: String = raw.hget(job_key("f"), "output").await.unwrap();
    assert_eq!(output, "first");
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 0, "a done entry is deleted from the work stream");
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
    let output: String = raw.hget(job_key("rec"), "output").await.unwrap();
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
        hero_testkit::pending(&mut raw, &stream).await,
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
        (hero_protocol::Status::Error, Some("stopped"), None)
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
    let score: Option<f64> = raw.zscore(keys().delayed(), "r").await.unwrap();
    assert!(score.is_some());
    let status: String = raw.hget(job_key("r"), "status").await.unwrap();
    assert_eq!(status, "waiting");
}

/// A queue policy's retention is applied by the completion itself (protocol 26): a job the
/// call ends gets its TTL in that call; a job retried, a job without one, or a delivery whose
/// lease was lost gets none. Before, the worker sent a second, non-atomic PEXPIRE after the
/// call, which a worker killed between the two never sent.
#[tokio::test]
async fn the_call_that_ends_a_job_gives_it_its_queue_retention() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, kept) = submit_and_fetch(&c, "ka").await;
    let (_, plain) = submit_and_fetch(&c, "kb").await;
    let (_, retried) = submit_and_fetch(&c, "kc").await;
    let mut raw = server.conn().await;
    // kc may run again: a budget of one retry
    let _: () = raw.hset(job_key("kc"), "retries", "1").await.unwrap();
    let now = clock::now_iso();
    let mut outcomes = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag(), "g:a:1");
    let ids = ["ka", "kb", "kc", "kd"].map(|s| JobId::new(s).unwrap());
    let retry_at = clock::now_ms() + 60_000;
    let held = |i: usize, lease: &'static str| Leased {
        id: &ids[i],
        stream: &stream,
        lease,
        reply: "",
    };
    let kept: &'static str = Box::leak(kept.into_boxed_str());
    let plain: &'static str = Box::leak(plain.into_boxed_str());
    let retried: &'static str = Box::leak(retried.into_boxed_str());
    outcomes.push(Ended {
        held: held(0, kept),
        ending: Ending::Done,
        text: "out",
        retry_at_ms: 0,
        ran: None,
    });
    outcomes.expire_after(60_000);
    outcomes.push(Ended {
        held: held(1, plain),
        ending: Ending::Done,
        text: "out",
        retry_at_ms: 0,
        ran: None,
    });
    outcomes.push(Ended {
        held: held(2, retried),
        ending: Ending::Fail,
        text: "boom",
        retry_at_ms: retry_at,
        ran: None,
    });
    outcomes.expire_after(60_000);
    outcomes.push(Ended {
        held: held(3, "0-9"),
        ending: Ending::Done,
        text: "never",
        retry_at_ms: 0,
        ran: None,
    });
    outcomes.expire_after(60_000);
    let v: redis::Value = c.redis().query(&outcomes.call()).await.expect("complete");
    let answers = outcomes.answers(&v).expect("decode complete");
    assert_eq!(
        answers,
        [
            Completion::Completed,
            Completion::Completed,
            Completion::Retrying,
            Completion::LeaseLost
        ]
    );
    let ttl = |raw: &mut redis::aio::MultiplexedConnection, id: &str| {
        let key = job_key(id);
        let mut raw = raw.clone();
        async move {
            redis::cmd("PTTL")
                .arg(key)
                .query_async::<i64>(&mut raw)
                .await
                .unwrap()
        }
    };
    let t = ttl(&mut raw, "ka").await;
    assert!(
        (50_000..=60_000).contains(&t),
        "the ended job expires after its queue's retention: {t}"
    );
    assert_eq!(
        ttl(&mut raw, "kb").await,
        -1,
        "a job of a queue without one keeps no TTL"
    );
    assert_eq!(ttl(&mut raw, "kc").await, -1, "a retried job is not ended");
    assert_eq!(
        ttl(&mut raw, "kd").await,
        -2,
        "nothing is made for a lost delivery"
    );
}

/// The run-time histogram of a batch with mixed run times: every sample in its bucket (b =
/// floor(log2(ms + 1))) and the sum exact, also where jobs in a row share a time (worked out once
/// for the row) and where a job gives none (no sample).
#[tokio::test]
async fn run_samples_of_a_batch_land_in_their_buckets() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut held = Vec::new();
    for id in ["r1", "r2", "r3", "r4", "r5", "r6"] {
        held.push(submit_and_fetch(&c, id).await);
    }
    let stream = held[0].0.clone();
    let now = clock::now_iso();
    let mut batch = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag(), "g:a:1");
    let ids: Vec<JobId> = ["r1", "r2", "r3", "r4", "r5", "r6"]
        .iter()
        .map(|s| JobId::new(*s).unwrap())
        .collect();
    let ran = [Some(0), Some(5), Some(5), Some(300), None, Some(5)];
    for ((id, (_, lease)), ms) in ids.iter().zip(&held).zip(ran) {
        batch.push(Ended {
            held: Leased {
                id,
                stream: &stream,
                lease,
                reply: "",
            },
            ending: Ending::Done,
            text: "",
            retry_at_ms: clock::now_ms() + 60_000,
            ran: ms.map(Duration::from_millis),
        });
    }
    let v: redis::Value = c.redis().query(&batch.call()).await.unwrap();
    let answers = batch.answers(&v).unwrap();
    assert!(
        answers.iter().all(|a| *a == Completion::Completed),
        "{answers:?}"
    );
    let mut raw = server.conn().await;
    let stats: std::collections::HashMap<String, String> =
        raw.hgetall(c.keys().stats()).await.unwrap();
    let field = |b: &str| stats.get(&format!("{stream}|run|{b}")).cloned();
    assert_eq!(
        field("0").as_deref(),
        Some("1"),
        "0 ms: bucket 0 ({stats:?})"
    );
    assert_eq!(
        field("2").as_deref(),
        Some("3"),
        "5 ms three times: bucket 2"
    );
    assert_eq!(field("8").as_deref(), Some("1"), "300 ms: bucket 8");
    assert_eq!(
        field("sum").as_deref(),
        Some("315"),
        "the sum of every sample"
    );
    let samples: u64 = stats
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{stream}|run|")) && !k.ends_with("|sum"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(samples, 5, "one sample a job that gave its run time");
}

/// A job no one waits on has no reply list to answer: since protocol 34 the completion derives
/// a job's reply list from its id only for a job given its `reply` field (a `w<i>` pair), so a
/// batch no one waits on names no reply key at all, and such a job's list is never made, for a
/// success or a failure; a job someone waits on is answered on its own list.
#[tokio::test]
async fn only_a_job_someone_waits_on_is_answered_on_its_reply_list() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, quiet) = submit_and_fetch(&c, "quiet").await;
    let (_, failed) = submit_and_fetch(&c, "failed").await;
    let (_, waited) = submit_and_fetch(&c, "waited").await;
    let mut raw = server.conn().await;
    let _: () = raw.hset(job_key("waited"), "reply", "1").await.unwrap();
    let now = clock::now_iso();
    let mut batch = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag(), "g:a:1");
    let ids: Vec<JobId> = ["quiet", "failed", "waited"]
        .iter()
        .map(|s| JobId::new(*s).unwrap())
        .collect();
    for ((id, lease), (reply, ending)) in ids.iter().zip([&quiet, &failed, &waited]).zip([
        ("", Ending::Done),
        ("", Ending::Abort),
        ("1", Ending::Done),
    ]) {
        batch.push(Ended {
            held: Leased {
                id,
                stream: &stream,
                lease,
                reply,
            },
            ending,
            text: "out",
            retry_at_ms: 0,
            ran: None,
        });
    }
    let cmd = batch.call().into_cmd();
    let words: Vec<String> = cmd
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect();
    let named = words.iter().any(|w| w.contains(":reply:"));
    assert!(!named, "no reply key is passed: {words:?}");
    assert_eq!(
        &words[words.len() - 2..],
        ["w2", "1"],
        "the waited job's reply field, after the jobs"
    );
    let v: redis::Value = c.redis().query(&batch.call()).await.unwrap();
    assert_eq!(batch.answers(&v).unwrap(), [Completion::Completed; 3]);
    let answered: Vec<String> = raw.lrange(c.keys().reply(&ids[2]), 0, -1).await.unwrap();
    assert_eq!(answered.len(), 1, "{answered:?}");
    for quiet in &ids[..2] {
        let n: usize = raw.exists(c.keys().reply(quiet)).await.unwrap();
        assert_eq!(n, 0, "{quiet}: no one waits, no reply list");
    }
}

/// A batch whose jobs come from several streams, interleaved: the call passes each stream
/// once and the jobs grouped by it (protocol 34), and each answer comes back in push order.
#[tokio::test]
async fn a_batch_over_interleaved_streams_answers_each_job_in_push_order() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, first) = submit_and_fetch(&c, "s1").await;
    let (_, last) = submit_and_fetch(&c, "s3").await;
    // s2 was never fetched, from a stream that does not exist: its delivery holds nothing
    let other = format!("{stream}:elsewhere");
    let now = clock::now_iso();
    let mut batch = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag(), "g:a:1");
    let ids: Vec<JobId> = ["s1", "s2", "s3", "s4"]
        .iter()
        .map(|s| JobId::new(*s).unwrap())
        .collect();
    let plan = [
        (&stream, first.as_str(), Ending::Done, Some(3)),
        (&other, "1-1", Ending::Done, None),
        (&stream, last.as_str(), Ending::Abort, Some(3)),
        (&other, "1-2", Ending::Fail, None),
    ];
    for (id, (s, lease, ending, ran)) in ids.iter().zip(plan) {
        batch.push(Ended {
            held: Leased {
                id,
                stream: s,
                lease,
                reply: "",
            },
            ending,
            text: "out",
            retry_at_ms: 0,
            ran: ran.map(Duration::from_millis),
        });
    }
    let v: redis::Value = c.redis().query(&batch.call()).await.unwrap();
    assert_eq!(
        batch.answers(&v).unwrap(),
        [
            Completion::Completed,
            Completion::LeaseLost,
            Completion::Completed,
            Completion::LeaseLost
        ]
    );
    let mut raw = server.conn().await;
    let s1: String = raw.hget(job_key("s1"), "status").await.unwrap();
    let s3: String = raw.hget(job_key("s3"), "status").await.unwrap();
    assert_eq!((s1.as_str(), s3.as_str()), ("finished", "error"));
    let stats: std::collections::HashMap<String, String> =
        raw.hgetall(c.keys().stats()).await.unwrap();
    assert_eq!(
        stats.get(&format!("{stream}|run|2")).map(String::as_str),
        Some("2"),
        "both of the stream's run times, one code parsed once: {stats:?}"
    );
}

/// `hero_complete` of one job (no `reply` field, no run time) with every key and argument
/// spelled out, as a caller in another language sends it: `reply_key` in the reply list's place.
pub(super) fn complete_by_hand(
    c: &Client,
    id: &str,
    stream: &str,
    lease: &str,
    outcome: &str,
) -> redis::Cmd {
    let mut call = Function::Complete.unchecked(&[
        c.keys().delayed(),
        c.keys().config(),
        c.keys().retention(),
        c.keys().events(),
        c.keys().stats(),
        c.keys().queues(),
        stream.to_string(),
    ]);
    // the code is the outcome's first letter: a whole word (`done`) names it as well
    call.arg(CONSUMER_GROUP)
        .arg(clock::now_iso())
        .arg(c.redis().caps().xackdel_flag())
        .arg(id)
        .arg("g:a:1")
        .arg("")
        .arg(c.keys().job_prefix())
        .arg("1")
        .arg(lease)
        .arg(id)
        .arg(outcome)
        .arg("x");
    call
}
