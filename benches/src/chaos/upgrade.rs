//! The upgrade phase (`--topology upgrade`): a rolling upgrade under load, the way an operator
//! rolls one at any hour. The system starts on an earlier release (`--old-bin`, built by
//! `benches/chaos` from `--upgrade-from`, by default the last release CHANGELOG.md names): its
//! two brokers, four workers (two Rust, one Python under that release's hero-py, one Node under
//! that release's npm package) and a producer
//! (that release's `hero submit`), beside this build's in-process producer. While jobs flow and
//! workers are killed, each is replaced by this build's, one at a time: brokers first, then
//! workers, then the producer; then back again, one at a time (a rollback).
//!
//! The judgement is the other phases' (every acknowledged job ends once, by the ledger; the
//! audit clean) plus one of its own: no job ends `error`, since every job here would finish,
//! so an `error` is version skew.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::checks::{read_records, used_memory, wait_ended};
use super::deploy::{Deployment, Topology};
use super::figures::{KindFigures, PhaseFigures};
use super::ledger::{Book, Judgement};
use super::procs::{held, Build, Lang, Procs};
use super::{connect, now_ms, ChaosArgs, KEEP_SECS, MEMORY_SLACK, TYPE};

/// One step of the roll: which process moves to which build.
#[derive(Clone, Copy, Debug)]
enum Step {
    Broker(usize),
    Worker(usize),
    Producer,
}

