//! `hero worker`: the built-in Rhai worker until SIGTERM or ctrl-c.

use anyhow::Result;

use super::context::{connect, resolve_url, rhai_worker};
use super::{Global, WorkerArgs};

pub(super) async fn worker(g: &Global, args: &WorkerArgs) -> Result<i32> {
    let client = connect(g, &resolve_url(g)).await?;
    let worker = rhai_worker(client, args)?;
    eprintln!("worker {} serving {:?}", worker.consumer(), args.types);
    worker.run_until_signal().await?;
    Ok(0)
}
