//! hero_fetch: precedence order, the queue registry, dropped entries.

use super::*;
use hero_testkit::{job_key, work_key};

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
            .arg(job_key("high"))
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
        streams.len() + 1,
        "short fetch returns wake-up cursors: one per stream, then the registry's signal"
    );
}

#[tokio::test]
async fn fetch_reads_only_registered_streams_and_mends_one_broken_by_hand() {
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
    // a registered stream deleted by hand, and one whose group was destroyed, get their group
    // back at the fetch: the job whose entry is still there runs
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
    assert_eq!(
        ids,
        ["p1", "p5"],
        "the fetch mends the broken streams and goes on past them"
    );
    assert!(got.dropped.is_empty(), "{:?}", got.dropped);
    assert_eq!(got.cursors.len(), streams.len() + 1);
    let at = |key: &str| streams.iter().position(|s| s == key).unwrap();
    assert_eq!(
        got.cursors[at(&p0)],
        "0-0",
        "a registered stream is watched, empty or not"
    );
    assert_ne!(
        got.cursors[at(&stray)],
        "0-0",
        "a wake-up from past the entries a stray stream holds"
    );
    let p3 = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::new(3).unwrap());
    assert_eq!(
        got.cursors[at(&p3)],
        "",
        "a stream that does not exist is not watched"
    );
    assert_ne!(
        got.cursors.last().map(String::as_str),
        Some("0-0"),
        "the registry's signal stream has an entry per stream registered"
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
        .xadd(work_key("osis"), "*", &[("j", "ghost")])
        .await
        .unwrap();
    // a job key holding a string, not a hash: foreign data must not stop the fetch
    let alien = c.keys().job(&JobId::new("alien").unwrap());
    let _: () = raw.set(&alien, "not a job").await.unwrap();
    let _: String = raw
        .xadd(work_key("osis"), "*", &[("j", "alien")])
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

/// Asked for records, a fetch that comes up short hands back each leased job's record, read
/// after the lease was written (the worker starts them without another round trip); a full
/// fetch hands back none (a backlog: the plain reads cost Redis less) unless asked for every
/// fetch's (protocol 29). Not asked, the reply keeps its four parts, as a peer of protocol 23
/// reads it.
#[tokio::test]
async fn a_short_fetch_hands_back_the_records_when_asked() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let streams = submit_osis_at(
        &c,
        &[
            ("r1", 5),
            ("r2", 5),
            ("r3", 5),
            ("r4", 5),
            ("r6", 5),
            ("r7", 5),
        ],
    )
    .await;
    let asked = |count: usize, records: function::Records| {
        function::fetch_limited(
            c.keys(),
            &streams,
            "default:1:s",
            count,
            c.redis().caps().xackdel_flag(),
            "",
            records,
        )
    };
    // full: two of six asked for and got, no records
    let v: redis::Value = c
        .redis()
        .query(&asked(2, function::Records::WhenShort))
        .await
        .unwrap();
    let full = FetchReply::decode_owned(v).unwrap();
    assert_eq!(full.jobs.len(), 2);
    assert!(full.jobs.iter().all(|d| d.record.is_none()));
    // full, every fetch's asked for: two more, each with its record
    let v: redis::Value = c
        .redis()
        .query(&asked(2, function::Records::Always))
        .await
        .unwrap();
    let every = FetchReply::decode_owned(v).unwrap();
    let ids: Vec<_> = every.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["r3", "r4"]);
    // short: five asked for, two left, each with its record carrying the lease
    let v: redis::Value = c
        .redis()
        .query(&asked(5, function::Records::WhenShort))
        .await
        .unwrap();
    let short = FetchReply::decode_owned(v).unwrap();
    let ids: Vec<_> = short.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["r6", "r7"]);
    for d in every.jobs.into_iter().chain(short.jobs) {
        let record = d
            .record
            .clone()
            .expect("a short fetch hands the record back");
        let key = c.keys().job(&d.job_id);
        // the record handed back is the record as written, field for field (the lease's fields
        // patched into the read made before the write)
        handed_back_as_stored(&server, &key, &record).await;
        let job = match function::read_fetched(&key, record, &d.entry).unwrap() {
            function::Fetched::Leased { job, .. } => job.unwrap(),
            function::Fetched::Stale => panic!("the record handed back carries the lease"),
        };
        assert_eq!(job.script, "x");
        assert_eq!(job.status, hero_protocol::Status::Started);
        assert_eq!(job.worker_id, "default:1:s");
    }
    // not asked: four parts, as before protocol 24
    c.submit(&NewJob::builder("osis", "x").id("r5").build().unwrap())
        .await
        .unwrap();
    let plain = function::fetch(
        c.keys(),
        &streams,
        "default:1:s",
        5,
        c.redis().caps().xackdel_flag(),
    );
    let v: redis::Value = c.redis().query(&plain).await.unwrap();
    match &v {
        redis::Value::Array(parts) => assert_eq!(parts.len(), 4),
        other => panic!("fetch answered {other:?}"),
    }
}

