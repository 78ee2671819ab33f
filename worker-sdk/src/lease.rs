//! The worker's background loops besides fetching: presence and liveness heartbeat, lease
//! renewal of running jobs, the control list (stop requests), and the hand-back and
//! unregistration of shutdown.

use std::sync::Arc;
use std::time::Duration;

use hero_client::function::{self, Function, Recovery};
use hero_client::keys::CONSUMER_GROUP;
use hero_client::reply::{Recovered, Renewal};
use hero_client::{clock, JobId};
use redis::Value;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::Result;
use crate::inflight::CancelReason;
use crate::worker::Shared;

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

async fn beat(s: &Shared, started_at: &str) -> hero_client::Result<()> {
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
    let mut backoff = Backoff::new();
    loop {
        let delay = match beat(&s, &started_at).await {
            Ok(()) => {
                backoff.reset();
                every
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed; retrying");
                backoff.next_delay().min(every)
            }
        };
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
    }
}

/// Renews every running delivery each third of the lease, in one pipeline, and interrupts the
/// handlers of jobs that were stopped or whose lease went to another delivery.
pub(crate) async fn renew(s: Arc<Shared>, stop: CancellationToken) {
    let every = s.lease / 3;
    loop {
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(every) => {} }
        let running = s.inflight.snapshot();
        if running.is_empty() {
            continue;
        }
        let mut pipe = redis::pipe();
        let mut ids = Vec::with_capacity(running.len());
        for (job_id, stream, lease) in running {
            let Ok(id) = JobId::new(&job_id) else {
                continue;
            };
            pipe.add_command({
                let mut cmd = Function::Renew.call(&[s.keys.job(&id), s.streams[stream].clone()]);
                cmd.arg(&lease).arg(CONSUMER_GROUP).arg(&s.consumer_name);
                cmd
            });
            ids.push((job_id, lease));
        }
        match s.redis.pipeline(&pipe).await {
            Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying next round"),
            Ok(results) => {
                for ((job_id, lease), r) in ids.into_iter().zip(results) {
                    let reason = match r.and_then(|v| Renewal::decode(&v)) {
                        Ok(Renewal::Ok) => continue,
                        Ok(Renewal::Stopped) => CancelReason::Stopped,
                        Ok(Renewal::Lost) => CancelReason::LeaseLost,
                        Err(e) => {
                            tracing::warn!(job = %job_id, error = %e, "renewal failed");
                            continue;
                        }
                    };
                    tracing::info!(job = %job_id, ?reason, "interrupting the handler");
                    s.inflight.cancel(&job_id, Some(&lease), reason);
                }
            }
        }
    }
}

/// Waits on the worker's control lists and interrupts the jobs named there.
pub(crate) async fn control(s: Arc<Shared>, stop: CancellationToken) {
    let keys: Vec<String> = s
        .types
        .iter()
        .map(|t| {
            s.keys
                .ctl_instance(t, &s.consumer.group, &s.consumer.instance)
        })
        .collect();
    let block = Duration::from_secs(1);
    let mut backoff = Backoff::new();
    let mut conn = None;
    loop {
        if conn.is_none() {
            match s.redis.dedicated(block).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "no control connection; retrying");
                    tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(backoff.next_delay()) => {} }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut blpop = redis::cmd("BLPOP");
        blpop.arg(&keys).arg(block.as_secs_f64());
        let popped = tokio::select! {
            _ = stop.cancelled() => return,
            r = blpop.query_async::<Option<(String, String)>>(c) => r,
        };
        match popped {
            Ok(Some((_, job_id))) => {
                backoff.reset();
                if s.inflight.cancel(&job_id, None, CancelReason::Stopped) {
                    tracing::info!(job = %job_id, "stop request: handler interrupted");
                }
            }
            Ok(None) => backoff.reset(),
            Err(e) => {
                tracing::warn!(error = %e, "control wait failed; reconnecting");
                conn = None;
                tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(backoff.next_delay()) => {} }
            }
        }
    }
}

/// Puts every delivery this worker still holds back into its stream without counting an
/// attempt, so another worker takes it at once. Returns how many went back.
pub(crate) async fn hand_back(s: &Shared) -> u64 {
    let mut total = 0;
    for stream in &s.streams {
        let mut cursor = "0-0".to_string();
        loop {
            let cmd = function::recover(
                &s.keys,
                stream,
                Recovery::HandBack(&s.consumer_name),
                500,
                u32::MAX,
                &cursor,
                s.redis.caps().xackdel_flag(),
            );
            match s
                .redis
                .query::<Value>(&cmd)
                .await
                .and_then(|v| Recovered::decode(&v))
            {
                Ok(r) => {
                    total += r.requeued;
                    if r.cursor == "0-0" {
                        break;
                    }
                    cursor = r.cursor;
                }
                Err(e) => {
                    tracing::warn!(error = %e, stream, "hand-back failed; the broker will recover these jobs");
                    break;
                }
            }
        }
    }
    total
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
