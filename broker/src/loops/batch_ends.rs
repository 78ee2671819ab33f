//! Batch ends an older library did not count: while batches are open and a live worker speaks
//! a protocol older than batches (26 or older: its calls end members without counting them),
//! every [`EVERY`] this pass reads the event log past the brokers' cursor and hands the
//! `finished` and `error` events written for such a worker to `hero_batch_ends`, which counts
//! them into their batches (and calls back a batch that is done) and moves the cursor in the
//! same step, so each end is counted once however many brokers run. Costs one HMGET a pass
//! while no such worker lives, nothing more.

use std::collections::HashSet;
use std::time::Duration;

use hero_client::Client;
use hero_protocol::fleet::{Feature, Fleet, Role};
use hero_protocol::function;
use hero_protocol::name::JobId;
use hero_protocol::reply;
use tokio_util::sync::CancellationToken;

pub const EVERY: Duration = Duration::from_secs(1);

/// The config hash's field `hero_batch_ends` keeps its cursor in.
const CURSOR: &str = "batch_ends_cursor";

pub async fn pass(client: &Client) -> hero_protocol::Result<u64> {
    let (keys, redis) = (client.keys(), client.redis());
    let got: Vec<Option<String>> = redis
        .query(
            redis::cmd("HMGET")
                .arg(keys.config())
                .arg("batches")
                .arg("fleet_lacks")
                .arg(CURSOR),
        )
        .await?;
    let open = got
        .first()
        .cloned()
        .flatten()
        .and_then(|b| b.parse::<i64>().ok())
        .unwrap_or(0);
    // the fleet summary says when a live worker lacks batches (`fleet_lacks`, lib/fleet.lua)
    let lacking = got
        .get(1)
        .cloned()
        .flatten()
        .is_some_and(|l| l.contains("\"batch\""));
    if open <= 0 || !lacking {
        return Ok(0);
    }
    let cursor = got.get(2).cloned().flatten().unwrap_or_default();
    let fleet = Fleet::read(redis, keys).await?;
    let old: HashSet<String> = fleet
        .lacking(Feature::Batch)
        .into_iter()
        .filter(|m| m.role == Role::Worker)
        .map(|m| m.name.clone())
        .collect();
    let from = if cursor.is_empty() {
        "-".to_string()
    } else {
        format!("({cursor}")
    };
    let v: redis::Value = redis
        .query(
            redis::cmd("XRANGE")
                .arg(keys.events())
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(1000),
        )
        .await?;
    let entries = reply::array(&v)?;
    let Some(last) = entries.last() else {
        return Ok(0);
    };
    let after = reply::text(reply::array(last)?.first().unwrap_or(&redis::Value::Nil))?;
    let mut ended: Vec<(JobId, bool)> = Vec::new();
    for e in entries {
        let [_, fields] = reply::array(e)? else {
            continue;
        };
        let f: std::collections::HashMap<String, String> =
            reply::pairs(fields.clone())?.into_iter().collect();
        let ok = match f.get("e").map(String::as_str) {
            Some("finished") => true,
            Some("error") => false,
            _ => continue,
        };
        if !f.get("w").is_some_and(|w| old.contains(w)) {
            continue;
        }
        for id in f
            .get("j")
            .map(String::as_str)
            .unwrap_or_default()
            .split(' ')
        {
            if let Ok(id) = JobId::new(id) {
                ended.push((id, ok));
            }
        }
    }
    let answer: redis::Value = redis
        .query(&function::batch_ends(keys, &cursor, &after, &ended))
        .await?;
    Ok(reply::int(&answer).map(|n| n.max(0) as u64).unwrap_or(0))
}

pub async fn run(client: Client, stop: CancellationToken) {
    super::every(
        "batch ends an older library did not count",
        "batch_ends",
        "hero_broker_batch_ends_total",
        EVERY,
        stop,
        || pass(&client),
    )
    .await;
}
