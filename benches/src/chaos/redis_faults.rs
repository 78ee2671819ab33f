//! The soak's "redis faults" phase (issue 58): the faults Redis itself makes in production, on
//! one server with RDB snapshots, under the steady load, with two of the four workers' clocks
//! 30 s off Redis's (one behind, one ahead: libfaketime), in this order: Redis at its maxmemory
//! (30 s), its snapshot disk gone so every write is refused with MISCONF (20 s), the worker 30 s
//! ahead killed -9, a restart from a snapshot taken 3 s before, and a replica cut 3 s behind
//! its master promoted in its place (its data served on the master's port).
//!
//! The judgement counts handler runs, not only records. A rollback loses, by its nature, what
//! Redis accepted after the moment it went back to, and may run again what had ended since:
//! those jobs (acknowledged in a rollback's window; unfinished at its snapshot) are counted
//! apart, and the audit must name the rollback (`data_loss`). Every other job must end once,
//! with one handler run unless a run was on the killed worker; then the audit, its losses
//! acknowledged, must be clean.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hero_client::Client;
use hero_testkit::RedisServer;

use super::checks::{probe, read_records, used_memory, wait_ended};
use super::deploy::{Deployment, Topology};
use super::faults::{self, Kind};
use super::figures::{per_kind, KindFigures, PhaseFigures, Recovery, Thrown};
use super::ledger::{Book, Judgement};
use super::load::Load;
use super::procs::{held, Build, Procs};
use super::{connect, now_ms, ChaosArgs, BROKERS, KEEP_SECS};

async fn config_set(client: &Client, name: &str, value: &str) -> Result<()> {
    let _: redis::Value = client
        .redis()
        .query(redis::cmd("CONFIG").arg("SET").arg(name).arg(value))
        .await
        .with_context(|| format!("CONFIG SET {name} {value}"))?;
    Ok(())
}

async fn info(client: &Client, section: &str) -> Result<String> {
    Ok(client
        .redis()
        .query(redis::cmd("INFO").arg(section))
        .await?)
}

/// Of `c-0 .. c-<upto>`, the ids not finished now (what a snapshot taken next may run again)
/// and, among them, those with no record at all.
async fn unfinished(client: &Client, upto: u64) -> Result<(HashSet<String>, HashSet<String>)> {
    let ids: Vec<String> = (0..upto).map(|i| format!("c-{i}")).collect();
    let (mut open, mut missing) = (HashSet::new(), HashSet::new());
    for (id, (status, _)) in ids.iter().zip(read_records(client, &ids).await?) {
        if status.is_none() {
            missing.insert(id.clone());
        }
        if status.as_deref() != Some("finished") {
            open.insert(id.clone());
        }
    }
    Ok((open, missing))
}

/// The ids a rollback to the data `at` holds may run again: those unfinished there (read from
/// `at`, a client of the frozen data or of the server just before it is saved), and every one
/// acknowledged from `from` until `to`, the rollback over.
fn rerun_range(into: &mut HashSet<String>, from: u64, to: u64) {
    into.extend((from..to).map(|i| format!("c-{i}")));
}

