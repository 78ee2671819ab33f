//! The dashboard (`/`): server-rendered pages (maud) over the same reads as the API, with a
//! little JavaScript (`assets/app.js`, compiled into the binary) for what must be live: the
//! event feed (Server-Sent Events), the queue counts (refreshed from `/api/queues`), and the
//! buttons that change jobs (they call the API with the token the operator typed, kept in the
//! browser's local storage, never in a cookie the page could leak).

use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hero_client::inspect::{Actor, DeadLetter, Event, Histogram, Minute, QueueStats};
use hero_client::{clock, JobId, JobSummary};
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;

use super::api::JobsQuery;
use super::{ApiError, App};

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/app.js");

pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(overview))
        .route("/actors", get(actors))
        .route("/jobs", get(jobs))
        .route("/jobs/{id}", get(job))
        .route("/find", get(go))
        .route("/dead", get(dead))
        .route("/audit", get(audit))
        .route("/events", get(events))
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css", STYLE) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript", SCRIPT) }),
        )
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A page failed: the same layout, saying what went wrong.
struct PageError(ApiError);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError(e)
    }
}

impl From<hero_client::Error> for PageError {
    fn from(e: hero_client::Error) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = layout(
            "Error",
            "",
            html! {
                div.empty {
                    h2 { (self.0.status.as_u16()) " " (self.0.status.canonical_reason().unwrap_or("")) }
                    p { (self.0.message) }
                    p { a href="/" { "Back to the queues" } }
                }
            },
        );
        (self.0.status, Html(body.into_string())).into_response()
    }
}

type Page = Result<Html<String>, PageError>;

const NAV: [(&str, &str); 6] = [
    ("/", "Queues"),
    ("/actors", "Actors"),
    ("/jobs", "Jobs"),
    ("/dead", "Dead letters"),
    ("/audit", "Audit"),
    ("/events", "Events"),
];

fn layout(title: &str, active: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " · hero" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { span.logo { "◆" } " hero" }
                    nav {
                        @for (href, name) in NAV {
                            a href=(href) class=[(active == href).then_some("active")] { (name) }
                        }
                    }
                    form.token #token-form title="The broker's --http-token: needed to stop, requeue, retry or purge" {
                        input #token type="password" placeholder="API token" autocomplete="off" aria-label="API token";
                        button type="submit" { "Save" }
                    }
                }
                div #flash role="status" aria-live="polite" {}
                main { (content) }
            }
        }
    }
}

#[allow(clippy::unnecessary_wraps)] // every page handler returns a Page; this is their last step
fn page(title: &str, active: &str, content: Markup) -> Page {
    Ok(Html(layout(title, active, content).into_string()))
}

