//! The audit's account of what Redis lost: queued entries whose job record is gone, the
//! entries workers already dropped for that reason (the fetch counts them, `<stream>|lost`),
//! and a loss of data a broker's health pass found (the epoch's `lost`,
//! `hero_protocol::health`). Each is an inconsistency until an operator acknowledges it with
//! `hero audit --fix` (`Admin::fix`): the dropped count by `<stream>|lost_acked` in the stats
//! hash, the data loss by removing the epoch's `lost`.

use super::{AuditReport, Class, Finding, PAGE};
use crate::inspect::Inspector;
use hero_protocol::error::Result;
use hero_protocol::reply;

/// The stats field that records how many of a stream's `lost` an operator acknowledged.
pub const LOST_ACKED: &str = "lost_acked";

impl Inspector {
    /// Of `queued` (entry id, job id) of `stream`, the entries whose job has no record, read
    /// twice (a job that ran and expired since its entry was read took its entry with it).
    pub(super) async fn recordless(
        &self,
        stream: &str,
        queued: &[(String, String)],
    ) -> Result<Vec<Finding>> {
        let mut gone = Vec::new();
        for page in queued.chunks(PAGE) {
            let mut pipe = redis::pipe();
            for (_, job) in page {
                pipe.cmd("EXISTS").arg(self.keys.job_unchecked(job));
            }
            for ((entry, job), r) in page.iter().zip(self.redis.pipeline(&pipe).await?) {
                if r.ok().and_then(|v| reply::int(&v).ok()) == Some(0) {
                    gone.push((entry.clone(), job.clone()));
                }
            }
        }
        let mut out = Vec::new();
        for page in gone.chunks(PAGE) {
            let mut pipe = redis::pipe();
            for (entry, job) in page {
                pipe.cmd("XRANGE").arg(stream).arg(entry).arg(entry);
                pipe.cmd("EXISTS").arg(self.keys.job_unchecked(job));
            }
            let mut rows = self.redis.pipeline(&pipe).await?.into_iter();
            for (entry, job) in page {
                let still_queued = rows
                    .next()
                    .and_then(|r| r.ok())
                    .is_some_and(|v| reply::array(&v).is_ok_and(|a| !a.is_empty()));
                let exists = rows
                    .next()
                    .and_then(|r| r.ok())
                    .and_then(|v| reply::int(&v).ok());
                if still_queued && exists == Some(0) {
                    let mut f = Finding::new(Class::Missing, stream);
                    f.entry = Some(entry.clone());
                    f.job = Some(job.clone());
                    f.detail = "queued, but its job record is gone (evicted by Redis, or deleted by hand): the job is lost".into();
                    out.push(f);
                }
            }
        }
        Ok(out)
    }

    /// The entries workers dropped for a missing record, per stream, and a data loss a broker
    /// found, not yet acknowledged.
    pub(super) async fn audit_losses(
        &self,
        streams: &[String],
        report: &mut AuditReport,
    ) -> Result<()> {
        let mut pipe = redis::pipe();
        for s in streams {
            pipe.cmd("HMGET")
                .arg(self.keys.stats())
                .arg(hero_protocol::stats::field(s, hero_protocol::stats::LOST))
                .arg(hero_protocol::stats::field(s, LOST_ACKED));
        }
        pipe.cmd("HGET").arg(self.keys.epoch()).arg("lost");
        let mut rows = self.redis.pipeline(&pipe).await?.into_iter();
        for s in streams {
            let counts: Vec<Option<u64>> = rows
                .next()
                .and_then(|r| r.ok())
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or_default();
            let lost = counts.first().copied().flatten().unwrap_or(0);
            let acked = counts.get(1).copied().flatten().unwrap_or(0);
            if lost > acked {
                let mut f = Finding::new(Class::Dropped, s);
                f.deliveries = Some(lost);
                f.detail = format!(
                    "{} queued jobs of this stream had lost their record when a worker came to them (evicted by Redis, or deleted by hand): they are lost. `hero audit --fix` acknowledges them",
                    lost - acked
                );
                report.findings.push(f);
            }
        }
        let lost: Option<String> = rows
            .next()
            .and_then(|r| r.ok())
            .and_then(|v| redis::from_redis_value(v).ok());
        for v in hero_protocol::health::lost_records(lost.as_deref()) {
            let mut f = Finding::new(Class::DataLoss, &self.keys.epoch());
            f.detail = format!(
                "at {}: {}. `hero audit --fix` acknowledges it",
                v["at"].as_str().unwrap_or("?"),
                v["what"].as_str().unwrap_or("Redis lost data")
            );
            report.findings.push(f);
        }
        Ok(())
    }
}
