//! The admin JSON API (`/api/...`): the read side of `hero_admin::inspect` and the repairs of
//! `hero_admin::repair`, one handler per endpoint. Every request carries a token (the guard in
//! `http` checks it first); reads show `env_vars` values as `***` unless the admin token asks
//! with `?reveal=1`; the audit and every change need the admin token. Bad input is answered
//! 4xx before anything is read or changed.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use hero_admin::inspect::{AuditReport, DeadLetter, Finding, ListFilter};
use hero_protocol::{JobId, Priority, ScriptType, Status, Target};
use serde::Deserialize;
use serde_json::{json, Value};

use super::redact::REDACTED;
use super::{ApiError, App};

/// The event-log entries one `GET /api/events` reads at most (a job whose record is gone, or a
/// filter that matches little, answers what the newest this many hold).
pub const EVENTS_SCAN: usize = 20_000;

/// The audit's bounds over HTTP: it is the one O(jobs) read, so a page of findings and a time
/// limit keep one request from loading Redis for long.
pub(crate) const AUDIT_LIMIT: usize = 1000;
const AUDIT_TIMEOUT: Duration = Duration::from_secs(30);

type ApiResult = Result<Json<Value>, ApiError>;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/queues", get(queues))
        .route("/api/keys", get(fair_keys))
        .route("/api/actors", get(actors))
        .route("/api/shards", get(shards))
        .route("/api/jobs", get(jobs))
        .route("/api/jobs/{id}", get(job))
        .route("/api/jobs/{id}/stop", post(stop))
        .route("/api/jobs/{id}/requeue", post(requeue))
        .route("/api/jobs/{id}/track", post(track))
        .route("/api/events", get(events))
        .route("/api/events/stream", get(super::feed::event_stream))
        .route("/api/history", get(history))
        .route("/api/audit", get(audit).post(audit_fix))
        .route("/api/batches", get(batches))
        .route("/api/batches/{name}", get(batch_one))
        .route("/api/dead", get(dead))
        .route("/api/dead/{id}", get(dead_one))
        .route("/api/dead/retry", post(dead_retry))
        .route("/api/dead/purge", post(dead_purge))
}

/// A JSON body, parsed by hand so that a malformed one gets this API's JSON error (axum's own
/// rejection answers plain text). An empty body reads as `{}`.
fn body<T: for<'de> Deserialize<'de>>(bytes: &Bytes) -> Result<T, ApiError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(text).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not the JSON this endpoint takes: {e}"
        ))
    })
}

fn job_id(id: &str) -> Result<JobId, ApiError> {
    JobId::new(id).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The start of a job's mutating endpoint: the token first, then the id and the body.
fn mutation<T: for<'de> Deserialize<'de>>(
    app: &App,
    headers: &HeaderMap,
    id: &str,
    raw: &Bytes,
) -> Result<(JobId, T), ApiError> {
    app.authorize(headers)?;
    Ok((job_id(id)?, body(raw)?))
}

async fn queues(State(app): State<App>) -> ApiResult {
    let queues = hero_admin::Inspector::from(&app.client).queues().await?;
    Ok(Json(json!({
        "queues": queues.iter().map(hero_admin::inspect::QueueStats::to_json).collect::<Vec<_>>()
    })))
}

#[derive(Deserialize)]
struct KeysQuery {
    queue: String,
    top: Option<usize>,
    cursor: Option<u64>,
}

/// A fair queue's limit keys with work (`hero queues --keys`): `?queue=<name>&top=<n>`, the
/// top among a page of 1,000 keys; `&cursor=<next>` reads the next page.
async fn fair_keys(State(app): State<App>, Query(q): Query<KeysQuery>) -> ApiResult {
    let name = hero_protocol::policy::queue_name(&q.queue)?;
    let top = q.top.unwrap_or(10).min(1000);
    let k = hero_admin::Inspector::from(&app.client)
        .fair_keys(&name, top, q.cursor.unwrap_or(0))
        .await?;
    let mut v = k.to_json();
    v["queue"] = json!(name);
    Ok(Json(v))
}

async fn shards(State(app): State<App>) -> ApiResult {
    let map = app.client.shard_map();
    let rows = hero_admin::shards::rows(&app.client).await?;
    Ok(Json(json!({
        "k": map.k, "epoch": map.epoch,
        "shards": rows.iter().map(hero_admin::shards::ShardRow::to_json).collect::<Vec<_>>()
    })))
}

async fn actors(State(app): State<App>) -> ApiResult {
    let inspector = hero_admin::Inspector::from(&app.client);
    let actors = inspector.actors().await?;
    let brokers = inspector.brokers().await?;
    Ok(Json(json!({
        "actors": actors.iter().map(hero_admin::inspect::Actor::to_json).collect::<Vec<_>>(),
        "brokers": brokers.iter().map(|m| json!({"name": m.name, "version": m.version, "protocol": m.protocol})).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize, Default)]
pub struct JobsQuery {
    pub status: Option<String>,
    /// `<type>[/<group>[/<instance>]]`, optionally ` prio <n>`.
    pub queue: Option<String>,
    pub tag: Option<String>,
    pub cursor: Option<String>,
    pub limit: Option<usize>,
    /// `1` or `true`: the tracked jobs.
    pub tracked: Option<String>,
}

impl JobsQuery {
    /// The listing this query asks for (tracked, else a queue, else a status).
    pub fn filter(&self) -> Result<ListFilter, ApiError> {
        fn nonempty(s: Option<&String>) -> Option<&str> {
            s.map(String::as_str).filter(|s| !s.trim().is_empty())
        }
        if matches!(self.tracked.as_deref(), Some("1" | "true")) {
            return Ok(ListFilter::Tracked);
        }
        if let Some(q) = nonempty(self.queue.as_ref()) {
            let (target, prio) = Target::parse_queue(q)?;
            return Ok(ListFilter::Queue(target, prio));
        }
        if let Some(s) = nonempty(self.status.as_ref()) {
            return Status::parse(s).map(ListFilter::Status).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "status {s:?} is not a status: use waiting, dispatched, started, finished or error"
                ))
            });
        }
        Ok(ListFilter::All)
    }
}

