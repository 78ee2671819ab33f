//! The figures of one run of a scenario, their medians over rounds, and the printed table and
//! JSON report. The metric names are shared with the peer script, which prints the same keys.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::scenario::{BenchArgs, PeerKind, Pinning, Scenario, Side};

/// One metric: its key (as the peer prints it), how the table labels it, and which way is
/// better.
struct Metric {
    key: &'static str,
    label: &'static str,
    higher_is_better: bool,
}

const fn m(key: &'static str, label: &'static str, higher_is_better: bool) -> Metric {
    Metric {
        key,
        label,
        higher_is_better,
    }
}

const METRICS: &[Metric] = &[
    m("jobs_per_s", "jobs/s", true),
    m("offered_per_s", "offered jobs/s", true),
    m("redis_us_per_job", "Redis CPU µs/job", false),
    m("client_us_per_job", "client CPU µs/job", false),
    m("start_p50_ms", "submit→start p50 ms", false),
    m("start_p99_ms", "submit→start p99 ms", false),
    m("start_max_ms", "submit→start max ms", false),
    m("result_p50_ms", "submit→result p50 ms", false),
    m("result_p99_ms", "submit→result p99 ms", false),
    m("result_max_ms", "submit→result max ms", false),
    m("recovery_s", "s until all running elsewhere", false),
    m("wait_p50_ms", "submit then wait p50 ms", false),
    m("wait_p99_ms", "submit then wait p99 ms", false),
    m(
        "events_per_s",
        "job ends seen by all 10 subscribers /s",
        true,
    ),
    m("presence_ttl_s", "presence TTL s", false),
    m("bytes_per_waiting_job", "Redis bytes/waiting job", false),
    m("after_drain_pct", "after drain vs baseline %", false),
    m("event_log_bytes_per_job", "event log bytes/job", false),
    m("event_log_mb", "event log MB (at its cap)", false),
];

/// Named figures of one run.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(transparent)]
pub struct Figures(BTreeMap<String, f64>);

impl Figures {
    pub fn set(&mut self, key: &str, value: f64) {
        self.0.insert(key.to_string(), value);
    }

    /// One line for the progress output.
    pub fn summary(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={}", fmt(*v)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn fmt(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        f64::midpoint(xs[n / 2 - 1], xs[n / 2])
    })
}

/// p50, p99 and max of latencies in µs, as ms.
pub fn percentiles(mut us: Vec<u64>) -> (f64, f64, f64) {
    if us.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    us.sort_unstable();
    let at = |q: f64| {
        let i = ((q * us.len() as f64).ceil() as usize).clamp(1, us.len()) - 1;
        us[i] as f64 / 1000.0
    };
    (at(0.5), at(0.99), us[us.len() - 1] as f64 / 1000.0)
}

/// One row of the table: a scenario's metric, the medians of both sides, ours ÷ peer, and
/// the ceiling's median of the same metric where the scenario has a ceiling.
struct Row {
    scenario: Scenario,
    metric: &'static Metric,
    ours: Option<f64>,
    peer: Option<f64>,
    ceiling: Option<f64>,
}

/// The metrics held against the ceiling: throughput, and Redis's work per job.
const AGAINST_CEILING: [&str; 2] = ["jobs_per_s", "redis_us_per_job"];

impl Row {
    /// How close ours comes to the ceiling, in per cent: our jobs/s over the ceiling's, or the
    /// ceiling's Redis CPU per job over ours (100 % = as cheap as the least work a job needs).
    fn of_ceiling_pct(&self) -> Option<f64> {
        let (o, c) = (self.ours?, self.ceiling?);
        if o == 0.0 || c == 0.0 {
            return None;
        }
        Some(
            if self.metric.higher_is_better {
                o / c
            } else {
                c / o
            } * 100.0,
        )
    }

    fn ratio(&self) -> Option<f64> {
        match (self.ours, self.peer) {
            (Some(o), Some(p)) if p != 0.0 => Some(o / p),
            _ => None,
        }
    }
    /// How many times better ours is, whichever way "better" points.
    fn advantage(&self) -> Option<f64> {
        let r = self.ratio()?;
        Some(if self.metric.higher_is_better {
            r
        } else if r != 0.0 {
            1.0 / r
        } else {
            f64::INFINITY
        })
    }
}

pub struct Report {
    /// Figures of each round, by scenario and side (None: hero's).
    runs: BTreeMap<(Scenario, Option<PeerKind>), Vec<Figures>>,
    peers: Vec<PeerKind>,
    settings: serde_json::Value,
}

impl Report {
    pub fn new(args: &BenchArgs, version: &str, pin: Option<Pinning>, peers: &[PeerKind]) -> Self {
        let settings = serde_json::json!({
            "date": hero_protocol::clock::now_iso(),
            "redis_version": version,
            "persistence": args.aof.map(|a| format!("{a:?}").to_lowercase()).unwrap_or_else(|| "none".into()),
            "pinned": pin.map(|p| serde_json::json!({"redis_core": p.redis, "load_core": p.load})),
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "jobs": args.jobs,
            "batch": args.batch,
            "producers": args.producers,
            "concurrency": args.concurrency,
            "rate": args.rate,
            "duration_s": args.duration.as_secs_f64(),
            "recovery_jobs": args.recovery_jobs,
            "rounds": args.rounds,
            "peer": peers.first().map(|p| p.label()),
            "peers": peers.iter().map(|p| p.label()).collect::<Vec<_>>(),
        });
        Report {
            runs: BTreeMap::new(),
            peers: peers.to_vec(),
            settings,
        }
    }

