//! Deployments of several redis-servers on loopback: a master with a replica watched by three
//! Sentinels, and a Redis Cluster of masters with a replica each. Every process is the test's
//! own and is killed with it.

use std::time::Duration;

use redis::Value;

use crate::{wait_for, RedisServer};

/// What the Sentinels of a [`SentinelSet`] call the master.
pub const MASTER_NAME: &str = "heromaster";

/// A master, two replicas (so the promoted one still has a replica to acknowledge writes),
/// and three Sentinels watching them (quorum 2).
pub struct SentinelSet {
    pub master: RedisServer,
    pub replicas: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// Starts the set and waits until every Sentinel knows the replicas and the other two.
    pub async fn start(extra: &[&str]) -> SentinelSet {
        let master = RedisServer::start_with(extra);
        let port = master.port.to_string();
        let mut replica_args = vec!["--replicaof", "127.0.0.1", &port];
        replica_args.extend_from_slice(extra);
        let replicas = (0..2)
            .map(|_| RedisServer::start_with(&replica_args))
            .collect();
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_sentinel(MASTER_NAME, master.port))
            .collect();
        let set = SentinelSet {
            master,
            replicas,
            sentinels,
        };
        for s in &set.sentinels {
            let what = "each Sentinel to know the replicas and the other Sentinels";
            wait_for_info(s, &["INFO", "sentinel"], &["slaves=2", "sentinels=3"], what).await;
        }
        set
    }

    /// The URL clients use: every Sentinel, and the master's name.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The port of the master the Sentinels name now.
    pub async fn master_port(&self) -> Option<u16> {
        let mut conn = self.sentinels[0].conn().await;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query_async(&mut conn)
            .await
            .ok()?;
        Some(port)
    }
}

/// A Redis Cluster on loopback: `masters` masters, each with `replicas` replicas, the 16384
/// slots spread by `redis-cli --cluster create`; quick to fail over (node timeout 1 s).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub async fn start(masters: usize, replicas: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    "--appendonly",
                    "yes",
                ])
            })
            .collect();
        let mut create = std::process::Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .arg("--cluster-replicas")
            .arg(replicas.to_string())
            .arg("--cluster-yes")
            .output()
            .expect("run redis-cli --cluster create (install redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok().await;
        cluster
    }

    /// Waits until every live node says the cluster is ok.
    pub async fn wait_ok(&self) {
        for n in self.nodes.iter().filter(|n| n.pid() != 0) {
            let ok = ["cluster_state:ok"];
            wait_for_info(n, &["CLUSTER", "INFO"], &ok, "the cluster to be ok").await;
        }
    }

    /// Waits until every live replica has finished its first sync with its master (a replica
    /// still syncing cannot take over when its master dies).
    pub async fn wait_replicas_synced(&self) {
        for n in self.nodes.iter().filter(|n| n.pid() != 0) {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut n.conn().await)
                .await
                .expect("INFO replication");
            if info.contains("role:slave") {
                let up = ["master_link_status:up", "master_sync_in_progress:0"];
                wait_for_info(n, &["INFO", "replication"], &up, "a replica to sync").await;
            }
        }
    }

    /// The seeds URL: every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The index in `nodes` of the master that owns `key`'s slot now.
    pub async fn master_of(&self, key: &str) -> usize {
        let live = self
            .nodes
            .iter()
            .find(|n| n.pid() != 0)
            .expect("a live cluster node");
        let mut conn = live.conn().await;
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("CLUSTER KEYSLOT");
        let ranges: Vec<Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await
            .expect("CLUSTER SLOTS");
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let start: i64 = redis::from_redis_value_ref(&parts[0]).expect("slot start");
            let end: i64 = redis::from_redis_value_ref(&parts[1]).expect("slot end");
            if (start..=end).contains(&slot) {
                let Value::Array(node) = &parts[2] else { break };
                let port: u16 = redis::from_redis_value_ref(&node[1]).expect("node port");
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port == port)
                    .expect("a node of ours");
            }
        }
        panic!("no master serves {key}'s slot {slot}")
    }
}

/// Waits (30 s at most) until the text `command` answers on `server` holds every one of `needles`.
async fn wait_for_info(server: &RedisServer, command: &[&str], needles: &[&str], what: &str) {
    let conn = server.conn().await;
    wait_for(what, Duration::from_secs(30), || {
        let mut conn = conn.clone();
        let mut cmd = redis::cmd(command[0]);
        cmd.arg(&command[1..]);
        async move {
            let text: String = cmd.query_async(&mut conn).await.ok()?;
            needles.iter().all(|n| text.contains(n)).then_some(())
        }
    })
    .await;
}
