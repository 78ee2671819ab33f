//! A `hero broker` process serving its HTTP face on a free loopback port, for the HTTP and
//! dashboard tests; requests to its API with or without a token; a known state to read.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::NewJob;
use hero_worker::{Outcome, Worker};
use serde_json::Value;

use crate::{binary, dead_letter, queue_idle, run_to_finish, InProcWorker, Proc};

/// A `hero broker` process serving HTTP on a free loopback port with admin token `token` (none:
/// the broker makes one and prints it in its link), plus `extra` flags; returns it and its base
/// URL (`http://127.0.0.1:<port>`, without the link's `?token=`).
pub async fn http_broker(url: &str, token: Option<&str>, extra: &[&str]) -> (Proc, String) {
    let mut args = vec!["--redis-url", url, "broker", "--http", "127.0.0.1:0"];
    if let Some(t) = token {
        args.extend_from_slice(&["--http-token", t]);
    }
    args.extend_from_slice(extra);
    let p = Proc::spawn(&binary("hero"), &args, &[], None);
    let line = p
        .expect_line("http: http://", Duration::from_secs(30))
        .await;
    let link = line.trim().trim_start_matches("http: ");
    let base = link
        .split('?')
        .next()
        .unwrap_or(link)
        .trim_end_matches('/')
        .to_string();
    (p, base)
}

/// An HTTP client whose requests give up after 20 s.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("an HTTP client")
}

/// A client that does not follow redirects.
pub fn no_redirect() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// The session cookie (`name=value`) a browser gets from the sign-in form with `token`,
/// asking for changes (an admin token's session reads only unless asked).
pub async fn session(base: &str, token: &str) -> String {
    session_for(base, token, true).await
}

/// The session cookie from the sign-in form with `token`, asking for changes or not.
pub async fn session_for(base: &str, token: &str, changes: bool) -> String {
    let body = format!(
        "token={token}&next=%2F{}",
        if changes { "&changes=1" } else { "" }
    );
    let r = no_redirect()
        .post(format!("{base}/sign-in"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .header("origin", base)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "sign-in with {token}");
    let c = r.headers()["set-cookie"].to_str().unwrap();
    c.split(';').next().unwrap().to_string()
}

/// A request with exactly these headers: status, headers, body.
pub async fn send(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = no_redirect().request(method, url).body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

/// A GET of the API with `token` (none: no Authorization header): the status and the JSON body.
pub async fn api_get(base: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = http_client().get(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let r = req.send().await.expect("GET sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("GET body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}")),
    )
}

/// A POST of a JSON `body` to the API with `token`: the status and the JSON body.
pub async fn api_post(base: &str, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut req = http_client()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let r = req.send().await.expect("POST sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("POST body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {path}: {e}: {text}")),
    )
}

/// A known state for the API to show: q1 has 3 finished jobs (`q1-0`, tagged `nightly`, to
/// `q1-2`), idle has 2 waiting (`idle-0`, `idle-1`), dl holds the dead letter `dead-1`. The
/// worker that ran q1 is answered: it serves while kept.
pub async fn known_api_state(client: &Client) -> InProcWorker {
    let w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["q1"])
            .instance("api")
            .handler(|_j: hero_protocol::Job, _| async { Outcome::Done("ok".into()) }),
    );
    let jobs: Vec<NewJob> = (0..3)
        .map(|n| {
            let b = NewJob::builder("q1", "x").id(format!("q1-{n}"));
            if n == 0 { b.tag("nightly") } else { b }
                .build()
                .expect("a valid job")
        })
        .collect();
    run_to_finish(client, &jobs).await;
    queue_idle(client, "idle", "idle", 2).await;
    dead_letter(client, "dl", "dead-1").await;
    w
}
