//! Presence: the worker's heartbeat (one presence key per script type, JSON, with a TTL, its
//! liveness deadline in the consumers set the broker's recovery reads, and its entry in the
//! fleet with its protocol), and its removal on a clean exit. The heartbeat also reads the
//! fleet, in the same pipeline: while a live process older than protocol 27 would refuse the
//! `progress` and `log` fields, the worker holds its handlers' reports back (`hold_reports`).

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
    fleet::Fleet::ask(&mut pipe, &s.keys);
    // the brokers' lease: what their recovery waits for, so the longest a renewal may wait
    pipe.cmd("HGET").arg(s.keys.config()).arg("lease_ms");
    let mut replies = s.redis.pipeline(&pipe).await?;
    let brokers_lease = replies.pop().unwrap_or(Ok(redis::Value::Nil))?;
    let ms = hero_protocol::reply::text(&brokers_lease)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(0);
    s.brokers_lease_ms.store(ms, Ordering::Release);
    let live = replies.pop().unwrap_or(Ok(redis::Value::Nil))?;
    let entries = replies.pop().unwrap_or(Ok(redis::Value::Nil))?;
    for r in replies {
        r?;
    }
    let fleet = fleet::Fleet::answer(&s.redis, &s.keys, entries, &live).await?;
    hold_reports(s, &fleet);
    Ok(())
}

/// Holds the handlers' reports back while a live process would refuse them, saying so once
/// each time that begins and ends.
fn hold_reports(s: &Shared, fleet: &fleet::Fleet) {
    let lacking = fleet.lacking(fleet::Feature::Progress);
    let hold = !lacking.is_empty();
    let was = s.hold_reports.swap(hold, Ordering::AcqRel);
    if hold && !was {
        let names: Vec<String> = lacking.iter().map(|m| m.describe()).collect();
        tracing::warn!(
            processes = %names.join(", "),
            "holding back progress and log lines: these live processes of an older protocol would end a job carrying them in error; they are sent again once they are gone"
        );
    } else if was && !hold {
        tracing::info!("no older process is left: progress and log lines are sent again");
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
