//! `hero dead list|show|retry|purge`: dead-letter management over `hero_admin::inspect` (what is
//! there) and `hero_admin::repair` (one function call per batch: never in two places or none).

use anyhow::{bail, Result};
use hero_admin::inspect::DeadLetter;
use hero_admin::repair::DeadOutcome;
use hero_client::Client;
use hero_protocol::JobId;

use super::context::{connect, resolve_url};
use super::table::{render, text};
use super::{DeadCommand, Global};

pub(super) async fn dead(g: &Global, cmd: &DeadCommand) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let inspector = hero_admin::Inspector::from(&client);
    match cmd {
        DeadCommand::List { limit, cursor } => {
            let page = inspector.dead_letters(cursor.as_deref(), *limit).await?;
            let next = (page.len() == *limit)
                .then(|| page.last().map(|d| d.entry.clone()))
                .flatten();
            if g.json {
                let all: Vec<_> = page.iter().map(DeadLetter::to_json).collect();
                println!("{}", serde_json::json!({"dead": all, "next": next}));
                return Ok(0);
            }
            if page.is_empty() {
                println!("no dead letters");
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = page
                .iter()
                .map(|d| {
                    vec![
                        d.job_id.clone(),
                        hero_protocol::clock::iso(d.at_ms()),
                        client.keys().queue_name(&d.queue),
                        d.reason.clone(),
                    ]
                })
                .collect();
            print!(
                "{}",
                render(
                    &[
                        text("JOB"),
                        text("DEAD SINCE"),
                        text("QUEUE"),
                        text("REASON")
                    ],
                    &rows
                )
            );
            if let Some(next) = next {
                println!("more: hero dead list --cursor {next}");
            }
            Ok(0)
        }
        DeadCommand::Show { id } => {
            let Some(d) = inspector.dead_letter(id).await? else {
                bail!("job {id} has no dead letter (see hero dead list)");
            };
            let record = match JobId::new(id) {
                Ok(jid) => match client.get(&jid).await {
                    Ok(job) => Some(job),
                    Err(hero_protocol::Error::JobNotFound(_)) => None,
                    // a record that does not decode is shown as such, the bad field named
                    Err(e) => bail!("job {id}: {e}; see it field by field with hero status {id}"),
                },
                Err(_) => None,
            };
            if g.json {
                let mut v = d.to_json();
                v["record"] = record.map_or(serde_json::Value::Null, |j| {
                    serde_json::json!({
                        "status": j.status.as_str(),
                        "attempts": j.attempts,
                        "error": j.error,
                        "script": j.script,
                    })
                });
                println!("{v}");
            } else {
                println!("job:    {}", d.job_id);
                println!("since:  {}", hero_protocol::clock::iso(d.at_ms()));
                println!("queue:  {}", client.keys().queue_name(&d.queue));
                println!("reason: {}", d.reason);
                match record {
                    Some(j) => println!(
                        "record: {} after {} attempt(s): {}",
                        j.status,
                        j.attempts,
                        j.error.unwrap_or_default()
                    ),
                    None => println!("record: none (retry cannot queue it; purge it)"),
                }
            }
            Ok(0)
        }
        DeadCommand::Retry { ids, all } => {
            let letters = chosen(&client, ids, *all).await?;
            let outcomes = hero_admin::Admin::from(&client)
                .retry_dead(&letters)
                .await?;
            Ok(report(g, &outcomes, "requeued"))
        }
        DeadCommand::Purge { ids, all } => {
            let letters = chosen(&client, ids, *all).await?;
            let outcomes = hero_admin::Admin::from(&client)
                .purge_dead(&letters)
                .await?;
            Ok(report(g, &outcomes, "purged"))
        }
    }
}

/// The letters named by job id, or every one with `all`.
async fn chosen(client: &Client, ids: &[String], all: bool) -> Result<Vec<DeadLetter>> {
    let inspector = hero_admin::Inspector::from(client);
    if all {
        return Ok(inspector.all_dead_letters().await?);
    }
    if ids.is_empty() {
        bail!("name the jobs to act on, or --all");
    }
    match inspector.dead_letters_of(ids).await? {
        Ok(letters) => Ok(letters),
        Err(id) => bail!("job {id} has no dead letter (see hero dead list); nothing was changed"),
    }
}

/// One line (or JSON object) per letter; exit 1 when any was not `wanted`.
fn report(g: &Global, outcomes: &[DeadOutcome], wanted: &str) -> i32 {
    if g.json {
        let all: Vec<_> = outcomes
            .iter()
            .map(|o| serde_json::json!({"job": o.job_id, "answer": o.answer}))
            .collect();
        println!("{}", serde_json::json!({ "results": all }));
    } else {
        for o in outcomes {
            println!("{}: {}", o.job_id, o.answer.replace('_', " "));
        }
        if outcomes.is_empty() {
            println!("no dead letters");
        }
    }
    i32::from(outcomes.iter().any(|o| o.answer != wanted))
}
