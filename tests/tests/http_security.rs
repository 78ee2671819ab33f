//! The HTTP face attacked as a program on the same machine would: a page on another port of
//! 127.0.0.1 in a real Chromium, crafted requests (foreign origins, foreign hosts, redirects off
//! the server, bad cursors), hundreds of idle sockets under a low open-file limit, and 21 live
//! streams. Each test names the finding of issue 51 it closes; each failed on the code before.

use std::time::Duration;

use fantoccini::Locator;
use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{
    api_get, api_post, browser, hero_cli, http_broker, http_client, known_api_state, run_to_finish,
    send, session, shot, sign_in_browser, wait_for, InProcWorker, RedisServer,
};
use hero_worker::{Outcome, Worker};

const TOKEN: &str = "security-admin-token-0123";
const READ: &str = "security-read-token-0123";

async fn tracked(base: &str) -> usize {
    let (_, v) = api_get(base, "/api/jobs?tracked=1", Some(TOKEN)).await;
    v["jobs"].as_array().map_or(0, Vec::len)
}

/// A page served from another port of 127.0.0.1: it posts to the broker as a form and as a
/// `no-cors` fetch, the two requests a page may send to another origin without asking it.
async fn attacker_page(broker_port: u16) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let html = format!(
        r#"<!doctype html><html><body><h1>cat pictures</h1>
<form id="f" method="POST" action="http://127.0.0.1:{broker_port}/api/dead/purge" enctype="text/plain">
<input name='{{"all":true,"x":"' value='"}}'></form>
<script>
fetch("http://127.0.0.1:{broker_port}/api/jobs/q1-1/track", {{method: "POST", mode: "no-cors", credentials: "include", headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}})
  .finally(() => {{ document.title = "sent"; document.getElementById("f").submit(); }});
</script></body></html>"#
    );
    let task = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = s.write_all(answer.as_bytes()).await;
        }
    });
    (port, task)
}

/// Finding 1 (same-site CSRF) in a real browser: the operator signed in, then opened a page on
/// another port of the same host; its form and fetch reach the broker with the session cookie
/// (same site), and change nothing. The dashboard's own page still changes jobs.
#[tokio::test]
async fn a_page_on_another_port_cannot_change_anything_through_the_operators_browser() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = known_api_state(&client).await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let broker_port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    let (evil, _server) = attacker_page(broker_port).await;
    let (_driver, b, _profile) = browser(false).await;
    sign_in_browser(&b, &base, TOKEN).await;
    assert!(!b.current_url().await.unwrap().as_str().contains(TOKEN));

    b.goto(&format!("http://127.0.0.1:{evil}/")).await.unwrap();
    // the form's POST navigates to the broker's answer: the attack has run
    let purge = format!("{base}/api/dead/purge");
    let b2 = b.clone();
    wait_for(
        "the attacker's form to post",
        Duration::from_secs(20),
        || {
            let b = b2.clone();
            let purge = purge.clone();
            async move { (b.current_url().await.ok()?.as_str() == purge).then_some(()) }
        },
    )
    .await;
    shot(&b, "csrf-refused").await;
    let answer = b
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(answer.contains("another origin"), "{answer}");
    assert_eq!(tracked(&base).await, 0, "the no-cors fetch changed nothing");
    let (code, v) = api_get(&base, "/api/dead/dead-1", Some(TOKEN)).await;
    assert_eq!(code, 200, "the form purged nothing: {v}");

    // the dashboard's own page, with the same session, may change jobs
    b.goto(&format!("{base}/")).await.unwrap();
    let status = b
        .execute(
            "return fetch('/api/jobs/q1-1/track', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'}).then(r => r.status)",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(tracked(&base).await, 1);
    b.close().await.unwrap();
}

