//! The faults the soak throws, and in what mix. Each phase (topology) has its own kinds: the
//! single server takes the process faults and every network fault (through the fault proxy);
//! the Sentinel and cluster phases take process faults and failovers. The full run cycles
//! through a weighted mix (cheap faults often, the ones that freeze the whole system for a
//! command timeout rarely); `--short` throws each kind of the phase once.

use serde::Serialize;

use super::deploy::Topology;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// SIGKILL of a worker process (replaced by a new one).
    WorkerKill,
    /// SIGSTOP of a worker past its lease, then SIGCONT.
    WorkerStall,
    /// SIGKILL of a broker, started again.
    BrokerRestart,
    /// SIGKILL of Redis, started again (AOF, `appendfsync always`).
    RedisRestart,
    /// Every connection through the proxy closed.
    ConnectionCut,
    /// Every connection through the proxy stalled half-open: no FIN, no data, ever.
    HalfOpen,
    /// 50-500 ms added to every chunk for 0.5-1 s.
    Latency,
    /// 8-64 KiB/s per direction and connection for 0.5-1 s.
    Bandwidth,
    /// `SENTINEL FAILOVER`.
    SentinelFailover,
    /// SIGKILL of the primary that serves the namespace (Sentinel or cluster).
    PrimaryKill,
    /// Redis at its maxmemory (noeviction) for 30 s (5 s short).
    MaxMemory,
    /// Redis's snapshot disk gone: every write refused with MISCONF for 20 s (5 s short).
    DiskFailure,
    /// Redis restarted from a snapshot taken 3 s before.
    SnapshotRollback,
    /// A replica cut 3 s behind its master promoted in its place (its data served on the
    /// master's port).
    LaggingReplica,
    /// SIGKILL of the worker whose clock is 30 s ahead of Redis's.
    SkewedWorkerKill,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::WorkerKill => "worker SIGKILL",
            Kind::WorkerStall => "worker SIGSTOP past its lease",
            Kind::BrokerRestart => "broker SIGKILL and restart",
            Kind::RedisRestart => "Redis SIGKILL and restart",
            Kind::ConnectionCut => "connections cut",
            Kind::HalfOpen => "connections half-open",
            Kind::Latency => "latency 50-500 ms",
            Kind::Bandwidth => "bandwidth 8-64 KiB/s",
            Kind::SentinelFailover => "SENTINEL FAILOVER",
            Kind::PrimaryKill => "primary SIGKILL (failover)",
            Kind::MaxMemory => "Redis at maxmemory",
            Kind::DiskFailure => "MISCONF (snapshot disk gone)",
            Kind::SnapshotRollback => "restart from an older snapshot",
            Kind::LaggingReplica => "a replica 3 s behind promoted",
            Kind::SkewedWorkerKill => "SIGKILL of a worker 30 s ahead",
        }
    }

    /// A failover: wait until the primary has a replica in sync before throwing it.
    pub fn fails_over(self) -> bool {
        matches!(self, Kind::SentinelFailover | Kind::PrimaryKill)
    }
}

/// The mix of each phase, per 1,000 faults (the full run cycles through it): a Redis restart
/// replays a growing AOF and a half-open stall freezes every connection for a command timeout
/// (10 s), so those are rare; a latency or bandwidth window lasts 0.5-1 s, and at one every
/// ~2 s each leaves the network clean most of the time (the first full run, at ten times
/// these weights and 1-2 s windows, had one or both on all the time, the system's capacity
/// fell below its load and its "recovery" times measured a backlog of minutes).
fn mix(t: Topology) -> &'static [(Kind, u32)] {
    match t {
        Topology::Single | Topology::Upgrade => &[
            (Kind::ConnectionCut, 520),
            (Kind::WorkerKill, 300),
            (Kind::WorkerStall, 60),
            (Kind::BrokerRestart, 40),
            (Kind::Latency, 40),
            (Kind::Bandwidth, 35),
            (Kind::RedisRestart, 3),
            (Kind::HalfOpen, 2),
        ],
        // no broker to restart: its share goes to worker kills, which take the holder of the
        // duties as often as any other worker
        Topology::NoBroker => &[
            (Kind::ConnectionCut, 520),
            (Kind::WorkerKill, 340),
            (Kind::WorkerStall, 60),
            (Kind::Latency, 40),
            (Kind::Bandwidth, 35),
            (Kind::RedisRestart, 3),
            (Kind::HalfOpen, 2),
        ],
        Topology::Sentinel => &[
            (Kind::WorkerKill, 500),
            (Kind::WorkerStall, 100),
            (Kind::BrokerRestart, 200),
            (Kind::SentinelFailover, 100),
            (Kind::PrimaryKill, 100),
        ],
        Topology::Cluster | Topology::ShardedCluster => &[
            (Kind::WorkerKill, 600),
            (Kind::WorkerStall, 100),
            (Kind::BrokerRestart, 200),
            (Kind::PrimaryKill, 100),
        ],
        // scripted, in this order, once each (`redis_faults`)
        Topology::RedisFaults => &[
            (Kind::MaxMemory, 1),
            (Kind::DiskFailure, 1),
            (Kind::SkewedWorkerKill, 1),
            (Kind::SnapshotRollback, 1),
            (Kind::LaggingReplica, 1),
        ],
    }
}

/// `n` faults of phase `t`, spread evenly: each kind at its weight, interleaved (a kind of
/// weight w comes every 1000/w faults), so no stretch of the run sees only one kind. `short`:
/// each kind once.
pub fn plan(t: Topology, n: u64, short: bool) -> Vec<Kind> {
    let mix = mix(t);
    if short || t == Topology::RedisFaults {
        return mix.iter().map(|(k, _)| *k).collect();
    }
    let total: u32 = mix.iter().map(|(_, w)| w).sum();
    // smooth weighted round robin: deterministic, and every kind shows early
    let mut credit: Vec<i64> = vec![0; mix.len()];
    (0..n)
        .map(|_| {
            for (c, (_, w)) in credit.iter_mut().zip(mix) {
                *c += i64::from(*w);
            }
            let (i, _) = credit
                .iter()
                .enumerate()
                .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))
                .unwrap_or((0, &0));
            credit[i] -= i64::from(total);
            mix[i].0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_holds_each_kind_at_its_weight() {
        let p = plan(Topology::Single, 10_000, false);
        let count = |k| p.iter().filter(|&&x| x == k).count();
        assert_eq!(count(Kind::ConnectionCut), 5200);
        assert_eq!(count(Kind::HalfOpen), 20);
        assert_eq!(count(Kind::RedisRestart), 30);
        assert!(p[..1000].contains(&Kind::HalfOpen));
        assert_eq!(plan(Topology::Cluster, 0, true).len(), 4);
    }
}
