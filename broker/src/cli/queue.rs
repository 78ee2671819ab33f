//! `hero pause`, `hero resume` and `hero queue set|show`: the operator's controls of a queue
//! as a whole, over `hero_client::queue`.

use anyhow::Result;

use super::context::{connect, resolve_url};
use super::Global;

pub(super) async fn pause(g: &Global, queue: &str, on: bool) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let name = hero_client::queue::queue_name(queue)?;
    let moved = if on {
        client.pause(&name).await?
    } else {
        client.resume(&name).await?
    };
    let still = client.inspector().paused().await?;
    if g.json {
        println!(
            "{}",
            serde_json::json!({"queue": name, "paused": on, "streams": moved, "paused_queues": still})
        );
    } else {
        let word = if on { "paused" } else { "resumed" };
        println!("{name}: {word} ({moved} work streams now)");
        if !on {
            if let Some(other) = still
                .iter()
                .find(|p| name.starts_with(p.as_str()) || p.starts_with(name.as_str()))
            {
                println!("note: {other} is still paused and covers part of it");
            }
        }
    }
    Ok(0)
}
