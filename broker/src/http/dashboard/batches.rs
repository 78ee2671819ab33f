//! Batches: every recent batch with its counts, state and callback jobs.

use axum::extract::State;
use hero_protocol::batch::BatchInfo;
use maud::{html, Markup};

use super::{job_link, page, App, Page};

pub(super) async fn batches(State(app): State<App>) -> Page {
    let all = hero_admin::Inspector::from(&app.client)
        .batches(200)
        .await?;
    page(
        "Batches",
        "/batches",
        html! {
            section.card {
                h2 { "Batches" }
                @if all.is_empty() {
                    div.empty { p { "No batches. Submit members with hero submit --batch NAME, then hero batch close NAME --on-complete SCRIPT." } }
                } @else {
                    div.scroll { table #batches {
                        thead { tr {
                            th { "Batch" } th { "State" } th.n { "Total" } th.n { "Pending" }
                            th.n { "Finished" } th.n { "Failed" } th { "Progress" } th { "Created" } th { "Callbacks" }
                        } }
                        tbody {
                            @for b in &all {
                                (row(b))
                            }
                        }
                    } }
                }
            }
        },
    )
}

fn row(b: &BatchInfo) -> Markup {
    let ended = b.finished + b.failed;
    let tone = match b.state() {
        "done" if b.failed == 0 => "ok",
        "done" => "bad",
        "closed" => "run",
        _ => "wait",
    };
    html! {
        tr data-batch=(b.name) {
            td.mono { (b.name) }
            td { span class=(format!("pill {tone}")) { (b.state()) } }
            td.n data-f="total" { (b.total) }
            td.n data-f="pending" { (b.pending) }
            td.n data-f="finished" { (b.finished) }
            td.n data-f="failed" { (b.failed) }
            td { progress max=(b.total.max(1)) value=(ended) {} }
            td { (b.created_at) }
            td {
                @if let Some(c) = &b.complete_id { "on_complete " (job_link(c)) " " }
                @if let Some(s) = &b.success_id { "on_success " (job_link(s)) }
                @if b.done_at.is_none() && b.closed {
                    (if b.has_on_complete { "on_complete" } else { "" }) " "
                    (if b.has_on_success { "on_success" } else { "" }) " (waiting)"
                }
            }
        }
    }
}
