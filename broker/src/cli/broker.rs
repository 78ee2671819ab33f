//! `hero broker`: the broker daemon until SIGTERM or ctrl-c.

use std::time::Duration;

use anyhow::{bail, Result};

use super::context::{connect, resolve_url, signal_token};
use super::{BrokerArgs, Global};
use crate::config::BrokerConfig;

pub(super) async fn broker(g: &Global, args: &BrokerArgs) -> Result<i32> {
    let cfg = args.config(g.config.as_deref())?;
    let http = args.http_config()?;
    let client = connect(g, &resolve_url(g)).await?;
    let stop = signal_token().await;
    let served = crate::http::serve(client.clone(), &http, stop.clone()).await?;
    if let Some((addr, _)) = &served {
        // on stdout, so a supervisor (or a test) learns the port when --http asked for port 0
        println!("http: {}", http.link(&client, *addr).await?);
        if http.generated {
            if let Some(t) = &http.token {
                // the terminal's, never the browser's: for programs (Authorization: Bearer)
                println!("http token: {t}");
            }
        }
    }
    crate::daemon::run(client, cfg, stop).await?;
    if let Some((_, task)) = served {
        let _ = task.await;
    }
    Ok(0)
}

pub(super) fn on_off(s: &str) -> std::result::Result<bool, String> {
    match s {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

impl BrokerArgs {
    pub(super) fn http_config(&self) -> Result<crate::http::HttpConfig> {
        let mut cfg = crate::http::HttpConfig::parse(
            &self.http,
            self.http_token.clone(),
            self.http_token_file.as_deref(),
            self.http_read_token.clone(),
            self.http_open,
        )?;
        cfg.hosts.clone_from(&self.http_hosts);
        cfg.behind_tls = self.http_behind_tls;
        cfg.max_connections = self.http_max_connections;
        cfg.check()?;
        Ok(cfg)
    }

    pub(super) fn config(&self, file: Option<&std::path::Path>) -> Result<BrokerConfig> {
        if self.max_attempts == 0 {
            bail!("--max-attempts must be at least 1");
        }
        if self.lease_ms < 300 {
            bail!("--lease-ms must be at least 300");
        }
        let (mut bridges, mut legacy_replies) = match file {
            Some(path) => crate::bridge::load_file(path)?,
            None => (Vec::new(), None),
        };
        // flags add to the file's mappings and override its switch
        bridges.extend(self.bridges.iter().cloned());
        legacy_replies = self.legacy_replies.or(legacy_replies);
        Ok(BrokerConfig {
            retention: Duration::from_secs(self.retention_secs),
            reply_ttl: Duration::from_secs(self.reply_ttl_secs),
            dead_retention: Duration::from_secs(self.dead_retention_secs),
            lease: Duration::from_millis(self.lease_ms),
            max_attempts: self.max_attempts,
            events_max: self.events_max,
            accept_eviction: self.accept_eviction.clone(),
            bridges,
            legacy_replies,
            ..BrokerConfig::default()
        })
    }
}
