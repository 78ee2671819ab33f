//! `/metrics` (Prometheus text format), `/healthz` and `/readyz`.
//!
//! The job metrics are the system's, not this process's: each scrape reads the stats the server
//! functions keep on write (`Inspector::queues`, O(queues)) and the workers' presence
//! (O(workers)), so every broker answers the same numbers and a restart loses nothing. They are
//! written here by hand in the text format because they arrive pre-aggregated (counters and
//! histogram buckets kept in Redis), which the `metrics` facade cannot take: it counts and
//! observes in-process. This process's own metrics (the broker's loop timings and errors, the
//! bridge's moves) do go through the facade, and the `metrics-exporter-prometheus` recorder
//! renders them after the job metrics.

use std::fmt::Write;
use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use hero_admin::inspect::QueueStats;
use hero_protocol::stats::Histogram;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::{ApiError, App};

pub fn routes() -> Router<App> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder once; `None` when another recorder was installed first
/// (an application embedding the broker keeps its own).
pub fn install_recorder() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets(&[0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0])
                .ok()?
                .install_recorder()
                .ok()
        })
        .as_ref()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when Redis answers and this version's function library is loaded. Answered without a
/// token (probes carry none), so a failure says what is wrong but not Redis's error text.
async fn readyz(State(app): State<App>) -> Response {
    let version: Result<String, _> = app
        .client
        .redis()
        .query(&hero_protocol::function::version())
        .await;
    match version {
        // jobs would be refused: not ready to take traffic
        Ok(v) if v == hero_protocol::function::LIBRARY_VERSION
            && crate::loops::health::refusing().is_some() =>
        {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                crate::loops::health::refusing().unwrap_or_default(),
            )
            .into_response()
        }
        Ok(v) if v == hero_protocol::function::LIBRARY_VERSION => Json(serde_json::json!({
            "ready": true,
            "redis": "ok",
            "functions": hero_protocol::function::LIBRARY_NAME,
        }))
        .into_response(),
        Ok(v) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "Redis answers, but its function library is version {v}, not {}: restart the broker to load it",
                hero_protocol::function::LIBRARY_VERSION
            ),
        )
        .into_response(),
        // the error's text (an address, a server's words) is for the log, not for a probe that
        // carries no token: the process's outage account logs it (at once, then every 30 s)
        Err(e) => {
            hero_protocol::outage::report("the readiness check", &e);
            let error = if e.is_retryable() {
                NOT_REACHABLE
            } else {
                "Redis answered the readiness check with an error: see the broker's log"
            };
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({ "ready": false, "error": error })),
            )
                .into_response()
        }
    }
}

/// What `/readyz` answers while Redis is out of reach.
pub const NOT_REACHABLE: &str = "Redis is not reachable: see the broker's log";

async fn metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let inspector = hero_admin::Inspector::from(&app.client);
    let by_shard = inspector.queues_by_shard().await?;
    // an unsharded namespace's series carry no shard label (as before shards existed); a
    // sharded one's carry `shard`, so `sum by (queue)` gives the queue
    let sharded = by_shard.len() > 1;
    let queues: Vec<(Option<u16>, QueueStats)> = by_shard
        .into_iter()
        .flat_map(|(n, qs)| qs.into_iter().map(move |q| (sharded.then_some(n), q)))
        .collect();
    let actors = inspector.actors().await?;
    let mut dead = 0u64;
    for (_, shard) in app.client.all_shard_clients() {
        let n: u64 = shard
            .redis()
            .query(redis::cmd("XLEN").arg(shard.keys().dead_letter()))
            .await?;
        dead += n;
    }
    let mut out = render(&queues, &actors, dead);
    if let Some(info) = crate::loops::health::last() {
        render_redis(&mut out, &info);
    }
    if let Some(handle) = install_recorder() {
        out.push_str(&handle.render());
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response())
}

