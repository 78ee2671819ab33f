//! `/readyz` answers a probe that carries no token: while Redis is out of reach it says so and
//! points at the broker's log (where the process's outage account writes the error), without
//! Redis's error text (an address, the server's words).

use hero_testkit::{http_broker, http_client, RedisServer};

const TOKEN: &str = "s3cret-token-0123456789";

#[tokio::test]
async fn readyz_names_no_redis_error_when_redis_is_out_of_reach() {
    let mut server = RedisServer::start();
    let url = server.url();
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let ready = |base: String| async move {
        let r = http_client()
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        (code, v)
    };
    let (code, v) = ready(base.clone()).await;
    assert_eq!((code, v["ready"].as_bool()), (200, Some(true)), "{v}");

    server.kill();
    let (code, v) = ready(base.clone()).await;
    assert_eq!(code, 503, "{v}");
    assert_eq!(
        v,
        serde_json::json!({
            "ready": false,
            "error": "Redis is not reachable: see the broker's log",
        })
    );
}