pub const DEFAULT_PAGE: usize = 50;

impl JobsQuery {
    /// The page this query asks for, its jobs' secrets hidden in their errors (redact.rs).
    pub async fn page(&self, app: &App) -> Result<hero_admin::Page, ApiError> {
        let filter = self.filter()?;
        let mut page = hero_admin::Inspector::from(&app.client)
            .list_tagged(
                &filter,
                self.tag.as_deref().filter(|t| !t.is_empty()),
                self.cursor.as_deref().filter(|c| !c.is_empty()),
                self.limit.unwrap_or(DEFAULT_PAGE).clamp(1, 1000),
            )
            .await?;
        let with_error = page
            .jobs
            .iter()
            .filter(|j| j.error.chars().count() >= super::redact::MIN_SECRET)
            .map(|j| j.id.clone());
        let secrets = super::redact::secrets_of(&app.client, with_error).await?;
        for j in &mut page.jobs {
            if let Some(s) = secrets.get(&j.id) {
                j.error = s.scrub(&j.error);
            }
        }
        Ok(page)
    }
}

async fn jobs(State(app): State<App>, Query(q): Query<JobsQuery>) -> ApiResult {
    let page = q.page(&app).await?;
    Ok(Json(json!({
        "jobs": page.jobs.iter().map(hero_admin::JobSummary::to_json).collect::<Vec<_>>(),
        "next": page.next,
    })))
}

/// A job's record and its history from the event log; 404 when there is no record. The
/// values of `env_vars` (passwords, keys) read `***` unless `reveal`.
pub async fn job_with_history(app: &App, id: &JobId, reveal: bool) -> Result<Value, ApiError> {
    let job = app.client.get(id).await?;
    // bounded by the job's life, not the log's length (Inspector::job_history)
    let (history, whole) = hero_admin::Inspector::from(&app.client)
        .job_history(&job)
        .await?;
    let mut v = job.to_json();
    if !reveal {
        if let Some(env) = v.get_mut("env_vars").and_then(Value::as_object_mut) {
            for value in env.values_mut() {
                *value = REDACTED.into();
            }
        }
    }
    v["script"] = job.script.clone().into();
    v["history"] = history.iter().map(|e| e.to_json()).collect();
    v["history_complete"] = whole.into();
    if !reveal {
        // its secrets wherever its text repeats them: error, trace, log, output, history
        super::redact::Secrets::of(&job.env_vars).scrub_json(&mut v);
    }
    Ok(v)
}

#[derive(Deserialize, Default)]
struct JobQuery {
    /// `1`: show the `env_vars` values (the admin token only).
    reveal: Option<String>,
}

async fn job(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<JobQuery>,
    Path(id): Path<String>,
) -> ApiResult {
    let id = job_id(&id)?;
    let reveal = matches!(q.reveal.as_deref(), Some("1" | "true"));
    if reveal {
        app.authorize(&headers)?;
    }
    Ok(Json(job_with_history(&app, &id, reveal).await?))
}

