//! Presence: the worker's heartbeat (one presence key per script type, JSON, with a TTL, its
//! liveness deadline in the consumers set the broker's recovery reads, and its entry in the
//! fleet with its protocol), and its removal on a clean exit. The heartbeat also reads, in the
//! same pipeline, the brokers' lease and their summary of the fleet: while a live process older
//! than protocol 27 would refuse the `progress` and `log` fields, the worker holds its
//! handlers' reports back (`hold_reports`).

use std::sync::Arc;

use std::sync::atomic::Ordering;

use hero_protocol::{clock, fleet, function, memory};
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
        // this machine's clock minus Redis's, as last measured (`hero actors` shows it)
        "skew_ms": -clock::offset_ms(),
    })
    .to_string()
}

/// One heartbeat: `hero_beat` writes presence, liveness and the fleet entry on Redis's clock
/// (allowed past maxmemory: a full Redis never makes a live worker look dead), and answers
/// Redis's time (this process's clock offset), the brokers' lease and fleet summary, and the
/// maxmemory policy.
async fn beat(s: &Shared, started_at: &str) -> hero_protocol::Result<()> {
    let json = presence_json(s, &clock::now_iso(), started_at);
    let presence: Vec<String> = s
        .types
        .iter()
        .map(|t| s.keys.presence(t, &s.consumer.group, &s.consumer.instance))
        .collect();
    let call = function::beat(
        &s.keys,
        &s.consumer_name,
        s.presence_ttl,
        &fleet::entry_body(fleet::Role::Worker, env!("CARGO_PKG_VERSION")),
        Some((&presence, &json)),
    );
    let sent = clock::local_ms();
    let answer: redis::Value = s.redis.query(&call).await?;
    let got = clock::local_ms();
    let beat = function::Beat::parse(&answer)?;
    clock::observe(beat.now_ms, sent, got);
    memory::note_policy(&beat.memory_policy);
    s.brokers_lease_ms.store(beat.lease_ms, Ordering::Release);
    hold_reports(s, beat.fleet_lacks.as_deref());
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
