//! Presence: the worker's heartbeat (one presence key per script type, JSON, with a TTL, its
//! liveness deadline in the consumers set the broker's recovery reads, and its entry in the
//! fleet with its protocol), and its removal on a clean exit. The heartbeat also reads, in the
//! same pipeline, the brokers' lease and their summary of the fleet: while a live process older
//! than protocol 27 would refuse the `progress` and `log` fields, the worker holds its
//! handlers' reports back (`hold_reports`).

use std::sync::Arc;

use std::sync::atomic::Ordering;

use hero_protocol::{clock, fleet};
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
        "protocol": hero_protocol::function::LIBRARY_VERSION,
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
    pipe.cmd("HSET")
        .arg(s.keys.fleet())
        .arg(&s.consumer_name)
        .arg(fleet::entry(
            fleet::Role::Worker,
            env!("CARGO_PKG_VERSION"),
            s.presence_ttl,
        ));
    // the brokers' lease (what their recovery waits for: the longest a renewal may wait) and
    // their summary of what live older processes lack (`fleet_lacks`), in one read: the
    // brokers compute the fleet, every worker reads one field
    pipe.cmd("HMGET")
        .arg(s.keys.config())
        .arg("lease_ms")
        .arg("fleet_lacks");
    let mut replies = s.redis.pipeline(&pipe).await?;
    let config = replies.pop().unwrap_or(Ok(redis::Value::Nil))?;
    for r in replies {
        r?;
    }
    let fields: Vec<Option<String>> = redis::from_redis_value(config).unwrap_or_default();
    let ms = fields
        .first()
        .cloned()
        .flatten()
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(0);
    s.brokers_lease_ms.store(ms, Ordering::Release);
    hold_reports(s, fields.get(1).cloned().flatten().as_deref());
    Ok(())
}

/// Holds the handlers' reports back while the brokers say a live worker would refuse them
/// (`progress` in their `fleet_lacks` summary), and the failures' traces while one would refuse
/// those (`trace`), saying so once each time that begins and ends.
fn hold_reports(s: &Shared, lacks: Option<&str>) {
    let summary: serde_json::Value = lacks
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    for (feature, flag, what) in [
        (
            fleet::Feature::Progress,
            &s.hold_reports,
            "progress and log lines",
        ),
        (
            fleet::Feature::Trace,
            &s.hold_traces,
            "failed attempts' traces",
        ),
    ] {
        let lacking = &summary[feature.key()];
        let hold = !lacking.is_null();
        let was = flag.swap(hold, Ordering::AcqRel);
        if hold && !was {
            tracing::warn!(
                processes = %lacking["processes"],
                "holding back {what}: these live processes of an older protocol would end a job carrying them in error; they are sent again once they are gone"
            );
        } else if was && !hold {
            tracing::info!("no older process is left: {what} are sent again");
        }
    }
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
    pipe.cmd("HDEL").arg(s.keys.fleet()).arg(&s.consumer_name);
    if let Err(e) = s.redis.pipeline(&pipe).await {
        tracing::warn!(error = %e, "could not remove presence; it expires by itself");
    }
}