/// A fetch given the registry cursor `*` answers which streams are registered and the signal's
/// id; given that id and only those streams, it reads them without asking the registry, and
/// once a stream was registered (or a queue paused) since, it claims nothing and answers
/// stale, so a worker naming only the registered streams never skips a new one of higher
/// precedence.
#[tokio::test]
async fn a_fetch_naming_only_registered_streams_is_told_when_the_registry_moved() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let streams = submit_osis_at(&c, &[("p5", 5)]).await;
    let with = |named: &[String], cursor: function::RegistryCursor<'_>, count: usize| {
        function::fetch_with(
            c.keys(),
            named,
            "default:1:s",
            count,
            c.redis().caps().xackdel_flag(),
            "",
            function::Records::WhenShort,
            cursor,
        )
    };
    let ask = |cmd: function::Call| {
        let c = c.clone();
        async move {
            let v: redis::Value = c.redis().query(&cmd).await.expect("fetch");
            FetchReply::decode_owned(v).expect("decode fetch")
        }
    };
    // the first fetch asks: only the default level's stream is registered
    let first = ask(with(&streams, function::RegistryCursor::Ask, 0)).await;
    let view = first.registry.expect("a registry view");
    assert!(!view.stale);
    let p5 = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    assert_eq!(
        view.registered
            .iter()
            .map(|&i| streams[i].clone())
            .collect::<Vec<_>>(),
        std::slice::from_ref(&p5)
    );
    let named = vec![p5.clone()];
    // while the registry stays, the named stream is read, records handed back
    let got = ask(with(
        &named,
        function::RegistryCursor::Since(&view.signal),
        5,
    ))
    .await;
    assert_eq!(got.jobs.len(), 1);
    assert_eq!(got.jobs[0].job_id.as_str(), "p5");
    let record = got.jobs[0]
        .record
        .clone()
        .expect("a short fetch hands the record back");
    let fields: std::collections::HashMap<String, String> =
        redis::FromRedisValue::from_redis_value(record).expect("a record is a map");
    assert_eq!(
        (
            fields["status"].as_str(),
            fields["lease"].as_str(),
            fields["worker_id"].as_str()
        ),
        ("started", got.jobs[0].entry.as_str(), "default:1:s"),
        "the record handed back is the one the fetch wrote, read in the same call"
    );
    assert_eq!(fields["script"], "x");
    let reg = got.registry.expect("a registry view");
    assert!(!reg.stale && reg.signal == view.signal);
    assert_eq!(
        got.cursors.last(),
        Some(&view.signal),
        "the signal's cursor is its id"
    );
    // a job at a higher priority makes a new stream: the old list is stale, nothing is taken
    submit_osis_at(&c, &[("p0", 0), ("p5b", 5)]).await;
    let stale = ask(with(
        &named,
        function::RegistryCursor::Since(&view.signal),
        5,
    ))
    .await;
    assert!(stale.jobs.is_empty(), "nothing claimed from a stale list");
    let moved = stale.registry.expect("a registry view");
    assert!(moved.stale);
    assert_ne!(moved.signal, view.signal);
    // asked again, the new stream comes first: precedence holds
    let again = ask(with(&streams, function::RegistryCursor::Ask, 5)).await;
    let ids: Vec<_> = again.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["p0", "p5b"]);
    let now = again.registry.expect("a registry view");
    assert_eq!(now.registered.len(), 2);
    // pausing a queue moves the registry too
    hero_admin::Admin::from(&c).pause("osis").await.unwrap();
    let named: Vec<String> = now.registered.iter().map(|&i| streams[i].clone()).collect();
    let paused = ask(with(
        &named,
        function::RegistryCursor::Since(&now.signal),
        5,
    ))
    .await;
    assert!(
        paused.registry.expect("a registry view").stale,
        "a pause announces"
    );
}

/// The wait histogram of one fetch over entries of different ages: each job's wait (its entry's
/// age) in its bucket, jobs of one millisecond counted together, and the sum of every wait.
#[tokio::test]
async fn wait_samples_of_a_fetch_land_in_their_buckets() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let stream = stream_by_hand(&c, &mut raw, "aged").await;
    let now = clock::now_ms();
    // two entries 5 s old (one millisecond), one 300 ms old: buckets 12 (5000..8191 ms waited)
    // and 8 (300..510), with room for a slow machine between the XADDs and the fetch
    let entries = [
        ("w1", format!("{}-0", now - 5000)),
        ("w2", format!("{}-1", now - 5000)),
        ("w3", format!("{}-0", now - 300)),
    ];
    for (id, entry) in &entries {
        job_by_hand(&c, &mut raw, &stream, "aged", id, entry).await;
    }
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 10).await;
    let fetched_at = clock::now_ms();
    assert_eq!(got.jobs.len(), 3);
    let stats: std::collections::HashMap<String, String> =
        raw.hgetall(c.keys().stats()).await.unwrap();
    let field = |b: &str| stats.get(&format!("{stream}|wait|{b}")).cloned();
    assert_eq!(field("12").as_deref(), Some("2"), "5 s twice ({stats:?})");
    assert_eq!(field("8").as_deref(), Some("1"), "300 ms once ({stats:?})");
    let sum: u64 = field("sum").unwrap().parse().unwrap();
    let least = 2 * 5000 + 300;
    let most = least + 3 * (fetched_at - now);
    assert!(
        (least..=most).contains(&sum),
        "the waits' sum {sum} is between {least} and {most}"
    );
}

