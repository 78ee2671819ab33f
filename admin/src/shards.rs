//! A sharded namespace's shards as an operator sees them (`hero shards show`, `/api/shards`,
//! the dashboard's shards table): each shard's state, slot, node and job counts.

use hero_client::Client;
use hero_protocol::Result;

use crate::Inspector;

/// One shard's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRow {
    pub shard: u16,
    /// `active` (takes new jobs), `draining` (served until empty) or `retired`.
    pub state: &'static str,
    pub prefix: String,
    /// Its hash tag's cluster slot.
    pub slot: u16,
    /// The node that serves it (its URL, credentials hidden).
    pub node: String,
    /// Queued or delayed (the queues' waiting and delayed counts).
    pub waiting: u64,
    pub running: u64,
    pub finished: u64,
    pub failed: u64,
}

impl ShardRow {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "shard": self.shard, "state": self.state, "prefix": self.prefix, "slot": self.slot,
            "node": self.node, "waiting": self.waiting, "running": self.running,
            "finished": self.finished, "failed": self.failed,
        })
    }
}

/// Every shard of `client`'s namespace (one row for an unsharded one), shard 0 first.
pub async fn rows(client: &Client) -> Result<Vec<ShardRow>> {
    let map = client.shard_map();
    let mut out = Vec::new();
    for (n, shard) in client.all_shard_clients() {
        let mut row = ShardRow {
            shard: n,
            state: if n < map.k {
                "active"
            } else if map.draining.contains_key(&n) {
                "draining"
            } else {
                "retired"
            },
            prefix: shard.keys().prefix().to_string(),
            slot: hero_protocol::shard::key_slot(shard.keys().prefix()),
            node: shard.redis().node_url(),
            waiting: 0,
            running: 0,
            finished: 0,
            failed: 0,
        };
        for q in Inspector::new(shard.redis().clone(), shard.keys().clone())
            .queues()
            .await?
        {
            row.waiting += q.waiting + q.delayed.max(0) as u64;
            row.running += q.running;
            row.finished += q.finished;
            row.failed += q.failed;
        }
        out.push(row);
    }
    Ok(out)
}
