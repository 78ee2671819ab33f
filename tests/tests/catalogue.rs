//! The bad-input catalogue (issue 28, point 6): wrong input everywhere it enters — the CLI, the
//! Rust API, the HTTP API, and records edited by hand in Redis — each case ends in a clear error
//! that names what was wrong (a needle of the message is asserted), a non-zero exit or an error
//! status, no panic, and nothing changed in Redis (every key's DUMP is compared before and
//! after). After the catalogue, a worker started on the same Redis still runs jobs, and a
//! record edited by hand ends `error` naming its field without stopping the worker.
//!
//! Legacy list entries with garbage are in `bridge.rs`
//! (`a_legacy_job_with_garbage_fields_ends_error_and_one_without_a_hash_is_dead_lettered`).

use std::collections::BTreeMap;
use std::time::Duration;

use hero_client::{Client, ClientOptions};
use hero_protocol::{Error, JobId, NewJob, Priority};
use hero_testkit::{all_finished, hero_cli, http_broker, job_key, test_worker, RedisServer};

/// Every key and its DUMP, except what a running broker keeps on its own (its presence, the
/// sampled stats, the published settings).
async fn snapshot(server: &RedisServer) -> BTreeMap<String, Vec<u8>> {
    let mut raw = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        // what live processes write on their own clock (stats, heartbeats, the broker's epoch,
        // the duty lease), not job data, and the memory flag (the policy a submit read from
        // INFO, for a second)
        if k.contains(":stats")
            || k.ends_with(":meta:memory")
            || k.ends_with(":meta:duties")
            || k.ends_with(":meta:epoch")
            || k.contains(":brokers")
            || k.contains(":meta:fleet")
            || k.contains(":config")
            || k.contains(":meta:sample")
        {
            continue;
        }
        let dump: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut raw)
            .await
            .unwrap();
        out.insert(k, dump.unwrap_or_default());
    }
    out
}

/// Asserts `got` is an error naming `needle`, and that Redis did not change.
fn judged(case: &str, message: &str, needle: &str) {
    assert!(
        message.to_lowercase().contains(&needle.to_lowercase()),
        "{case}: the message names what was wrong ({needle:?}): {message}"
    );
    assert!(!message.contains("panicked"), "{case}: {message}");
}

