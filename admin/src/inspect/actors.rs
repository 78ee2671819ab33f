//! Workers as an operator sees them: the live ones from their presence keys, and the ones whose
//! presence expired but whose consumer still holds pending entries (gone: the broker's recovery
//! will take their jobs back). Costs a read of the registries, a GET per worker and queue type
//! (`presence`) and one XPENDING summary per queue, never a read per job nor a SCAN per call.

use std::collections::BTreeMap;

use redis::Value;

use super::Inspector;
use hero_protocol::error::Result;
use hero_protocol::keys::CONSUMER_GROUP;
use hero_protocol::reply;

/// Deliveries one consumer holds in one queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub stream: String,
    pub jobs: u64,
}

/// One worker: live (presence present) or gone (presence expired, entries still held).
#[derive(Clone, Debug, PartialEq)]
pub struct Actor {
    /// `<group>:<instance>:<session>`, as the consumer groups know it.
    pub consumer: String,
    pub live: bool,
    /// The presence JSON's fields (empty for a gone worker).
    pub presence: serde_json::Value,
    /// What it holds now, queue by queue.
    pub holdings: Vec<Holding>,
}

impl Actor {
    pub fn running(&self) -> u64 {
        self.holdings.iter().map(|h| h.jobs).sum()
    }

    /// The protocol it speaks: its presence's `protocol`, or for a worker released before
    /// protocol 29 the one its `version` names (`hero_protocol::fleet::protocol_of_version`).
    pub fn protocol(&self) -> Option<u32> {
        let p = &self.presence["protocol"];
        p.as_str()
            .and_then(|p| p.parse().ok())
            .or_else(|| p.as_u64().map(|p| p as u32))
            .or_else(|| {
                self.presence["version"]
                    .as_str()
                    .and_then(hero_protocol::fleet::protocol_of_version)
            })
    }

    /// How far its clock is from Redis's, ms (its clock minus Redis's, as its last heartbeat
    /// measured: protocol 31 and later).
    pub fn skew_ms(&self) -> Option<i64> {
        self.presence["skew_ms"].as_i64()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "consumer": self.consumer,
            "skew_ms": self.skew_ms(),
            "state": if self.live { "live" } else { "gone" },
            "protocol": self.protocol(),
            "presence": self.presence,
            "running": self.running(),
            "holds": self.holdings.iter().map(|h| serde_json::json!({"stream": h.stream, "jobs": h.jobs})).collect::<Vec<_>>(),
        })
    }
}

impl Inspector {
    /// The live brokers of protocol 29 and later (older ones register nowhere), from the fleet.
    pub async fn brokers(&self) -> Result<Vec<hero_protocol::fleet::Member>> {
        let fleet = hero_protocol::fleet::Fleet::read(&self.redis, &self.keys).await?;
        Ok(fleet
            .members
            .into_iter()
            .filter(|m| m.role == hero_protocol::fleet::Role::Broker)
            .collect())
    }

    /// Every live worker and every gone one that still holds jobs, live first, by consumer.
    /// The live ones are read by name from the registries (`presence::live_presence`); only a
    /// worker that registers nowhere needs the process's shared, bounded SCAN, continued at most
    /// every `presence::SCAN_REFRESH`: never a walk of the keyspace per call. A one-shot process
    /// (`hero actors`) makes one such bounded refresh (50,000 keys), so a worker that registers
    /// nowhere, in a larger keyspace, may show only to a process that keeps asking (the HTTP
    /// face).
    pub async fn actors(&self) -> Result<Vec<Actor>> {
        // holdings: the pending summary of every queue names its consumers and their counts
        let streams = self.queue_streams().await?;
        let presence = self.live_presence(&streams).await?;
        let mut pipe = redis::pipe();
        for s in &streams {
            pipe.cmd("XPENDING").arg(s).arg(CONSUMER_GROUP);
        }
        let mut holdings: BTreeMap<String, Vec<Holding>> = BTreeMap::new();
        if !streams.is_empty() {
            for (stream, r) in streams.iter().zip(self.redis.pipeline(&pipe).await?) {
                let Ok(summary) = r else { continue };
                let Some(Value::Array(consumers)) =
                    reply::array(&summary).ok().and_then(|a| a.get(3).cloned())
                else {
                    continue;
                };
                for c in &consumers {
                    let [name, n] = reply::array(c).unwrap_or(&[]) else {
                        continue;
                    };
                    let (Ok(name), Ok(n)) = (reply::text(name), reply::int(n)) else {
                        continue;
                    };
                    holdings.entry(name).or_default().push(Holding {
                        stream: stream.clone(),
                        jobs: n.max(0) as u64,
                    });
                }
            }
        }
        let mut actors: Vec<Actor> = presence
            .into_iter()
            .map(|(consumer, json)| Actor {
                holdings: holdings.remove(&consumer).unwrap_or_default(),
                consumer,
                live: true,
                presence: json,
            })
            .collect();
        actors.extend(holdings.into_iter().map(|(consumer, holdings)| {
            // the legacy bridge reads outbound mappings as `bridge:<legacy>`: alive while the
            // broker is, and not a worker with presence
            let bridge = hero_protocol::keys::is_bridge_consumer(&consumer);
            Actor {
                consumer,
                live: bridge,
                presence: if bridge {
                    serde_json::json!({"kind": "legacy bridge"})
                } else {
                    serde_json::Value::Null
                },
                holdings,
            }
        }));
        Ok(actors)
    }
}
