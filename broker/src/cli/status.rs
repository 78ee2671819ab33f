//! `hero status`: a job's status with its progress, log lines and last failure's trace, or with --json its whole
//! record; with --history, its events from the event log as well; with --follow, the changes
//! as they come until the job ends.

use super::table::shown as printable;
use anyhow::Result;
use hero_protocol::JobId;

use super::context::{connect, resolve_url};
use super::events::print_event;
use super::{Global, StatusArgs};

pub(super) async fn status(g: &Global, args: &StatusArgs) -> Result<i32> {
    let id = JobId::new(&args.id)?;
    let client = connect(g, &resolve_url(g)).await?;
    if args.follow {
        return follow(g, &client, &id).await;
    }
    // bounded by the job's life, not the log's length (Inspector::job_history); a record that
    // does not decode has none
    let history = match (args.history, client.get(&id).await) {
        (true, Ok(job)) => Some(
            hero_admin::Inspector::from(&client)
                .job_history(&job)
                .await?,
        ),
        _ => None,
    };
    if g.json {
        let job = match client.get(&id).await {
            Err(hero_protocol::Error::InvalidJob(bad)) => {
                return undecodable(&client, &id, &bad, true).await
            }
            other => other?,
        };
        let mut v = job.to_json();
        if let Some((h, whole)) = &history {
            v["history"] = h.iter().map(|e| e.to_json()).collect();
            v["history_complete"] = (*whole).into();
        }
        println!("{v}");
    } else {
        let status = match client.status(&id).await {
            Ok(s) => s,
            Err(hero_protocol::Error::InvalidJob(bad)) => {
                return undecodable(&client, &id, &bad, false).await
            }
            Err(e) => return Err(e.into()),
        };
        println!("{status}");
        match client.get(&id).await {
            Err(hero_protocol::Error::InvalidJob(bad)) => {
                return undecodable(&client, &id, &bad, false).await
            }
            Ok(job) => {
                if let Some(p) = &job.progress {
                    println!("progress {}", printable(&p.to_string()));
                }
                if !job.log.is_empty() {
                    println!("log (last {}):", job.log.len());
                    for line in &job.log {
                        println!("  {}", printable(line));
                    }
                }
                print_trace(&job);
                print_budget(&client, &job).await;
                // a newer version's fields: shown as they are, acted on by nothing here
                for (k, v) in &job.unknown_fields {
                    println!("{k} = {v:?} (a field this version does not know)");
                }
            }
            Err(_) => {}
        }
        if let Some((h, whole)) = &history {
            let mut out = std::io::stdout().lock();
            for e in h {
                print_event(&mut out, client.keys(), e, false)?;
            }
            if !whole {
                println!(
                    "(history: the log's entries around the job's submit and end only; its life spans more than {} entries each way)",
                    hero_admin::inspect::HISTORY_SCAN
                );
            }
        }
    }
    Ok(0)
}

