//! Redis's own state as an operator needs to see it beside the queues (`hero queues`, the
//! dashboard's overview): the maxmemory policy and whether submits are refused for it, a disk
//! Redis cannot write to, used against max memory, and a data loss a broker found and no one
//! acknowledged yet. One INFO and one pipeline of two hash reads: O(1).

use super::Inspector;
use hero_protocol::error::Result;
use hero_protocol::health::RedisInfo;

#[derive(Clone, Debug, Default)]
pub struct RedisState {
    pub info: RedisInfo,
    /// The evicting policy an operator accepted (`hero broker --accept-eviction`).
    pub accepted: Option<String>,
    /// A data loss a broker's health pass found (`hero audit --fix` acknowledges it).
    pub data_loss: Option<String>,
}

impl RedisState {
    /// Submits are refused: the policy may evict, and no operator accepted it.
    pub fn refusing(&self) -> bool {
        hero_protocol::memory::refused(&self.info.policy, self.accepted.as_deref())
    }

    /// What an operator must know first, one line each ('' lines none): None when all is well.
    pub fn warning(&self) -> Option<String> {
        let mut lines = Vec::new();
        let p = &self.info.policy;
        if self.refusing() {
            lines.push(format!("Redis's maxmemory-policy is {p}: every submit is refused (Redis may evict job records). Set it to noeviction, or accept the loss with `hero broker --accept-eviction {p}`"));
        } else if hero_protocol::memory::evicting(p) {
            lines.push(format!("Redis's maxmemory-policy is {p} (accepted): Redis may evict job records; `hero audit` counts what it lost"));
        }
        if self.info.disk_failing() {
            lines.push("Redis cannot write to its disk (MISCONF): it refuses writes; see docs/operations.md, a failed disk".to_string());
        }
        if self.info.maxmemory > 0 && self.info.used_memory >= self.info.maxmemory {
            lines.push(format!(
                "Redis is full ({} of {} bytes): submits are refused; workers finish what was accepted",
                self.info.used_memory, self.info.maxmemory
            ));
        }
        if let Some(loss) = &self.data_loss {
            lines.push(format!("Redis lost data: {loss} (`hero audit`)"));
        }
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "maxmemory_policy": self.info.policy,
            "accepted_policy": self.accepted,
            "submits_refused": self.refusing(),
            "used_memory": self.info.used_memory,
            "maxmemory": self.info.maxmemory,
            "disk_failing": self.info.disk_failing(),
            "loading": self.info.loading,
            "data_loss": self.data_loss,
            "warning": self.warning(),
        })
    }
}

impl Inspector {
    pub async fn redis_state(&self) -> Result<RedisState> {
        let info = RedisInfo::read(&self.redis).await?;
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(self.keys.config())
            .arg("accept_eviction");
        pipe.cmd("HGET").arg(self.keys.epoch()).arg("lost");
        let mut r = self.redis.pipeline(&pipe).await?.into_iter();
        let mut text = || -> Option<String> {
            r.next()
                .and_then(|v| v.ok())
                .and_then(|v| redis::from_redis_value::<Option<String>>(v).ok())
                .flatten()
        };
        let accepted = text();
        let losses = hero_protocol::health::lost_records(text().as_deref());
        let data_loss = (!losses.is_empty()).then(|| {
            losses
                .iter()
                .map(|v| {
                    format!(
                        "at {}: {}",
                        v["at"].as_str().unwrap_or("?"),
                        v["what"].as_str().unwrap_or("Redis lost data")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        });
        Ok(RedisState {
            info,
            accepted,
            data_loss,
        })
    }
}
