//! What every command needs: the Redis URL (flag, environment, or the one `hero up` left in
//! this directory), a client in the namespace, a token cancelled on SIGTERM or ctrl-c, and the
//! built-in Rhai worker of `hero worker` and `hero up`.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use hero_client::{Client, ClientOptions};
use hero_worker::Worker;
use tokio_util::sync::CancellationToken;

use super::{Global, WorkerArgs};
use crate::local_redis;

/// The URL commands use: flag or env, else the one `hero up` left in this directory.
pub(super) fn resolve_url(global: &Global) -> String {
    if let Some(url) = &global.redis_url {
        return url.clone();
    }
    if let Ok(url) = std::fs::read_to_string(local_redis::url_file(Path::new("."))) {
        return url.trim().to_string();
    }
    "redis://127.0.0.1:6379".to_string()
}

pub(super) async fn connect(global: &Global, url: &str) -> Result<Client> {
    let mut opts = ClientOptions::new(url);
    opts.namespace = global.namespace.clone();
    opts.cluster = global.cluster;
    opts.pool_size = global.pool_size;
    opts.replicas = hero_protocol::conn::Replicas {
        wanted: global.min_replicas,
        timeout: std::time::Duration::from_millis(global.replica_timeout_ms),
        fsync: global.replica_fsync,
    };
    opts.tls = hero_protocol::conn::Tls {
        ca: global.tls_ca.clone(),
        cert: global.tls_cert.clone(),
        key: global.tls_key.clone(),
    };
    Ok(Client::with_options(opts).await?)
}

pub(super) async fn signal_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            if let Ok(mut term) = signal(SignalKind::terminate()) {
                tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
            } else {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        t.cancel();
    });
    token
}

/// The built-in worker in `client`'s namespace and, after it in precedence, in `more`'s.
pub(super) fn rhai_worker(client: Client, more: Vec<Client>, args: &WorkerArgs) -> Result<Worker> {
    let mut b = Worker::builder(client)
        .types(args.types.clone())
        .group(&args.group)
        .concurrency(args.concurrency)
        .lease(Duration::from_millis(args.lease_ms))
        .presence_ttl(Duration::from_millis(args.presence_ms))
        .shutdown_deadline(Duration::from_millis(args.shutdown_ms))
        .duties(!args.no_duties)
        .handler(crate::rhai_worker::handle);
    if let Some(i) = &args.instance {
        b = b.instance(i);
    }
    if let Some(on) = args.group_commit {
        b = b.group_commit(on);
    }
    for c in more {
        b = b.also(c);
    }
    Ok(b.build()?)
}
