//! Who may do what through the HTTP face, against a real `hero broker` process and redis-server:
//! 401/403 on every mutating endpoint with nothing changed, bad input answered 4xx with nothing
//! changed, a non-loopback bind without a token refused, reads refused without a token and
//! secrets redacted unless the admin token asks.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, Status};
use hero_testkit::{
    api_get, api_post, dead_letter, hero_cli, http_broker, http_client, known_api_state,
    RedisServer,
};
use serde_json::{json, Value};

const TOKEN: &str = "s3cret-token-0123456789";

/// A GET with the admin token.
async fn get(base: &str, path: &str) -> (u16, Value) {
    api_get(base, path, Some(TOKEN)).await
}

/// What a state holds, to show that a refused request changed nothing.
async fn snapshot(base: &str) -> (Value, Value, Value) {
    let q = get(base, "/api/queues").await.1;
    // the rates and histograms move with the clock: compare the counts
    let counts = q["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            json!([
                q["queue"],
                q["waiting"],
                q["running"],
                q["delayed"],
                q["finished"],
                q["failed"],
                q["dead"]
            ])
        })
        .collect::<Vec<_>>();
    (
        Value::Array(counts),
        get(base, "/api/dead").await.1,
        get(base, "/api/jobs/idle-0").await.1["status"].clone(),
    )
}

#[tokio::test]
async fn mutating_endpoints_need_the_token_and_bad_input_changes_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = known_api_state(&client).await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let before = snapshot(&base).await;
    let mutating = [
        ("/api/jobs/idle-0/stop", "{}"),
        ("/api/jobs/idle-0/requeue", "{}"),
        ("/api/jobs/idle-0/track", "{}"),
        ("/api/dead/retry", "{\"ids\":[\"dead-1\"]}"),
        ("/api/dead/purge", "{\"all\":true}"),
        ("/api/audit", "{\"fix\":true}"),
    ];
    for (path, body) in mutating {
        let (code, v) = api_post(&base, path, None, body).await;
        assert_eq!(code, 401, "{path} without a token: {v}");
        assert!(v["error"].as_str().unwrap().contains("Bearer"), "{v}");
        let (code, v) = api_post(&base, path, Some("wrong"), body).await;
        assert_eq!(code, 403, "{path} with a wrong token: {v}");
    }
    // bad input: 4xx with a JSON message, nothing changed
    let bad: [(&str, &str, u16); 7] = [
        ("/api/jobs/no-such-job/stop", "{}", 404),
        ("/api/jobs/idle-0/requeue", "{not json", 400),
        ("/api/jobs/idle-0/requeue", "{\"type\":\"has space\"}", 400),
        ("/api/jobs/idle-0/requeue", "{\"priority\":12}", 400),
        ("/api/dead/retry", "{\"ids\":[\"nobody\"]}", 404),
        ("/api/dead/retry", "{}", 400),
        (
            "/api/dead/purge",
            "{\"ids\":[\"dead-1\"],\"all\":true}",
            400,
        ),
    ];
    for (path, body, want) in bad {
        let (code, v) = api_post(&base, path, Some(TOKEN), body).await;
        assert_eq!(code, want, "{path} {body}: {v}");
        assert!(v["error"].is_string(), "{path}: a JSON error: {v}");
    }
    let (code, v) = get(&base, "/api/jobs?status=bogus").await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = get(&base, "/api/jobs/bad%20id").await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = get(&base, "/api/jobs/never-was").await;
    assert_eq!(code, 404, "{v}");
    let (code, _) = get(&base, "/api/no-such-endpoint").await;
    assert_eq!(code, 404);
    let huge = format!("{{\"ids\":[\"{}\"]}}", "x".repeat(200 * 1024));
    let r = http_client()
        .post(format!("{base}/api/dead/retry"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413, "an oversized body is refused");
    let v: serde_json::Value = r.json().await.expect("413 is answered in JSON");
    assert!(v["error"].as_str().unwrap().contains("64 KiB"), "{v}");
    assert_eq!(snapshot(&base).await, before, "nothing changed");

    // with the token: each mutating endpoint does its work
    let (code, v) = api_post(&base, "/api/jobs/idle-0/stop", Some(TOKEN), "").await;
    assert_eq!((code, v["stop"].as_str()), (200, Some("cancelled")), "{v}");
    let (code, v) = api_post(
        &base,
        "/api/jobs/idle-1/requeue",
        Some(TOKEN),
        "{\"type\":\"q1\"}",
    )
    .await;
    assert_eq!((code, v["queue"].as_str()), (200, Some("q1")), "{v}");
    let r = client
        .wait(&JobId::new("idle-1").unwrap(), Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished, "the requeued job ran in q1");
    let (code, v) = api_post(
        &base,
        "/api/dead/retry",
        Some(TOKEN),
        "{\"ids\":[\"dead-1\"]}",
    )
    .await;
    assert_eq!(
        (code, v["results"][0]["answer"].as_str()),
        (200, Some("requeued")),
        "{v}"
    );
    let (code, v) = api_post(&base, "/api/audit", Some(TOKEN), "{\"fix\":true}").await;
    assert_eq!(code, 200);
    assert_eq!(v["consistent"], true, "{v}");
    let (code, v) = api_post(&base, "/api/jobs/q1-0/track", Some(TOKEN), "").await;
    assert_eq!((code, v["tracked"].as_bool()), (200, Some(true)), "{v}");
    let (_, v) = get(&base, "/api/jobs?tracked=1").await;
    assert_eq!(v["jobs"][0]["id"], "q1-0");
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1);
    dead_letter(&client, "dl2", "dead-2").await;
    let (code, v) = api_post(&base, "/api/dead/purge", Some(TOKEN), "{\"all\":true}").await;
    assert_eq!(code, 200, "{v}");
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["job"] == "dead-2" && r["answer"] == "purged"),
        "{v}"
    );
}

