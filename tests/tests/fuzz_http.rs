//! Fuzzed HTTP input (issue 28): the API takes paths, query strings, headers and bodies from
//! anyone who can reach it. Random ones, with and without a token, against a real broker
//! process: every answer is a 2xx, 3xx or a 4xx with a body that says what was wrong; never a
//! 5xx, never a hang, and the broker still answers afterwards.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{http_broker, RedisServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const TOKEN: &str = "fuzz-admin-token";

const PATHS: &[&str] = &[
    "/api/queues",
    "/api/actors",
    "/api/jobs",
    "/api/jobs/{}",
    "/api/jobs/{}/stop",
    "/api/jobs/{}/requeue",
    "/api/jobs/{}/track",
    "/api/events",
    "/api/history",
    "/api/audit",
    "/api/dead",
    "/api/dead/{}",
    "/api/dead/retry",
    "/api/dead/purge",
    "/metrics",
    "/",
    "/jobs/{}",
    "/{}",
];

const QUERY_KEYS: &[&str] = &[
    "status",
    "limit",
    "cursor",
    "type",
    "queue",
    "tag",
    "job",
    "kind",
    "since",
    "until",
    "reveal",
    "after",
    "count",
    "token",
    "group",
    "instance",
    "worker",
    "ids",
    "older_than",
];

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9]{0,30}",
        Just("finished".to_string()),
        Just("1".to_string()),
        Just("-1".to_string()),
        Just(String::new()),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    post: bool,
    path: String,
    query: Vec<(String, String)>,
    auth: Option<String>,
    body: Vec<u8>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        0..PATHS.len(),
        prop_oneof![value(), Just("j1".to_string())],
        proptest::collection::vec((0..QUERY_KEYS.len(), value()), 0..4),
        prop_oneof![
            Just(None),
            Just(Some(format!("Bearer {TOKEN}"))),
            any::<String>().prop_map(Some),
        ],
        proptest::collection::vec(any::<u8>(), 0..128),
    )
        .prop_map(|(post, p, seg, q, auth, body)| Case {
            post,
            path: PATHS[p].replace("{}", &pct(&seg)),
            query: q
                .into_iter()
                .map(|(k, v)| (QUERY_KEYS[k].to_string(), v))
                .collect(),
            auth: auth.filter(|a| reqwest::header::HeaderValue::from_str(a).is_ok()),
            body,
        })
}

#[test]
fn random_requests_get_a_clear_answer_and_never_a_server_error() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let (broker, base) = rt.block_on(async {
        let client = Client::connect(&server.url()).await.unwrap();
        for i in 0..5 {
            let job = NewJob::builder("fz", "x")
                .id(format!("j{i}"))
                .build()
                .unwrap();
            client.submit(&job).await.unwrap();
        }
        http_broker(&server.url(), Some(TOKEN), &[]).await
    });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |c| {
        let query: String = c
            .query
            .iter()
            .map(|(k, v)| format!("{k}={}", pct(v)))
            .collect::<Vec<_>>()
            .join("&");
        let url = format!("{base}{}?{query}", c.path);
        let mut req = if c.post {
            http.post(&url).body(c.body.clone())
        } else {
            http.get(&url)
        };
        if let Some(a) = &c.auth {
            req = req.header("authorization", a);
        }
        let (status, body) = rt.block_on(async {
            let r = req
                .send()
                .await
                .expect("the broker answers (no hang, no dropped connection)");
            let status = r.status();
            (status, r.text().await.unwrap_or_default())
        });
        prop_assert!(
            !status.is_server_error(),
            "{} {url}: {status} {body}",
            if c.post { "POST" } else { "GET" }
        );
        if status.is_client_error() {
            prop_assert!(!body.trim().is_empty(), "{url}: a {status} says why");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // still serving
    let ok = rt.block_on(async {
        http.get(format!("{base}/api/queues"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .map(|r| r.status().is_success())
    });
    assert!(matches!(ok, Ok(true)), "the broker still answers: {ok:?}");
    drop(broker);
}