/// Findings 1 and 10: a change needs this origin and JSON; a cookie alone, a foreign origin or a
/// form's type is refused, whatever the credentials; the sign-in is a POST.
#[tokio::test]
async fn changes_come_from_this_origin_as_json_and_the_sign_in_is_a_post() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = known_api_state(&client).await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let host = base.trim_start_matches("http://").to_string();
    let cookie = session(&base, TOKEN).await;
    let track = format!("{base}/api/jobs/q1-0/track");
    let json = ("content-type", "application/json");
    let bearer = format!("Bearer {TOKEN}");
    let refused: [&[(&str, &str)]; 7] = [
        &[("cookie", &cookie), ("sec-fetch-site", "none"), json],
        &[("cookie", &cookie), ("origin", "http://evil.example"), json],
        &[("cookie", &cookie), ("origin", "http://127.0.0.1:1"), json],
        &[("cookie", &cookie), ("sec-fetch-site", "same-site"), json],
        &[("cookie", &cookie), json],
        &[("cookie", &cookie), ("origin", "null"), json],
        &[
            ("authorization", &bearer),
            ("origin", "http://evil.example"),
            json,
        ],
    ];
    for headers in refused {
        let (code, _, body) = send(reqwest::Method::POST, &track, headers, "{}").await;
        assert_eq!(code, 403, "{headers:?}: {body}");
        assert!(body.contains("another origin"), "{body}");
    }
    let origin = format!("http://{host}");
    let (code, _, body) = send(
        reqwest::Method::POST,
        &track,
        &[
            ("cookie", &cookie),
            ("origin", &origin),
            ("content-type", "text/plain"),
        ],
        "{}",
    )
    .await;
    assert_eq!(code, 415, "a form's type: {body}");
    assert!(body.contains("application/json"), "{body}");
    assert_eq!(tracked(&base).await, 0, "nothing changed");
    let (code, _, body) = send(
        reqwest::Method::POST,
        &track,
        &[("cookie", &cookie), ("origin", &origin), json],
        "{}",
    )
    .await;
    assert_eq!(code, 200, "the dashboard's own request: {body}");
    let (code, v) = api_post(&base, "/api/jobs/q1-1/track", Some(TOKEN), "{}").await;
    assert_eq!(
        code, 200,
        "a program with a bearer token and no origin: {v}"
    );
    assert_eq!(tracked(&base).await, 2);

    // a page of another port may not make the browser fetch with the session (an image, a
    // no-cors fetch of the audit); following a link here shows a page but runs no audit
    let subresource = [
        ("cookie", cookie.as_str()),
        ("sec-fetch-site", "same-site"),
        ("sec-fetch-mode", "no-cors"),
    ];
    for path in ["/audit?run=1", "/api/audit", "/api/queues"] {
        let (code, _, body) = send(
            reqwest::Method::GET,
            &format!("{base}{path}"),
            &subresource,
            "",
        )
        .await;
        assert_eq!(code, 403, "{path}: {body}");
    }
    let (code, _, page) = send(
        reqwest::Method::GET,
        &format!("{base}/audit?run=1"),
        &[
            ("cookie", &cookie),
            ("sec-fetch-site", "same-site"),
            ("sec-fetch-mode", "navigate"),
        ],
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        !page.contains("audit-result"),
        "a link from another site runs no audit"
    );
    let (code, _, body) = send(
        reqwest::Method::GET,
        &format!("{base}/api/queues"),
        &[
            ("authorization", &bearer),
            ("host", &host),
            ("host", "evil.example"),
        ],
        "",
    )
    .await;
    assert_eq!(code, 400, "two Host headers: {body}");

    // the sign-in page posts its form; a wrong token gets it again, no cookie
    let (code, _, page) = send(reqwest::Method::GET, &format!("{base}/jobs"), &[], "").await;
    assert_eq!(code, 401);
    assert!(
        page.contains(r#"method="post" action="/sign-in""#),
        "{page}"
    );
    let sign_in = format!("{base}/sign-in");
    let form = ("content-type", "application/x-www-form-urlencoded");
    let (code, headers, _) = send(
        reqwest::Method::POST,
        &sign_in,
        &[form, ("origin", &origin)],
        &format!("token={READ}x&next=%2Fjobs"),
    )
    .await;
    assert_eq!(code, 403);
    assert!(headers.get("set-cookie").is_none());
    let (code, headers, _) = send(
        reqwest::Method::POST,
        &sign_in,
        &[form, ("origin", &origin)],
        &format!("token={TOKEN}&next=%2F%2Fevil.example%2Fjobs"),
    )
    .await;
    assert_eq!(code, 303);
    assert_eq!(
        headers["location"], "/evil.example/jobs",
        "never off the server"
    );
    let set = headers["set-cookie"].to_str().unwrap();
    assert!(
        set.starts_with("hero_session=") && !set.contains(TOKEN),
        "{set}"
    );
    let (code, _, _) = send(
        reqwest::Method::POST,
        &sign_in,
        &[form, ("origin", "http://127.0.0.1:1")],
        &format!("token={TOKEN}"),
    )
    .await;
    assert_eq!(code, 403, "a sign-in from another origin (login CSRF)");
    for next in [
        "%2F%09%2Fevil.example",
        "%2F%5C%09%5Cevil.example",
        "%2F%7F",
    ] {
        let (code, headers, _) = send(
            reqwest::Method::POST,
            &sign_in,
            &[form, ("origin", &origin)],
            &format!("token={TOKEN}&next={next}"),
        )
        .await;
        assert_eq!(
            (code, headers["location"].to_str().unwrap()),
            (303, "/"),
            "{next}"
        );
    }
}