fn ms_text(ms: Option<u64>) -> String {
    match ms {
        None => "–".into(),
        Some(ms) if ms < 1000 => format!("{ms} ms"),
        Some(ms) if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) if ms < 3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        Some(ms) => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

fn when(ms: u64) -> String {
    let iso = clock::iso(ms);
    iso.replace('T', " ").trim_end_matches('Z').to_string()
}

fn job_link(id: &str) -> Markup {
    html! { a.mono href=(format!("/jobs/{}", urlencode(id))) { (id) } }
}

/// Percent-encodes what may not stand in a path segment or a query value.
fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn quantile(h: &Histogram, q: f64) -> String {
    ms_text(h.quantile_ms(q))
}

/// A small bar chart, one bar a minute, drawn as SVG on the server: no chart library to ship.
fn chart(title: &str, unit: &str, minutes: &[Minute], value: fn(&Minute) -> Option<u64>) -> Markup {
    let values: Vec<Option<u64>> = minutes.iter().map(value).collect();
    let max = values.iter().flatten().copied().max().unwrap_or(0).max(1);
    let n = values.len().max(1);
    let (w, h) = (600.0_f64, 120.0_f64);
    let bw = w / n as f64;
    let last = values.iter().rev().flatten().next().copied();
    html! {
        figure.chart {
            figcaption {
                span { (title) }
                span.num { @if let Some(v) = last { (v) " " (unit) } @else { "no samples yet" } }
            }
            svg viewBox=(format!("0 0 {w} {}", h + 16.0)) preserveAspectRatio="none" role="img" aria-label=(title) {
                line x1="0" y1=(h) x2=(w) y2=(h) class="axis" {}
                @for (i, v) in values.iter().enumerate() {
                    @if let Some(v) = v {
                        @let bh = (*v as f64 / max as f64) * (h - 4.0);
                        rect x=(format!("{:.1}", i as f64 * bw + 1.0)) y=(format!("{:.1}", h - bh)) width=(format!("{:.1}", (bw - 2.0).max(1.0))) height=(format!("{bh:.1}")) {
                            title { (minutes[i].at) ": " (v) " " (unit) }
                        }
                    }
                }
                text x="0" y=(h + 14.0) class="tick" { (minutes.first().map_or("", |m| &m.at[11..])) }
                text x=(w) y=(h + 14.0) class="tick end" { "now" }
                text x="2" y="10" class="tick" { "max " (max) }
            }
        }
    }
}

fn queues_table(queues: &[QueueStats]) -> Markup {
    html! {
        div.scroll {
            table #queues {
                thead { tr {
                    th { "Queue" } th.n { "Waiting" } th.n { "Delayed" } th.n { "Running" }
                    th.n { "Finished" } th.n { "Failed" } th.n { "Dead" } th.n { "Done/min" }
                    th.n { "Wait p50" } th.n { "Wait p99" } th.n { "Run p50" } th.n { "Run p99" }
                    th.n { "Oldest waiting" } th { "State" }
                } }
                tbody {
                    @for q in queues {
                        tr data-queue=(q.name) {
                            td { a href=(format!("/jobs?queue={}", urlencode(&q.name))) { (q.name) } }
                            td.n data-f="waiting" { (q.waiting) }
                            td.n data-f="delayed" { (q.delayed.max(0)) }
                            td.n data-f="running" { (q.running) }
                            td.n data-f="finished" { (q.finished) }
                            td.n data-f="failed" { (q.failed) }
                            td.n data-f="dead" { (q.dead) }
                            td.n data-f="done_per_minute" { (format!("{:.1}", q.done_per_minute)) }
                            td.n { (quantile(&q.wait, 0.5)) }
                            td.n { (quantile(&q.wait, 0.99)) }
                            td.n { (quantile(&q.run, 0.5)) }
                            td.n { (quantile(&q.run, 0.99)) }
                            td.n { (ms_text(q.oldest_waiting_ms)) }
                            td { span.pill.ok { "active" } }
                        }
                    }
                }
            }
        }
    }
}

fn feed(filter: &str) -> Markup {
    html! {
        section.card {
            h2 { "Live events" span.live { "●" } }
            ul #feed data-filter=(filter) {
                li.empty-feed { "Waiting for the next change of any job…" }
            }
        }
    }
}

