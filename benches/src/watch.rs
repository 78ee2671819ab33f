//! hero's waits and subscriptions measured: `wait` right after a plain submit at a fixed rate
//! (the waits' shared follower of the event log is all that can wake them), and end to end with
//! 10 subscribers to the queue's events (`Client::events`).

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::ours::{CpuMark, Ours, TYPE};
use crate::probe::Probe;
use crate::report::Figures;
use crate::tally::{offer_at_rate, Tally};

impl Ours {
    /// Jobs submitted one a call at 1,000 a second for the run's duration, each waited on at
    /// once with `wait` (plain submits: no reply list, so only the waits' shared follower of
    /// the event log can wake them): the latency from the submit to the wait's answer.
    pub(crate) async fn wait_after_submit(&self, fig: &mut Figures) -> Result<()> {
        let rate = 1000;
        let total = ((rate as f64) * self.args.duration.as_secs_f64())
            .round()
            .max(1.0) as u64;
        let tally = Tally::new(total);
        let w = self.worker(&tally, self.args.concurrency).await?;
        let mut waits = tokio::task::JoinSet::new();
        offer_at_rate(rate, total, |_| {
            let Ok(job) = self.job() else { return };
            let client = self.client.clone();
            waits.spawn(async move {
                let t0 = Instant::now();
                let s = client.submit(&job).await?;
                client.wait(&s.id, Duration::from_secs(30)).await?;
                anyhow::Ok(t0.elapsed().as_micros() as u64)
            });
        })
        .await;
        let mut us = Vec::new();
        while let Some(r) = waits.join_next().await {
            us.push(r??);
        }
        let (p50, p99, _) = crate::report::percentiles(us);
        fig.set("wait_p50_ms", p50);
        fig.set("wait_p99_ms", p99);
        fig.set("offered_per_s", rate as f64);
        w.stop().await
    }

    /// End to end with 10 subscribers to the queue's events: jobs/s until every subscriber has
    /// seen every job's `finished`, and the Redis CPU per job with them reading.
    pub(crate) async fn events(&self, probe: &Probe, fig: &mut Figures) -> Result<()> {
        let n = self.args.jobs;
        let filter = hero_protocol::event_log::EventFilter {
            script_type: Some(hero_protocol::name::ScriptType::new(TYPE)?),
            ..Default::default()
        };
        let mut subscribers = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let mut stream = self
                .client
                .events(filter.clone(), hero_client::Since::Now)
                .await?;
            subscribers.spawn(async move {
                let mut seen = 0u64;
                while seen < n {
                    match stream.next().await {
                        Some(Ok(hero_client::Watched::Event { event, .. }))
                            if event.event == "finished" =>
                        {
                            seen += 1;
                        }
                        Some(Ok(hero_client::Watched::Gap { missed, .. })) => {
                            anyhow::bail!(
                                "a subscriber fell behind the log's cap: {missed:?} missed"
                            )
                        }
                        Some(Err(e)) => return Err(e.into()),
                        None => anyhow::bail!("a subscription ended"),
                        Some(Ok(_)) => {}
                    }
                }
                anyhow::Ok(())
            });
        }
        let tally = Tally::new(n);
        let w = self.worker(&tally, self.args.concurrency).await?;
        let cpu = CpuMark::now(probe).await?;
        let t0 = Instant::now();
        self.submit(n).await?;
        while let Some(r) = subscribers.join_next().await {
            r??;
        }
        let secs = t0.elapsed().as_secs_f64();
        fig.set("events_per_s", n as f64 / secs);
        cpu.record(probe, n, fig).await?;
        w.stop().await
    }
}