#[tokio::test]
async fn a_non_loopback_bind_without_a_token_is_refused_and_without_one_configured_nothing_mutates()
{
    let server = RedisServer::start();
    let url = server.url();
    let (code, _, err) = hero_cli(&url, &["broker", "--http", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("without a token"), "{err}");
    let (code, _, err) = hero_cli(&url, &["broker", "--http", "not-an-address"]);
    assert_ne!(code, 0);
    assert!(err.contains("is not an address"), "{err}");
    let (code, _, err) = hero_cli(
        &url,
        &[
            "broker",
            "--http",
            "0.0.0.0:0",
            "--http-token",
            TOKEN,
            "--http-open",
        ],
    );
    assert_eq!(code, 2, "--http-open is for a loopback only: {err}");
    assert!(err.contains("trusted loopback"), "{err}");
    // loopback without a token: the broker makes one, prints it in its link, and nothing is
    // read or changed without it
    let (mut broker, base) = hero_testkit::http_broker(&url, None, &[]).await;
    assert_eq!(api_get(&base, "/api/queues", None).await.0, 401);
    assert_eq!(api_get(&base, "/api/queues", Some("anything")).await.0, 403);
    let (code, v) = api_post(&base, "/api/dead/purge", Some("anything"), "{\"all\":true}").await;
    assert_eq!(code, 403, "{v}");
    let out = broker.output();
    let link = out
        .iter()
        .find(|l| l.starts_with("http: "))
        .unwrap()
        .clone();
    let made = out
        .iter()
        .find_map(|l| l.strip_prefix("http token: "))
        .expect("the token it made, on the terminal")
        .trim()
        .to_string();
    assert_eq!(made.len(), 32, "{made}");
    assert!(
        !link.contains(&made),
        "the link never carries the token: {link}"
    );
    assert_eq!(api_get(&base, "/api/queues", Some(&made)).await.0, 200);
    // the link's one-time code: a session for its first visit, refused after
    let code = link.split("?code=").nth(1).expect("a one-time code").trim();
    let visit = || {
        hero_testkit::no_redirect()
            .get(format!("{base}/?code={code}"))
            .header("sec-fetch-site", "none")
            .send()
    };
    let first = visit().await.unwrap();
    assert_eq!(first.status().as_u16(), 303);
    let cookie = first.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        !cookie.contains(&made) && !cookie.contains(code),
        "{cookie}"
    );
    assert_eq!(visit().await.unwrap().status().as_u16(), 401, "spent");
    // a code of a broker with other tokens on the same Redis is no good here, and stays unspent
    // for its own broker
    let other = hero_testkit::http_broker(&url, Some(TOKEN), &[]).await;
    let fresh_code = hero_broker::http::signin::mint_code(
        &hero_client::Client::connect(&url).await.unwrap(),
        &made_key(&made),
        hero_broker::http::Role::Admin,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let on_other = hero_testkit::no_redirect()
        .get(format!("{}/?code={fresh_code}", other.1))
        .header("sec-fetch-site", "none")
        .send()
        .await
        .unwrap();
    assert_eq!(on_other.status().as_u16(), 401, "another broker's code");
    let on_own = hero_testkit::no_redirect()
        .get(format!("{base}/?code={fresh_code}"))
        .header("sec-fetch-site", "none")
        .send()
        .await
        .unwrap();
    assert_eq!(
        on_own.status().as_u16(),
        303,
        "still good on its own broker"
    );
    broker.kill9();
    // --http-open: reads without a token on loopback, changes still refused
    let (_open, base) = hero_testkit::http_broker(&url, Some(TOKEN), &["--http-open"]).await;
    assert_eq!(api_get(&base, "/api/queues", None).await.0, 200);
    let (code, _) = api_post(&base, "/api/dead/purge", None, "{\"all\":true}").await;
    assert_eq!(code, 401);
}

/// Nobody reads a job's secrets without the admin token asking for them: without a token a
/// read is refused, the read-only token sees `env_vars` values as `***` and may not run the
/// audit or change anything, the admin token sees them only with `?reveal=1`; a browser that
/// opens the printed link gets a session cookie (not the token) and the page without the token in its address.
#[tokio::test]
async fn reads_need_a_token_and_env_values_stay_redacted_unless_the_admin_asks() {
    const READ: &str = "read-only-token-0123456789";
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let job = hero_protocol::NewJob::builder("sec", "x")
        .id("secret-1")
        .env("DB_PASSWORD", "hunter2")
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    let (_broker, base) =
        hero_testkit::http_broker(&url, Some(TOKEN), &["--http-read-token", READ]).await;
    let path = "/api/jobs/secret-1";
    let (code, v) = api_get(&base, path, None).await;
    assert_eq!(code, 401, "{v}");
    assert!(!v.to_string().contains("hunter2"), "{v}");
    let (code, v) = api_get(&base, path, Some(READ)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["env_vars"]["DB_PASSWORD"], "***", "{v}");
    assert!(!v.to_string().contains("hunter2"), "{v}");
    assert_eq!(
        api_get(&base, &format!("{path}?reveal=1"), Some(READ))
            .await
            .0,
        403
    );
    assert_eq!(api_get(&base, "/api/audit", Some(READ)).await.0, 403);
    assert_eq!(api_get(&base, "/api/audit", None).await.0, 401);
    let (code, _) = api_post(&base, "/api/jobs/secret-1/stop", Some(READ), "").await;
    assert_eq!(code, 403);
    let (_, v) = api_get(&base, path, Some(TOKEN)).await;
    assert_eq!(
        v["env_vars"]["DB_PASSWORD"], "***",
        "the admin sees it only on request: {v}"
    );
    let (_, v) = api_get(&base, &format!("{path}?reveal=1"), Some(TOKEN)).await;
    assert_eq!(v["env_vars"]["DB_PASSWORD"], "hunter2", "{v}");
    let (code, v) = api_get(&base, "/api/audit", Some(TOKEN)).await;
    assert_eq!((code, v["truncated"].as_bool()), (200, Some(false)), "{v}");
    // a page without a token answers a page that asks for one; the link sets a cookie
    let (code, page) = {
        let r = http_client()
            .get(format!("{base}/jobs/secret-1"))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(code, 401);
    assert!(
        page.contains("sign-in") && !page.contains("hunter2"),
        "{page}"
    );
    let no_redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // a token in the address signs nothing in (a link from another site could sign the
    // browser in): the form again, no cookie
    let r = no_redirect
        .get(format!("{base}/jobs/secret-1?token={READ}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    // the form's POST does
    let r = no_redirect
        .post(format!("{base}/sign-in"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={READ}&next=%2Fjobs%2Fsecret-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/jobs/secret-1");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with("hero_session=")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && !cookie.contains(READ),
        "a signed session, never the token: {cookie}"
    );
    let r = http_client()
        .get(format!("{base}/jobs/secret-1"))
        .header("cookie", cookie.split(';').next().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(!r.text().await.unwrap().contains("hunter2"));
    // health checks stay open for probes
    let r = http_client()
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// The session key of a broker that made admin token `made` and has no read token.
fn made_key(made: &str) -> String {
    hero_broker::http::session::key_of(Some(made), None)
}
