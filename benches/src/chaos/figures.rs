//! The soak's figures: a row per phase and kind of fault (how many, jobs lost and recorded
//! twice, the worst time to recover), a row per phase, the JSON they are written as, and how a
//! fault's recovery is measured and its bad jobs are counted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::deploy::Topology;
use super::faults::Kind;
use super::ledger::Judgement;
use super::procs::Procs;

/// One row: a kind of fault in one phase.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(super) struct KindFigures {
    pub(super) topology: String,
    pub(super) kind: String,
    pub(super) faults: u64,
    pub(super) lost: u64,
    pub(super) recorded_twice: u64,
    pub(super) worst_recovery_ms: u64,
}

#[derive(Debug, Default, serde::Serialize)]
pub(super) struct PhaseFigures {
    pub(super) topology: String,
    pub(super) jobs: u64,
    pub(super) faults: u64,
    pub(super) lost: u64,
    pub(super) recorded_twice: u64,
    /// Finished with an output no run in the ledger produced.
    pub(super) unproven: u64,
    pub(super) handler_runs: u64,
    pub(super) audit_clean: bool,
    pub(super) memory_baseline_bytes: u64,
    pub(super) memory_after_bytes: u64,
    pub(super) seconds: f64,
    /// The upgrade phase: jobs that ended `error` (each would finish: an error is version skew).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ended_error: Option<u64>,
    /// The redis-faults phase: jobs acknowledged in a rollback's window and gone with its data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lost_to_redis: Option<u64>,
    /// The redis-faults phase: jobs unfinished at a rollback's snapshot recorded again after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rerun_after_rollback: Option<u64>,
    /// The redis-faults phase: jobs run twice with no worker killed and no rollback to explain it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ran_twice_alive: Option<u64>,
    /// The redis-faults phase: rollbacks the audit named (`data_loss`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rollbacks_named: Option<u64>,
}

impl PhaseFigures {
    /// A phase's row: `jobs` judged, `bad` of them (and `bad_probes` of the probes) lost,
    /// recorded twice or unproven; the rest of the row is the caller's.
    pub(super) fn judged<I, P>(
        t: Topology,
        jobs: u64,
        faults: u64,
        bad: &[(I, Judgement)],
        bad_probes: &[(P, Judgement)],
        handler_runs: u64,
    ) -> PhaseFigures {
        let count = |j: Judgement| {
            (bad.iter().filter(|(_, b)| *b == j).count()
                + bad_probes.iter().filter(|(_, b)| *b == j).count()) as u64
        };
        PhaseFigures {
            topology: t.name().into(),
            jobs,
            faults,
            lost: count(Judgement::Lost),
            recorded_twice: count(Judgement::Twice),
            unproven: count(Judgement::Unproven),
            handler_runs,
            ..PhaseFigures::default()
        }
    }
}

#[derive(Debug, Default, serde::Serialize)]
pub(super) struct Figures {
    pub(super) faults: u64,
    pub(super) jobs: u64,
    pub(super) lost: u64,
    pub(super) recorded_twice: u64,
    pub(super) phases: Vec<PhaseFigures>,
    pub(super) kinds: Vec<KindFigures>,
}

pub(super) fn print_table(fig: &Figures) {
    println!("| phase | fault | how many | lost | recorded twice | worst recovery |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for k in &fig.kinds {
        println!(
            "| {} | {} | {} | {} | {} | {:.1} s |",
            k.topology,
            k.kind,
            k.faults,
            k.lost,
            k.recorded_twice,
            k.worst_recovery_ms as f64 / 1000.0
        );
    }
    for p in &fig.phases {
        println!(
            "| {} | all: {} jobs, {} handler runs, {:.0} s | {} | {} | {} | audit {}, memory {:.1} → {:.1} MiB |",
            p.topology,
            p.jobs,
            p.handler_runs,
            p.seconds,
            p.faults,
            p.lost,
            p.recorded_twice,
            if p.audit_clean { "clean" } else { "NOT clean" },
            p.memory_baseline_bytes as f64 / 1048576.0,
            p.memory_after_bytes as f64 / 1048576.0
        );
    }
}

/// How a fault's recovery is measured.
pub(super) enum Recovery {
    /// The jobs a killed or stalled worker held: until each started elsewhere.
    Held(Vec<String>),
    /// A probe job submitted after the fault: until it finished (unix ms), None if never.
    Probe(String, tokio::task::JoinHandle<Option<u64>>),
    /// A probe's time, once awaited (None: it never finished).
    Measured(Option<u64>),
}

pub(super) struct Thrown {
    pub(super) kind: Kind,
    pub(super) at_ms: u64,
    pub(super) recovery: Recovery,
}

/// The figures per kind: how many, the worst recovery, and the bad jobs counted against the
/// last fault before their acknowledgement.
pub(super) fn per_kind(
    t: Topology,
    thrown: &[Thrown],
    procs: &Procs,
    bad: &[(u64, Judgement)],
    bad_probes: &[(usize, Judgement)],
    acks: &Mutex<Vec<(u64, u64)>>,
) -> Vec<KindFigures> {
    // each job's start times, from every worker's lines
    let mut starts: HashMap<String, Vec<u64>> = HashMap::new();
    for p in procs.retired.iter().chain(&procs.workers) {
        for line in p.output() {
            let mut w = line.split_whitespace();
            if let (Some("started"), Some(id), Some(ms)) = (w.next(), w.next(), w.next()) {
                if let Ok(ms) = ms.parse::<u64>() {
                    starts.entry(id.to_string()).or_default().push(ms);
                }
            }
        }
    }
    let mut rows: BTreeMap<Kind, KindFigures> = BTreeMap::new();
    fn row(rows: &mut BTreeMap<Kind, KindFigures>, t: Topology, k: Kind) -> &mut KindFigures {
        rows.entry(k).or_insert_with(|| KindFigures {
            topology: t.name().into(),
            kind: k.name().into(),
            ..KindFigures::default()
        })
    }
    let mut worst: Vec<(Kind, u64)> = Vec::new();
    for f in thrown {
        let ms = match &f.recovery {
            Recovery::Held(ids) => ids
                .iter()
                .filter_map(|id| {
                    starts
                        .get(id)
                        .and_then(|s| s.iter().copied().filter(|&ms| ms >= f.at_ms).min())
                })
                .map(|again| again - f.at_ms)
                .max()
                .unwrap_or(0),
            // a probe that never finished is a lost job, counted below
            Recovery::Measured(ms) => ms.unwrap_or(0),
            Recovery::Probe(..) => 0,
        };
        worst.push((f.kind, ms));
    }
    for (k, ms) in worst {
        let r = row(&mut rows, t, k);
        r.faults += 1;
        r.worst_recovery_ms = r.worst_recovery_ms.max(ms);
    }
    for (i, j) in bad_probes {
        let r = row(&mut rows, t, thrown[*i].kind);
        match j {
            Judgement::Twice => r.recorded_twice += 1,
            _ => r.lost += 1,
        }
    }
    let acks = acks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (i, j) in bad {
        // the batch that acknowledged job i, then the last fault before it
        let at = acks
            .iter()
            .find(|(end, _)| *end > *i)
            .map_or(u64::MAX, |(_, at)| *at);
        let kind = thrown
            .iter()
            .rev()
            .find(|f| f.at_ms <= at)
            .or(thrown.first())
            .map(|f| f.kind);
        if let Some(k) = kind {
            match j {
                Judgement::Twice => row(&mut rows, t, k).recorded_twice += 1,
                _ => row(&mut rows, t, k).lost += 1,
            }
        }
    }
    rows.into_values().collect()
}
