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
    /// 50-500 ms added to every chunk for 1-2 s.
    Latency,
    /// 8-64 KiB/s per direction and connection for 1-2 s.
    Bandwidth,
    /// `SENTINEL FAILOVER`.
    SentinelFailover,
    /// SIGKILL of the primary that serves the namespace (Sentinel or cluster).
    PrimaryKill,
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
        }
    }

    /// A failover: wait until the primary has a replica in sync before throwing it.
    pub fn fails_over(self) -> bool {
        matches!(self, Kind::SentinelFailover | Kind::PrimaryKill)
    }
}

/// The mix of each phase, per 100 faults (the full run cycles through it).
fn mix(t: Topology) -> &'static [(Kind, u32)] {
    match t {
        Topology::Single => &[
            (Kind::ConnectionCut, 40),
            (Kind::WorkerKill, 30),
            (Kind::Latency, 10),
            (Kind::Bandwidth, 8),
            (Kind::WorkerStall, 6),
            (Kind::BrokerRestart, 4),
            (Kind::RedisRestart, 1),
            (Kind::HalfOpen, 1),
        ],
        Topology::Sentinel => &[
            (Kind::WorkerKill, 50),
            (Kind::WorkerStall, 10),
            (Kind::BrokerRestart, 20),
            (Kind::SentinelFailover, 10),
            (Kind::PrimaryKill, 10),
        ],
        Topology::Cluster => &[
            (Kind::WorkerKill, 60),
            (Kind::WorkerStall, 10),
            (Kind::BrokerRestart, 20),
            (Kind::PrimaryKill, 10),
        ],
    }
}

/// `n` faults of phase `t`, spread evenly: each kind at its weight, interleaved (a kind of
/// weight w comes every 100/w faults), so no stretch of the run sees only one kind. `short`:
/// each kind once.
pub fn plan(t: Topology, n: u64, short: bool) -> Vec<Kind> {
    let mix = mix(t);
    if short {
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
        let p = plan(Topology::Single, 1000, false);
        let count = |k| p.iter().filter(|&&x| x == k).count();
        assert_eq!(count(Kind::ConnectionCut), 400);
        assert_eq!(count(Kind::HalfOpen), 10);
        assert_eq!(count(Kind::RedisRestart), 10);
        assert!(p[..100].contains(&Kind::HalfOpen));
        assert_eq!(plan(Topology::Cluster, 0, true).len(), 4);
    }
}
