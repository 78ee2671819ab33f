//! A fair queue on the dashboard, in real headless Chromium against a real broker and
//! redis-server: the queues page shows its keys with work, and its queue page (`/jobs?queue=`)
//! the keys with the most jobs waiting, a paused key, and the jobs waiting in its gate.
//! Screenshot: `target/screenshots/fair-keys.png`.

use fantoccini::Locator;
use hero_client::Client;
use hero_protocol::policy::Policy;
use hero_protocol::NewJob;
use hero_testkit::{browser, http_broker, shot, sign_in_browser, text_of, RedisServer};

const TOKEN: &str = "fair-token-0123456789";

#[tokio::test]
async fn a_fair_queues_page_shows_its_keys_with_work() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let admin = hero_admin::Admin::from(&client);
    admin
        .set_policy(
            "tenants",
            &Policy {
                fair: Some(true),
                ..Policy::default()
            },
        )
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for (key, n) in [("acme", 5), ("globex", 3), ("initech", 2)] {
        for i in 0..n {
            jobs.push(
                NewJob::builder("tenants", "x")
                    .id(format!("{key}-{i}"))
                    .limit_key(key)
                    .build()
                    .unwrap(),
            );
        }
    }
    client.submit_many(&jobs).await.unwrap();
    admin.pause_key("tenants", "initech").await.unwrap();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let (_driver, b, _profile) = browser(false).await;
    sign_in_browser(&b, &base, TOKEN).await;
    b.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(
        text_of(&b, "#queues tr[data-queue='tenants'] td[data-f='waiting']").await,
        "10"
    );
    // the keys that have turns: initech is paused
    assert_eq!(
        text_of(&b, "#queues tr[data-queue='tenants'] td[data-f='keys']").await,
        "2"
    );
    b.goto(&format!("{base}/jobs?queue=tenants")).await.unwrap();
    let card = text_of(&b, "#fair-keys").await;
    assert!(card.contains("3 limit keys have jobs waiting"), "{card}");
    assert!(
        card.contains("Key initech is paused under tenants"),
        "the paused key: {card}"
    );
    assert!(text_of(&b, "#keys tr[data-key='initech'] td")
        .await
        .contains("paused"));
    assert_eq!(text_of(&b, "#keys tr[data-key='acme'] td.n").await, "5");
    assert_eq!(text_of(&b, "#keys tbody tr:first-child td").await, "acme");
    // the jobs waiting in the gate are listed as the queue's
    let rows = b.find_all(Locator::Css("#jobs tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 10);
    shot(&b, "fair-keys").await;
}
