//! A legacy actor for bridge tests, written only from seed 001's worker loop with plain Redis
//! commands: `BLPOP` the work queue, `HGETALL` the job, `HSET status started`, run, `HSET status
//! finished output <label>`, `LPUSH hero:reply:<id> <label>`. It prints `took <id>` once it
//! marked a job started and `ran <id>` once it recorded the result, so a test can follow it and
//! kill it with SIGKILL mid-job.
//!
//! Flags: --url U --queue <list key> --label L --hang 1 (never finishes a job: the actor to kill)
//! --prefix P (the namespace's first key segment, `{ns}` in a cluster; default `hero`).
//! A script `sleep <ms>` sleeps that long before finishing.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;

fn line(s: String) {
    hero_testkit::say(&s);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = hero_testkit::flags();
    let get = |k: &str, d: &str| flags.get(k).cloned().unwrap_or_else(|| d.to_string());
    let queue = get("queue", "hero:work_queue:w1");
    let label = get("label", "legacy");
    let hang = get("hang", "0") == "1";
    let prefix = get("prefix", "hero");
    let client = redis::Client::open(get("url", "redis://127.0.0.1:6379"))?;
    // BLPOP blocks for 1 s: the default response timeout would cut it short
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    line("ready".into());
    loop {
        // 1. wait for a job
        let popped: Option<(String, String)> = conn.blpop(&queue, 1.0).await?;
        let Some((_, job_id)) = popped else { continue };
        let key = format!("{prefix}:job:{job_id}");
        // 2. its details  3. status started
        let job: HashMap<String, String> = conn.hgetall(&key).await?;
        let _: () = conn.hset(&key, "status", "started").await?;
        line(format!("took {job_id}"));
        if hang {
            std::future::pending::<()>().await;
        }
        // 5. run the script
        let script = job.get("script").cloned().unwrap_or_default();
        if let Some(ms) = script
            .strip_prefix("sleep ")
            .and_then(|n| n.trim().parse().ok())
        {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        // 6. the result  7. the reply
        let _: () = conn
            .hset_multiple(&key, &[("status", "finished"), ("output", label.as_str())])
            .await?;
        let _: () = conn
            .lpush(format!("{prefix}:reply:{job_id}"), &label)
            .await?;
        line(format!("ran {job_id}"));
    }
}
