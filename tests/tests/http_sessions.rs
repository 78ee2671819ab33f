//! Dashboard sessions against real brokers (issues 51 and 61): the cookie is a signed session,
//! never the token; any broker with the same tokens and Redis accepts it, one signed by another
//! token or altered does not; a session reads only unless the operator asked for changes; a
//! session tossed in beside the operator's hides nothing; sign-out ends it on every broker; behind
//! TLS it is `__Host-` and `Secure`, with HSTS.

use hero_testkit::{http_broker, no_redirect, send, session, RedisServer};

const TOKEN: &str = "security-admin-token-0123";
const READ: &str = "security-read-token-0123";

/// The status of `GET /api/queues` on `base` with `cookie`.
async fn read_with(base: &str, cookie: &str) -> u16 {
    send(
        reqwest::Method::GET,
        &format!("{base}/api/queues"),
        &[("cookie", cookie)],
        "",
    )
    .await
    .0
}

/// The status of a change (tracking job x-1) on `base` with `cookie`, from its own origin.
async fn change_with(base: &str, cookie: &str) -> u16 {
    let origin = format!("http://{}", base.trim_start_matches("http://"));
    send(
        reqwest::Method::POST,
        &format!("{base}/api/jobs/x-1/track"),
        &[
            ("cookie", cookie),
            ("origin", &origin),
            ("content-type", "application/json"),
        ],
        "{}",
    )
    .await
    .0
}

/// Finding 2: the cookie is a signed, expiring session, not the token: the token never travels
/// in it, the old cookie holding the token no longer opens anything, a session made by another
/// broker with the same tokens works (a load balancer), one signed by another token or altered
/// does not; behind TLS it is `__Host-` and `Secure`, with HSTS.
#[tokio::test]
async fn the_cookie_is_a_signed_session_any_broker_with_the_tokens_accepts() {
    let server = RedisServer::start();
    let url = server.url();
    let (_a, base_a) = http_broker(&url, Some(TOKEN), &["--http-read-token", READ]).await;
    let (_b, base_b) = http_broker(&url, Some(TOKEN), &["--http-read-token", READ]).await;
    let (_c, base_c) = http_broker(&url, Some("another-admin-token-0123"), &[]).await;
    let cookie = session(&base_a, READ).await;
    assert!(!cookie.contains(READ) && cookie.starts_with("hero_session=v2.r."));
    for base in [&base_a, &base_b] {
        let code = read_with(base.as_str(), &cookie).await;
        assert_eq!(code, 200, "{base}");
    }
    let code = read_with(base_c.as_str(), &cookie).await;
    assert_eq!(code, 401, "signed with another token");
    // a cookie of the same name set by a page on another port (sent first) hides nothing
    let tossed = format!("hero_session=v2.a.99999999999999.ab.00; {cookie}");
    let code = read_with(base_a.as_str(), &tossed).await;
    assert_eq!(code, 200, "the operator's own session among a tossed one");
    let raised = cookie.replacen("v2.r.", "v2.a.", 1);
    let code = read_with(base_a.as_str(), &raised).await;
    assert_eq!(code, 401, "a read session altered to admin");
    let other_name = cookie.replacen("hero_session=", "__Host-hero_session=", 1);
    let code = read_with(base_a.as_str(), &other_name).await;
    assert_eq!(code, 401, "only the name this deployment sets is read");
    let old = format!("hero_token={TOKEN}");
    let code = read_with(base_a.as_str(), &old).await;
    assert_eq!(code, 401, "the token in a cookie opens nothing");
    // the read session may not change anything
    let host = base_a.trim_start_matches("http://");
    assert_eq!(change_with(&base_a, &cookie).await, 403);
    // issue 61: the admin token's session reads only unless the operator asks for changes
    let change = |cookie: String| {
        let base_a = base_a.clone();
        async move { change_with(&base_a, &cookie).await }
    };
    let quiet = hero_testkit::session_for(&base_a, TOKEN, false).await;
    assert_eq!(change(quiet).await, 403, "not asked for changes");
    let admin = session(&base_a, TOKEN).await;
    // allowed (404: there is no such job to track)
    assert_eq!(change(admin.clone()).await, 404, "asked for changes");
    // a live read session tossed in front of it (a page on another port signed in with a
    // read token it knows) hides nothing: the highest live role counts
    let tossed = format!("{cookie}; {admin}");
    assert_eq!(
        change(tossed).await,
        404,
        "the operator's session behind a tossed one"
    );
    // sign-out ends it everywhere: a copy replayed on either broker is refused
    let (code, headers, _) = send(
        reqwest::Method::POST,
        &format!("{base_a}/sign-out"),
        &[("cookie", &cookie), ("origin", &format!("http://{host}"))],
        "",
    )
    .await;
    assert_eq!(code, 303);
    assert!(headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    assert!(headers["clear-site-data"]
        .to_str()
        .unwrap()
        .contains("storage"));
    for base in [&base_a, &base_b] {
        let code = read_with(base.as_str(), &cookie).await;
        assert_eq!(code, 401, "{base}: a session signed out is refused");
    }
    assert_eq!(change(admin).await, 404, "another session lives on");

    let (_tls, base_t) = http_broker(&url, Some(TOKEN), &["--http-behind-tls"]).await;
    let r = no_redirect()
        .post(format!("{base_t}/sign-in"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.starts_with("__Host-hero_session=")
            && set.contains("; Secure")
            && set.contains("Path=/")
            && !set.contains("Domain"),
        "{set}"
    );
    assert!(r.headers()["strict-transport-security"]
        .to_str()
        .unwrap()
        .contains("max-age="));
}

/// Issue 61, finding 6: signing out in a real browser forgets what the browser kept: the token
/// typed into the dashboard's box (local storage) and the session, which the broker no longer
/// takes.
#[tokio::test]
async fn signing_out_in_chromium_forgets_the_kept_token_and_ends_the_session() {
    use fantoccini::Locator;
    let server = RedisServer::start();
    let (_broker, base) = http_broker(&server.url(), Some(TOKEN), &[]).await;
    let (_driver, b, _profile) = hero_testkit::browser(false).await;
    hero_testkit::sign_in_browser(&b, &base, TOKEN).await;
    // the token kept in the box for the buttons' changes
    b.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    b.find(Locator::Css("#token-form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let kept = b
        .execute("return localStorage.getItem('hero-token')", vec![])
        .await
        .unwrap();
    assert_eq!(kept, serde_json::json!(TOKEN));
    b.find(Locator::Css("form.sign-out button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    hero_testkit::text_of(&b, "#sign-in").await;
    let kept = b
        .execute("return localStorage.getItem('hero-token')", vec![])
        .await
        .unwrap();
    assert_eq!(kept, serde_json::Value::Null, "the kept token is forgotten");
    // the session is over: the dashboard asks to sign in again
    b.goto(&format!("{base}/")).await.unwrap();
    hero_testkit::text_of(&b, "#sign-in").await;
    hero_testkit::shot(&b, "signed-out").await;
    b.close().await.unwrap();
}