    pub fn add(&mut self, scenario: Scenario, side: Side, figures: Figures) {
        let side = match side {
            Side::Ours => None,
            Side::Peer(p) => Some(p),
        };
        self.runs.entry((scenario, side)).or_default().push(figures);
    }

    fn medians(&self, scenario: Scenario, side: Option<PeerKind>, key: &str) -> Option<f64> {
        let runs = self.runs.get(&(scenario, side))?;
        median(runs.iter().filter_map(|f| f.0.get(key).copied()).collect())
    }

    /// hero's medians beside `peer`'s (none: hero's alone).
    fn rows(&self, peer: Option<PeerKind>) -> Vec<Row> {
        let mut scenarios: Vec<Scenario> = self.runs.keys().map(|(s, _)| *s).collect();
        scenarios.dedup();
        let mut rows = Vec::new();
        for s in scenarios {
            for metric in METRICS {
                let ours = self.medians(s, None, metric.key);
                let peer = peer.and_then(|p| self.medians(s, Some(p), metric.key));
                let ceiling = s
                    .ceiling()
                    .filter(|_| AGAINST_CEILING.contains(&metric.key))
                    .and_then(|c| self.medians(c, None, metric.key));
                if ours.is_some() || peer.is_some() {
                    rows.push(Row {
                        scenario: s,
                        metric,
                        ours,
                        peer,
                        ceiling,
                    });
                }
            }
        }
        rows
    }

    /// The printed tables: one per peer (hero's column, the peer's, the ratio), or hero's alone.
    pub fn table(&self) -> String {
        if self.peers.is_empty() {
            return self.table_for(None);
        }
        self.peers
            .iter()
            .map(|p| format!("hero beside {}\n{}", p.label(), self.table_for(Some(*p))))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn table_for(&self, peer: Option<PeerKind>) -> String {
        let opt = |v: Option<f64>| v.map(fmt).unwrap_or_else(|| "-".into());
        let pct = |v: Option<f64>| v.map(|p| format!("{p:.0} %")).unwrap_or_default();
        let mut lines = vec![match peer {
            Some(p) => format!(
                "{:<20} {:<30} {:>12} {:>13} {:>8} {:>9} {:>12}",
                "scenario",
                "metric",
                "hero",
                p.name(),
                "ratio",
                "hero ×",
                "% of ceiling"
            ),
            None => format!(
                "{:<20} {:<30} {:>12} {:>12}",
                "scenario", "metric", "hero", "% of ceiling"
            ),
        }];
        for r in self.rows(peer) {
            lines.push(if peer.is_some() {
                format!(
                    "{:<20} {:<30} {:>12} {:>13} {:>8} {:>9} {:>12}",
                    r.scenario.name(),
                    r.metric.label,
                    opt(r.ours),
                    opt(r.peer),
                    opt(r.ratio()),
                    r.advantage()
                        .map(|a| format!("{a:.2}×"))
                        .unwrap_or_else(|| "-".into()),
                    pct(r.of_ceiling_pct()),
                )
            } else {
                format!(
                    "{:<20} {:<30} {:>12} {:>12}",
                    r.scenario.name(),
                    r.metric.label,
                    opt(r.ours),
                    pct(r.of_ceiling_pct()),
                )
            });
        }
        if let Some(p) = peer {
            lines.push(format!(
                "ratio = hero ÷ {}; hero × = how many times better hero is (medians)",
                p.name()
            ));
        }
        lines.push(
            "% of ceiling = hero's jobs/s over the ceiling's, or the ceiling's Redis CPU per job \
             over hero's (ceiling: plain XADD+HSET, XREADGROUP, XACK+HSET)"
                .into(),
        );
        lines.join("\n") + "\n"
    }

    /// The report: `rows` hero beside the first peer (the shape of a one-peer run), `peers` the
    /// rows beside each peer, `runs` every round's figures.
    pub fn json(&self) -> serde_json::Value {
        let peers: Vec<serde_json::Value> = self
            .peers
            .iter()
            .map(|p| {
                serde_json::json!({
                    "peer": p.name(),
                    "label": p.label(),
                    "rows": self.json_rows(Some(*p)),
                })
            })
            .collect();
        let runs: Vec<serde_json::Value> = self
            .runs
            .iter()
            .map(|((s, side), figs)| {
                serde_json::json!({
                    "scenario": s.name(),
                    "side": side.map_or("ours", PeerKind::name),
                    "rounds": figs.iter().map(|f| &f.0).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({
            "settings": self.settings,
            "rows": self.json_rows(self.peers.first().copied()),
            "peers": peers,
            "runs": runs,
        })
    }

    fn json_rows(&self, peer: Option<PeerKind>) -> Vec<serde_json::Value> {
        let num = |v: Option<f64>| v.filter(|x| x.is_finite());
        self.rows(peer)
            .iter()
            .map(|r| {
                serde_json::json!({
                    "scenario": r.scenario.name(),
                    "metric": r.metric.key,
                    "label": r.metric.label,
                    "higher_is_better": r.metric.higher_is_better,
                    "ours": num(r.ours),
                    "peer": num(r.peer),
                    "ratio": num(r.ratio()),
                    "advantage": num(r.advantage()),
                    "of_ceiling_pct": num(r.of_ceiling_pct()),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_nearest_rank() {
        let us: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentiles(us), (50.0, 99.0, 100.0));
        assert!(percentiles(Vec::new()).0.is_nan());
    }

    #[test]
    fn median_ignores_missing_figures() {
        assert_eq!(median(vec![3.0, f64::NAN, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![1.0, 2.0]), Some(1.5));
        assert_eq!(median(vec![]), None);
    }
}
