//! Redis's own trouble on the dashboard's first page, in real headless Chromium against a real
//! broker and redis-server: an evicting maxmemory policy (every submit refused) and a data loss
//! a broker found are said above the queues, and go once fixed.
//! Screenshot: `target/screenshots/redis-warning.png`.

use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::{
    browser, http_broker, keys, shot, sign_in_browser, text_of, wait_for, RedisServer,
};
use redis::AsyncCommands;

const TOKEN: &str = "redis-token-0123456789";

#[tokio::test]
async fn the_overview_says_when_redis_refuses_submits_or_lost_data() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .submit(&NewJob::builder("mail", "x").id("m1").build().unwrap())
        .await
        .unwrap();
    let mut raw = server.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = raw
        .hset(
            keys().epoch(),
            "lost",
            r#"{"at":"2026-11-28T07:00:00.000Z","what":"Redis went back in time"}"#,
        )
        .await
        .unwrap();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let (_driver, b, _profile) = browser(false).await;
    sign_in_browser(&b, &base, TOKEN).await;
    b.goto(&format!("{base}/")).await.unwrap();
    let warning = text_of(&b, "#redis-warning").await;
    assert!(
        warning.contains("maxmemory-policy is allkeys-lru")
            && warning.contains("every submit is refused")
            && warning.contains("--accept-eviction allkeys-lru"),
        "{warning}"
    );
    assert!(
        warning.contains("Redis lost data") && warning.contains("went back in time"),
        "{warning}"
    );
    shot(&b, "redis-warning").await;
    // fixed: the policy back, the loss acknowledged
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = raw.hdel(keys().epoch(), "lost").await.unwrap();
    let b2 = b.clone();
    let base2 = base.clone();
    wait_for(
        "the warning gone",
        std::time::Duration::from_secs(10),
        || {
            let b = b2.clone();
            let base = base2.clone();
            async move {
                b.goto(&format!("{base}/")).await.ok()?;
                let gone = b
                    .find(fantoccini::Locator::Css("#redis-warning"))
                    .await
                    .is_err();
                gone.then_some(())
            }
        },
    )
    .await;
    // the session ended, so chromedriver takes its Chromium with it
    b.close().await.unwrap();
}
