//! The Redis a phase of the soak runs on, and the faults that belong to it: one durable server
//! behind the fault proxy (restarts, and every network fault), a Sentinel-managed primary with
//! two replicas (`SENTINEL FAILOVER`, SIGKILL of the primary), or a cluster of three masters
//! with a replica each (SIGKILL of the primary that owns the namespace's slot). Where failovers
//! happen, every acknowledgement waits for a replica (`WAIT 1`, and `min-replicas-to-write 1`
//! on the servers), so what was acknowledged survives the primary's death.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use hero_testkit::{FaultProxy, RedisCluster, RedisServer, SentinelSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    Single,
    Sentinel,
    Cluster,
    /// The three-master cluster with the namespace spread over three shards (`hero shards set
    /// 3`), one on each master: primary kills rotate over the shards' masters.
    #[value(name = "sharded-cluster")]
    #[serde(rename = "sharded-cluster")]
    ShardedCluster,
    /// One durable server (as `single`) while brokers, workers (Rust and Python) and producers
    /// of an earlier release are replaced by this build's one by one, and back (`upgrade`).
    Upgrade,
    /// One server with RDB snapshots (so it can be restarted from an older one) and the faults
    /// Redis itself makes: full, a failed disk, a rollback, a lagging replica promoted, and
    /// workers 30 s off its clock (`redis_faults`).
    #[value(name = "redis-faults")]
    #[serde(rename = "redis-faults")]
    RedisFaults,
    /// One durable server (as `single`) and no `hero broker` at all: the workers do the
    /// queue's upkeep (issue 59), and worker kills take the duty holder too.
    #[value(name = "no-broker")]
    #[serde(rename = "no-broker")]
    NoBroker,
}

impl Topology {
    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Sentinel => "sentinel",
            Topology::Cluster => "cluster",
            Topology::ShardedCluster => "sharded-cluster",
            Topology::Upgrade => "upgrade",
            Topology::RedisFaults => "redis-faults",
            Topology::NoBroker => "no-broker",
        }
    }

    /// The shards the phase spreads the namespace over (1: unsharded).
    pub fn shards(self) -> u16 {
        match self {
            Topology::ShardedCluster => 3,
            _ => 1,
        }
    }
}

pub enum Deployment {
    Single {
        redis: RedisServer,
        proxy: FaultProxy,
    },
    Sentinel(SentinelSet),
    Cluster(RedisCluster),
}

/// How long a replica may lag before a primary refuses writes (`min-replicas-max-lag`).
const MAX_LAG: &str = "10";

impl Deployment {
    pub async fn start(t: Topology) -> Deployment {
        match t {
            Topology::Single | Topology::Upgrade | Topology::NoBroker => {
                let redis = RedisServer::start_durable();
                let proxy = FaultProxy::start(redis.port);
                Deployment::Single { redis, proxy }
            }
            Topology::RedisFaults => {
                // snapshots only (a restart from an older one is a fault of the phase); `dir`
                // is a protected config, moved to fail the disk
                let redis = RedisServer::start_with(&["--enable-protected-configs", "yes"]);
                let proxy = FaultProxy::start(redis.port);
                Deployment::Single { redis, proxy }
            }
            Topology::Sentinel => {
                let set = Deployment::Sentinel(
                    SentinelSet::start(&[
                        "--appendonly",
                        "yes",
                        "--min-replicas-to-write",
                        "1",
                        "--min-replicas-max-lag",
                        MAX_LAG,
                    ])
                    .await,
                );
                // writes are refused until a replica is in sync
                set.settle("").await;
                set
            }
            Topology::Cluster | Topology::ShardedCluster => {
                let c = RedisCluster::start(3, 1).await;
                // a replica still on its first sync cannot take over yet
                c.wait_replicas_synced().await;
                Deployment::Cluster(c)
            }
        }
    }

    /// The one server of a single-server phase.
    pub fn server(&mut self) -> Option<&mut RedisServer> {
        match self {
            Deployment::Single { redis, .. } => Some(redis),
            _ => None,
        }
    }

    /// Where the workers and brokers connect: through the proxy, or the deployment's URL.
    pub fn system_url(&self) -> String {
        match self {
            Deployment::Single { proxy, .. } => proxy.url(),
            Deployment::Sentinel(s) => s.url(),
            Deployment::Cluster(c) => c.url(),
        }
    }

    /// Where the soak's producer and checks connect (around the proxy).
    pub fn direct_url(&self) -> String {
        match self {
            Deployment::Single { redis, .. } => redis.url(),
            Deployment::Sentinel(s) => s.url(),
            Deployment::Cluster(c) => c.url(),
        }
    }

    /// Replicas every write waits for: all of them. `SENTINEL FAILOVER` promotes whichever
    /// replica it likes and resyncs the others from it, so a write one replica of two held is
    /// lost when the other is promoted (the soak's first Sentinel run lost 400 jobs and saw
    /// 10 completions recorded twice with `WAIT 1` against two replicas).
    pub fn replicas(&self) -> u32 {
        match self {
            Deployment::Single { .. } => 0,
            Deployment::Sentinel(s) => s.replicas.len() as u32,
            Deployment::Cluster(_) => 1,
        }
    }

