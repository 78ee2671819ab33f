//! Bounded waits: poll until a condition holds or fail naming it, so a hang fails fast
//! instead of sleeping; and the waits on the system's state the tests share (every job
//! finished, the audit clean).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{keys, RedisServer};

/// Polls `check` every 10 ms until it returns Some, or panics after `limit` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until every job of `ids` is `finished` (namespace `hero`).
pub async fn all_finished(server: &RedisServer, ids: &[String], limit: Duration) {
    all_in(server, ids, &["finished"], limit).await;
}

/// Waits until every job of `ids` has ended, `finished` or `error` (namespace `hero`).
pub async fn all_finished_or_failed(server: &RedisServer, ids: &[String], limit: Duration) {
    all_in(server, ids, &["finished", "error"], limit).await;
}

async fn all_in(server: &RedisServer, ids: &[String], statuses: &[&str], limit: Duration) {
    let raw = server.conn().await;
    let keys = keys();
    wait_for(
        &format!("every job {}", statuses.join(" or ")),
        limit,
        || {
            let mut raw = raw.clone();
            let ids = ids.to_vec();
            let keys = keys.clone();
            async move {
                let mut pipe = redis::pipe();
                for id in &ids {
                    pipe.hget(keys.job_unchecked(id), "status");
                }
                let now: Vec<Option<String>> = pipe.query_async(&mut raw).await.ok()?;
                now.iter()
                    .all(|s| s.as_deref().is_some_and(|s| statuses.contains(&s)))
                    .then_some(())
            }
        },
    )
    .await;
}

/// Waits (bounded) until the audit finds the namespace `hero` at `url` consistent, as it must
/// once the broker has had its recovery pass after a crash; panics with what it found else.
pub async fn audit_consistent(url: &str, limit: Duration) -> hero_admin::inspect::AuditReport {
    let client = hero_client::Client::connect(url).await.expect("connect");
    let inspector = hero_admin::Inspector::from(&client);
    let deadline = Instant::now() + limit;
    loop {
        let report = inspector.audit(&|_: &str| {}).await.expect("audit");
        if report.is_consistent() {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "the audit still finds inconsistencies after {limit:?}: {:#?}",
            report.inconsistencies().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until batch `name` is done (its callbacks submitted) and answers it as it stands then.
pub async fn batch_done(
    client: &hero_client::Client,
    name: &str,
    limit: Duration,
) -> hero_protocol::batch::BatchInfo {
    let batch = client.batch(name).expect("a valid batch name");
    wait_for(&format!("batch {name} to be done"), limit, || {
        let batch = batch.clone();
        async move {
            batch
                .show()
                .await
                .ok()
                .flatten()
                .filter(|b| b.done_at.is_some())
        }
    })
    .await
}