async fn overview(State(app): State<App>) -> Page {
    let inspector = app.client.inspector();
    let queues = inspector.queues().await?;
    let minutes = inspector.history(60).await?;
    let total = |f: fn(&QueueStats) -> u64| queues.iter().map(f).sum::<u64>();
    let rate: f64 = queues.iter().map(|q| q.done_per_minute).sum();
    page(
        "Queues",
        "/",
        html! {
            section.cards {
                div.stat { span.label { "Waiting" } span.value #total-waiting { (total(|q| q.waiting)) } }
                div.stat { span.label { "Running" } span.value #total-running { (total(|q| q.running)) } }
                div.stat { span.label { "Delayed" } span.value { (total(|q| q.delayed.max(0) as u64)) } }
                div.stat { span.label { "Finished" } span.value { (total(|q| q.finished)) } }
                div.stat { span.label { "Failed" } span.value { (total(|q| q.failed)) } }
                div.stat { span.label { "Done / min" } span.value { (format!("{rate:.1}")) } }
            }
            section.charts {
                (chart("Jobs ended per minute, last hour", "jobs", &minutes, |m| Some(m.finished + m.failed)))
                (chart("Jobs waiting, last hour", "waiting", &minutes, |m| m.waiting))
            }
            section.card {
                h2 { "Queues" }
                @if queues.is_empty() {
                    div.empty {
                        p { "No queues yet. A queue appears with its first job:" }
                        pre { "hero submit --type rhai '40 + 2'" }
                        p { "Workers register themselves; see them under " a href="/actors" { "Actors" } "." }
                    }
                } @else {
                    (queues_table(&queues))
                }
            }
            (feed(""))
        },
    )
}

async fn actors(State(app): State<App>) -> Page {
    let actors = app.client.inspector().actors().await?;
    let field = |a: &Actor, k: &str| {
        a.presence
            .get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .unwrap_or_default()
    };
    page(
        "Actors",
        "/actors",
        html! {
            section.card {
                h2 { "Actors" }
                @if actors.is_empty() {
                    div.empty {
                        p { "No workers are running. Start one:" }
                        pre { "hero worker --type rhai" }
                    }
                } @else {
                    div.scroll { table {
                        thead { tr {
                            th { "Worker" } th { "State" } th { "Types" } th { "Host" } th.n { "Pid" }
                            th { "Version" } th { "Started" } th { "Last heartbeat" } th.n { "Running" } th { "Holds" }
                        } }
                        tbody {
                            @for a in &actors {
                                tr {
                                    td.mono { (a.consumer) }
                                    td { @if a.live { span.pill.ok { "live" } } @else { span.pill.bad { "gone" } } }
                                    td { (field(a, "types")) }
                                    td { (field(a, "host")) }
                                    td.n { (field(a, "pid")) }
                                    td { (field(a, "version")) }
                                    td { (field(a, "started_at")) }
                                    td { (field(a, "heartbeat_at")) }
                                    td.n { (a.running()) }
                                    td {
                                        @for h in &a.holdings {
                                            div { (app.client.keys().queue_name(&h.stream)) ": " (h.jobs) }
                                        }
                                    }
                                }
                            }
                        }
                    } }
                }
            }
        },
    )
}

const STATUSES: [&str; 5] = ["waiting", "dispatched", "started", "finished", "error"];

async fn jobs(State(app): State<App>, Query(q): Query<JobsQuery>) -> Page {
    let page_of = q.page(&app).await?;
    let keep = |name: &str, v: &Option<String>| {
        v.as_deref()
            .filter(|v| !v.is_empty())
            .map(|v| format!("&{name}={}", urlencode(v)))
            .unwrap_or_default()
    };
    let next_link = page_of.next.as_ref().map(|n| {
        format!(
            "/jobs?cursor={}{}{}{}{}",
            urlencode(n),
            keep("status", &q.status),
            keep("queue", &q.queue),
            keep("tag", &q.tag),
            keep("tracked", &q.tracked)
        )
    });
    page(
        "Jobs",
        "/jobs",
        html! {
            section.card {
                h2 { "Find a job" }
                form.inline action="/find" method="get" #find-job {
                    input name="id" placeholder="Job id" aria-label="Job id" required;
                    button type="submit" { "Open" }
                }
                form.inline action="/jobs" method="get" #filter-jobs {
                    select name="status" aria-label="Status" {
                        option value="" { "any status" }
                        @for s in STATUSES {
                            option value=(s) selected[q.status.as_deref() == Some(s)] { (s) }
                        }
                    }
                    input name="queue" placeholder="queue, e.g. osis/g1" value=(q.queue.clone().unwrap_or_default()) aria-label="Queue";
                    input name="tag" placeholder="tag" value=(q.tag.clone().unwrap_or_default()) aria-label="Tag";
                    button type="submit" { "Filter" }
                    a.button href="/jobs?tracked=1" #tracked-jobs { "Tracked jobs" }
                }
            }
            section.card {
                h2 { "Jobs" }
                @if page_of.jobs.is_empty() {
                    div.empty {
                        @if page_of.next.is_some() {
                            p { "None on this page of the keyspace; there is more." }
                        } @else {
                            p { "No jobs match. Ended jobs are kept for the broker's retention time, then deleted." }
                        }
                    }
                } @else {
                    div.scroll { table #jobs {
                        thead { tr {
                            th { "Id" } th { "Status" } th { "Queue" } th.n { "Prio" } th.n { "Attempts" }
                            th { "Updated" } th { "Worker" } th { "Tags" } th { "Error" }
                        } }
                        tbody {
                            @for j in &page_of.jobs {
                                (job_row(j))
                            }
                        }
                    } }
                }
                @if let Some(next) = next_link {
                    p { a.button href=(next) { "Next page →" } }
                }
            }
        },
    )
}

fn status_pill(status: &str) -> Markup {
    let class = match status {
        "finished" => "ok",
        "error" => "bad",
        "started" => "run",
        _ => "wait",
    };
    html! { span class=(format!("pill {class}")) { (status) } }
}

fn job_row(j: &JobSummary) -> Markup {
    html! {
        tr {
            td { (job_link(&j.id)) }
            td { (status_pill(&j.status)) }
            td { (j.queue) }
            td.n { (j.priority) }
            td.n { (j.attempts) }
            td { (j.updated_at) }
            td.mono { (j.worker) }
            td { (j.tags.join(", ")) }
            td.err { (j.error) }
        }
    }
}

