//! `hero cron add|list|next|remove|pause|resume`: recurring jobs, over `hero_protocol::cron`.

use anyhow::Result;
use hero_protocol::cron::{CronJob, Missed};

use super::context::{connect, resolve_url};
use super::table::{render, text};
use super::Global;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum CronCommand {
    /// Add (or replace) a recurring job: `hero cron add nightly '0 3 * * *' --type osis 'script'`.
    Add(Box<AddArgs>),
    /// Every recurring job with its next tick and how often it fired.
    List,
    /// Remove a recurring job (the jobs it fired stay).
    Remove {
        /// The recurring job's name, as `hero cron list` shows it.
        name: String,
    },
    /// Stop firing a recurring job until `hero cron resume`.
    Pause {
        /// The recurring job's name, as `hero cron list` shows it.
        name: String,
    },
    /// Fire a paused recurring job again, from its next tick.
    Resume {
        /// The recurring job's name, as `hero cron list` shows it.
        name: String,
    },
    /// The next ticks of a schedule, by the cron engine that fires them (Redis's clock):
    /// `hero cron next '0 3 * * *' --tz Europe/Amsterdam`.
    Next {
        /// A cron expression or `every <duration>`.
        schedule: String,
        /// The zone the cron expression is read in (IANA name).
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// How many ticks (1-100).
        #[arg(short = 'n', long, default_value_t = 5)]
        count: u32,
    },
}

#[derive(clap::Args, Debug, Clone)]
pub struct AddArgs {
    /// 1-64 characters of [A-Za-z0-9_-].
    pub name: String,
    /// A cron expression (5 fields, or 6 with seconds first; @hourly, @daily, ...) or
    /// `every <duration>` (every 30s, every 5m).
    pub schedule: String,
    /// The script each tick submits.
    pub script: String,
    #[command(flatten)]
    pub target: super::TargetArgs,
    /// The zone the cron expression is read in (IANA name).
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// A tick missed while no process did the duties: fire it once on return (catch-up) or not
    /// (skip).
    #[arg(long, default_value = "skip", value_parser = ["skip", "catch-up"])]
    pub missed: String,
}

pub(super) async fn cron(g: &Global, cmd: &CronCommand) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let done = |what: &str, name: &str| {
        if g.json {
            println!("{}", serde_json::json!({"name": name, "done": what}));
        } else {
            println!("{name}: {what}");
        }
    };
    match cmd {
        CronCommand::Add(a) => {
            let job = CronJob {
                name: a.name.clone(),
                schedule: a.schedule.clone(),
                tz: a.tz.clone(),
                missed: Missed::parse(&a.missed)?,
                paused: false,
                job: a.target.template(&a.script)?,
            };
            let next = client.cron_add(&job).await?;
            if g.json {
                println!(
                    "{}",
                    serde_json::json!({"name": a.name, "done": "added", "next_ms": next})
                );
            } else {
                // 0: the schedule has no tick to come (`0 0 30 2 *`)
                let when = if next == 0 {
                    "none (the schedule never fires)".to_string()
                } else {
                    hero_protocol::clock::iso(next)
                };
                println!("{}: added, next tick {when}", a.name);
            }
        }
        CronCommand::Remove { name } => {
            if !hero_admin::Admin::from(&client).cron_remove(name).await? {
                anyhow::bail!("no recurring job named {name:?} (see hero cron list)");
            }
            done("removed", name);
        }
        CronCommand::Pause { name } => {
            hero_admin::Admin::from(&client)
                .cron_pause(name, true)
                .await?;
            done("paused", name);
        }
        CronCommand::Resume { name } => {
            hero_admin::Admin::from(&client)
                .cron_pause(name, false)
                .await?;
            done("resumed", name);
        }
        CronCommand::Next {
            schedule,
            tz,
            count,
        } => {
            let now = hero_protocol::clock::now_ms();
            let ticks = client.cron_next(schedule, tz, now, *count).await?;
            if g.json {
                println!("{}", serde_json::json!({ "ticks": ticks }));
            } else {
                for t in ticks {
                    println!("{}", hero_protocol::clock::iso(t));
                }
            }
        }
        CronCommand::List => {
            let all = hero_admin::Admin::from(&client).cron_list().await?;
            if g.json {
                let list: Vec<_> = all.iter().map(|e| e.to_json()).collect();
                println!("{}", serde_json::json!({ "cron": list }));
                return Ok(0);
            }
            if all.is_empty() {
                println!("no recurring jobs: add one with hero cron add <name> 'every 1m' --type <type> '<script>'");
                return Ok(0);
            }
            let at =
                |ms: Option<u64>| ms.map_or_else(|| "-".to_string(), hero_protocol::clock::iso);
            let rows: Vec<Vec<String>> = all
                .iter()
                .map(|e| {
                    vec![
                        e.job.name.clone(),
                        e.job.schedule.clone(),
                        e.job.tz.clone(),
                        e.job.job.script_type.clone(),
                        if e.job.paused { "yes" } else { "no" }.to_string(),
                        at(e.next_ms),
                        e.fires.to_string(),
                        at(e.last_ms),
                    ]
                })
                .collect();
            print!(
                "{}",
                render(
                    &[
                        text("NAME"),
                        text("SCHEDULE"),
                        text("TZ"),
                        text("TYPE"),
                        text("PAUSED"),
                        text("NEXT"),
                        text("FIRES"),
                        text("LAST"),
                    ],
                    &rows
                )
            );
        }
    }
    Ok(0)
}
