//! `hero actors`: live workers from their presence, and gone ones that still hold jobs.

use anyhow::Result;

use super::context::{connect, resolve_url};
use super::table::{num, render, text};
use super::Global;

pub(super) async fn actors(g: &Global) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let actors = hero_admin::Inspector::from(&client).actors().await?;
    if g.json {
        let all: Vec<_> = actors.iter().map(|a| a.to_json()).collect();
        println!("{}", serde_json::json!({ "actors": all }));
        return Ok(0);
    }
    if actors.is_empty() {
        println!("no workers: start one with `hero worker --types <type>` (or `hero up`)");
        return Ok(0);
    }
    let field = |p: &serde_json::Value, k: &str| match p.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(","),
        Some(v) if !v.is_null() => v.to_string(),
        _ => "-".to_string(),
    };
    let rows: Vec<Vec<String>> = actors
        .iter()
        .map(|a| {
            let p = &a.presence;
            vec![
                a.consumer.clone(),
                if a.live { "live" } else { "gone" }.to_string(),
                field(p, "capabilities"),
                field(p, "pid"),
                field(p, "hostname"),
                field(p, "version"),
                field(p, "started_at"),
                field(p, "last_heartbeat"),
                a.running().to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        render(
            &[
                text("CONSUMER"),
                text("STATE"),
                text("TYPES"),
                num("PID"),
                text("HOST"),
                text("VERSION"),
                text("STARTED"),
                text("HEARTBEAT"),
                num("RUNNING"),
            ],
            &rows
        )
    );
    let gone: Vec<_> = actors.iter().filter(|a| !a.live).collect();
    for a in gone {
        for h in &a.holdings {
            println!(
                "{} (gone) holds {} job(s) of {}: the broker recovers them",
                a.consumer,
                h.jobs,
                client.keys().queue_name(&h.stream)
            );
        }
    }
    Ok(0)
}
