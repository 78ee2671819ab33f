//! The operator's pages: dead letters (retry, purge), the audit (run, fix), the event log.

use axum::extract::{Query, State};
use hero_admin::inspect::{DeadLetter, Event};
use maud::{html, Markup};
use serde::Deserialize;

use super::super::api::AUDIT_LIMIT;
use super::{feed, job_link, page, shown, when, App, Page};

pub(super) async fn dead(State(app): State<App>) -> Page {
    let mut letters = hero_admin::Inspector::from(&app.client)
        .dead_letters(None, 200)
        .await?;
    super::super::redact::scrub_letters(&app.client, &mut letters).await?;
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
            td.err { (shown(&d.reason)) }
            td.actions {
                button data-post="/api/dead/retry" data-body=(body) { "Retry" }
                button.danger data-post="/api/dead/purge" data-body=(body) data-confirm="Delete this job for good?" { "Purge" }
            }
        }
    }
}

#[derive(Deserialize, Default)]
pub(super) struct AuditQuery {
    run: Option<String>,
}

pub(super) async fn audit(
    State(app): State<App>,
    headers: axum::http::HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Page {
    // a link from another site (another port of this host is one) shows the page, never runs it
    let report = if q.run.is_some() && super::super::origin::same_origin(&headers) {
        // the one O(jobs) read: the admin token only
        app.authorize(&headers)?;
        Some(super::super::api::timed_audit(&app, false).await?.0)
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
                                @for f in r.inconsistencies().take(AUDIT_LIMIT) {
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
                        @if r.inconsistencies().count() > AUDIT_LIMIT {
                            p.notice #audit-truncated { "The first " (AUDIT_LIMIT) " are shown; `hero audit` in a shell lists them all." }
                        }
                    }
                }
            }
        },
    )
}

pub(super) async fn events(State(app): State<App>) -> Page {
    let mut latest: Vec<Event> = hero_admin::Inspector::from(&app.client)
        .events(&hero_admin::inspect::EventFilter::default(), 100)
        .await?;
    super::super::redact::scrub_events(&app.client, &mut latest).await?;
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
                                    td { span class=(format!("pill {}", e.kind().map_or("wait", |k| k.tone()))) { (e.event) } }
                                    td { (job_link(&e.job_id)) }
                                    td { (e.queue.as_deref().map(|q| app.client.keys().queue_name(q)).unwrap_or_default()) }
                                    td.mono { (shown(e.worker.as_deref().unwrap_or_default())) }
                                    td { (shown(e.reason.as_deref().unwrap_or_default())) }
                                }
                            }
                        }
                    } }
                }
            }
        },
    )
}
