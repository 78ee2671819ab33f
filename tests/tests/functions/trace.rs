//! hero_complete's failed-attempt traces (protocol 30): bounded, replaced, absent from a batch of
//! successes.

use super::complete::complete_by_hand;
use super::*;
use hero_testkit::job_key;

/// A failed attempt's trace (protocol 30): stored with the failure that brought it, cut at
/// 16 KiB by the function whatever the caller sent; each failure replaces it (one without a
/// trace removes it), a success leaves it as the reason of the retry, and a batch of
/// successes sends no trace argument at all.
#[tokio::test]
async fn a_failure_stores_its_trace_bounded_and_the_next_failure_replaces_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let trace_of = |id: &str| job_key(id);
    // a 40 KiB trace sent by hand (a foreign caller): kept to its first 16 KiB
    let (stream, lease) = submit_and_fetch(&c, "big").await;
    let mut call = complete_by_hand(&c, "big", &stream, &lease, "abort");
    call.arg(0).arg("x".repeat(40 * 1024));
    let v: redis::Value = c.redis().query(&call).await.unwrap();
    assert_eq!(
        Completion::decode_many(&v, 1).unwrap(),
        [Completion::Completed]
    );
    let stored: String = raw.hget(trace_of("big"), "trace").await.unwrap();
    assert_eq!(stored.len(), hero_protocol::function::TRACE_MAX);

    // through the builder: the trace goes with its own job of the batch only
    let (_, a) = submit_and_fetch(&c, "ta").await;
    let (_, b) = submit_and_fetch(&c, "tb").await;
    let ids = [JobId::new("ta").unwrap(), JobId::new("tb").unwrap()];
    let now = clock::now_iso();
    let mut batch = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag(), "g:a:1");
    for (id, lease, ending) in [(&ids[0], &a, Ending::Done), (&ids[1], &b, Ending::Fail)] {
        batch.push(Ended {
            held: Leased {
                id,
                stream: &stream,
                lease,
                reply: "",
            },
            ending,
            text: "boom",
            retry_at_ms: clock::now_ms() + 60_000,
            ran: None,
        });
        batch.trace(&format!("trace of {id}\ncaused by: io"));
    }
    let v: redis::Value = c.redis().query(&batch.call()).await.unwrap();
    assert_eq!(
        batch.answers(&v).unwrap(),
        [Completion::Completed, Completion::Completed],
        "tb has no retries: its failure ends it"
    );
    let ta: Option<String> = raw.hget(trace_of("ta"), "trace").await.unwrap();
    assert_eq!(ta, None, "a success stores no trace");
    let tb: String = raw.hget(trace_of("tb"), "trace").await.unwrap();
    assert_eq!(tb, "trace of tb\ncaused by: io");

    // a retried failure keeps its trace; the next failure without one removes it
    c.submit(
        &NewJob::builder("osis", "x")
            .id("tr")
            .retries(2)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let tr = JobId::new("tr").unwrap();
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    let mut batch = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag(), "g:a:1");
    batch.push(Ended {
        held: Leased {
            id: &tr,
            stream: &stream,
            lease: &got.jobs[0].entry,
            reply: "",
        },
        ending: Ending::Fail,
        text: "first",
        retry_at_ms: clock::now_ms(),
        ran: None,
    });
    batch.trace("first attempt's trace");
    let v: redis::Value = c.redis().query(&batch.call()).await.unwrap();
    assert_eq!(batch.answers(&v).unwrap(), [Completion::Retrying]);
    let kept: String = raw.hget(trace_of("tr"), "trace").await.unwrap();
    assert_eq!(kept, "first attempt's trace");
    let job = c.get(&tr).await.unwrap();
    assert_eq!(
        job.trace.as_deref(),
        Some("first attempt's trace"),
        "the record decodes it"
    );
    let _: () = raw.hset(trace_of("tr"), "status", "started").await.unwrap();
    let _: () = raw.hset(trace_of("tr"), "lease", "9-9").await.unwrap();
    let again = complete_by_hand(&c, "tr", &stream, "9-9", "fail");
    let v: redis::Value = c.redis().query(&again).await.unwrap();
    let _ = Completion::decode_many(&v, 1).unwrap();
    let gone: Option<String> = raw.hget(trace_of("tr"), "trace").await.unwrap();
    assert_eq!(
        gone, None,
        "a failure without a trace leaves none of an earlier one"
    );

    // a batch of successes and failures without traces sends 8 arguments and 4 a job, no more
    let mut plain = CompleteBatch::new(c.keys(), &now, "0", "g:a:1");
    plain.push(Ended {
        held: Leased {
            id: &ids[0],
            stream: &stream,
            lease: "1-1",
            reply: "",
        },
        ending: Ending::Done,
        text: "out",
        retry_at_ms: 0,
        ran: None,
    });
    let words = plain.call().into_cmd().args_iter().count();
    assert_eq!(
        words,
        3 + 6 + 1 + 8 + 4,
        "FCALL name numkeys, keys (one a stream), arguments"
    );
}