/// A record that does not decode: shown field by field with the bad one named, exit 1.
async fn undecodable(
    client: &hero_client::Client,
    id: &JobId,
    bad: &hero_protocol::DecodeError,
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

/// How often `--follow` reads the record: a change shows within this.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// `hero status --follow`: prints what changed (status, progress, new log lines) until the job
/// ends; exit 0 when it finished, 1 when it ended error.
async fn follow(g: &Global, client: &hero_client::Client, id: &JobId) -> Result<i32> {
    let mut last_status = None;
    let mut last_progress = None;
    let mut shown: Vec<String> = Vec::new();
    let mut last_json = None;
    loop {
        let job = match client.get(id).await {
            Err(hero_protocol::Error::InvalidJob(bad)) => {
                return undecodable(client, id, &bad, g.json).await
            }
            other => other?,
        };
        if g.json {
            let v = job.to_json();
            if last_json.as_ref() != Some(&v) {
                println!("{v}");
                last_json = Some(v);
            }
        } else {
            if last_status != Some(job.status) {
                println!("{}", job.status);
                last_status = Some(job.status);
            }
            if job.progress.is_some() && last_progress != job.progress {
                if let Some(p) = &job.progress {
                    println!("progress {}", printable(&p.to_string()));
                }
                last_progress.clone_from(&job.progress);
            }
            for line in new_lines(&shown, &job.log) {
                println!("  {}", printable(line));
            }
            shown.clone_from(&job.log);
        }
        if job.status.is_terminal() {
            if !g.json {
                match job.status {
                    hero_protocol::Status::Finished => {
                        println!(
                            "output: {}",
                            printable(job.output.as_deref().unwrap_or_default())
                        );
                    }
                    _ => {
                        println!(
                            "error: {}",
                            printable(job.error.as_deref().unwrap_or_default())
                        );
                        print_trace(&job);
                    }
                }
            }
            return Ok(i32::from(job.status != hero_protocol::Status::Finished));
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// The last failed attempt's trace, indented under a heading (a finished job shows the failure
/// it was retried after).
fn print_trace(job: &hero_protocol::Job) {
    if let Some(trace) = &job.trace {
        println!("trace of the last failed attempt:");
        for line in trace.lines() {
            println!("  {}", printable(line));
        }
    }
}

/// The lines of `now` (a job's last log lines) that follow what `before` showed: the longest
/// tail of `before` that begins `now` was shown already.
fn new_lines<'a>(before: &[String], now: &'a [String]) -> &'a [String] {
    for start in 0..before.len() {
        let tail = &before[start..];
        if now.len() >= tail.len() && now[..tail.len()] == *tail {
            return &now[tail.len()..];
        }
    }
    now
}

#[cfg(test)]
mod tests {
    use super::new_lines;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn follow_prints_only_the_lines_it_has_not_shown() {
        assert_eq!(new_lines(&[], &v(&["a", "b"])), v(&["a", "b"]));
        assert_eq!(new_lines(&v(&["a", "b"]), &v(&["a", "b", "c"])), v(&["c"]));
        // the job keeps its last lines only: the oldest fell off
        assert_eq!(
            new_lines(&v(&["a", "b", "c"]), &v(&["b", "c", "d", "e"])),
            v(&["d", "e"])
        );
        assert!(new_lines(&v(&["a", "b"]), &v(&["a", "b"])).is_empty());
        // nothing in common (more lines came than the job keeps): all are new
        assert_eq!(new_lines(&v(&["a"]), &v(&["x", "y"])), v(&["x", "y"]));
    }
}

/// The retry budget and the rule it comes from (issue 60: ported code met it by surprise), in
/// one line: failures are retried while the attempts stay within 1 + the larger of the job's
/// own `retries` and its queue policy's; a delivery lost with its worker counts an attempt too,
/// and such a job is dead-lettered after the larger of the namespace's `max_attempts` and that
/// budget (recover.lua). Nothing is said when the policies cannot be read.
async fn print_budget(client: &hero_client::Client, job: &hero_protocol::Job) {
    let Some(script_type) = &job.script_type else {
        return;
    };
    let Ok(policies) = hero_admin::Admin::from(client).policies().await else {
        return;
    };
    let group = job.group.as_ref().map(|g| g.to_string());
    let queue = policies
        .of(script_type.as_str(), group.as_deref())
        .and_then(|p| p.retries);
    let max_attempts: Option<u32> = client
        .redis()
        .query(
            redis::cmd("HGET")
                .arg(client.keys().config())
                .arg("max_attempts"),
        )
        .await
        .unwrap_or(None);
    let max_attempts = max_attempts.unwrap_or(5);
    let retries = job.retries.max(queue.unwrap_or(0));
    if retries == 0 && job.attempts == 0 {
        // a job with no budget not yet run: nothing to explain (and `hero status`'s one line
        // stays one line for scripts that read it)
        return;
    }
    println!(
        "attempts {} of {} (retries: its own {}, its queue's {}: the larger counts); a worker lost \
         mid-job counts an attempt, and after {} such the job is dead-lettered (the larger of \
         max_attempts {max_attempts} and its budget)",
        job.attempts,
        retries + 1,
        job.retries,
        queue.map_or_else(|| "none".to_string(), |r| r.to_string()),
        max_attempts.max(retries + 1),
    );
}