async fn stop(State(app): State<App>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    app.authorize(&headers)?;
    let id = job_id(&id)?;
    let outcome = match app.client.stop(&id).await? {
        hero_client::StopOutcome::Cancelled => "cancelled",
        hero_client::StopOutcome::Interrupted => "interrupted",
        hero_client::StopOutcome::AlreadyCompleted => "already_completed",
    };
    Ok(Json(json!({ "id": id.as_str(), "stop": outcome })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrackBody {
    #[serde(default = "yes")]
    on: bool,
}

fn yes() -> bool {
    true
}

/// Marks a job tracked (`{"on": false}` unmarks it).
async fn track(
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    raw: Bytes,
) -> ApiResult {
    let (id, b): (JobId, TrackBody) = mutation(&app, &headers, &id, &raw)?;
    hero_admin::Admin::from(&app.client)
        .track(&id, b.on)
        .await?;
    Ok(Json(json!({ "id": id.as_str(), "tracked": b.on })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RequeueBody {
    #[serde(rename = "type")]
    script_type: Option<String>,
    group: Option<String>,
    instance: Option<String>,
    priority: Option<u8>,
}

async fn requeue(
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    raw: Bytes,
) -> ApiResult {
    let (id, b): (JobId, RequeueBody) = mutation(&app, &headers, &id, &raw)?;
    let priority = b.priority.map(Priority::new).transpose()?;
    let target = match &b.script_type {
        Some(t) => Some(Target::new(
            ScriptType::new(t)?,
            b.group
                .as_deref()
                .map(hero_protocol::GroupName::new)
                .transpose()?,
            b.instance
                .as_deref()
                .map(hero_protocol::InstanceName::new)
                .transpose()?,
        )),
        None if b.group.is_some() || b.instance.is_some() => {
            return Err(ApiError::bad_request(
                "a group or instance needs its type: send \"type\" too",
            ))
        }
        None => None,
    };
    let moved = hero_admin::Admin::from(&app.client)
        .requeue_to(&id, target, priority)
        .await?;
    Ok(Json(json!({
        "id": id.as_str(),
        "requeued": true,
        "queue": app.client.keys().queue_name(&moved.stream),
    })))
}

async fn events(State(app): State<App>, Query(q): Query<super::feed::EventsQuery>) -> ApiResult {
    let filter = q.filter()?;
    let inspector = hero_admin::Inspector::from(&app.client);
    let limit = q.limit.unwrap_or(100).clamp(1, 10_000);
    // one job's: its life's span of the log (bounded), when its record is there
    let one = match &filter.job {
        Some(id) => match app.client.get(&job_id(id)?).await {
            Ok(job) => Some(inspector.job_history(&job).await?.0),
            Err(hero_protocol::Error::JobNotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let mut events = match one {
        Some(mut h) => {
            h.retain(|e| filter.matches(app.client.keys(), e));
            let skip = h.len().saturating_sub(limit);
            h.split_off(skip)
        }
        // a filter that matches little reads the newest entries only, not the whole log
        None => inspector.events_within(&filter, limit, EVENTS_SCAN).await?,
    };
    super::redact::scrub_events(&app.client, &mut events).await?;
    Ok(Json(json!({
        "events": events.iter().map(|e| e.to_json()).collect::<Vec<_>>()
    })))
}

#[derive(Deserialize, Default)]
struct HistoryQuery {
    minutes: Option<u64>,
}

async fn history(State(app): State<App>, Query(q): Query<HistoryQuery>) -> ApiResult {
    let minutes = hero_admin::Inspector::from(&app.client)
        .history(q.minutes.unwrap_or(60).clamp(1, 120))
        .await?;
    Ok(Json(json!({
        "minutes": minutes.iter().map(hero_admin::inspect::Minute::to_json).collect::<Vec<_>>()
    })))
}

#[derive(Deserialize, Default)]
struct AuditQuery {
    /// Findings answered at most (default and cap 1,000); `counts` cover them all.
    limit: Option<usize>,
}

/// The audit: the admin token only, at most [`AUDIT_TIMEOUT`], a page of findings.
async fn audit(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> ApiResult {
    app.authorize(&headers)?;
    bounded_audit(&app, false, q.limit).await
}

/// Runs the audit (and its fixes) within [`AUDIT_TIMEOUT`], else 503 with the advice to run it
/// from a shell; the dashboard's audit page runs it through here too.
pub(crate) async fn timed_audit(
    app: &App,
    fix: bool,
) -> Result<(AuditReport, Vec<(Finding, bool)>), ApiError> {
    let Ok(_one) = app.audit.try_acquire() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "an audit is running in this broker: ask again when it has finished (one at a time: it reads every job)",
        ));
    };
    let ran = tokio::time::timeout(
        AUDIT_TIMEOUT,
        hero_admin::Admin::from(&app.client).audit(fix, &|_| {}),
    )
    .await;
    let Ok(done) = ran else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the audit did not finish within {AUDIT_TIMEOUT:?}: run `hero audit` from a shell for a namespace this large"),
        ));
    };
    Ok(done?)
}

/// Runs the audit (and its fixes) within [`AUDIT_TIMEOUT`], answering at most `limit` findings.
async fn bounded_audit(app: &App, fix: bool, limit: Option<usize>) -> ApiResult {
    let limit = limit.unwrap_or(AUDIT_LIMIT).clamp(1, AUDIT_LIMIT);
    let (mut report, fixed) = timed_audit(app, fix).await?;
    let mut v = report.to_json(&fixed);
    let total = report.findings.len();
    report.findings.truncate(limit);
    v["findings"] = report.findings.iter().map(|f| f.to_json()).collect();
    v["findings_total"] = total.into();
    v["truncated"] = (total > limit).into();
    Ok(Json(v))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AuditBody {
    #[serde(default)]
    fix: bool,
}

/// POST runs the audit too, and with `{"fix": true}` repairs what it found (token needed).
async fn audit_fix(State(app): State<App>, headers: HeaderMap, raw: Bytes) -> ApiResult {
    app.authorize(&headers)?;
    let b: AuditBody = body(&raw)?;
    bounded_audit(&app, b.fix, None).await
}

#[derive(Deserialize, Default)]
struct DeadQuery {
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn dead(State(app): State<App>, Query(q): Query<DeadQuery>) -> ApiResult {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, 1000);
    let mut page = hero_admin::Inspector::from(&app.client)
        .dead_letters(q.cursor.as_deref().filter(|c| !c.is_empty()), limit)
        .await?;
    super::redact::scrub_letters(&app.client, &mut page).await?;
    let next = (page.len() == limit)
        .then(|| page.last().map(|d| d.entry.clone()))
        .flatten();
    Ok(Json(json!({
        "dead": page.iter().map(DeadLetter::to_json).collect::<Vec<_>>(),
        "next": next,
    })))
}

#[derive(Deserialize)]
struct BatchesQuery {
    limit: Option<usize>,
}

async fn batches(State(app): State<App>, Query(q): Query<BatchesQuery>) -> ApiResult {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, 1000);
    let all = hero_admin::Inspector::from(&app.client)
        .batches(limit)
        .await?;
    Ok(Json(json!({
        "batches": all.iter().map(hero_protocol::batch::BatchInfo::to_json).collect::<Vec<_>>(),
    })))
}

async fn batch_one(State(app): State<App>, Path(name): Path<String>) -> ApiResult {
    let name =
        hero_protocol::BatchName::new(&name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    match hero_admin::Inspector::from(&app.client)
        .batch(&name)
        .await?
    {
        Some(b) => Ok(Json(b.to_json())),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no batch {name} (a done batch is kept for the broker's retention time)"),
        )),
    }
}

async fn dead_one(State(app): State<App>, Path(id): Path<String>) -> ApiResult {
    let id = job_id(&id)?;
    match hero_admin::Inspector::from(&app.client)
        .dead_letter(id.as_str())
        .await?
    {
        Some(d) => Ok(Json(d.to_json())),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("job {id} has no dead letter"),
        )),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DeadBody {
    #[serde(default)]
    ids: Vec<String>,
    #[serde(default)]
    all: bool,
}

/// The letters a retry or purge body names; 400 for neither or both, 404 for an id with none.
async fn chosen(app: &App, raw: &Bytes) -> Result<Vec<DeadLetter>, ApiError> {
    let b: DeadBody = body(raw)?;
    let inspector = hero_admin::Inspector::from(&app.client);
    match (b.all, b.ids.is_empty()) {
        (true, true) => Ok(inspector.all_dead_letters().await?),
        (false, false) => {
            for id in &b.ids {
                job_id(id)?;
            }
            inspector.dead_letters_of(&b.ids).await?.map_err(|id| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("job {id} has no dead letter; nothing was changed"),
                )
            })
        }
        (true, false) => Err(ApiError::bad_request(
            "send either {\"ids\": [...]} or {\"all\": true}, not both",
        )),
        (false, true) => Err(ApiError::bad_request(
            "name the jobs: {\"ids\": [...]}, or {\"all\": true}",
        )),
    }
}

fn outcomes(outcomes: &[hero_admin::repair::DeadOutcome]) -> Json<Value> {
    Json(json!({
        "results": outcomes.iter().map(|o| json!({"job": o.job_id, "answer": o.answer})).collect::<Vec<_>>()
    }))
}

async fn dead_retry(State(app): State<App>, headers: HeaderMap, raw: Bytes) -> ApiResult {
    app.authorize(&headers)?;
    let letters = chosen(&app, &raw).await?;
    Ok(outcomes(
        &hero_admin::Admin::from(&app.client)
            .retry_dead(&letters)
            .await?,
    ))
}

async fn dead_purge(State(app): State<App>, headers: HeaderMap, raw: Bytes) -> ApiResult {
    app.authorize(&headers)?;
    let letters = chosen(&app, &raw).await?;
    Ok(outcomes(
        &hero_admin::Admin::from(&app.client)
            .purge_dead(&letters)
            .await?,
    ))
}
