//! `hero requeue`: move a job to a queue, wherever it is (one server function call).

use anyhow::Result;
use hero_protocol::{GroupName, InstanceName, JobId, Priority, ScriptType, Target};

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
    let moved = hero_admin::Admin::from(&client)
        .requeue_to(&id, target, priority)
        .await?;
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
