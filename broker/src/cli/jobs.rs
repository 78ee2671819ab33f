//! `hero jobs`: list jobs by status or by queue, a page at a time.

use anyhow::{Context, Result};
use hero_admin::{JobSummary, ListFilter};
use hero_protocol::{GroupName, InstanceName, Priority, ScriptType, Status, Target};

use super::context::{connect, resolve_url};
use super::table::{num, render, text};
use super::{Global, JobsArgs};

pub(super) async fn jobs(g: &Global, args: &JobsArgs) -> Result<i32> {
    let filter = if args.tracked {
        ListFilter::Tracked
    } else if let Some(t) = &args.queue_type {
        let target = Target::new(
            ScriptType::new(t)?,
            args.queue_group
                .as_deref()
                .map(GroupName::new)
                .transpose()?,
            args.queue_instance
                .as_deref()
                .map(InstanceName::new)
                .transpose()?,
        );
        let prio = args
            .queue_priority
            .map(Priority::new)
            .transpose()?
            .unwrap_or_default();
        ListFilter::Queue(target, prio)
    } else if let Some(s) = &args.status {
        ListFilter::Status(Status::parse(s).with_context(|| {
            format!("--status {s:?} is not a status: use waiting, dispatched, started, finished or error")
        })?)
    } else {
        ListFilter::All
    };
    let client = connect(g, &resolve_url(g)).await?;
    // a call reads a bounded number of candidates; a person reading the table is never shown an
    // empty page while matches remain, so the CLI asks on until it has some or the listing ends
    let inspector = hero_admin::Inspector::from(&client);
    let mut page = inspector
        .list_tagged(
            &filter,
            args.tag.as_deref(),
            args.cursor.as_deref(),
            args.limit,
        )
        .await?;
    while page.jobs.is_empty() {
        let Some(next) = page.next.take() else { break };
        page = inspector
            .list_tagged(&filter, args.tag.as_deref(), Some(&next), args.limit)
            .await?;
    }
    if g.json {
        let jobs: Vec<_> = page.jobs.iter().map(JobSummary::to_json).collect();
        println!("{}", serde_json::json!({"jobs": jobs, "next": page.next}));
    } else {
        let rows: Vec<Vec<String>> = page
            .jobs
            .iter()
            .map(|j| {
                vec![
                    j.id.clone(),
                    j.status.clone(),
                    j.queue.clone(),
                    j.priority.to_string(),
                    j.attempts.to_string(),
                    j.updated_at.clone(),
                    if j.worker.is_empty() {
                        "-".into()
                    } else {
                        j.worker.clone()
                    },
                    j.error.clone(),
                ]
            })
            .collect();
        print!(
            "{}",
            render(
                &[
                    text("ID"),
                    text("STATUS"),
                    text("QUEUE"),
                    num("PRIO"),
                    num("ATTEMPTS"),
                    text("UPDATED"),
                    text("WORKER"),
                    text("ERROR"),
                ],
                &rows
            )
        );
        if let Some(next) = &page.next {
            println!("more: hero jobs --cursor {next}");
        }
    }
    Ok(0)
}

/// `hero track <id> [--off]`.
pub(super) async fn track(g: &Global, id: &str, on: bool) -> Result<i32> {
    let id = hero_protocol::JobId::new(id)?;
    let client = connect(g, &resolve_url(g)).await?;
    hero_admin::Admin::from(&client).track(&id, on).await?;
    if g.json {
        println!("{}", serde_json::json!({"id": id.as_str(), "tracked": on}));
    } else {
        println!("{id}: {}", if on { "tracked" } else { "no longer tracked" });
    }
    Ok(0)
}
