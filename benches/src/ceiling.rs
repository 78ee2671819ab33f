//! The ceiling: the least Redis work a job with a record needs, from plain clients with no
//! functions, so that every scenario can say how close it comes to what Redis itself can do.
//! A submit is a pipelined XADD of the entry and HSET of a small record; a worker reads with
//! XREADGROUP and records the result with a pipelined XACK and HSET. No presence, no lease
//! checks, no event log, no stats, no trimming: nothing a guarantee needs beyond the job itself.
//!
//! `ceiling` runs it end to end at saturation (the shape of the end-to-end scenario: the same
//! producers, batch and concurrency); `ceiling-latency` offers it at the latency scenario's
//! rate, one job a submit, and measures Redis CPU per job and submit→start there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use redis::aio::MultiplexedConnection;
use redis::Value;
use tokio_util::sync::CancellationToken;

use crate::ours::CpuMark;
use crate::probe::Probe;
use crate::report::Figures;
use crate::scenario::BenchArgs;
use crate::tally::{now_us, offer_at_rate, Tally};

const STREAM: &str = "ceiling:q";
const GROUP: &str = "workers";
const JOB: &str = "ceiling:job:";
/// Readers with a read under way at once, as the hero worker keeps two fetches in flight.
const READERS: usize = 2;

pub struct Ceiling {
    client: redis::Client,
    args: BenchArgs,
    seq: AtomicU64,
}

impl Ceiling {
    pub fn new(url: &str, args: &BenchArgs) -> Result<Ceiling> {
        Ok(Ceiling {
            client: redis::Client::open(url)?,
            args: args.clone(),
            seq: AtomicU64::new(0),
        })
    }

    async fn conn(&self) -> Result<MultiplexedConnection> {
        Ok(self.client.get_multiplexed_async_connection().await?)
    }

    /// Appends the submit of one job (entry and record) to `pipe`; ids carry their submit time.
    fn add_submit(&self, pipe: &mut redis::Pipeline) {
        let id = format!("{}-{}", self.seq.fetch_add(1, Ordering::Relaxed), now_us());
        pipe.cmd("XADD")
            .arg(STREAM)
            .arg("*")
            .arg("j")
            .arg(&id)
            .ignore();
        pipe.cmd("HSET")
            .arg(format!("{JOB}{id}"))
            .arg("script")
            .arg("noop")
            .arg("script_type")
            .arg("bench")
            .arg("created_at")
            .arg(hero_protocol::clock::now_iso())
            .arg("status")
            .arg("dispatched")
            .ignore();
    }

    /// Starts the readers; they run until `stop`.
    async fn workers(
        &self,
        tally: &Arc<Tally>,
        stop: &CancellationToken,
    ) -> Result<Vec<tokio::task::JoinHandle<Result<()>>>> {
        let mut conn = self.conn().await?;
        let _: Value = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(STREAM)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await
            .context("creating the ceiling's group")?;
        let count = (self.args.concurrency / 4).max(8);
        let mut tasks = Vec::new();
        for r in 0..READERS {
            // a blocking read holds its connection: each reader has its own
            let conn = self.conn().await?;
            let (tally, stop) = (tally.clone(), stop.clone());
            tasks.push(tokio::spawn(read_loop(
                conn,
                format!("c{r}"),
                count,
                tally,
                stop,
            )));
        }
        Ok(tasks)
    }

    pub async fn run(&self, probe: &Probe, latency: bool) -> Result<Figures> {
        let mut fig = Figures::default();
        let stop = CancellationToken::new();
        let total = if latency {
            ((self.args.rate as f64 * self.args.duration.as_secs_f64()).round() as u64).max(1)
        } else {
            self.args.jobs
        };
        let tally = Tally::new(total);
        let readers = self.workers(&tally, &stop).await?;
        let producer = self.conn().await?;
        let cpu = CpuMark::now(probe).await?;
        let t0 = Instant::now();
        let run = async {
            if latency {
                let mut submits = tokio::task::JoinSet::new();
                offer_at_rate(self.args.rate, total, |_| {
                    let mut pipe = redis::pipe();
                    self.add_submit(&mut pipe);
                    let mut conn = producer.clone();
                    submits.spawn(async move { pipe.query_async::<()>(&mut conn).await });
                })
                .await;
                while let Some(r) = submits.join_next().await {
                    r??;
                }
                tally.all_completed().await
            } else {
                let next = AtomicU64::new(0);
                let batch = self.args.batch as u64;
                let produce = || async {
                    let mut conn = producer.clone();
                    while next.fetch_add(batch, Ordering::Relaxed) < total {
                        let mut pipe = redis::pipe();
                        for _ in 0..batch {
                            self.add_submit(&mut pipe);
                        }
                        pipe.query_async::<()>(&mut conn).await?;
                    }
                    anyhow::Ok(())
                };
                let producers =
                    futures::future::try_join_all((0..self.args.producers).map(|_| produce()));
                tokio::try_join!(producers, tally.all_completed())?;
                Ok(())
            }
        };
        let result = run.await;
        let secs = t0.elapsed().as_secs_f64();
        stop.cancel();
        for r in readers {
            r.await??;
        }
        result?;
        fig.set(
            if latency {
                "offered_per_s"
            } else {
                "jobs_per_s"
            },
            total as f64 / secs,
        );
        cpu.record(probe, total, &mut fig).await?;
        tally.latencies(&mut fig, true, latency);
        Ok(fig)
    }
}

/// One reader: XREADGROUP, then per entry read the job "runs" (no work) and its result is
/// recorded with XACK and HSET, pipelined per read.
async fn read_loop(
    mut conn: MultiplexedConnection,
    consumer: String,
    count: usize,
    tally: Arc<Tally>,
    stop: CancellationToken,
) -> Result<()> {
    let now = hero_protocol::clock::now_iso();
    loop {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&consumer)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(200)
            .arg("STREAMS")
            .arg(STREAM)
            .arg(">");
        let read = cmd.query_async::<Option<redis::streams::StreamReadReply>>(&mut conn);
        let reply = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            r = read => r?,
        };
        let Some(reply) = reply else { continue };
        let mut pipe = redis::pipe();
        let mut ids = Vec::new();
        for key in reply.keys {
            for entry in key.ids {
                let Some(id) = entry.get::<String>("j") else {
                    continue;
                };
                tally.on_start(&id);
                pipe.cmd("XACK")
                    .arg(STREAM)
                    .arg(GROUP)
                    .arg(&entry.id)
                    .ignore();
                pipe.cmd("HSET")
                    .arg(format!("{JOB}{id}"))
                    .arg("status")
                    .arg("finished")
                    .arg("output")
                    .arg("")
                    .arg("finished_at")
                    .arg(&now)
                    .ignore();
                ids.push(id);
            }
        }
        if ids.is_empty() {
            continue;
        }
        pipe.query_async::<()>(&mut conn).await?;
        for id in &ids {
            tally.on_completed(id);
        }
    }
}