/// Finding 3 (DNS rebinding): a request naming another host is refused before any read; the
/// health checks answer any host; `--http-host` names the ones a proxy uses.
#[tokio::test]
async fn a_request_naming_a_foreign_host_reads_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &["--http-open"]).await;
    let port = base.rsplit(':').next().unwrap();
    for path in ["/api/queues", "/", "/assets/app.js", "/api/jobs/x-1"] {
        let (code, _, body) = send(
            reqwest::Method::GET,
            &format!("{base}{path}"),
            &[("host", &format!("rebind.evil.example:{port}"))],
            "",
        )
        .await;
        assert_eq!(code, 421, "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(v["error"].as_str().unwrap().contains("--http-host"), "{v}");
    }
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (code, _, _) = send(
            reqwest::Method::GET,
            &format!("{base}/api/queues"),
            &[("host", &host)],
            "",
        )
        .await;
        assert_eq!(code, 200, "{host}");
    }
    let (code, _, _) = send(
        reqwest::Method::GET,
        &format!("{base}/healthz"),
        &[("host", "anything.example")],
        "",
    )
    .await;
    assert_eq!(code, 200);
    let (_named, base) = http_broker(
        &url,
        Some(TOKEN),
        &["--http-open", "--http-host", "hero.test"],
    )
    .await;
    let (code, _, _) = send(
        reqwest::Method::GET,
        &format!("{base}/api/queues"),
        &[("host", "hero.test")],
        "",
    )
    .await;
    assert_eq!(code, 200);
    let (code, _, _) = send(
        reqwest::Method::GET,
        &format!("{base}/api/queues"),
        &[("host", "other.test")],
        "",
    )
    .await;
    assert_eq!(code, 421);
}

