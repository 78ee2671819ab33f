//! `hero stop`: a queued job never starts, a running one is interrupted; and the other controls
//! of one job by id: `hero promote`, `hero remove`, `hero children`.

use anyhow::Result;
use hero_client::StopOutcome;
use hero_protocol::JobId;

use super::context::{connect, resolve_url};
use super::Global;

pub(super) async fn stop(g: &Global, id: &str) -> Result<i32> {
    let id = JobId::new(id)?;
    let client = connect(g, &resolve_url(g)).await?;
    let word = match client.stop(&id).await? {
        StopOutcome::Cancelled => "cancelled",
        StopOutcome::Interrupted => "interrupted",
        StopOutcome::AlreadyCompleted => "already completed",
    };
    if g.json {
        println!("{}", serde_json::json!({"id": id.as_str(), "stop": word}));
    } else {
        println!("{id}: {word}");
    }
    Ok(0)
}

pub(super) async fn promote(g: &Global, id: &str) -> Result<i32> {
    let id = JobId::new(id)?;
    let client = connect(g, &resolve_url(g)).await?;
    hero_admin::Admin::from(&client).promote(&id).await?;
    done(g, &id, "promote", "promoted");
    Ok(0)
}

pub(super) async fn remove(g: &Global, id: &str) -> Result<i32> {
    let id = JobId::new(id)?;
    let client = connect(g, &resolve_url(g)).await?;
    hero_admin::Admin::from(&client).remove(&id).await?;
    done(g, &id, "remove", "removed");
    Ok(0)
}

fn done(g: &Global, id: &JobId, what: &str, word: &str) {
    if g.json {
        println!("{}", serde_json::json!({"id": id.as_str(), what: word}));
    } else {
        println!("{id}: {word}");
    }
}

pub(super) async fn children(g: &Global, id: &str) -> Result<i32> {
    let id = JobId::new(id)?;
    let client = connect(g, &resolve_url(g)).await?;
    let all = client.children(&id).await?;
    if g.json {
        let map: serde_json::Map<String, serde_json::Value> =
            all.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
        println!("{}", serde_json::Value::Object(map));
        return Ok(0);
    }
    if all.is_empty() {
        println!("job {id} has no prerequisites");
    }
    for (child, r) in &all {
        let text = r.output.as_deref().or(r.error.as_deref()).unwrap_or("");
        println!("{child}\t{}\t{}", r.status.as_str(), text);
    }
    Ok(0)
}
