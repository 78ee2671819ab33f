//! `hero run`: submit one job, wait for it, print its output (exit 1 when it ends in error).

use std::time::Duration;

use anyhow::Result;
use hero_protocol::Status;

use super::context::{connect, resolve_url};
use super::{Global, RunArgs};

pub(super) async fn run(g: &Global, args: &RunArgs) -> Result<i32> {
    let job = args.job.build()?;
    let client = connect(g, &resolve_url(g)).await?;
    let r = client.run(&job, Duration::from_secs(args.wait)).await?;
    if g.json {
        println!(
            "{}",
            serde_json::json!({"id": r.id.as_str(), "status": r.status.as_str(), "output": r.output,
                // the value the handler returned (protocol 33), as JSON; null for text
                "value": r.value.as_deref().and_then(hero_protocol::job::value::to_json),
                "error": r.error})
        );
    } else if r.status == Status::Finished {
        println!("{}", r.output);
    } else {
        eprintln!("job {} ended {}: {}", r.id, r.status, r.error);
    }
    Ok(i32::from(r.status != Status::Finished))
}