/// Findings 7, 8, 11 and 12: no redirect leaves the server; every answer carries the security
/// headers; bad cursors, queries and bodies are answered 400 in JSON, never with Redis's text;
/// bidi controls in a job's output are shown, not obeyed; a short token is refused at start.
#[tokio::test]
async fn answers_carry_security_headers_and_errors_are_json() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let _w = InProcWorker::spawn(Worker::builder(client.clone()).types(["bidi"]).handler(
        |_j: hero_protocol::Job, _| async { Outcome::Done("invoice\u{202E}fdp.exe".into()) },
    ));
    run_to_finish(
        &client,
        &[NewJob::builder("bidi", "x").id("bidi-1").build().unwrap()],
    )
    .await;
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;

    let (code, headers, _) = send(
        reqwest::Method::POST,
        &format!("{base}/sign-in"),
        &[("content-type", "application/x-www-form-urlencoded")],
        &format!("token={TOKEN}&next=%2F%2Fevil.example%2F"),
    )
    .await;
    assert_eq!(code, 303);
    let to = headers["location"].to_str().unwrap();
    assert!(
        to.starts_with('/') && !to.starts_with("//") && !to.starts_with("/\\"),
        "{to}"
    );

    let auth = format!("Bearer {TOKEN}");
    for (path, with_token) in [
        ("/", true),
        ("/jobs", false),
        ("/api/queues", true),
        ("/api/no-such", true),
        ("/assets/app.js", false),
        ("/healthz", false),
        ("/metrics", true),
    ] {
        let headers_in: &[(&str, &str)] = if with_token {
            &[("authorization", &auth)]
        } else {
            &[]
        };
        let (_, h, _) = send(
            reqwest::Method::GET,
            &format!("{base}{path}"),
            headers_in,
            "",
        )
        .await;
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
            "{path}: {csp}"
        );
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "same-origin", "{path}");
        if path != "/assets/app.js" {
            assert_eq!(h["cache-control"], "no-store", "{path}");
        }
    }

    for q in [
        "status=finished&cursor=r:abc",
        "status=waiting&cursor=d:abc",
        "status=waiting&cursor=z:18446744073709551615",
        "status=started&cursor=s:0:abc",
        "limit=abc",
        // issue 61: past 64 bits, Redis's error before
        "queue=rhai&cursor=18446744073709551616-0",
        "status=started&cursor=s:0:1-99999999999999999999999",
        "cursor=18446744073709551616",
    ] {
        let (code, v) = api_get(&base, &format!("/api/jobs?{q}"), Some(TOKEN)).await;
        assert_eq!(code, 400, "{q}: {v}");
        let e = v["error"].as_str().unwrap();
        assert!(!e.contains("ERR") && !e.contains("Redis"), "{q}: {e}");
    }

    let (code, v) = api_get(
        &base,
        "/api/dead?cursor=1-99999999999999999999999",
        Some(TOKEN),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    // a method the API has no route for: 405, as http.md says (not the JSON check's 415)
    let r = http_client()
        .delete(format!("{base}/api/queues"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);

    // issue 61: a field no view knows (an extension's), and a terminal escape in the output
    let mut raw = server.conn().await;
    redis::cmd("HSET")
        .arg(hero_testkit::job_key("bidi-1"))
        .arg("x_note")
        .arg("note\u{2066}gpj.exe\u{1b}[31m\u{2028}\u{200B}")
        .arg("log")
        .arg(r#"["clear \u001b[2J then \u202e"]"#)
        .query_async::<i64>(&mut raw)
        .await
        .unwrap();
    let r = http_client()
        .get(format!("{base}/jobs/bidi-1"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let page = r.text().await.unwrap();
    assert!(
        !page.contains(['\u{202E}', '\u{2066}', '\u{1b}']),
        "no control character is in the page"
    );
    assert!(
        page.contains("U+202E")
            && page.contains("fdp.exe")
            && page.contains("U+2066")
            && page.contains("U+001B")
            && page.contains("U+2028")
            && page.contains("U+200B"),
        "{page}"
    );
    // the CLI's text output marks them too
    let (code, out, err) = hero_cli(&url, &["status", "bidi-1"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(['\u{202E}', '\u{1b}']), "{out:?}");
    assert!(out.contains("clear U+001B[2J then U+202E"), "{out}");
    let (code, out, err) = hero_cli(&url, &["jobs", "--status", "finished"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains('\u{202E}'), "{out:?}");

    let (code, _, err) = hero_cli(
        &url,
        &["broker", "--http", "127.0.0.1:0", "--http-token", "short"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 16"), "{err}");
}