/// The wait samples of a fetch whose entries come in runs of one millisecond each (as a submit
/// of many jobs appends them), of different lengths: every job is counted once, in the bucket of
/// its run's age, and the sum holds every job's wait.
#[tokio::test]
async fn wait_samples_count_every_job_of_runs_of_one_millisecond_once() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let stream = stream_by_hand(&c, &mut raw, "runs").await;
    let now = clock::now_ms();
    // (age in ms, jobs, bucket): each age mid-bucket, with room for a slow machine
    let runs = [
        (20_000, 1, 14),
        (5_000, 7, 12),
        (1_400, 3, 10),
        (350, 8, 8),
        (90, 1, 6),
    ];
    let mut n = 0;
    for &(age, jobs, _) in &runs {
        for seq in 0..jobs {
            n += 1;
            let id = format!("r{n}");
            let entry = format!("{}-{seq}", now - age);
            job_by_hand(&c, &mut raw, &stream, "runs", &id, &entry).await;
        }
    }
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 25).await;
    let fetched_at = clock::now_ms();
    assert_eq!(got.jobs.len(), n);
    let stats: std::collections::HashMap<String, String> =
        raw.hgetall(c.keys().stats()).await.unwrap();
    let field = |b: &str| stats.get(&format!("{stream}|wait|{b}")).cloned();
    for &(age, jobs, bucket) in &runs {
        assert_eq!(
            field(&bucket.to_string()),
            Some(jobs.to_string()),
            "{jobs} jobs {age} ms old in bucket {bucket} ({stats:?})"
        );
    }
    let counted: usize = stats
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{stream}|wait|")) && !k.ends_with("|sum"))
        .map(|(_, v)| v.parse::<usize>().unwrap())
        .sum();
    assert_eq!(counted, n, "each job counted once");
    let sum: u64 = field("sum").unwrap().parse().unwrap();
    let least: u64 = runs.iter().map(|&(age, jobs, _)| age * jobs as u64).sum();
    let most = least + n as u64 * (fetched_at - now);
    assert!(
        (least..=most).contains(&sum),
        "the waits' sum {sum} is between {least} and {most}"
    );
}

/// A retried job's record handed back by a fetch (the record still holds the worker and start
/// of its first run, and counts attempts) is the record as written: the lease's fields replaced
/// in place, attempts counted on.
#[tokio::test]
async fn a_retried_record_handed_back_is_the_record_as_written() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "x")
        .id("again")
        .retries(1)
        .build()
        .unwrap();
    c.submit(&job).await.unwrap();
    let stream = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    let first = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    let lease = first.jobs[0].entry.clone();
    let answers = complete_batch(&c, &stream, &[("again", &lease, "", Ending::Fail, "once")]).await;
    assert_eq!(answers, [Completion::Retrying]);
    let cmd = function::promote(c.keys(), job.id(), &stream, &clock::now_iso());
    let _: redis::Value = c.redis().query(&cmd).await.unwrap();
    let cmd = function::fetch_limited(
        c.keys(),
        std::slice::from_ref(&stream),
        "g:b:2",
        5,
        c.redis().caps().xackdel_flag(),
        "",
        function::Records::WhenShort,
    );
    let v: redis::Value = c.redis().query(&cmd).await.unwrap();
    let got = FetchReply::decode_owned(v).unwrap();
    assert_eq!(got.jobs.len(), 1);
    let d = &got.jobs[0];
    let stored = handed_back_as_stored(
        &server,
        &c.keys().job(&d.job_id),
        d.record.as_ref().expect("handed back"),
    )
    .await;
    assert_eq!(stored.get("worker_id").map(String::as_str), Some("g:b:2"));
    assert_eq!(stored.get("attempts").map(String::as_str), Some("2"));
    assert_eq!(stored.get("lease"), Some(&d.entry));
}

/// Asserts that a record a fetch handed back equals the record stored at `key`, field for
/// field; returns the stored one.
async fn handed_back_as_stored(
    server: &RedisServer,
    key: &str,
    record: &redis::Value,
) -> std::collections::HashMap<String, String> {
    let handed: std::collections::HashMap<String, String> =
        redis::FromRedisValue::from_redis_value(record.clone()).unwrap();
    let mut raw = server.conn().await;
    let stored: std::collections::HashMap<String, String> = raw.hgetall(key).await.unwrap();
    assert_eq!(handed, stored, "{key}");
    stored
}
