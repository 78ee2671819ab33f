//! `hero config show`: the settings every command would run with, merged from flags, `HERO_*`
//! variables, the configuration file and the defaults (see `file`), secrets masked.

use std::ffi::OsString;

use anyhow::Result;
use hero_protocol::conn::{shown_url, HIDDEN};

use super::context::resolve_url;
use super::{Command, Global};

pub(super) fn show(g: &Global) -> Result<i32> {
    // what `hero broker` and `hero worker` would see: the same file and environment
    let as_command = |name: &str| -> Result<super::Cli> {
        let mut argv: Vec<OsString> = vec!["hero".into()];
        if let Some(c) = &g.config {
            argv.push("--config".into());
            argv.push(c.clone().into_os_string());
        }
        argv.push(name.into());
        super::file::parse(argv).map_err(|e| anyhow::anyhow!("{e}"))
    };
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let mask = |s: &Option<String>| s.as_ref().map(|_| HIDDEN.to_string());
    let mut out = serde_json::json!({
        "config_file": path(&g.config),
        "redis_url": shown_url(&resolve_url(g)),
        "namespace": g.namespace,
        "cluster": g.cluster,
        "pool_size": g.pool_size,
        "min_replicas": g.min_replicas,
        "replica_timeout_ms": g.replica_timeout_ms,
        "replica_fsync": g.replica_fsync,
        "tls_ca": path(&g.tls_ca),
        "tls_cert": path(&g.tls_cert),
        "tls_key": path(&g.tls_key),
        "otlp": g.otlp.as_deref().map(shown_url),
    });
    if let Command::Broker(b) = as_command("broker")?.command {
        let cfg = b.config(g.config.as_deref())?;
        out["broker"] = serde_json::json!({
            "retention_secs": b.retention_secs,
            "lease_ms": b.lease_ms,
            "max_attempts": b.max_attempts,
            "dead_retention_secs": b.dead_retention_secs,
            "events_max": b.events_max,
            "accept_eviction": b.accept_eviction,
            "reply_ttl_secs": b.reply_ttl_secs,
            "http": b.http,
            "http_token": mask(&b.http_token),
            "http_token_file": path(&b.http_token_file),
            "http_read_token": mask(&b.http_read_token),
            "http_open": b.http_open,
            "http_hosts": b.http_hosts,
            "http_behind_tls": b.http_behind_tls,
            "http_max_connections": b.http_max_connections,
            "bridges": cfg.bridges.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>(),
            "legacy_replies": cfg.legacy_replies(),
        });
    }
    if let Command::Worker(w) = as_command("worker")?.command {
        out["worker"] = serde_json::json!({
            "types": w.types,
            "group": w.group,
            "instance": w.instance,
            "concurrency": w.concurrency,
            "lease_ms": w.lease_ms,
            "presence_ms": w.presence_ms,
            "shutdown_ms": w.shutdown_ms,
            "group_commit": w.group_commit,
            "duties": !w.no_duties,
        });
    }
    if g.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(0)
}
