//! `hero status`: a job's status, or with --json its whole record.

use anyhow::Result;
use hero_client::JobId;

use super::context::{connect, resolve_url};
use super::Global;

pub(super) async fn status(g: &Global, id: &str) -> Result<i32> {
    let id = JobId::new(id)?;
    let client = connect(g, &resolve_url(g)).await?;
    if g.json {
        let job = client.get(&id).await?;
        println!("{}", job_json(&job));
    } else {
        println!("{}", client.status(&id).await?);
    }
    Ok(0)
}

fn job_json(job: &hero_client::Job) -> serde_json::Value {
    serde_json::json!({
        "id": job.id.as_str(),
        "status": job.status.as_str(),
        "script_type": job.script_type.as_ref().map(|t| t.as_str()),
        "group": job.group.as_ref().map(|g| g.as_str()),
        "instance": job.instance.as_ref().map(|i| i.as_str()),
        "priority": job.priority.level(),
        "attempts": job.attempts,
        "retries": job.retries,
        "timeout": job.timeout.as_secs(),
        "worker_id": job.worker_id,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "output": job.output,
        "error": job.error,
        "tags": job.tags,
    })
}
