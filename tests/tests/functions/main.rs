//! The server-side functions called directly against a real redis-server: seed raw state, call,
//! assert raw state (asynq's style). The worker and broker are built on exactly these calls.
//! One module per function; the helpers here are the calls as a worker or broker makes them.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::function::{self, CompleteBatch, Ended, Ending, Function, Leased, Recovery};
use hero_protocol::function::{Completion, Expired, FetchReply, Recovered, Renewal};
use hero_protocol::keys::CONSUMER_GROUP;
use hero_protocol::{clock, GroupName, InstanceName, JobId, NewJob, Priority, ScriptType, Target};
use hero_testkit::RedisServer;
use redis::AsyncCommands;

mod complete;
mod expire;
mod fetch;
mod keys;
mod library;
mod promote;
mod recover;
mod renew;
mod stop;
mod submit;
mod trace;
mod trim;

async fn client(server: &RedisServer) -> Client {
    Client::connect(&server.url()).await.expect("connect")
}

fn t(s: &str) -> ScriptType {
    ScriptType::new(s).unwrap()
}

async fn fetch(c: &Client, consumer: &str, streams: &[String], count: usize) -> FetchReply {
    let cmd = hero_protocol::function::fetch(
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
    let mut outcomes = CompleteBatch::new(c.keys(), &now, c.redis().caps().xackdel_flag(), "g:a:1");
    for &(job, lease, reply, ending, text) in batch {
        let job = JobId::new(job).unwrap();
        let held = Leased {
            id: &job,
            stream,
            lease,
            reply,
        };
        outcomes.push(Ended {
            held,
            ending,
            text,
            retry_at_ms: clock::now_ms() + 60_000,
            ran: None,
        });
    }
    let v: redis::Value = c.redis().query(&outcomes.call()).await.expect("complete");
    outcomes.answers(&v).expect("decode complete")
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

/// A registered work stream of type `ty` (default priority) with its group, for the tests that
/// lay its entries out by hand (chosen ages, chosen id lengths).
async fn stream_by_hand(
    c: &Client,
    raw: &mut redis::aio::MultiplexedConnection,
    ty: &str,
) -> String {
    let stream = c.keys().work(&Target::of_type(t(ty)), Priority::DEFAULT);
    hero_testkit::create_group(raw, &stream).await;
    let _: () = raw.sadd(c.keys().queues(), &stream).await.unwrap();
    stream
}

/// A dispatched job `id` of type `ty` queued on `stream` under the entry id `entry`.
async fn job_by_hand(
    c: &Client,
    raw: &mut redis::aio::MultiplexedConnection,
    stream: &str,
    ty: &str,
    id: &str,
    entry: &str,
) {
    let _: () = raw
        .hset_multiple(
            c.keys().job(&JobId::new(id).unwrap()),
            &[
                ("status", "dispatched"),
                ("script", "x"),
                ("script_type", ty),
            ],
        )
        .await
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg(stream)
        .arg(entry)
        .arg("j")
        .arg(id)
        .query_async(raw)
        .await
        .unwrap();
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

async fn expire(c: &Client, retention: Duration, entries: usize) -> Expired {
    let v: redis::Value = c
        .redis()
        .query(&function::expire(
            c.keys(),
            retention,
            entries,
            Duration::ZERO,
        ))
        .await
        .expect("expire");
    Expired::decode(&v).expect("decode expire")
}
