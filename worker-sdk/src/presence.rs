//! Presence: the worker's heartbeat (one presence key per script type, JSON, with a TTL, and
//! its liveness deadline in the consumers set the broker's recovery reads), and its removal on
//! a clean exit.

use std::sync::Arc;

use hero_protocol::clock;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::shared::Shared;
use hero_protocol::outage::Outage;

fn presence_json(s: &Shared, now_iso: &str, started_at: &str) -> String {
    serde_json::json!({
        "pid": std::process::id(),
        "hostname": std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim(),
        "started_at": started_at,
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": s.types.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
        "consumer": s.consumer_name,
        "concurrency": s.concurrency,
        "running": s.inflight.len(),
        "last_heartbeat": now_iso,
    })
    .to_string()
}

async fn beat(s: &Shared, started_at: &str) -> hero_protocol::Result<()> {
    let now = clock::now_ms();
    let json = presence_json(s, &clock::iso(now), started_at);
    let ttl_ms = s.presence_ttl.as_millis() as u64;
    let mut pipe = redis::pipe();
    for t in &s.types {
        pipe.cmd("SET")
            .arg(s.keys.presence(t, &s.consumer.group, &s.consumer.instance))
            .arg(&json)
            .arg("PX")
            .arg(ttl_ms);
    }
    pipe.cmd("ZADD")
        .arg(s.keys.consumers())
        .arg(now + ttl_ms)
        .arg(&s.consumer_name);
    for r in s.redis.pipeline(&pipe).await? {
        r?;
    }
    Ok(())
}

/// The first heartbeat, before any job is taken: a worker that cannot register does not start.
pub(crate) async fn heartbeat_once(s: &Shared) -> Result<()> {
    beat(s, &clock::now_iso()).await?;
    Ok(())
}

pub(crate) async fn heartbeat(s: Arc<Shared>, stop: CancellationToken) {
    let started_at = clock::now_iso();
    let every = s.presence_ttl / 3;
    let mut outage = Outage::new("the heartbeat");
    loop {
        let delay = match beat(&s, &started_at).await {
            Ok(()) => {
                outage.ok();
                every
            }
            Err(e) => outage.failed(&e).min(every),
        };
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
    }
}

/// Removes presence and liveness: a clean exit is not a death to recover from.
pub(crate) async fn unregister(s: &Shared) {
    let mut pipe = redis::pipe();
    for t in &s.types {
        pipe.cmd("DEL")
            .arg(s.keys.presence(t, &s.consumer.group, &s.consumer.instance));
    }
    pipe.cmd("ZREM")
        .arg(s.keys.consumers())
        .arg(&s.consumer_name);
    if let Err(e) = s.redis.pipeline(&pipe).await {
        tracing::warn!(error = %e, "could not remove presence; it expires by itself");
    }
}