    pub fn proxy(&self) -> Option<&FaultProxy> {
        match self {
            Deployment::Single { proxy, .. } => Some(proxy),
            _ => None,
        }
    }

    /// SIGKILL and restart of the single server (AOF, `appendfsync always`).
    pub fn restart_redis(&mut self) -> Result<()> {
        match self {
            Deployment::Single { redis, .. } => {
                redis.restart();
                Ok(())
            }
            _ => bail!("a Redis restart is a fault of the single-server phase"),
        }
    }

    /// `SENTINEL FAILOVER`: the Sentinels promote a replica while the primary still runs.
    pub async fn sentinel_failover(&self) -> Result<()> {
        let Deployment::Sentinel(s) = self else {
            bail!("a Sentinel failover needs the Sentinel phase");
        };
        let mut conn = s.sentinels[0].conn().await;
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(hero_testkit::MASTER_NAME)
            .query_async(&mut conn)
            .await
            .context("SENTINEL FAILOVER")?;
        Ok(())
    }

    /// SIGKILL of the primary that serves the namespace (`slot_key` is one of its keys):
    /// the port of the server killed, to [`Deployment::revive`] once the failover is done.
    pub async fn kill_primary(&mut self, slot_key: &str) -> Result<u16> {
        let server = match self {
            Deployment::Sentinel(s) => {
                let port = s.master_port().await.context("no master named")?;
                std::iter::once(&mut s.master)
                    .chain(s.replicas.iter_mut())
                    .find(|r| r.port == port)
                    .context("the master is not one of ours")?
            }
            Deployment::Cluster(c) => {
                let i = c.master_of(slot_key).await;
                &mut c.nodes[i]
            }
            Deployment::Single { .. } => bail!("the single server has no replica to fail over to"),
        };
        server.kill();
        Ok(server.port)
    }

    /// The port of the primary serving the namespace now.
    pub async fn kill_target_port(&self, slot_key: &str) -> Result<u16> {
        match self {
            Deployment::Sentinel(s) => s.master_port().await.context("no master named"),
            Deployment::Cluster(c) => Ok(c.nodes[c.master_of(slot_key).await].port),
            Deployment::Single { redis, .. } => Ok(redis.port),
        }
    }

    /// The primary now serving the namespace differs from the one killed at `port`.
    pub async fn failed_over(&self, port: u16, slot_key: &str) -> bool {
        match self {
            Deployment::Sentinel(s) => s.master_port().await.is_some_and(|p| p != port),
            Deployment::Cluster(c) => {
                let i = c.master_of(slot_key).await;
                c.nodes[i].port != port
            }
            Deployment::Single { .. } => true,
        }
    }

    /// Starts the server killed at `port` again; it comes back as a replica of the new primary.
    pub async fn revive(&mut self, port: u16) {
        let server = match self {
            Deployment::Sentinel(s) => std::iter::once(&mut s.master)
                .chain(s.replicas.iter_mut())
                .find(|r| r.port == port),
            Deployment::Cluster(c) => c.nodes.iter_mut().find(|n| n.port == port),
            Deployment::Single { .. } => None,
        };
        if let Some(server) = server {
            server.restart();
        }
        match self {
            Deployment::Cluster(c) => c.wait_ok().await,
            Deployment::Sentinel(s) => {
                // it starts with the role its flags gave it (master, or a replica of whoever
                // was master when the set started): make it a replica of today's master at
                // once, as its Sentinels would in time. A replica of a replica is no replica of
                // the master's: `WAIT 2` would wait for it forever.
                if let Some(master) = s.master_port().await {
                    if let Some(server) = std::iter::once(&s.master)
                        .chain(s.replicas.iter())
                        .find(|r| r.port == port)
                    {
                        let mut conn = server.conn().await;
                        let _: redis::RedisResult<()> = redis::cmd("REPLICAOF")
                            .arg("127.0.0.1")
                            .arg(master)
                            .query_async(&mut conn)
                            .await;
                    }
                }
            }
            Deployment::Single { .. } => {}
        }
    }

    /// Waits (bounded) until the primary has every replica in sync again, so writes are taken
    /// and the next failover has somewhere safe to go.
    pub async fn settle(&self, slot_key: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            if self.replica_in_sync(slot_key).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("chaos: the primary has no replica in sync after 60 s; going on");
    }

    async fn replica_in_sync(&self, slot_key: &str) -> bool {
        let primary = match self {
            Deployment::Single { .. } => return true,
            Deployment::Sentinel(s) => {
                let Some(port) = s.master_port().await else {
                    return false;
                };
                std::iter::once(&s.master)
                    .chain(s.replicas.iter())
                    .find(|r| r.port == port)
            }
            Deployment::Cluster(c) => {
                let i = c.master_of(slot_key).await;
                c.nodes.get(i)
            }
        };
        let Some(primary) = primary else { return false };
        let Ok(client) = redis::Client::open(primary.url()) else {
            return false;
        };
        let Ok(Ok(mut conn)) = tokio::time::timeout(
            Duration::from_secs(1),
            client.get_multiplexed_async_connection(),
        )
        .await
        else {
            return false;
        };
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        // every replica, not one: each write waits for all of them
        let wanted = match self {
            Deployment::Sentinel(s) => s.replicas.len(),
            _ => 1,
        };
        info.contains("role:master") && info.matches("state=online").count() >= wanted
    }
}