#[derive(Deserialize)]
struct Go {
    id: String,
}

/// The search box: straight to the job's page.
async fn go(Query(g): Query<Go>) -> Response {
    axum::response::Redirect::to(&format!("/jobs/{}", urlencode(g.id.trim()))).into_response()
}

async fn job(State(app): State<App>, Path(id): Path<String>) -> Page {
    let jid = JobId::new(&id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let v = super::api::job_with_history(&app, &jid).await?;
    let dead = app.client.inspector().dead_letter(jid.as_str()).await?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let status = s("status");
    let ended = status == "finished" || status == "error";
    let history: Vec<&serde_json::Value> = v["history"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let id_json = serde_json::to_string(&[jid.as_str()]).unwrap_or_default();
    page(
        &format!("Job {id}"),
        "/jobs",
        html! {
            section.card #job data-status=(status) {
                h2 { "Job " span.mono { (id) } " " (status_pill(&status)) }
                div.actions {
                    @if !ended {
                        button.danger data-post=(format!("/api/jobs/{}/stop", urlencode(&id))) data-confirm="Stop this job?" { "Stop" }
                    }
                    button data-post=(format!("/api/jobs/{}/requeue", urlencode(&id))) data-confirm="Queue this job again?" { "Requeue" }
                    button data-post=(format!("/api/jobs/{}/track", urlencode(&id))) { "Track" }
                    @if dead.is_some() {
                        button.primary #retry data-post="/api/dead/retry" data-body=(format!("{{\"ids\":{id_json}}}")) { "Retry dead letter" }
                    }
                }
                @if let Some(d) = &dead {
                    p.notice { "Dead-lettered " (when(d.at_ms())) ": " (d.reason) }
                }
                dl.record {
                    @for k in ["script_type", "group", "instance", "priority", "attempts", "retries", "timeout", "worker_id", "created_at", "started_at", "finished_at", "caller_id", "context_id", "traceparent"] {
                        @let val = &v[k];
                        @if !val.is_null() && val.as_str() != Some("") {
                            dt { (k) }
                            dd.mono { (val.as_str().map_or_else(|| val.to_string(), str::to_string)) }
                        }
                    }
                    @if let Some(tags) = v["tags"].as_array().filter(|t| !t.is_empty()) {
                        dt { "tags" }
                        dd { (tags.iter().filter_map(|t| t.as_str()).collect::<Vec<_>>().join(", ")) }
                    }
                }
                h3 { "Script" }
                pre { (s("script")) }
                @if !s("output").is_empty() {
                    h3 { "Output" }
                    pre #output { (s("output")) }
                }
                @if !s("error").is_empty() {
                    h3 { "Error" }
                    pre.err #error { (s("error")) }
                }
            }
            section.card {
                h2 { "History" }
                @if history.is_empty() {
                    div.empty { p { "No events of this job are in the event log (it keeps the latest entries only, up to the broker's --events-max)." } }
                } @else {
                    div.scroll { table #history {
                        thead { tr { th { "When" } th { "Event" } th { "Queue" } th { "Worker" } th.n { "Attempt" } th { "Detail" } } }
                        tbody {
                            @for e in &history {
                                tr {
                                    td { (when(e["at_ms"].as_u64().unwrap_or(0))) }
                                    td { (e["event"].as_str().unwrap_or("")) }
                                    td { (e["queue"].as_str().map(|q| app.client.keys().queue_name(q)).unwrap_or_default()) }
                                    td.mono { (e["worker"].as_str().unwrap_or("")) }
                                    td.n { (e["attempt"].as_u64().map(|a| a.to_string()).unwrap_or_default()) }
                                    td { (e["reason"].as_str().unwrap_or("")) }
                                }
                            }
                        }
                    } }
                }
            }
            (feed(&format!("?job={}", urlencode(&id))))
        },
    )
}

async fn dead(State(app): State<App>) -> Page {
    let letters = app.client.inspector().dead_letters(None, 200).await?;
    page(
        "Dead letters",
        "/dead",
        html! {
            section.card {
                h2 { "Dead letters" }
                @if letters.is_empty() {
                    div.empty { p { "No dead letters. A job lands here when its attempts run out or it cannot be run at all." } }
                } @else {
                    div.actions {
                        button.primary data-post="/api/dead/retry" data-body="{\"all\":true}" data-confirm="Queue every dead-lettered job again?" { "Retry all" }
                        button.danger data-post="/api/dead/purge" data-body="{\"all\":true}" data-confirm="Delete every dead letter and its job for good?" { "Purge all" }
                    }
                    div.scroll { table #dead {
                        thead { tr { th { "Job" } th { "Dead since" } th { "Queue" } th { "Reason" } th {} } }
                        tbody {
                            @for d in &letters {
                                (dead_row(&app, d))
                            }
                        }
                    } }
                }
            }
        },
    )
}

