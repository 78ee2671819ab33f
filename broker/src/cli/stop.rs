//! `hero stop`: a queued job never starts, a running one is interrupted.

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
