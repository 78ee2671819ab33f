//! What the scenarios read from the server itself: Redis CPU time, memory, command statistics
//! and the version, through `INFO` on a connection of its own.

use anyhow::{Context, Result};

/// Reads what the scenarios need from the server itself.
#[derive(Clone)]
pub(crate) struct Probe {
    conn: redis::aio::MultiplexedConnection,
}

impl Probe {
    pub async fn connect(url: &str) -> Result<Probe> {
        let client = redis::Client::open(url)?;
        Ok(Probe {
            conn: client.get_multiplexed_async_connection().await?,
        })
    }

    async fn info(&self, section: &str) -> Result<String> {
        Ok(redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn.clone())
            .await?)
    }

    async fn info_field(&self, section: &str, field: &str) -> Result<f64> {
        info_value(&self.info(section).await?, field)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("INFO {section} has no {field}"))
    }

    /// Seconds of CPU the server has used, user and system.
    pub async fn cpu_secs(&self) -> Result<f64> {
        Ok(self.info_field("cpu", "used_cpu_user").await?
            + self.info_field("cpu", "used_cpu_sys").await?)
    }

    pub async fn used_memory(&self) -> Result<f64> {
        self.info_field("memory", "used_memory").await
    }

    pub async fn flushall(&self) -> Result<()> {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    pub async fn reset_stats(&self) -> Result<()> {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The commands Redis spent most time in since the last reset: (name, calls, µs).
    pub async fn commandstats(&self) -> Result<Vec<(String, u64, u64)>> {
        let text = self.info("commandstats").await?;
        let mut rows: Vec<(String, u64, u64)> = text
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |f: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
                        .and_then(|v| v.parse::<u64>().ok())
                };
                Some((name.to_string(), field("calls")?, field("usec")?))
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.2));
        Ok(rows)
    }

    pub async fn version(&self) -> Result<String> {
        let text = self.info("server").await?;
        Ok(info_value(&text, "redis_version")
            .unwrap_or("?")
            .to_string())
    }
}

/// The value of `field` in INFO's `field:value` lines.
fn info_value<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}