pub(super) async fn phase(
    args: &ChaosArgs,
    dir: &Path,
) -> Result<(PhaseFigures, Vec<KindFigures>, bool)> {
    let t = Topology::RedisFaults;
    if !Path::new(super::procs::FAKETIME).exists() {
        bail!("libfaketime is missing (scripts/setup installs the faketime package)");
    }
    let mut dep = Deployment::start(t).await;
    let mut procs = Procs::new(dep.system_url(), 0, dir, args.run_ms, Build::current());
    let client = connect(&dep.direct_url(), 0).await?;
    procs.brokers = (0..BROKERS).map(|_| procs.broker(KEEP_SECS)).collect();
    procs.workers = vec![procs.worker(), procs.worker(), procs.skewed_worker("-30s")];
    let mut ahead = Some(procs.skewed_worker("+30s"));
    for w in procs.workers.iter().chain(&ahead) {
        w.expect_line("ready", Duration::from_secs(30)).await;
    }
    let killed_pid = ahead.as_ref().map(|p| p.pid()).unwrap_or(0);
    let baseline = used_memory(&client).await?;
    let started = Instant::now();
    let load = Load::start(client.clone(), args.rate, false);
    let hold = |full: u64, short: u64| Duration::from_secs(if args.short { short } else { full });
    let mut thrown: Vec<Thrown> = Vec::new();
    // rollbacks: jobs acknowledged within (from, to) ms may be gone with the data
    let mut windows: Vec<(u64, u64)> = Vec::new();
    let mut rerun: HashSet<String> = HashSet::new();
    let mut gone_on_replica: HashSet<String> = HashSet::new();
    let disk = dir.join("disk");
    for (n, kind) in faults::plan(t, 0, args.short).into_iter().enumerate() {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let at_ms = now_ms();
        let probe_id = format!("p-{}-{n}", t.name());
        let mut recovery = None;
        match kind {
            Kind::MaxMemory => {
                let used: u64 = info(&client, "memory")
                    .await?
                    .lines()
                    .find_map(|l| l.strip_prefix("used_memory:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                config_set(
                    &client,
                    "maxmemory",
                    &(used.saturating_sub(64 << 10)).to_string(),
                )
                .await?;
                tokio::time::sleep(hold(30, 5)).await;
                config_set(&client, "maxmemory", "0").await?;
            }
            Kind::DiskFailure => {
                std::fs::create_dir_all(&disk)?;
                config_set(&client, "dir", &disk.display().to_string()).await?;
                config_set(&client, "stop-writes-on-bgsave-error", "yes").await?;
                config_set(&client, "save", "3600 1").await?;
                std::fs::remove_dir_all(&disk)?;
                // refused or not, the save runs in the background and fails on the missing disk
                let _: hero_protocol::Result<redis::Value> =
                    client.redis().query(&redis::cmd("BGSAVE")).await;
                let deadline = Instant::now() + Duration::from_secs(10);
                while !info(&client, "persistence")
                    .await?
                    .contains("rdb_last_bgsave_status:err")
                {
                    if Instant::now() > deadline {
                        bail!("the snapshot on a missing disk did not fail");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(hold(20, 5)).await;
                // the disk back (Redis's own directory again) and a snapshot that works
                let home = dep.server().context("a single server")?.dir.clone();
                config_set(&client, "dir", &home.display().to_string()).await?;
                config_set(&client, "save", "").await?;
                let _: redis::Value = client.redis().query(&redis::cmd("SAVE")).await?;
            }
            Kind::SkewedWorkerKill => {
                if let Some(mut p) = ahead.take() {
                    p.kill9();
                    recovery = Some(Recovery::Held(held(&p)));
                    procs.retired.push(p);
                }
            }
            Kind::SnapshotRollback => {
                // read before the save: a job finished then is finished in the snapshot too
                let upto = load.count();
                rerun.extend(unfinished(&client, upto).await?.0);
                let server = dep.server().context("a single server")?;
                let mut raw = server.conn().await;
                let from = now_ms();
                let _: () = redis::cmd("SAVE").query_async(&mut raw).await?;
                let old = server.dir.join("dump.old");
                std::fs::copy(server.dir.join("dump.rdb"), &old)?;
                tokio::time::sleep(Duration::from_secs(3)).await;
                server.kill();
                std::fs::copy(&old, server.dir.join("dump.rdb"))?;
                server.restart();
                windows.push((from, now_ms()));
                rerun_range(&mut rerun, upto, load.count());
            }
            Kind::LaggingReplica => {
                let port = dep.server().context("a single server")?.port;
                let replica =
                    RedisServer::start_with(&["--replicaof", "127.0.0.1", &port.to_string()]);
                let mut r = replica.conn().await;
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let i: String = redis::cmd("INFO")
                        .arg("replication")
                        .query_async(&mut r)
                        .await?;
                    if i.contains("master_link_status:up")
                        && i.contains("master_sync_in_progress:0")
                    {
                        break;
                    }
                    if Instant::now() > deadline {
                        bail!("the replica never synced");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // cut behind: it holds the data of this moment, the master goes on 3 s more
                // `from` before `upto`: a job acknowledged before `from` is below `upto`, and is
                // judged by what the replica holds; one after is in the window
                let from = now_ms();
                let upto = load.count();
                let _: () = redis::cmd("REPLICAOF")
                    .arg("NO")
                    .arg("ONE")
                    .query_async(&mut r)
                    .await?;
                // what may run again is what the replica holds unfinished: it lags the master
                // by a moment, so it is read there, frozen
                let (open, missing) =
                    unfinished(&Client::connect(&replica.url()).await?, upto).await?;
                rerun.extend(open);
                // acknowledged by the master a moment before the cut, not yet replicated
                gone_on_replica.extend(missing);
                tokio::time::sleep(Duration::from_secs(3)).await;
                let _: () = redis::cmd("SAVE").query_async(&mut r).await?;
                let server = dep.server().context("a single server")?;
                server.kill();
                std::fs::copy(replica.dir.join("dump.rdb"), server.dir.join("dump.rdb"))?;
                drop(replica);
                server.restart();
                windows.push((from, now_ms()));
                rerun_range(&mut rerun, upto, load.count());
            }
            other => bail!("{} is not a fault of the redis-faults phase", other.name()),
        }
        let recovery = recovery
            .unwrap_or_else(|| Recovery::Probe(probe_id.clone(), probe(client.clone(), probe_id)));
        thrown.push(Thrown {
            kind,
            at_ms,
            recovery,
        });
        procs.replace_exited();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let acks = load.acks.clone();
    let jobs = load.finish().await?;
    let seconds = started.elapsed().as_secs_f64();

    // a job's acknowledgement time, by its batch
    let acked_at = |i: u64| -> u64 {
        acks.lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(end, _)| *end > i)
            .map_or(u64::MAX, |(_, at)| *at)
    };
    let in_window = |i: u64| {
        let at = acked_at(i);
        windows.iter().any(|(from, to)| at >= *from && at <= *to)
            || gone_on_replica.contains(&format!("c-{i}"))
    };
    let ids: Vec<String> = (0..jobs).map(|i| format!("c-{i}")).collect();
    let must_end: Vec<String> = (0..jobs)
        .filter(|&i| !in_window(i))
        .map(|i| format!("c-{i}"))
        .collect();
    wait_ended(&client, &must_end, Duration::from_secs(180)).await?;
    // the rollbacks named (before the audit's --fix acknowledges them)
    let (named, _) = hero_admin::Admin::from(&client)
        .audit(false, &|_| {})
        .await?;
    let rollbacks_named = named
        .findings
        .iter()
        .filter(|f| f.class == hero_admin::inspect::Class::DataLoss)
        .count();
    let book = Book::read(dir)?;
    let records = read_records(&client, &ids).await?;
    let (mut lost_to_redis, mut rerun_by_rollback, mut ran_twice_alive) = (0u64, 0u64, 0u64);
    let mut bad: Vec<(u64, Judgement)> = Vec::new();
    for (i, (id, (status, output))) in ids.iter().zip(&records).enumerate() {
        let i = i as u64;
        match book.judge(id, status.as_deref(), output.as_deref()) {
            Judgement::Lost if in_window(i) => lost_to_redis += 1,
            Judgement::Twice if rerun.contains(id) => rerun_by_rollback += 1,
            Judgement::Once => {}
            j => bad.push((i, j)),
        }
        // runs on live workers: one, unless a rollback could run it again
        let alive = book
            .runs_of(id)
            .iter()
            .filter(|token| !token.starts_with(&format!("{killed_pid}-")))
            .count();
        if alive > 1 && !rerun.contains(id) && !in_window(i) {
            ran_twice_alive += 1;
            if ran_twice_alive <= 5 {
                eprintln!(
                    "chaos: {id} ran {alive} times on live workers ({:?}), acknowledged at {} (rollbacks {windows:?})",
                    book.runs_of(id),
                    acked_at(i)
                );
            }
        }
    }
    // a job judged wrong is named with what its record says, so a failing run can be read
    for (i, j) in bad.iter().take(5) {
        let (status, output) = &records[*i as usize];
        eprintln!(
            "chaos: c-{i} judged {j:?}: status {status:?}, output {output:?}, acknowledged at {}, runs {:?} (rollbacks {windows:?})",
            acked_at(*i),
            book.runs_of(&format!("c-{i}"))
        );
    }
    let mut bad_probes: Vec<(usize, Judgement)> = Vec::new();
    for (n, f) in thrown.iter_mut().enumerate() {
        if !matches!(f.recovery, Recovery::Probe(..)) {
            continue;
        }
        if let Recovery::Probe(id, h) = std::mem::replace(&mut f.recovery, Recovery::Measured(None))
        {
            let done = h.await.ok().flatten();
            f.recovery = Recovery::Measured(done.map(|d| d.saturating_sub(f.at_ms)));
            let rec = read_records(&client, std::slice::from_ref(&id)).await?;
            let (status, output) = rec.into_iter().next().unwrap_or((None, None));
            match book.judge(&id, status.as_deref(), output.as_deref()) {
                Judgement::Once => {}
                j => bad_probes.push((n, j)),
            }
        }
    }
    // what Redis lost, acknowledged; then every other inconsistency must be repaired
    let (report, _) = hero_admin::Admin::from(&client)
        .audit(true, &|_| {})
        .await?;
    let audit_clean = report.is_consistent();
    if !audit_clean {
        eprintln!("audit: {:?}", report.inconsistencies().collect::<Vec<_>>());
    }
    eprintln!(
        "chaos: redis faults: {lost_to_redis} jobs lost with the data of {} rollbacks ({rollbacks_named} named by the broker), {rerun_by_rollback} recorded again after them, {ran_twice_alive} run twice on live workers",
        windows.len()
    );
    let kinds = per_kind(t, &thrown, &procs, &bad, &bad_probes, &acks);
    for w in procs.workers.iter_mut().chain(&mut procs.retired) {
        if matches!(w.child.try_wait(), Ok(None)) {
            w.kill9();
        }
    }
    for b in &mut procs.brokers {
        b.kill9();
    }
    let memory_after = used_memory(&client).await?;
    let p = PhaseFigures {
        audit_clean,
        memory_baseline_bytes: baseline,
        memory_after_bytes: memory_after,
        seconds,
        lost_to_redis: Some(lost_to_redis),
        rerun_after_rollback: Some(rerun_by_rollback),
        ran_twice_alive: Some(ran_twice_alive),
        rollbacks_named: Some(rollbacks_named as u64),
        ..PhaseFigures::judged(
            t,
            jobs + thrown.len() as u64,
            thrown.len() as u64,
            &bad,
            &bad_probes,
            book.runs() as u64,
        )
    };
    let clean = bad.is_empty()
        && bad_probes.is_empty()
        && audit_clean
        && ran_twice_alive == 0
        && rollbacks_named >= windows.len();
    Ok((p, kinds, clean))
}
