//! hero_submit: batches, idempotent ids, a malformed batch refused whole.

use super::*;
use hero_testkit::{job_key, work_key};

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
    let script: String = raw
        .hget(c.keys().job_unchecked("taken"), "script")
        .await
        .unwrap();
    assert_eq!(script, "old", "an existing id is left as it was");

    // the second job's field count runs past the end: nothing of the batch is written
    let osis = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    let mut bad = Function::Submit.unchecked(&[
        c.keys().delayed(),
        c.keys().queues(),
        c.keys().bridge_registry(),
        c.keys().config(),
        c.keys().events(),
        c.keys().stats(),
        osis.clone(),
    ]);
    bad.arg(CONSUMER_GROUP)
        .arg(c.keys().job_prefix())
        .arg(0)
        .arg("b1")
        .arg("1.4")
        .arg("script")
        .arg("x")
        .arg("script_type")
        .arg("osis")
        .arg("b2")
        .arg("1.4")
        .arg("script")
        .arg("y");
    let err = c.redis().query::<redis::Value>(&bad).await.unwrap_err();
    assert!(err.to_string().contains("HERO_BAD_ARG"), "{err}");
    let exists: bool = raw.exists(c.keys().job_unchecked("b1")).await.unwrap();
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
    let script: String = raw.hget(job_key("same"), "script").await.unwrap();
    assert_eq!(script, "1");
    let len: usize = raw.xlen(work_key("osis")).await.unwrap();
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
    let len: usize = raw.xlen(work_key("v")).await.unwrap();
    assert_eq!(len, 50);
}

/// What a worker would refuse is refused at submit, from any language: the whole batch, before
/// anything is written, with the job and the field named.
#[tokio::test]
async fn submit_refuses_a_record_a_worker_would_refuse_and_writes_nothing_of_its_batch() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let osis = work_key("osis");
    let raw_submit = |stream: &str, fields: &[(&str, &str)]| {
        let mut cmd = Function::Submit.unchecked(&[
            c.keys().delayed(),
            c.keys().queues(),
            c.keys().bridge_registry(),
            c.keys().config(),
            c.keys().events(),
            c.keys().stats(),
            osis.clone(),
            stream.to_string(),
        ]);
        let good = [("script", "x"), ("script_type", "osis")];
        cmd.arg(CONSUMER_GROUP)
            .arg(c.keys().job_prefix())
            .arg(0)
            .arg("fine")
            .arg(format!("1.{}", 2 * good.len()));
        for (k, v) in good {
            cmd.arg(k).arg(v);
        }
        cmd.arg("bad").arg(format!("2.{}", 2 * fields.len()));
        for (k, v) in fields {
            cmd.arg(*k).arg(*v);
        }
        cmd
    };
    let base = [("script", "x"), ("script_type", "osis")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut f = base.to_vec();
        f.extend_from_slice(extra);
        f
    };
    for (fields, stream, says) in [
        (with(&[("priority", "12")]), osis.clone(), "`priority`"),
        (with(&[("timeout", "soon")]), osis.clone(), "`timeout`"),
        (with(&[("colour", "blue")]), osis.clone(), "`colour`"),
        (with(&[("tags", "{\"a\":1}")]), osis.clone(), "`tags`"),
        (with(&[("env_vars", "[1,2]")]), osis.clone(), "`env_vars`"),
        (
            with(&[("created_at", "yesterday")]),
            osis.clone(),
            "`created_at`",
        ),
        (with(&[("status", "finished")]), osis.clone(), "`status`"),
        (
            with(&[("traceparent", "00-XYZ-1-01")]),
            osis.clone(),
            "`traceparent`",
        ),
        (with(&[("unique_ttl", "5")]), osis.clone(), "`unique_ttl`"),
        (
            with(&[("unique", "k"), ("unique_ttl", "0")]),
            osis.clone(),
            "`unique_ttl`",
        ),
        (vec![("script_type", "osis")], osis.clone(), "`script`"),
        (
            with(&[("instance", "i1")]),
            osis.clone(),
            "`instance` needs a `group`: an instance is named within its group",
        ),
        (
            with(&[("group", "io")]),
            osis.clone(),
            "but its record names",
        ),
        (
            with(&[("priority", "0")]),
            osis.clone(),
            "but its record names",
        ),
        (base.to_vec(), work_key("other"), "but its record names"),
    ] {
        let err = c
            .redis()
            .query::<redis::Value>(&raw_submit(&stream, &fields))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("HERO_INVALID_JOB") && text.contains("job bad") && text.contains(says),
            "{fields:?}: {text}"
        );
        let written: bool = raw.exists(job_key("fine")).await.unwrap();
        assert!(!written, "nothing of the batch is written ({fields:?})");
    }
    // an extension is stored, and a worker's decoder ignores it
    // ... and a W3C trace context travels with the record
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let ok = raw_submit(
        &osis,
        &with(&[("x_colour", "blue"), ("priority", "5"), ("traceparent", tp)]),
    );
    let _: redis::Value = c.redis().query(&ok).await.unwrap();
    let job = c.get(&JobId::new("bad").unwrap()).await.unwrap();
    assert_eq!(job.script, "x");
    assert_eq!(job.traceparent.as_deref(), Some(tp));
    let colour: String = raw.hget(job_key("bad"), "x_colour").await.unwrap();
    assert_eq!(colour, "blue");
    // neither record named its `created_at`: the server dated both (protocol 29)
    for id in ["fine", "bad"] {
        let created: String = raw.hget(job_key(id), "created_at").await.unwrap();
        assert!(
            created.starts_with("20") && created.ends_with('Z'),
            "{id}: {created:?}"
        );
    }
}