const CLI: &[(&str, &[&str], &str)] = &[
    (
        "type with a space",
        &["submit", "--type", "bad type", "x"],
        "script type",
    ),
    (
        "group with a colon",
        &["submit", "--type", "osis", "--group", "a:b", "x"],
        "group",
    ),
    (
        "empty instance",
        &["submit", "--type", "osis", "--instance", "", "x"],
        "instance",
    ),
    (
        "priority 10",
        &["submit", "--type", "osis", "--priority", "10", "x"],
        "priority",
    ),
    (
        "id with a space",
        &["submit", "--type", "osis", "--id", "has space", "x"],
        "job id",
    ),
    (
        "timeout not a number",
        &["submit", "--type", "osis", "--timeout", "banana", "x"],
        "--timeout",
    ),
    (
        "env without a name",
        &["submit", "--type", "osis", "--env", "=v", "x"],
        "environment variable",
    ),
    (
        "env without =",
        &["submit", "--type", "osis", "--env", "novalue", "x"],
        "KEY=VALUE",
    ),
    (
        "delay not a duration",
        &["submit", "--type", "osis", "--delay", "banana", "x"],
        "--delay",
    ),
    (
        "at not a time",
        &["submit", "--type", "osis", "--at", "yesterday", "x"],
        "--at",
    ),
    (
        "delay and at",
        &[
            "submit",
            "--type",
            "osis",
            "--delay",
            "1s",
            "--at",
            "2030-01-01T00:00:00Z",
            "x",
        ],
        "cannot be used with",
    ),
    (
        "after a bad id",
        &["submit", "--type", "osis", "--after", "no such", "x"],
        "job id",
    ),
    (
        "after a missing job",
        &["submit", "--type", "osis", "--after", "nosuchjob", "x"],
        "prerequisite nosuchjob does not exist",
    ),
    (
        "script file missing",
        &["submit", "--type", "osis", "--file", "/no/such/file"],
        "/no/such/file",
    ),
    (
        "unique ttl of 0",
        &[
            "submit",
            "--type",
            "osis",
            "--unique",
            "k",
            "--unique-ttl",
            "0",
            "x",
        ],
        "unique_ttl",
    ),
    ("no script", &["submit", "--type", "osis"], "<SCRIPT>"),
    ("status of a bad id", &["status", "has space"], "job id"),
    (
        "status of a missing job",
        &["status", "nosuchjob"],
        "not found",
    ),
    ("stop a missing job", &["stop", "nosuchjob"], "not found"),
    (
        "requeue a missing job",
        &["requeue", "nosuchjob"],
        "not found",
    ),
    ("track a missing job", &["track", "nosuchjob"], "not found"),
    (
        "jobs of a bogus status",
        &["jobs", "--status", "bogus"],
        "not a status",
    ),
    (
        "jobs limit not a number",
        &["jobs", "--limit", "abc"],
        "--limit",
    ),
    (
        "events of a bad type",
        &["events", "--type", "bad type"],
        "script type",
    ),
    (
        "dead letter of a missing job",
        &["dead", "show", "nosuchjob"],
        "no dead letter",
    ),
    (
        "retry a missing dead letter",
        &["dead", "retry", "nosuchjob"],
        "nothing was changed",
    ),
    (
        "cron with a bad schedule",
        &["cron", "add", "nightly", "not a cron", "x"],
        "not a cron",
    ),
    (
        "cron minute 61",
        &["cron", "add", "nightly", "61 * * * *", "x"],
        "61",
    ),
    (
        "remove a missing cron",
        &["cron", "remove", "nosuch"],
        "no recurring job",
    ),
    ("pause a bad type", &["pause", "bad type"], "script type"),
    ("resume a bad type", &["resume", "bad type"], "script type"),
    (
        "queue retries not a number",
        &["queue", "set", "osis", "--retries", "abc"],
        "--retries",
    ),
    (
        "queue rate not a rate",
        &["queue", "set", "osis", "--rate", "5/x"],
        "window",
    ),
    (
        "queue timeout without a unit",
        &["queue", "set", "osis", "--timeout", "5"],
        "time unit",
    ),
    (
        "pool of 0",
        &["--pool-size", "0", "status", "j1"],
        "--pool-size",
    ),
    (
        "namespace with a space",
        &["--namespace", "a b", "status", "j1"],
        "namespace",
    ),
    (
        "config file missing",
        &["--config", "/no/such.toml", "status", "j1"],
        "/no/such.toml",
    ),
    (
        "worker of concurrency 0",
        &["worker", "--concurrency", "0"],
        "concurrency",
    ),
    (
        "broker lease of 0",
        &["broker", "--lease-ms", "0"],
        "--lease-ms",
    ),
    (
        "run wait not a number",
        &["run", "--type", "osis", "--wait", "banana", "x"],
        "--wait",
    ),
];

