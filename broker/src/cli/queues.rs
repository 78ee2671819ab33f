//! `hero queues`: every queue with its gauges, counters, rate and times; `--keys`: a fair
//! queue's limit keys.

use anyhow::Result;

use super::context::{connect, resolve_url};
use super::table::{ms, num, render, text};
use super::Global;

pub(super) async fn queues(g: &Global) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let queues = hero_admin::Inspector::from(&client).queues().await?;
    // Redis's own state first: an evicting policy refuses every submit and may lose jobs
    let redis = hero_admin::Inspector::from(&client)
        .redis_state()
        .await
        .ok();
    if g.json {
        let all: Vec<_> = queues.iter().map(|q| q.to_json()).collect();
        println!(
            "{}",
            serde_json::json!({ "queues": all, "redis": redis.as_ref().map(|r| r.to_json()) })
        );
        return Ok(0);
    }
    if let Some(warning) = redis.as_ref().and_then(|r| r.warning()) {
        eprintln!("{warning}");
    }
    if queues.is_empty() {
        println!(
            "no queues yet: a queue appears with its first job (hero submit --type <type> ...)"
        );
        return Ok(0);
    }
    let times =
        |h: &hero_protocol::stats::Histogram| match (h.quantile_ms(0.5), h.quantile_ms(0.99)) {
            (Some(p50), Some(p99)) => format!("{}/{}", ms(p50), ms(p99)),
            _ => "-".to_string(),
        };
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            vec![
                q.name.clone(),
                q.waiting.to_string(),
                q.delayed.to_string(),
                q.running.to_string(),
                q.finished.to_string(),
                q.failed.to_string(),
                q.dead.to_string(),
                format!("{:.1}", q.done_per_minute),
                times(&q.wait),
                times(&q.run),
                q.oldest_waiting_ms.map_or_else(|| "-".to_string(), ms),
                if q.paused { "yes" } else { "no" }.to_string(),
                q.keys.to_string(),
            ]
        })
        .collect();
    // the KEYS column only where fair share is in use
    let fair = queues.iter().any(|q| q.keys > 0);
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|mut r| {
            if !fair {
                r.pop();
            }
            r
        })
        .collect();
    let mut columns = vec![
        text("QUEUE"),
        num("WAITING"),
        num("DELAYED"),
        num("RUNNING"),
        num("FINISHED"),
        num("FAILED"),
        num("DEAD"),
        num("DONE/MIN"),
        num("WAIT p50/p99"),
        num("RUN p50/p99"),
        num("OLDEST"),
        text("PAUSED"),
    ];
    if fair {
        columns.push(num("KEYS"));
    }
    print!("{}", render(&columns, &rows));
    Ok(0)
}

/// `hero queues --keys <queue>`: a fair queue's keys with work, the `top` with the most jobs
/// waiting, and its paused keys.
pub(super) async fn keys(g: &Global, queue: &str, top: usize) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let name = hero_protocol::policy::queue_name(queue)?;
    let k = hero_admin::Inspector::from(&client)
        .fair_keys(&name, top, 0)
        .await?;
    if g.json {
        let mut v = k.to_json();
        v["queue"] = serde_json::json!(name);
        println!("{v}");
        return Ok(0);
    }
    println!("{name}: {} keys with jobs waiting", k.keys);
    if k.next.is_some() {
        println!(
            "(the top among the first {} keys in the gates' order; the API's /api/keys?cursor= reads on)",
            k.read
        );
    }
    if !k.top.is_empty() {
        let rows: Vec<Vec<String>> = k
            .top
            .iter()
            .map(|w| {
                let key = if w.key.is_empty() {
                    "(no key)".to_string()
                } else {
                    w.key.clone()
                };
                vec![key, w.waiting.to_string()]
            })
            .collect();
        print!("{}", render(&[text("KEY"), num("WAITING")], &rows));
    }
    for h in &k.held {
        println!("paused: {}", super::table::shown(h));
    }
    Ok(0)
}
