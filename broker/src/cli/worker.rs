//! `hero worker`: the built-in Rhai worker until SIGTERM or ctrl-c.

use anyhow::Result;

use super::context::{connect, resolve_url, rhai_worker};
use super::{Global, WorkerArgs};

pub(super) async fn worker(g: &Global, args: &WorkerArgs) -> Result<i32> {
    let url = resolve_url(g);
    let client = connect(g, &url).await?;
    let mut more = Vec::new();
    for ns in &args.also_namespaces {
        let other = Global {
            namespace: ns.clone(),
            ..g.clone()
        };
        more.push(connect(&other, &url).await?);
    }
    let worker = rhai_worker(client, more, args)?;
    eprintln!(
        "worker {} serving {:?} in {}",
        worker.consumer(),
        args.types,
        std::iter::once(&g.namespace)
            .chain(&args.also_namespaces)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    );
    worker.run_until_signal().await?;
    Ok(0)
}
