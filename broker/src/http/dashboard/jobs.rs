//! Jobs: the listing (by status, queue, tag or tracked; search by id) and a job's page (record,
//! progress and log, live while it runs; output, error, the last failure's trace, history, actions).

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use hero_admin::JobSummary;
use hero_protocol::JobId;
use maud::{html, Markup};
use serde::Deserialize;

use super::super::api::JobsQuery;
use super::{feed, job_link, page, shown, status_pill, urlencode, when, ApiError, App, Page};

const STATUSES: [&str; 5] = ["waiting", "dispatched", "started", "finished", "error"];

pub(super) async fn jobs(State(app): State<App>, Query(q): Query<JobsQuery>) -> Page {
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
    let fair = match q.queue.as_deref().filter(|v| !v.is_empty()) {
        Some(name) => match hero_protocol::policy::queue_name(name) {
            Ok(name) => Some((
                hero_admin::Inspector::from(&app.client)
                    .fair_keys(&name, 10, 0)
                    .await?,
                name,
            )),
            Err(_) => None,
        },
        None => None,
    };
    page(
        "Jobs",
        "/jobs",
        html! {
            @if let Some((k, name)) = fair.as_ref().filter(|(k, _)| k.keys > 0 || !k.held.is_empty()) {
                (fair_keys(name, k))
            }
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

/// A fair queue's keys with work (`hero queues --keys`): the queue page's card.
fn fair_keys(name: &str, k: &hero_admin::inspect::FairKeys) -> Markup {
    html! {
        section.card #fair-keys {
            h2 { "Keys with work in " (name) }
            p { (k.keys) " limit keys have jobs waiting; they are served in turns (fair share)." }
            @if k.next.is_some() {
                p.note { "The most waiting among the first " (k.read) " keys in the gates' order (a page reads no more)." }
            }
            @if !k.top.is_empty() {
                div.scroll { table #keys {
                    thead { tr { th { "Key" } th.n { "Waiting" } } }
                    tbody {
                        @for w in &k.top {
                            tr data-key=(w.key) {
                                td {
                                    @if w.key.is_empty() { em { "(no key)" } } @else { (shown(&w.key)) }
                                    @if k.held.iter().any(|h| h.rsplit_once('|').is_some_and(|(_, key)| key == w.key)) {
                                        " " span.pill.wait { "paused" }
                                    }
                                }
                                td.n { (w.waiting) }
                            }
                        }
                    }
                } }
            }
            @for (queue, key) in k.held.iter().filter_map(|h| h.rsplit_once('|')) {
                p.held { "Key " strong { (shown(key)) } " is paused under " (queue) ": its jobs wait while the other keys run ("
                    code { "hero resume " (queue) " --key " (shown(key)) } ")." }
            }
        }
    }
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
            td.mono { (shown(&j.worker)) }
            td { (shown(&j.tags.join(", "))) }
            td.err { (shown(&j.error)) }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct Go {
    id: String,
}

/// The search box: straight to the job's page.
pub(super) async fn go(Query(g): Query<Go>) -> Response {
    axum::response::Redirect::to(&format!("/jobs/{}", urlencode(g.id.trim()))).into_response()
}

pub(super) async fn job(State(app): State<App>, Path(id): Path<String>) -> Page {
    let jid = JobId::new(&id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let v = super::super::api::job_with_history(&app, &jid, false).await?;
    let dead = hero_admin::Inspector::from(&app.client)
        .dead_letter(jid.as_str())
        .await?;
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
            section.card #job data-status=(status) data-job=(id) data-live=(if ended { "" } else { "1" }) {
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
                    p.notice { "Dead-lettered " (when(d.at_ms())) ": " (shown(&d.reason)) }
                }
                dl.record {
                    @for k in ["script_type", "group", "instance", "priority", "attempts", "retries", "timeout", "worker_id", "created_at", "started_at", "finished_at", "caller_id", "context_id", "traceparent"] {
                        @let val = &v[k];
                        @if !val.is_null() && val.as_str() != Some("") {
                            dt { (k) }
                            dd.mono { (shown(&val.as_str().map_or_else(|| val.to_string(), str::to_string))) }
                        }
                    }
                    @if let Some(b) = v["batch"].as_str() {
                        dt { "batch" }
                        dd.mono { a href="/batches" { (b) } }
                    }
                    @if let Some(tags) = v["tags"].as_array().filter(|t| !t.is_empty()) {
                        dt { "tags" }
                        dd { (shown(&tags.iter().filter_map(|t| t.as_str()).collect::<Vec<_>>().join(", "))) }
                    }
                    // a newer version's fields, as they are
                    @if let Some(unknown) = v["unknown_fields"].as_object() {
                        @for (k, val) in unknown {
                            dt.unknown title="a field this version does not know (a newer version wrote it)" { (k) }
                            dd.mono { (val.as_str().unwrap_or_default()) }
                        }
                    }
                }
                @let percent = v["progress"]["percent"].as_f64();
                @let message = v["progress"]["message"].as_str().unwrap_or("");
                div #progress hidden[percent.is_none()] {
                    h3 { "Progress" }
                    progress #progress-bar max="100" value=(percent.unwrap_or(0.0)) {}
                    " "
                    span #progress-text { (percent.map(|p| format!("{p:.0}%")).unwrap_or_default()) " " (shown(message)) }
                }
                @let log: Vec<&str> = v["log"].as_array().map(|a| a.iter().filter_map(|l| l.as_str()).collect()).unwrap_or_default();
                div #job-log-box hidden[log.is_empty()] {
                    h3 { "Log" }
                    pre #job-log { (shown(&log.join("\n"))) }
                }
                h3 { "Script" }
                pre { (shown(&s("script"))) }
                @if !s("output").is_empty() {
                    h3 { "Output" }
                    pre #output { (shown(&s("output"))) }
                }
                @if !s("error").is_empty() {
                    h3 { "Error" }
                    pre.err #error { (shown(&s("error"))) }
                }
                @if !s("trace").is_empty() {
                    h3 { "Trace of the last failed attempt" }
                    pre.err.trace #trace { (shown(&s("trace"))) }
                }
            }
            section.card {
                h2 { "History" }
                @if v["history_complete"] == false {
                    p.note #history-partial { "Its life spans more of the event log than a page reads: the events around its submit and its end are shown, those between (a retry's) may not be." }
                }
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
                                    td.mono { (shown(e["worker"].as_str().unwrap_or(""))) }
                                    td.n { (e["attempt"].as_u64().map(|a| a.to_string()).unwrap_or_default()) }
                                    td { (shown(e["reason"].as_str().unwrap_or(""))) }
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
