//! `hero batch`: close a batch with its callbacks, show one, list them. Members join with
//! `hero submit --batch NAME`.

use anyhow::Result;
use clap::Subcommand;

use super::context::{connect, resolve_url};
use super::{Global, TargetArgs};

#[derive(Subcommand, Debug)]
pub enum BatchCommand {
    /// Close a batch: its callback jobs are submitted once every member ended (--on-complete)
    /// or once every member finished (--on-success; never if one failed). Members may still be
    /// added until then.
    Close(Box<CloseArgs>),
    /// A batch's counts (total, pending, finished, failed), state and callback job ids.
    Show {
        /// The batch's name.
        name: String,
    },
    /// The newest batches, with their counts.
    List {
        /// How many.
        #[arg(long, short = 'n', default_value_t = 50)]
        last: usize,
    },
}

#[derive(clap::Args, Debug)]
pub struct CloseArgs {
    /// The batch's name.
    pub name: String,
    /// Script of the job submitted once every member ended.
    #[arg(long, value_name = "SCRIPT", required_unless_present = "on_success")]
    pub on_complete: Option<String>,
    /// Script of the job submitted once every member finished (none failed).
    #[arg(long, value_name = "SCRIPT")]
    pub on_success: Option<String>,
    /// Where the callback jobs go and how they run; they get the env vars BATCH,
    /// BATCH_TOTAL, BATCH_FINISHED and BATCH_FAILED.
    #[command(flatten)]
    pub target: TargetArgs,
}

pub(super) async fn batch(g: &Global, cmd: &BatchCommand) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    match cmd {
        BatchCommand::Close(a) => {
            let job =
                |script: &Option<String>, which: &str| -> Result<Option<hero_protocol::NewJob>> {
                    script
                        .as_ref()
                        .map(|s| -> Result<hero_protocol::NewJob> {
                            Ok(a.target
                                .template(s)?
                                .builder()
                                .id(format!("batch-{}-{which}", a.name))
                                .build()?)
                        })
                        .transpose()
                };
            let complete = job(&a.on_complete, "complete")?;
            let success = job(&a.on_success, "success")?;
            let b = client.batch(&a.name)?;
            let r = b.close(complete.as_ref(), success.as_ref()).await?;
            if g.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "name": a.name, "state": r.state, "total": r.total, "pending": r.pending,
                        "finished": r.finished, "failed": r.failed,
                        "complete_id": r.complete_id, "success_id": r.success_id,
                    })
                );
            } else {
                match r.state.as_str() {
                    "already_done" => println!(
                        "batch {} was done already: its callbacks ran; nothing changed",
                        a.name
                    ),
                    "done" => println!(
                        "batch {} closed and done: {} finished, {} failed; callbacks {}",
                        a.name,
                        r.finished,
                        r.failed,
                        callbacks(r.complete_id.as_deref(), r.success_id.as_deref())
                    ),
                    _ => println!(
                        "batch {} closed: {} of {} members pending; the callbacks run when they end",
                        a.name, r.pending, r.total
                    ),
                }
            }
            Ok(0)
        }
        BatchCommand::Show { name } => {
            let b = client.batch(name)?;
            let Some(info) = b.show().await? else {
                anyhow::bail!(
                    "no batch {name}: submit members with hero submit --batch {name} (a done batch is kept for the broker's retention time)"
                );
            };
            if g.json {
                println!("{}", info.to_json());
            } else {
                println!(
                    "batch {}: {}, {} members: {} pending, {} finished, {} failed",
                    info.name,
                    info.state(),
                    info.total,
                    info.pending,
                    info.finished,
                    info.failed
                );
                if info.done_at.is_some() {
                    println!(
                        "callbacks {}",
                        callbacks(info.complete_id.as_deref(), info.success_id.as_deref())
                    );
                }
            }
            Ok(0)
        }
        BatchCommand::List { last } => {
            let all = hero_admin::Inspector::from(&client).batches(*last).await?;
            if g.json {
                let list: Vec<_> = all.iter().map(|b| b.to_json()).collect();
                println!("{}", serde_json::json!({ "batches": list }));
                return Ok(0);
            }
            if all.is_empty() {
                println!("no batches: submit members with hero submit --batch NAME ...");
            }
            for b in all {
                println!(
                    "{}  {}  total {}  pending {}  finished {}  failed {}",
                    b.name,
                    b.state(),
                    b.total,
                    b.pending,
                    b.finished,
                    b.failed
                );
            }
            Ok(0)
        }
    }
}

fn callbacks(complete: Option<&str>, success: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(c) = complete {
        parts.push(format!("on_complete {c}"));
    }
    if let Some(s) = success {
        parts.push(format!("on_success {s}"));
    }
    if parts.is_empty() {
        "none submitted (on_success only, and a member failed)".into()
    } else {
        parts.join(", ")
    }
}