/// Redis's own health as the broker's last health pass read it (INFO).
pub fn render_redis(out: &mut String, i: &hero_protocol::health::RedisInfo) {
    let gauges: [(&str, &str, f64); 7] = [
        (
            "hero_redis_used_memory_bytes",
            "Memory Redis uses (INFO used_memory).",
            i.used_memory as f64,
        ),
        (
            "hero_redis_maxmemory_bytes",
            "Redis's maxmemory (0: no limit).",
            i.maxmemory as f64,
        ),
        (
            "hero_redis_aof_enabled",
            "1 when Redis keeps an append-only file.",
            f64::from(u8::from(i.aof_enabled)),
        ),
        (
            "hero_redis_disk_write_failing",
            "1 when Redis's last AOF write or RDB save failed: it refuses writes (MISCONF).",
            f64::from(u8::from(i.disk_failing())),
        ),
        (
            "hero_redis_last_save_timestamp_seconds",
            "When Redis last saved an RDB snapshot.",
            i.rdb_last_save_time as f64,
        ),
        (
            "hero_redis_changes_since_last_save",
            "Writes since the last RDB snapshot: lost if Redis restarts from it.",
            i.rdb_changes_since_last_save as f64,
        ),
        (
            "hero_redis_loading",
            "1 while Redis loads its data after a restart.",
            f64::from(u8::from(i.loading)),
        ),
    ];
    for (name, help, v) in gauges {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
    header(
        out,
        "hero_redis_maxmemory_policy",
        "gauge",
        "Redis's maxmemory policy (the label); any but noeviction may evict job records, and hero refuses submits under it unless accepted.",
    );
    let _ = writeln!(
        out,
        "hero_redis_maxmemory_policy{{policy=\"{}\"}} 1",
        escape(&i.policy)
    );
}

/// A label value as the text format wants it escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A family's `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The job metrics of `queues`, the workers and the dead-letter count, in the text format.
pub fn render(
    queues: &[(Option<u16>, QueueStats)],
    actors: &[hero_admin::inspect::Actor],
    dead_letters: u64,
) -> String {
    let mut out = String::new();
    let labels = |(shard, q): &(Option<u16>, QueueStats)| match shard {
        Some(n) => format!("queue=\"{}\",shard=\"{n}\"", escape(&q.name)),
        None => format!("queue=\"{}\"", escape(&q.name)),
    };
    type Gauge = fn(&QueueStats) -> f64;
    let families: [(&str, &str, &str, Gauge); 12] = [
        (
            "hero_queue_waiting_jobs",
            "gauge",
            "Jobs queued and not yet taken by a worker.",
            |q| q.waiting as f64,
        ),
        (
            "hero_queue_delayed_jobs",
            "gauge",
            "Jobs waiting in the delayed set (delayed submits and retry back-off).",
            |q| q.delayed.max(0) as f64,
        ),
        (
            "hero_queue_running_jobs",
            "gauge",
            "Jobs delivered to a worker and not yet acknowledged.",
            |q| q.running as f64,
        ),
        (
            "hero_queue_oldest_waiting_seconds",
            "gauge",
            "Age of the oldest job not yet taken (0 when none waits).",
            |q| q.oldest_waiting_ms.unwrap_or(0) as f64 / 1000.0,
        ),
        (
            "hero_queue_fair_keys",
            "gauge",
            "A fair queue's limit keys with jobs waiting their turn (0 for a queue served first in, first out).",
            |q| q.keys as f64,
        ),
        (
            "hero_queue_done_per_minute",
            "gauge",
            "Jobs ended per minute, averaged over the last five minutes.",
            |q| q.done_per_minute,
        ),
        (
            "hero_jobs_finished_total",
            "counter",
            "Jobs that finished.",
            |q| q.finished as f64,
        ),
        (
            "hero_jobs_failed_total",
            "counter",
            "Jobs that ended in error, whatever the reason.",
            |q| q.failed as f64,
        ),
        (
            "hero_jobs_retried_total",
            "counter",
            "Failed attempts given another.",
            |q| q.retried as f64,
        ),
        (
            "hero_jobs_recovered_total",
            "counter",
            "Deliveries taken back from dead or stuck workers.",
            |q| q.recovered as f64,
        ),
        (
            "hero_jobs_dead_lettered_total",
            "counter",
            "Jobs moved to the dead-letter stream.",
            |q| q.dead as f64,
        ),
        (
            "hero_jobs_lost_total",
            "counter",
            "Queue entries dropped because their job's record was gone (evicted by Redis, or deleted by hand): jobs lost.",
            |q| q.lost as f64,
        ),
    ];
    for (name, kind, help, value) in families {
        header(&mut out, name, kind, help);
        for q in queues {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(q), value(&q.1));
        }
    }
    type Hist = fn(&QueueStats) -> &Histogram;
    let histograms: [(&str, &str, Hist); 2] = [
        (
            "hero_job_wait_seconds",
            "Time from dispatch to start.",
            |q| &q.wait,
        ),
        (
            "hero_job_run_seconds",
            "Time from start to end, as the worker measured it.",
            |q| &q.run,
        ),
    ];
    for (name, help, hist) in histograms {
        header(&mut out, name, "histogram", help);
        for q in queues {
            let h = hist(&q.1);
            let mut seen = 0u64;
            for (b, n) in &h.buckets {
                seen += n;
                let le = Histogram::upper_ms(*b) as f64 / 1000.0;
                let _ = writeln!(out, "{name}_bucket{{{},le=\"{le}\"}} {seen}", labels(q));
            }
            let _ = writeln!(
                out,
                "{name}_bucket{{{},le=\"+Inf\"}} {}",
                labels(q),
                h.count()
            );
            let _ = writeln!(
                out,
                "{name}_sum{{{}}} {}",
                labels(q),
                h.sum_ms as f64 / 1000.0
            );
            let _ = writeln!(out, "{name}_count{{{}}} {}", labels(q), h.count());
        }
    }
    let live = actors.iter().filter(|a| a.live).count();
    header(
        &mut out,
        "hero_workers",
        "gauge",
        "Workers by state: live (presence kept) or gone (presence expired, jobs still held).",
    );
    let _ = writeln!(out, "hero_workers{{state=\"live\"}} {live}");
    let _ = writeln!(
        out,
        "hero_workers{{state=\"gone\"}} {}",
        actors.len() - live
    );
    let _ = writeln!(
        out,
        "# HELP hero_dead_letters Entries in the dead-letter stream."
    );
    let _ = writeln!(out, "# TYPE hero_dead_letters gauge");
    let _ = writeln!(out, "hero_dead_letters {dead_letters}");
    out
}
