//! The keys of the namespace `hero` the tests use (from the keys module, like every key), and
//! the states tests plant: jobs run to the end, jobs queued that no worker takes, dead letters,
//! the pending count of a stream.

use std::time::Duration;

/// The workers' group on `stream`, made from its start (the stream too, when it is missing), as
/// a test that plants entries by hand needs before it reads them as a worker would.
pub async fn create_group(raw: &mut redis::aio::MultiplexedConnection, stream: impl AsRef<str>) {
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream.as_ref())
        .arg(hero_protocol::keys::CONSUMER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(raw)
        .await
        .expect("XGROUP CREATE");
}

/// How many entries of `stream` are pending (delivered, not acknowledged) in the workers' group.
pub async fn pending(raw: &mut redis::aio::MultiplexedConnection, stream: impl AsRef<str>) -> i64 {
    let summary: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(stream.as_ref())
        .arg(hero_protocol::keys::CONSUMER_GROUP)
        .query_async(raw)
        .await
        .expect("XPENDING");
    match summary.first() {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("unexpected XPENDING summary {other:?}"),
    }
}

/// The keys of the default namespace `hero`, which the tests use.
pub fn keys() -> hero_protocol::Keyspace {
    hero_protocol::Keyspace::new(&hero_protocol::Namespace::new("hero").expect("namespace"))
}

/// The key of job `id` in namespace `hero` (any string: tests plant foreign ids too).
pub fn job_key(id: impl std::fmt::Display) -> String {
    keys().job_unchecked(&id.to_string())
}

/// The work stream of a script type at the default priority, in namespace `hero`.
pub fn work_key(script_type: &str) -> String {
    let t = hero_protocol::ScriptType::new(script_type).expect("script type");
    keys().work(
        &hero_protocol::Target::of_type(t),
        hero_protocol::Priority::DEFAULT,
    )
}

/// The tracking zset of the legacy list `legacy` (a full key), in namespace `hero`.
pub fn bridge_track_key(legacy: &str) -> String {
    let keys = keys();
    let queue = keys.parse_legacy_queue(legacy).expect("a legacy queue key");
    keys.bridge_track(&queue)
}

/// Leases `id` (a job of type `script_type`) to a consumer that then dies, and has recovery
/// give up on it at once: a dead letter, made in a few calls.
pub async fn dead_letter(client: &hero_client::Client, script_type: &str, id: &str) {
    let job = hero_protocol::NewJob::builder(script_type, "x")
        .id(id)
        .build()
        .expect("a valid job");
    client.submit(&job).await.expect("submit");
    dead_letter_queued(client, script_type, id).await;
}

/// [`dead_letter`] of the job `id` already queued first in `script_type`'s stream.
pub async fn dead_letter_queued(client: &hero_client::Client, script_type: &str, id: &str) {
    use hero_protocol::function::Recovery;
    // the client's own keys: a client bound to another shard of a sharded namespace works too
    let target = hero_protocol::Target::new(
        hero_protocol::ScriptType::new(script_type).expect("a valid script type"),
        None,
        None,
    );
    let stream = client
        .keys()
        .work(&target, hero_protocol::Priority::DEFAULT);
    let fetch = hero_protocol::function::fetch(
        client.keys(),
        std::slice::from_ref(&stream),
        "g:gone:1",
        1,
        "0",
    );
    let _: redis::Value = client.redis().query(&fetch).await.expect("fetch");
    let taken = hero_protocol::recovery::recover_stream(
        client.redis(),
        client.keys(),
        &stream,
        Recovery::Consumer("g:gone:1"),
        1,
    )
    .await
    .expect("recover");
    assert_eq!(taken.dead, 1, "{id} dead-lettered");
}

/// Submits `jobs` and waits (bounded) until each has finished.
pub async fn run_to_finish(client: &hero_client::Client, jobs: &[hero_protocol::NewJob]) {
    for job in jobs {
        client.submit(job).await.expect("submit");
    }
    for job in jobs {
        let r = client
            .wait(job.id(), Duration::from_secs(20))
            .await
            .expect("the job ends");
        assert_eq!(r.status, hero_protocol::Status::Finished, "{}", job.id());
    }
}

/// Submits `n` jobs of `script_type` named `<prefix>-0`, `<prefix>-1`, ... that no worker takes.
pub async fn queue_idle(client: &hero_client::Client, script_type: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let job = hero_protocol::NewJob::builder(script_type, "x")
            .id(format!("{prefix}-{i}"))
            .build()
            .expect("a valid job");
        client.submit(&job).await.expect("submit");
    }
}

/// The record of job `id`, which must exist.
pub async fn record(client: &hero_client::Client, id: &str) -> hero_protocol::Job {
    client
        .get(&hero_protocol::JobId::new(id).expect("a valid id"))
        .await
        .unwrap_or_else(|e| panic!("reading job {id}: {e}"))
}

/// A recurring job `name` on `schedule` (UTC) that submits script `x` to `script_type`.
pub fn cron_job(
    name: &str,
    schedule: &str,
    script_type: &str,
    missed: hero_protocol::cron::Missed,
) -> hero_protocol::cron::CronJob {
    hero_protocol::cron::CronJob {
        name: name.into(),
        schedule: schedule.into(),
        tz: "UTC".into(),
        missed,
        paused: false,
        job: hero_protocol::cron::JobTemplate {
            script_type: script_type.into(),
            script: "x".into(),
            group: None,
            instance: None,
            priority: None,
            timeout_secs: None,
            retries: 0,
            tags: Vec::new(),
            payload: None,
            backoff: None,
            keep_ms: None,
            keep_failed_ms: None,
        },
    }
}
