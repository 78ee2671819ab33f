//! `hero actors`: live workers from their presence, and gone ones that still hold jobs.

use anyhow::Result;

use super::context::{connect, resolve_url};
use super::table::{num, render, text};
use super::Global;

pub(super) async fn actors(g: &Global) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let inspector = hero_admin::Inspector::from(&client);
    let actors = inspector.actors().await?;
    let brokers = inspector.brokers().await?;
    if g.json {
        let all: Vec<_> = actors.iter().map(|a| a.to_json()).collect();
        let brokers: Vec<_> = brokers.iter().map(broker_json).collect();
        println!(
            "{}",
            serde_json::json!({ "actors": all, "brokers": brokers })
        );
        return Ok(0);
    }
    print_brokers(&brokers);
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
                a.protocol()
                    .map_or_else(|| "-".to_string(), |p| p.to_string()),
                field(p, "started_at"),
                field(p, "last_heartbeat"),
                clock(a.skew_ms()),
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
                num("PROTOCOL"),
                text("STARTED"),
                text("HEARTBEAT"),
                text("CLOCK"),
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

/// A worker's clock against Redis's: `ok` within the warning's bound, else how far and which
/// way (hero goes by Redis's clock, so this is for the operator to fix, not a fault).
fn clock(skew_ms: Option<i64>) -> String {
    match skew_ms {
        None => "-".to_string(),
        Some(ms) if ms.abs() <= hero_protocol::clock::SKEW_WARN_MS => "ok".to_string(),
        Some(ms) => format!(
            "{:.1} s {}",
            ms.abs() as f64 / 1000.0,
            if ms > 0 { "ahead" } else { "behind" }
        ),
    }
}

fn broker_json(m: &hero_protocol::fleet::Member) -> serde_json::Value {
    serde_json::json!({ "name": m.name, "version": m.version, "protocol": m.protocol })
}

/// The brokers of protocol 29 and later (older ones register nowhere).
fn print_brokers(brokers: &[hero_protocol::fleet::Member]) {
    if brokers.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = brokers
        .iter()
        .map(|m| {
            vec![
                m.name.clone(),
                m.version.clone(),
                m.protocol
                    .map_or_else(|| "-".to_string(), |p| p.to_string()),
            ]
        })
        .collect();
    print!(
        "{}",
        render(&[text("BROKER"), text("VERSION"), num("PROTOCOL")], &rows)
    );
    println!();
}