fn dead_row(app: &App, d: &DeadLetter) -> Markup {
    let body = format!(
        "{{\"ids\":{}}}",
        serde_json::to_string(&[&d.job_id]).unwrap_or_default()
    );
    html! {
        tr {
            td { (job_link(&d.job_id)) }
            td { (when(d.at_ms())) }
            td { (app.client.keys().queue_name(&d.queue)) }
            td.err { (d.reason) }
            td.actions {
                button data-post="/api/dead/retry" data-body=(body) { "Retry" }
                button.danger data-post="/api/dead/purge" data-body=(body) data-confirm="Delete this job for good?" { "Purge" }
            }
        }
    }
}

#[derive(Deserialize, Default)]
struct AuditQuery {
    run: Option<String>,
}

async fn audit(State(app): State<App>, Query(q): Query<AuditQuery>) -> Page {
    let report = if q.run.is_some() {
        Some(app.client.audit(false, &|_| {}).await?.0)
    } else {
        None
    };
    page(
        "Audit",
        "/audit",
        html! {
            section.card {
                h2 { "Recovery audit" }
                p { "Every pending entry of every queue, joined with its job and its owner's presence, and the cross-checks the other way. It reads the whole keyspace a page at a time: run it when you need it." }
                div.actions {
                    a.button.primary href="/audit?run=1" #run-audit { "Run the audit" }
                    @if report.as_ref().is_some_and(|r| !r.is_consistent()) {
                        button.danger data-post="/api/audit" data-body="{\"fix\":true}" data-confirm="Repair every inconsistency found?" { "Fix inconsistencies" }
                    }
                }
                @if let Some(r) = &report {
                    @if r.is_consistent() {
                        p.notice.ok #audit-result { "Consistent: every pending entry and job is where it should be." }
                    } @else {
                        p.notice.bad #audit-result { (r.inconsistencies().count()) " inconsistencies found." }
                    }
                    div.scroll { table #audit-counts {
                        thead { tr { th { "Class" } th.n { "Count" } th { "Meaning" } } }
                        tbody {
                            @for (class, n) in r.counts() {
                                tr class=[(class.is_inconsistency() && n > 0).then_some("bad")] {
                                    td { (class.as_str()) }
                                    td.n { (n) }
                                    td { (class.to_string()) }
                                }
                            }
                        }
                    } }
                    @if !r.is_consistent() {
                        h3 { "Inconsistencies" }
                        div.scroll { table {
                            thead { tr { th { "Class" } th { "Job" } th { "Key" } th { "Consumer" } th { "Detail" } } }
                            tbody {
                                @for f in r.inconsistencies() {
                                    tr {
                                        td { (f.class.as_str()) }
                                        td { @if let Some(j) = &f.job { (job_link(j)) } }
                                        td.mono { (f.key) }
                                        td.mono { (f.consumer.clone().unwrap_or_default()) }
                                        td { (f.detail) }
                                    }
                                }
                            }
                        } }
                    }
                }
            }
        },
    )
}

async fn events(State(app): State<App>) -> Page {
    let latest: Vec<Event> = app
        .client
        .inspector()
        .events(&hero_client::inspect::EventFilter::default(), 100)
        .await?;
    page(
        "Events",
        "/events",
        html! {
            (feed(""))
            section.card {
                h2 { "Latest events" }
                @if latest.is_empty() {
                    div.empty { p { "The event log is empty (or off: the broker's --events-max is 0)." } }
                } @else {
                    div.scroll { table {
                        thead { tr { th { "When" } th { "Event" } th { "Job" } th { "Queue" } th { "Worker" } th { "Detail" } } }
                        tbody {
                            @for e in latest.iter().rev() {
                                tr {
                                    td { (when(e.at_ms())) }
                                    td { (e.event) }
                                    td { (job_link(&e.job_id)) }
                                    td { (e.queue.as_deref().map(|q| app.client.keys().queue_name(q)).unwrap_or_default()) }
                                    td.mono { (e.worker.clone().unwrap_or_default()) }
                                    td { (e.reason.clone().unwrap_or_default()) }
                                }
                            }
                        }
                    } }
                }
            }
        },
    )
}
