//! `hero status`: a job's status, or with --json its whole record; with --history, its events
//! from the event log as well.

use anyhow::Result;
use hero_client::inspect::EventFilter;
use hero_client::JobId;

use super::context::{connect, resolve_url};
use super::events::print_event;
use super::{Global, StatusArgs};

pub(super) async fn status(g: &Global, args: &StatusArgs) -> Result<i32> {
    let id = JobId::new(&args.id)?;
    let client = connect(g, &resolve_url(g)).await?;
    let history = if args.history {
        let only = EventFilter {
            job: Some(id.to_string()),
            ..EventFilter::default()
        };
        Some(client.inspector().events(&only, usize::MAX).await?)
    } else {
        None
    };
    if g.json {
        let job = match client.get(&id).await {
            Err(hero_client::Error::InvalidJob(bad)) => {
                return undecodable(&client, &id, &bad, true).await
            }
            other => other?,
        };
        let mut v = job.to_json();
        if let Some(h) = &history {
            v["history"] = h.iter().map(|e| e.to_json()).collect();
        }
        println!("{v}");
    } else {
        let status = match client.status(&id).await {
            Ok(s) => s,
            Err(hero_client::Error::InvalidJob(bad)) => {
                return undecodable(&client, &id, &bad, false).await
            }
            Err(e) => return Err(e.into()),
        };
        println!("{status}");
        if let Err(hero_client::Error::InvalidJob(bad)) = client.get(&id).await {
            return undecodable(&client, &id, &bad, false).await;
        }
        if let Some(h) = &history {
            let mut out = std::io::stdout().lock();
            for e in h {
                print_event(&mut out, client.keys(), e, false)?;
            }
        }
    }
    Ok(0)
}

/// A record that does not decode: shown field by field with the bad one named, exit 1.
async fn undecodable(
    client: &hero_client::Client,
    id: &JobId,
    bad: &hero_client::DecodeError,
    json: bool,
) -> Result<i32> {
    // bytes, not text: a field edited by hand may not be UTF-8, and is shown marked
    let raw: Vec<(Vec<u8>, Vec<u8>)> = client
        .redis()
        .query(redis::cmd("HGETALL").arg(client.keys().job(id)))
        .await?;
    let mut unreadable = Vec::new();
    let fields: Vec<(String, String)> = raw
        .into_iter()
        .map(|(k, v)| {
            let k = String::from_utf8_lossy(&k).into_owned();
            let v = match String::from_utf8(v) {
                Ok(v) => v,
                Err(e) => {
                    unreadable.push(k.clone());
                    format!("<unreadable: {} bytes, not UTF-8>", e.as_bytes().len())
                }
            };
            (k, v)
        })
        .collect();
    if json {
        let record: serde_json::Map<String, serde_json::Value> = fields
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "id": id.as_str(),
                "invalid": {"field": bad.field, "reason": bad.reason},
                "unreadable": unreadable,
                "fields": record,
            })
        );
    } else {
        println!(
            "job {id}: the record does not decode: field `{}` {}",
            bad.field, bad.reason
        );
        for (k, v) in fields {
            let mark = if unreadable.contains(&k) {
                "   <-- unreadable (not UTF-8)"
            } else if k == bad.field {
                "   <-- invalid"
            } else {
                ""
            };
            println!("  {k} = {v:?}{mark}");
        }
    }
    Ok(1)
}