/// URLs that are not a Redis (each with `status j1`).
const URLS: &[(&str, &str, &str)] = &[
    ("an http URL", "http://nope", "not a Redis URL scheme"),
    (
        "no server there",
        "redis://127.0.0.1:1",
        "cannot reach Redis",
    ),
    (
        "a port that is not a number",
        "redis://host:notaport",
        "not a valid Redis URL",
    ),
    ("no scheme", "nope", "no scheme"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_ends_in_a_clear_error_and_changes_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let seed = NewJob::builder("osis", "x").id("j1").build().unwrap();
    client.submit(&seed).await.unwrap();
    let before = snapshot(&server).await;
    let mut cases = 0;

    for (case, args, needle) in CLI {
        let (code, _, stderr) = hero_cli(&url, args);
        assert_ne!(code, 0, "{case}: exit non-zero");
        judged(case, &stderr, needle);
        assert_eq!(snapshot(&server).await, before, "{case}: nothing changed");
        cases += 1;
    }
    for (case, bad_url, needle) in URLS {
        let (code, _, stderr) = hero_cli(bad_url, &["status", "j1"]);
        assert_ne!(code, 0, "{case}");
        judged(case, &stderr, needle);
        let err = Client::with_options(ClientOptions::new(*bad_url))
            .await
            .err();
        judged(
            case,
            &err.expect("the API refuses it too").to_string(),
            needle,
        );
        cases += 1;
    }
    assert_eq!(snapshot(&server).await, before);

    // the Rust API
    let api: Vec<(&str, Result<NewJob, Error>, &str)> = vec![
        (
            "API: type",
            NewJob::builder("bad type", "x").build(),
            "script type",
        ),
        (
            "API: group",
            NewJob::builder("osis", "x").group("a:b").build(),
            "group",
        ),
        (
            "API: priority",
            NewJob::builder("osis", "x").priority(10).build(),
            "priority",
        ),
        (
            "API: id",
            NewJob::builder("osis", "x").id("has space").build(),
            "job id",
        ),
        (
            "API: script too big",
            NewJob::builder("osis", "x".repeat(hero_protocol::MAX_SCRIPT_BYTES + 1)).build(),
            "script",
        ),
        (
            "API: log path outside",
            NewJob::builder("osis", "x")
                .log_path("../../etc/passwd")
                .build(),
            "log",
        ),
        (
            "API: log path absolute",
            NewJob::builder("osis", "x").log_path("/var/log/x").build(),
            "log",
        ),
        (
            "API: env name",
            NewJob::builder("osis", "x").env("", "v").build(),
            "environment variable",
        ),
    ];
    for (case, r, needle) in api {
        judged(case, &r.expect_err(case).to_string(), needle);
        cases += 1;
    }
    judged(
        "API: JobId",
        &JobId::new("").unwrap_err().to_string(),
        "job id",
    );
    judged(
        "API: Priority",
        &Priority::new(42).unwrap_err().to_string(),
        "priority",
    );
    let missing = JobId::new("nosuchjob").unwrap();
    judged(
        "API: get",
        &client.get(&missing).await.unwrap_err().to_string(),
        "not found",
    );
    judged(
        "API: stop",
        &client.stop(&missing).await.unwrap_err().to_string(),
        "not found",
    );
    let orphan = NewJob::builder("osis", "x")
        .after("nosuchjob")
        .build()
        .unwrap();
    judged(
        "API: after a missing job",
        &client.submit(&orphan).await.unwrap_err().to_string(),
        "does not exist",
    );
    cases += 5;
    assert_eq!(snapshot(&server).await, before, "the API changed nothing");

    // a record edited by hand: `hero status` names the field, exit 1, nothing changed
    let mut raw = server.conn().await;
    for (n, (case, field, value, needle)) in [
        ("record: status", "status", &b"bogus"[..], "status"),
        ("record: timeout", "timeout", b"banana", "timeout"),
        ("record: not UTF-8", "timeout", b"\xff\xfe", "unreadable"),
        ("record: attempts", "attempts", b"many", "attempts"),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("edited-{n}");
        client
            .submit(
                &NewJob::builder("edited", "x")
                    .id(id.clone())
                    .build()
                    .unwrap(),
            )
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(job_key(&id))
            .arg(field)
            .arg(value)
            .query_async(&mut raw)
            .await
            .unwrap();
        let edited = snapshot(&server).await;
        let (code, stdout, stderr) = hero_cli(&url, &["status", &id]);
        assert_ne!(code, 0, "{case}");
        judged(case, &format!("{stdout}{stderr}"), needle);
        assert!(
            stdout.contains(field) || stderr.contains(field),
            "{case}: names {field}"
        );
        assert_eq!(
            snapshot(&server).await,
            edited,
            "{case}: reading changed nothing"
        );
        cases += 1;
    }
    // a field this version does not know is no error (SPEC §4.7: a newer version wrote it):
    // `hero status` exits 0 and shows it as it is
    client
        .submit(
            &NewJob::builder("edited", "x")
                .id("edited-unknown")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(job_key("edited-unknown"))
        .arg("colour")
        .arg("blue")
        .query_async(&mut raw)
        .await
        .unwrap();
    let (code, stdout, stderr) = hero_cli(&url, &["status", "edited-unknown"]);
    assert_eq!(code, 0, "an unknown field: {stdout}{stderr}");
    assert!(stdout.contains("colour = \"blue\""), "{stdout}");
    let (code, stdout, _) = hero_cli(&url, &["status", "edited-unknown", "--json"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("\"unknown_fields\":{\"colour\":\"blue\"}"),
        "{stdout}"
    );

    // the HTTP API: a broker with an admin token
    let (broker, base) = http_broker(&url, Some("catalogue-admin-token"), &[]).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let before_http = snapshot(&server).await;
    for (case, post, path, token, status, needle) in [
        (
            "HTTP: bogus status",
            false,
            "/api/jobs?status=bogus",
            true,
            400,
            "status",
        ),
        (
            "HTTP: limit not a number",
            false,
            "/api/jobs?limit=abc",
            true,
            400,
            "limit",
        ),
        (
            "HTTP: bad job id",
            false,
            "/api/jobs/has%20space",
            true,
            400,
            "job id",
        ),
        (
            "HTTP: missing job",
            false,
            "/api/jobs/nosuchjob",
            true,
            404,
            "not found",
        ),
        (
            "HTTP: stop a missing job",
            true,
            "/api/jobs/nosuchjob/stop",
            true,
            404,
            "not found",
        ),
        ("HTTP: no token", false, "/api/queues", false, 401, "token"),
        (
            "HTTP: wrong method",
            false,
            "/api/dead/purge",
            true,
            405,
            "POST",
        ),
        (
            "HTTP: no such endpoint",
            false,
            "/api/nope",
            true,
            404,
            "no such",
        ),
    ] {
        let url = format!("{base}{path}");
        let mut req = if post {
            http.post(&url).header("content-type", "application/json")
        } else {
            http.get(&url)
        };
        if token {
            req = req.bearer_auth("catalogue-admin-token");
        }
        let r = req.send().await.unwrap();
        let code = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert_eq!(code, status, "{case}: {body}");
        judged(case, &body, needle);
        cases += 1;
    }
    assert_eq!(
        snapshot(&server).await,
        before_http,
        "the HTTP API changed nothing"
    );
    assert!(cases >= 40, "the catalogue holds {cases} cases");

    // and the system still runs jobs: a worker takes the seed, and a record edited by hand
    // ends `error` naming its field while the worker goes on
    let worker = test_worker(&url, "osis,edited", "w", &["--concurrency", "2"]);
    worker.expect_line("ready", Duration::from_secs(20)).await;
    let fresh = NewJob::builder("osis", "x")
        .id("after-the-catalogue")
        .build()
        .unwrap();
    client.submit(&fresh).await.unwrap();
    all_finished(
        &server,
        &["j1".into(), "after-the-catalogue".into()],
        Duration::from_secs(30),
    )
    .await;
    let (status, error) = hero_testkit::wait_for(
        "the record edited by hand to end",
        Duration::from_secs(30),
        || {
            let mut raw = raw.clone();
            async move {
                let (s, e): (Option<String>, Option<String>) = redis::cmd("HMGET")
                    .arg(job_key("edited-1"))
                    .arg("status")
                    .arg("error")
                    .query_async(&mut raw)
                    .await
                    .ok()?;
                (s.as_deref() == Some("error"))
                    .then(|| (s.unwrap_or_default(), e.unwrap_or_default()))
            }
        },
    )
    .await;
    assert_eq!(status, "error");
    assert!(
        error.contains("timeout"),
        "the error names the field: {error}"
    );
    let more = NewJob::builder("osis", "x")
        .id("still-running")
        .build()
        .unwrap();
    client.submit(&more).await.unwrap();
    all_finished(&server, &["still-running".into()], Duration::from_secs(30)).await;
    assert!(worker.output().iter().all(|l| !l.contains("panicked")));
    drop(broker);
}