/// A fair queue's submit gathers the jobs that follow one another into one lane and writes
/// each run with one RPUSH (gate.lua): one call of 2,600 jobs whose keys come in runs (one past
/// the 1,000 a write takes) and alternate leaves every job in its key's lane in submit order,
/// each key once in the ring in order of its first job, a paused key out of it, and the gauge
/// counting them all.
#[tokio::test]
async fn a_fair_submit_files_runs_and_alternating_keys_in_order() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let admin = hero_admin::Admin::from(&c);
    let fair = hero_protocol::policy::Policy {
        fair: Some(true),
        ..Default::default()
    };
    admin.set_policy("tenants", &fair).await.unwrap();
    admin.pause_key("tenants", "H").await.unwrap();
    let mut keys: Vec<&str> = vec!["A"; 1500];
    for i in 0..600 {
        keys.push(["B", "A", "C", "H"][i % 4]);
    }
    keys.extend(["C"; 500]);
    let jobs: Vec<NewJob> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            NewJob::builder("tenants", "x")
                .id(format!("{k}-{i}"))
                .limit_key(*k)
                .build()
                .unwrap()
        })
        .collect();
    let v: redis::Value = c
        .redis()
        .query(&function::submit(c.keys(), &jobs, false))
        .await
        .expect("one call of 2,600 jobs");
    let replies = function::SubmitReply::decode_many(&v, jobs.len()).unwrap();
    assert_eq!(replies.len(), 2600);
    let stream = work_key("tenants");
    let mut raw = server.conn().await;
    for key in ["A", "B", "C", "H"] {
        let lane: Vec<String> = raw
            .lrange(c.keys().fair_lane(&stream, key), 0, -1)
            .await
            .unwrap();
        let ids: Vec<String> = lane
            .iter()
            .map(|item| item.split(' ').next().unwrap().to_string())
            .collect();
        let expected: Vec<String> = jobs
            .iter()
            .filter(|j| j.id().as_str().starts_with(&format!("{key}-")))
            .map(|j| j.id().to_string())
            .collect();
        assert_eq!(ids, expected, "lane {key} holds its jobs in submit order");
        assert!(lane.iter().all(|item| item.split(' ').count() == 2));
    }
    let ring: Vec<String> = raw
        .lrange(c.keys().fair_ring(&stream), 0, -1)
        .await
        .unwrap();
    assert_eq!(
        ring,
        ["A", "B", "C"],
        "each key once, in order; the paused key out"
    );
    let counts = admin.job_counts("tenants").await.unwrap();
    assert_eq!(counts.waiting, 2600, "the gauge counts every gated job");
}

/// Protocol 35: a batch names each stream once and a job by its code, so the jobs of a batch
/// over two streams, interleaved, each land on their own stream; the function writes the
/// record's `created_at` (Redis's clock) and `script_type` (the stream's), and keeps a
/// `created_at` the job names; a code's run-at parks the job as a delayed one.
#[tokio::test]
async fn a_batch_over_interleaved_streams_puts_each_job_on_its_own_and_dates_it_by_redis() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let (osis, py) = (work_key("osis"), work_key("py"));
    let mut cmd = Function::Submit.unchecked(&[
        c.keys().delayed(),
        c.keys().queues(),
        c.keys().bridge_registry(),
        c.keys().config(),
        c.keys().events(),
        c.keys().stats(),
        osis.clone(),
        py.clone(),
    ]);
    // a producer whose clock is an hour behind Redis's: what it dates is Redis's clock, and the
    // hour it delays by is an hour on Redis's clock
    let now = hero_protocol::clock::now_ms();
    let (behind, far) = (now - 3_600_000, now);
    cmd.arg(CONSUMER_GROUP)
        .arg(c.keys().job_prefix())
        .arg(behind)
        .arg("o1")
        .arg("1.2")
        .arg("script")
        .arg("a")
        .arg("p1")
        .arg("2.4")
        .arg("script")
        .arg("b")
        .arg("created_at")
        .arg("2020-01-02T03:04:05.000Z")
        .arg("o2")
        .arg(format!("1.2@{far}"))
        .arg("script")
        .arg("c");
    let got: Vec<String> = c.redis().query(&cmd).await.unwrap();
    assert_eq!(
        got,
        [
            "created",
            "dispatched",
            "created",
            "dispatched",
            "created",
            "waiting"
        ]
    );
    let on = |stream: &String| {
        let stream = stream.clone();
        let mut raw = raw.clone();
        async move {
            let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
                .arg(&stream)
                .arg("-")
                .arg("+")
                .query_async(&mut raw)
                .await
                .unwrap();
            entries
                .into_iter()
                .map(|(_, f)| f[0].1.clone())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(on(&osis).await, ["o1"], "o2 waits in the delayed set");
    assert_eq!(on(&py).await, ["p1"]);
    let (redis_s, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    for (id, stype) in [("o1", "osis"), ("p1", "py"), ("o2", "osis")] {
        let (t, created): (String, String) = redis::cmd("HMGET")
            .arg(c.keys().job_unchecked(id))
            .arg("script_type")
            .arg("created_at")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(t, stype, "{id}'s type is its stream's");
        if id == "p1" {
            assert_eq!(
                created, "2020-01-02T03:04:05.000Z",
                "a named created_at is kept"
            );
        } else {
            let secs = hero_protocol::clock::parse_iso_ms(&created).unwrap_or(0) / 1000;
            assert!(
                secs.abs_diff(redis_s) <= 2,
                "{id} is dated by Redis's clock: {created}"
            );
        }
    }
    let due: f64 = raw.zscore(c.keys().delayed(), "o2").await.unwrap();
    let hour_on = now + 3_600_000;
    assert!(
        (due as u64).abs_diff(hour_on) <= 2_000,
        "{due} against {hour_on}: an hour after the submit, on Redis's clock"
    );
}
