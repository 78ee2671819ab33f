//! `hero shards set K | show`: spreading a namespace over shards (`hero_protocol::shard`,
//! docs/sharding.md), and each shard's counts.

use anyhow::Result;

use super::context::{connect, resolve_url};
use super::table::{num, render, text};
use super::Global;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ShardsCommand {
    /// Spread the namespace over K shards (1 to 64): new jobs go to shards 0..K; shards beyond
    /// K drain (still served) and are retired once empty (by any Rust worker or broker). 1 is the unsharded layout.
    Set {
        /// The number of shards.
        k: u16,
    },
    /// Every shard with its slot, the node that serves it, and its waiting, running, finished
    /// and failed counts (waiting includes delayed jobs).
    Show,
    /// Retire the drained shards that are empty now (what every Rust worker and broker does
    /// each 10 s; by hand where only Python or Node workers run).
    Retire,
}

pub(super) async fn shards(g: &Global, cmd: &ShardsCommand) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    match cmd {
        ShardsCommand::Set { k } => {
            let map = client.set_shards(*k).await?;
            // the shards it added start with no pauses and no policies: give them shard 0's
            hero_admin::Admin::from(&client).spread_controls().await?;
            if g.json {
                println!(
                    "{}",
                    serde_json::json!({"k": map.k, "epoch": map.epoch, "draining": map.draining.keys().collect::<Vec<_>>()})
                );
            } else {
                println!("{} shards (epoch {})", map.k, map.epoch);
                for n in map.draining.keys() {
                    println!("shard {n} drains: still served, retired once empty");
                }
            }
            Ok(0)
        }
        ShardsCommand::Show => show(g, &client).await,
        ShardsCommand::Retire => {
            let retired = client
                .retire_drained_shards(std::time::Duration::from_secs(86_400))
                .await?
                .unwrap_or(0);
            if g.json {
                println!("{}", serde_json::json!({ "retired": retired }));
            } else {
                println!("retired {retired} drained shard(s)");
            }
            Ok(0)
        }
    }
}

async fn show(g: &Global, client: &hero_client::Client) -> Result<i32> {
    let map = client.shard_map();
    let rows = hero_admin::shards::rows(client).await?;
    if g.json {
        let shards: Vec<_> = rows.iter().map(|r| r.to_json()).collect();
        println!(
            "{}",
            serde_json::json!({"k": map.k, "epoch": map.epoch, "shards": shards})
        );
        return Ok(0);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.shard.to_string(),
                r.state.to_string(),
                r.prefix.clone(),
                r.slot.to_string(),
                r.node.clone(),
                r.waiting.to_string(),
                r.running.to_string(),
                r.finished.to_string(),
                r.failed.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        render(
            &[
                num("SHARD"),
                text("STATE"),
                text("PREFIX"),
                num("SLOT"),
                text("NODE"),
                num("WAITING"),
                num("RUNNING"),
                num("FINISHED"),
                num("FAILED"),
            ],
            &table,
        )
    );
    Ok(0)
}
