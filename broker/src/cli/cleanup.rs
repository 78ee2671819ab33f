//! `hero queue clean|drain|obliterate` and `hero retry`: failed-job tooling and a queue's
//! cleanup, over `hero_admin::Admin` (`admin/src/cleanup.rs`).

use anyhow::Result;
use hero_client::Client;
use hero_protocol::{JobId, Status};

use super::context::{connect, resolve_url};
use super::Global;

/// `hero queue clean|drain|obliterate` (flattened into `hero queue`'s subcommands).
#[derive(clap::Subcommand, Debug)]
pub enum CleanupCommand {
    /// Delete ended jobs older than a grace period, oldest first (BullMQ's queue.clean).
    Clean(CleanArgs),
    /// Delete a queue's waiting jobs, leaving the running ones (BullMQ's queue.drain).
    Drain {
        /// <type>[/<group>[/<instance>]].
        queue: String,
        /// Its delayed jobs (and retries waiting out their back-off) too.
        #[arg(long)]
        delayed: bool,
    },
    /// Remove a queue whole: its jobs, streams, pause and policy (BullMQ's queue.obliterate);
    /// refused while a job of it runs.
    Obliterate {
        /// <type>[/<group>[/<instance>]].
        queue: String,
    },
}

#[derive(clap::Args, Debug)]
pub struct CleanArgs {
    /// <type>[/<group>[/<instance>]]; every queue when absent.
    pub queue: Option<String>,
    /// Only jobs that ended at least this long ago (e.g. 1h, 7d).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub older_than: std::time::Duration,
    /// finished or error (failed, timed out); both when absent.
    #[arg(long, value_parser = ["finished", "error"])]
    pub status: Option<String>,
    /// The most jobs to delete.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
}

/// Answers one cleanup command.
pub(super) async fn run(g: &Global, client: &Client, cmd: &CleanupCommand) -> Result<i32> {
    let admin = hero_admin::Admin::from(client);
    match cmd {
        CleanupCommand::Clean(a) => {
            let status = match a.status.as_deref() {
                Some("finished") => Some(Status::Finished),
                Some(_) => Some(Status::Error),
                None => None,
            };
            let ids = admin
                .clean(a.queue.as_deref(), a.older_than, status, a.limit)
                .await?;
            if g.json {
                println!("{}", serde_json::json!({ "deleted": ids }));
            } else {
                println!("deleted {} ended jobs", ids.len());
            }
        }
        CleanupCommand::Drain { queue, delayed } => {
            let n = admin.drain(queue, *delayed).await?;
            if g.json {
                println!("{}", serde_json::json!({"queue": queue, "deleted": n}));
            } else {
                println!("{queue}: deleted {n} waiting jobs");
            }
        }
        CleanupCommand::Obliterate { queue } => {
            let n = admin.obliterate(queue).await?;
            if g.json {
                println!("{}", serde_json::json!({"queue": queue, "deleted": n}));
            } else {
                println!("{queue}: removed, with {n} jobs");
            }
        }
    }
    Ok(0)
}

/// `hero retry <id>`: a failed job runs again with a fresh retry budget.
pub(super) async fn retry(g: &Global, id: &str) -> Result<i32> {
    let id = JobId::new(id)?;
    let client = connect(g, &resolve_url(g)).await?;
    hero_admin::Admin::from(&client).retry(&id).await?;
    if g.json {
        println!(
            "{}",
            serde_json::json!({"id": id.as_str(), "retried": true})
        );
    } else {
        println!("{id}: retried");
    }
    Ok(0)
}