pub(super) async fn phase(
    args: &ChaosArgs,
    dir: &Path,
    old: Build,
    new: Build,
) -> Result<(PhaseFigures, Vec<KindFigures>, bool)> {
    let t = Topology::Upgrade;
    let dep = Deployment::start(t).await;
    let mut procs = Procs::new(dep.system_url(), 0, dir, args.run_ms, old.clone());
    let client = connect(&dep.direct_url(), 0).await?;
    // which build and language each worker slot runs now
    let langs = [Lang::Rust, Lang::Python, Lang::Node, Lang::Rust];
    let mut builds: Vec<Build> = vec![old.clone(); langs.len()];
    procs.brokers = (0..2).map(|_| procs.broker_of(&old, KEEP_SECS)).collect();
    for &lang in &langs {
        let w = procs.worker_of(&old, lang);
        procs.workers.push(w);
    }
    for w in &procs.workers {
        w.expect_line("ready", Duration::from_secs(60)).await;
    }
    let baseline = used_memory(&client).await?;
    let started = Instant::now();

    // this build's producer, in process, as the other phases' (ids c-<n>)
    let load = super::load::Load::start(client.clone(), args.rate, false);
    let stop = Arc::new(AtomicBool::new(false));
    // the rolled producer: a release's `hero submit`, one job at a time (ids o-<n>); a job
    // counts once the command said it was accepted
    let cli_build = Arc::new(Mutex::new(old.clone()));
    let cli_acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let cli = {
        let (stop, cli_build, cli_acked, url) = (
            stop.clone(),
            cli_build.clone(),
            cli_acked.clone(),
            procs.url.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let hero = cli_build
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .hero
                    .clone();
                let id = format!("o-{n}");
                let ok = std::process::Command::new(&hero)
                    .args([
                        "--redis-url",
                        &url,
                        "submit",
                        "--type",
                        TYPE,
                        "--id",
                        &id,
                        "x",
                    ])
                    .env("RUST_LOG", "error")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
                if ok {
                    cli_acked.lock().unwrap_or_else(|p| p.into_inner()).push(id);
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let forward = [
        Step::Broker(0),
        Step::Broker(1),
        Step::Worker(0),
        Step::Worker(1),
        Step::Worker(2),
        Step::Worker(3),
        Step::Producer,
    ];
    let plan: Vec<(Step, &Build)> = forward
        .iter()
        .map(|&s| (s, &new))
        .chain(forward.iter().map(|&s| (s, &old)))
        .collect();
    let pause = if args.short {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(8)
    };
    let mut rng = now_ms() | 1;
    let mut faults = 0u64;
    for (step, build) in plan {
        tokio::time::sleep(pause / 2).await;
        // the usual fault between two steps: a worker killed, replaced by one of its build
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % procs.workers.len() as u64) as usize;
        let fresh = procs.worker_of(&builds[i].clone(), langs[i]);
        let mut victim = std::mem::replace(&mut procs.workers[i], fresh);
        victim.kill9();
        let _ = held(&victim);
        procs.retired.push(victim);
        faults += 1;
        tokio::time::sleep(pause / 2).await;
        eprintln!("chaos: upgrade: {step:?} to {}", build.name);
        match step {
            Step::Broker(i) => {
                // a rolling restart: the old one stops as an operator stops it
                procs.brokers[i].signal("TERM");
                procs.brokers[i] = procs.broker_of(build, KEEP_SECS);
            }
            Step::Worker(i) => {
                let fresh = procs.worker_of(build, langs[i]);
                fresh.expect_line("ready", Duration::from_secs(60)).await;
                let gone = std::mem::replace(&mut procs.workers[i], fresh);
                gone.signal("TERM");
                procs.retired.push(gone);
                builds[i] = build.clone();
            }
            Step::Producer => {
                *cli_build.lock().unwrap_or_else(|p| p.into_inner()) = build.clone();
            }
        }
        procs.replace_exited();
    }
    tokio::time::sleep(pause).await;
    stop.store(true, Ordering::Relaxed);
    let jobs = load.finish().await?;
    cli.await.context("the CLI producer")?;
    let seconds = started.elapsed().as_secs_f64();

    let mut ids: Vec<String> = (0..jobs).map(|i| format!("c-{i}")).collect();
    ids.extend(
        cli_acked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned(),
    );
    wait_ended(&client, &ids, Duration::from_secs(180)).await?;
    let book = Book::read(dir)?;
    let records = read_records(&client, &ids).await?;
    let mut bad: Vec<(String, Judgement)> = Vec::new();
    let mut ended_error = 0u64;
    for (id, (status, output)) in ids.iter().zip(&records) {
        if status.as_deref() == Some("error") {
            ended_error += 1;
        }
        match book.judge(id, status.as_deref(), output.as_deref()) {
            Judgement::Once => {}
            j => bad.push((id.clone(), j)),
        }
    }
    for (id, j) in bad.iter().take(10) {
        eprintln!("chaos: upgrade: {id} {j:?}");
    }
    let audit_deadline = Instant::now() + Duration::from_secs(30);
    let report = loop {
        let (report, _) = hero_admin::Admin::from(&client)
            .audit(false, &|_| {})
            .await?;
        if report.is_consistent() || Instant::now() > audit_deadline {
            break report;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let audit_clean = report.is_consistent();
    if !audit_clean {
        eprintln!("audit: {:?}", report.inconsistencies().collect::<Vec<_>>());
    }
    // memory: this build's broker with a retention of 1 s deletes the ended jobs
    for b in &mut procs.brokers {
        b.kill9();
    }
    procs.brokers = vec![procs.broker_of(&new, 1)];
    for w in procs.workers.iter_mut().chain(&mut procs.retired) {
        if matches!(w.child.try_wait(), Ok(None)) {
            w.signal("TERM");
        }
    }
    let _: hero_protocol::Result<i64> = client
        .redis()
        .query(
            redis::cmd("XTRIM")
                .arg(client.keys().events())
                .arg("MAXLEN")
                .arg(0),
        )
        .await;
    let memory_deadline = Instant::now() + Duration::from_secs(60);
    let mut memory_after = used_memory(&client).await?;
    while memory_after > baseline + MEMORY_SLACK && Instant::now() < memory_deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        memory_after = used_memory(&client).await?;
    }
    let p = PhaseFigures {
        audit_clean,
        memory_baseline_bytes: baseline,
        memory_after_bytes: memory_after,
        seconds,
        ended_error: Some(ended_error),
        ..PhaseFigures::judged::<_, usize>(
            t,
            ids.len() as u64,
            faults,
            &bad,
            &[],
            book.runs() as u64,
        )
    };
    eprintln!(
        "chaos: upgrade from {} and back: {} jobs, lost {}, recorded twice {}, ended error {ended_error}",
        old.name, p.jobs, p.lost, p.recorded_twice
    );
    let kinds = vec![KindFigures {
        topology: t.name().into(),
        kind: format!("roll {} ⇄ {} (and worker-kill)", old.name, new.name),
        faults,
        lost: p.lost,
        recorded_twice: p.recorded_twice,
        worst_recovery_ms: 0,
    }];
    let clean = bad.is_empty()
        && audit_clean
        && ended_error == 0
        && memory_after <= baseline + MEMORY_SLACK;
    Ok((p, kinds, clean))
}
