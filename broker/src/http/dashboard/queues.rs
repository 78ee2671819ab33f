//! The overview (`/`: totals, the last hour's charts, the queues table, the live feed) and the
//! actors page.

use axum::extract::State;
use hero_admin::inspect::{Actor, QueueStats};
use maud::{html, Markup};

use super::{chart, feed, ms_text, page, quantile, urlencode, App, Page};

fn queues_table(queues: &[QueueStats]) -> Markup {
    // the Keys column only where fair share is in use
    let fair = queues.iter().any(|q| q.keys > 0);
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
                            td {
                                @if q.paused { span.pill.wait { "paused" } } @else { span.pill.ok { "active" } }
                            }
                            @if fair { td.n data-f="keys" { (q.keys) } }
                        }
                    }
                }
            }
        }
    }
}

/// A sharded namespace's shards (docs/sharding.md): the queues above are their sums.
fn shards_table(rows: &[hero_admin::shards::ShardRow]) -> Markup {
    html! {
        div.scroll {
            table #shards {
                thead { tr {
                    th.n { "Shard" } th { "State" } th { "Prefix" } th.n { "Slot" } th { "Node" }
                    th.n { "Waiting" } th.n { "Running" } th.n { "Finished" } th.n { "Failed" }
                } }
                tbody {
                    @for r in rows {
                        tr data-shard=(r.shard) {
                            td.n { (r.shard) }
                            td {
                                @match r.state {
                                    "active" => span.pill.ok { "active" },
                                    "draining" => span.pill.wait { "draining" },
                                    other => span.pill { (other) },
                                }
                            }
                            td { code { (r.prefix) } }
                            td.n { (r.slot) }
                            td { (r.node) }
                            td.n { (r.waiting) }
                            td.n { (r.running) }
                            td.n { (r.finished) }
                            td.n { (r.failed) }
                        }
                    }
                }
            }
        }
    }
}

pub(super) async fn overview(State(app): State<App>) -> Page {
    let inspector = hero_admin::Inspector::from(&app.client);
    let queues = inspector.queues().await?;
    let minutes = inspector.history(60).await?;
    let shards = hero_admin::shards::rows(&app.client).await?;
    // Redis's own trouble first (an evicting policy, a failing disk, full, a data loss); an
    // operator whose ACL user may not run INFO sees the queues without it
    let redis_warning = inspector.redis_state().await.ok().and_then(|r| r.warning());
    let total = |f: fn(&QueueStats) -> u64| queues.iter().map(f).sum::<u64>();
    let rate: f64 = queues.iter().map(|q| q.done_per_minute).sum();
    page(
        "Queues",
        "/",
        html! {
            @if let Some(w) = &redis_warning {
                section.card #redis-warning {
                    @for line in w.lines() { p.notice.bad { (line) } }
                }
            }
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
            @if shards.len() > 1 {
                section.card {
                    h2 { "Shards" }
                    (shards_table(&shards))
                }
            }
            (feed(""))
        },
    )
}

pub(super) async fn actors(State(app): State<App>) -> Page {
    let inspector = hero_admin::Inspector::from(&app.client);
    let actors = inspector.actors().await?;
    let brokers = inspector.brokers().await?;
    let field = |a: &Actor, k: &str| match a.presence.get(k) {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        Some(v) => v.as_str().map_or_else(|| v.to_string(), str::to_string),
        None => String::new(),
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
                            th { "Version" } th.n { "Protocol" } th { "Started" } th { "Last heartbeat" } th.n { "Running" } th { "Holds" }
                        } }
                        tbody {
                            @for a in &actors {
                                tr {
                                    td.mono { (a.consumer) }
                                    td { @if a.live { span.pill.ok { "live" } } @else { span.pill.bad { "gone" } } }
                                    td { (field(a, "capabilities")) }
                                    td { (field(a, "hostname")) }
                                    td.n { (field(a, "pid")) }
                                    td { (field(a, "version")) }
                                    td.n.protocol { (a.protocol().map(|p| p.to_string()).unwrap_or_else(|| "?".into())) }
                                    td { (field(a, "started_at")) }
                                    td { (field(a, "last_heartbeat")) }
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
            @if !brokers.is_empty() {
                section.card {
                    h2 { "Brokers" }
                    div.scroll { table #brokers {
                        thead { tr { th { "Broker" } th { "Version" } th.n { "Protocol" } } }
                        tbody {
                            @for b in &brokers {
                                tr {
                                    td.mono { (b.name) }
                                    td { (b.version) }
                                    td.n { (b.protocol.map(|p| p.to_string()).unwrap_or_default()) }
                                }
                            }
                        }
                    } }
                }
            }
        },
    )
}
