//! The audit's first half: the entries of one work stream (which jobs are queued there) and its
//! pending entries, each joined with its job record and its owner's liveness and classified;
//! and the consumers that hold nothing and belong to no live worker.

use std::collections::{BTreeMap, HashSet};

use redis::Value;

use super::{entry_job, AuditReport, Class, Finding, PAGE};
use crate::error::Result;
use crate::inspect::Inspector;
use crate::keys::CONSUMER_GROUP;
use crate::reply;

impl Inspector {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn audit_stream(
        &self,
        stream: &str,
        live: &HashSet<String>,
        deadlines: &BTreeMap<String, u64>,
        lease_ms: u64,
        now: u64,
        queued: &mut HashSet<String>,
        pending: &mut HashSet<(String, String)>,
        report: &mut AuditReport,
    ) -> Result<()> {
        // the entries: which jobs are queued here
        queued.extend(self.stream_jobs(stream).await);
        // the pending entries, a page at a time
        let mut from = "-".to_string();
        loop {
            let v: Value = self
                .redis
                .query(
                    redis::cmd("XPENDING")
                        .arg(stream)
                        .arg(CONSUMER_GROUP)
                        .arg(&from)
                        .arg("+")
                        .arg(PAGE),
                )
                .await
                .unwrap_or(Value::Nil);
            let rows = reply::array(&v).unwrap_or(&[]).to_vec();
            if rows.is_empty() {
                break;
            }
            let mut pipe = redis::pipe();
            let mut parsed = Vec::with_capacity(rows.len());
            for r in &rows {
                let [id, consumer, idle, deliveries] = reply::array(r).unwrap_or(&[]) else {
                    continue;
                };
                let id = reply::text(id)?;
                pipe.cmd("XRANGE").arg(stream).arg(&id).arg(&id);
                parsed.push((
                    id,
                    reply::text(consumer)?,
                    reply::int(idle)?.max(0) as u64,
                    reply::int(deliveries)?.max(0) as u64,
                ));
            }
            let entries = self.redis.pipeline(&pipe).await?;
            let mut read = redis::pipe();
            let mut jobs = Vec::with_capacity(parsed.len());
            for r in entries {
                let job = r
                    .ok()
                    .and_then(|v| reply::array(&v).ok()?.first().and_then(entry_job));
                if let Some(j) = &job {
                    read.cmd("HMGET")
                        .arg(self.keys.job_unchecked(j))
                        .arg(&["status", "lease"]);
                }
                jobs.push(job);
            }
            let mut records = self.redis.pipeline(&read).await?.into_iter();
            for ((id, consumer, idle, deliveries), job) in parsed.iter().zip(jobs) {
                pending.insert((stream.to_string(), id.clone()));
                let mut f = Finding::new(Class::Running, stream);
                f.entry = Some(id.clone());
                f.consumer = Some(consumer.clone());
                f.idle_ms = Some(*idle);
                f.deliveries = Some(*deliveries);
                f.job.clone_from(&job);
                f.class = match job {
                    None => {
                        f.detail = "the entry names no job".into();
                        Class::Foreign
                    }
                    Some(_) => match records.next() {
                        Some(Err(e)) => {
                            f.detail = format!("the job key is not a hash: {e}");
                            Class::Foreign
                        }
                        Some(Ok(v)) => {
                            let vals: Vec<Option<String>> =
                                redis::from_redis_value(v).unwrap_or_default();
                            let get = |i: usize| vals.get(i).cloned().flatten();
                            match (get(0).as_deref(), get(1)) {
                                (None, _) => {
                                    f.detail = "no job record".into();
                                    Class::Missing
                                }
                                (Some("started"), Some(lease)) if lease == *id => {
                                    if crate::keys::is_bridge_consumer(consumer) {
                                        Class::Bridge
                                    } else if live.contains(consumer) {
                                        Class::Running
                                    } else {
                                        f.detail = match deadlines.get(consumer) {
                                            Some(d) if *d <= now => {
                                                "its worker's liveness lapsed: the next presence pass recovers it".into()
                                            }
                                            _ => format!(
                                                "idle recovery takes it in {} ms",
                                                lease_ms.saturating_sub(*idle)
                                            ),
                                        };
                                        Class::Orphaned
                                    }
                                }
                                (Some(status), _)
                                    if crate::keys::is_bridge_consumer(consumer)
                                        && status != "finished"
                                        && status != "error" =>
                                {
                                    Class::Bridge
                                }
                                (Some(status), _) => {
                                    f.detail = format!(
                                        "the job is {status}, and this is not its delivery"
                                    );
                                    Class::Stale
                                }
                            }
                        }
                        None => Class::Missing,
                    },
                };
                report.findings.push(f);
            }
            if rows.len() < PAGE {
                break;
            }
            from = format!(
                "({}",
                parsed.last().map(|p| p.0.clone()).unwrap_or_default()
            );
        }
        // consumers that hold nothing and belong to no live worker, and that no loop will
        // delete: one still in the liveness set goes with the presence pass after its deadline
        // (a worker killed holding nothing, a moment ago), which is in-flight state, not an
        // inconsistency (the chaos soak's audit, run a second after its last kill, saw these)
        let consumers: Value = self
            .redis
            .query(
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(stream)
                    .arg(CONSUMER_GROUP),
            )
            .await
            .unwrap_or(Value::Nil);
        for c in reply::array(&consumers).unwrap_or(&[]) {
            let fields = reply::pairs(c.clone()).unwrap_or_default();
            let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let (Some(name), Some(held)) = (get("name"), get("pending")) else {
                continue;
            };
            if held == "0"
                && !live.contains(&name)
                && !deadlines.contains_key(&name)
                && !crate::keys::is_bridge_consumer(&name)
            {
                let mut f = Finding::new(Class::IdleConsumer, stream);
                f.consumer = Some(name);
                f.detail = "holds nothing and belongs to no live worker".into();
                report.findings.push(f);
            }
        }
        Ok(())
    }
}
