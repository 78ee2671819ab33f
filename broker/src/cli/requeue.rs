//! `hero requeue`: move a job to a queue, wherever it is (one server function call).

use anyhow::Result;
use hero_client::job::{Placement, PLACEMENT_FIELDS};
use hero_client::{GroupName, InstanceName, JobId, Priority, ScriptType, Target};

use super::context::{connect, resolve_url};
use super::{Global, RequeueArgs};

pub(super) async fn requeue(g: &Global, args: &RequeueArgs) -> Result<i32> {
    let id = JobId::new(&args.id)?;
    let priority = args.priority.map(Priority::new).transpose()?;
    let target = match &args.script_type {
        Some(t) => Some(Target::new(
            ScriptType::new(t)?,
            args.group.as_deref().map(GroupName::new).transpose()?,
            args.instance
                .as_deref()
                .map(InstanceName::new)
                .transpose()?,
        )),
        None => None,
    };
    let client = connect(g, &resolve_url(g)).await?;
    let to = if target.is_some() || priority.is_some() {
        // what is not given stays as the record has it
        let values: Vec<Option<String>> = client
            .redis()
            .query(
                redis::cmd("HMGET")
                    .arg(client.keys().job(&id))
                    .arg(&PLACEMENT_FIELDS),
            )
            .await?;
        let current = Placement::read(&values);
        let target = match (target, &current) {
            (Some(t), _) => t,
            (None, Some(c)) => c.target.clone(),
            (None, None) => anyhow::bail!(
                "job {id} names no valid script type: say which queue to move it to with --type"
            ),
        };
        let priority = priority.or(current.map(|c| c.priority)).unwrap_or_default();
        Some(Placement { target, priority })
    } else {
        None
    };
    let moved = client.requeue(&id, to).await?;
    let queue = client.keys().queue_name(&moved.stream);
    if g.json {
        println!(
            "{}",
            serde_json::json!({"id": id.as_str(), "requeued": true, "queue": queue})
        );
    } else {
        println!("{id}: requeued to {queue}");
    }
    Ok(0)
}
