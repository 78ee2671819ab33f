//! The audit's cross-checks from the other side: job records `dispatched` in no stream or
//! `started` with no pending entry (each read again before it is reported: the streams were read
//! first), delayed-set members that are not waiting, reply lists without a TTL, and the dead
//! letters for the record.

use std::collections::HashSet;

use super::{AuditReport, Class, Finding, PAGE};
use crate::inspect::Inspector;
use hero_protocol::error::Result;
use hero_protocol::job::{Placement, PLACEMENT_FIELDS};
use hero_protocol::keys::CONSUMER_GROUP;
use hero_protocol::reply;

impl Inspector {
    /// Every job record: `dispatched` ones must be in a stream, `started` ones must hold a
    /// pending entry.
    pub(super) async fn audit_jobs(
        &self,
        queued: &HashSet<String>,
        pending: &HashSet<(String, String)>,
        report: &mut AuditReport,
    ) -> Result<()> {
        let prefix = self.keys.job_prefix();
        let mut cursor = "0".to_string();
        let mut fields = vec!["status", "lease", "bridge"];
        fields.extend(PLACEMENT_FIELDS);
        // a waiting job's prerequisites, read only to find one no call will release
        let deps_at = fields.len();
        fields.extend(["deps_left", "prerequisites", "dependencies"]);
        loop {
            let (next, keys) = self
                .scan_page(&cursor, &self.keys.job_pattern(), PAGE, Some("hash"))
                .await?;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("HMGET").arg(k).arg(&fields);
            }
            let rows = if keys.is_empty() {
                Vec::new()
            } else {
                self.redis.pipeline(&pipe).await?
            };
            let mut candidates = Vec::new();
            let mut waiting_on = Vec::new();
            for (key, row) in keys.iter().zip(rows) {
                let Some(id) = key.strip_prefix(&prefix) else {
                    continue;
                };
                let vals: Vec<Option<String>> = row
                    .ok()
                    .and_then(|v| redis::from_redis_value(v).ok())
                    .unwrap_or_default();
                let get = |i: usize| vals.get(i).cloned().flatten();
                let bridged = get(2).is_some_and(|b| !b.is_empty());
                let stream = Placement::read(&vals[3.min(vals.len())..])
                    .map(|p| self.keys.work(&p.target, p.priority));
                match (get(0).as_deref(), get(1), stream) {
                    (Some("dispatched"), _, Some(stream)) if !queued.contains(id) && !bridged => {
                        let mut f = Finding::new(Class::Lost, &stream);
                        f.job = Some(id.to_string());
                        f.detail = "dispatched, but no stream entry names it".into();
                        candidates.push(f);
                    }
                    (Some("started"), Some(lease), Some(stream))
                        if !lease.is_empty()
                            && !pending.contains(&(stream.clone(), lease.clone()))
                            && !bridged =>
                    {
                        let mut f = Finding::new(Class::Unleased, &stream);
                        f.job = Some(id.to_string());
                        f.entry = Some(lease);
                        f.detail =
                            "started, but its lease is not pending: nothing would recover it"
                                .into();
                        candidates.push(f);
                    }
                    (Some("waiting"), _, stream)
                        if get(deps_at).is_some_and(|n| n != "0" && !n.is_empty()) =>
                    {
                        let mut prerequisites: Vec<String> = Vec::new();
                        for raw in [get(deps_at + 1), get(deps_at + 2)].into_iter().flatten() {
                            for p in serde_json::from_str::<Vec<String>>(&raw).unwrap_or_default() {
                                if !prerequisites.contains(&p) {
                                    prerequisites.push(p);
                                }
                            }
                        }
                        waiting_on.push((id.to_string(), stream, prerequisites));
                    }
                    _ => {}
                }
            }
            report
                .findings
                .extend(self.stuck_dependents(waiting_on).await?);
            // The streams were read before the records: a job queued or fetched since looks lost
            // or unleased. Read again what could have changed, and report only what still is.
            for f in candidates {
                if self.still_so(&f).await? {
                    report.findings.push(f);
                }
            }
            if next == "0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// The jobs of `waiting_on` (id, stream, prerequisites) none of whose prerequisites is still
    /// waiting, queued or running: nothing will release them. One pipeline of status reads.
    async fn stuck_dependents(
        &self,
        waiting_on: Vec<(String, Option<String>, Vec<String>)>,
    ) -> Result<Vec<Finding>> {
        if waiting_on.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (id, _, prerequisites) in &waiting_on {
            for p in prerequisites {
                pipe.cmd("HGET")
                    .arg(self.keys.job_unchecked(p))
                    .arg("status");
            }
            // read after its prerequisites: one that ended since released it in the same call,
            // so a release that happened shows here
            pipe.cmd("HGET")
                .arg(self.keys.job_unchecked(id))
                .arg("status");
        }
        let mut statuses = self.redis.pipeline(&pipe).await?.into_iter();
        let mut out = Vec::new();
        for (id, stream, prerequisites) in waiting_on {
            let mut open = false;
            let mut ended = Vec::new();
            for p in &prerequisites {
                let status = statuses
                    .next()
                    .and_then(|r| r.ok())
                    .and_then(|v| reply::text(&v).ok());
                match status.as_deref() {
                    Some("waiting" | "dispatched" | "started") => open = true,
                    other => ended.push(format!("{p} {}", other.unwrap_or("gone"))),
                }
            }
            let still_waiting = statuses
                .next()
                .and_then(|r| r.ok())
                .and_then(|v| reply::text(&v).ok())
                .is_some_and(|s| s == "waiting");
            if !open && still_waiting {
                let mut f = Finding::new(Class::StuckDependent, stream.as_deref().unwrap_or(""));
                f.job = Some(id.clone());
                f.detail = format!(
                    "waiting on prerequisites that all ended ({}): nothing will release it; `hero requeue {id}` queues it, `hero stop {id}` ends it",
                    ended.join(", ")
                );
                out.push(f);
            }
        }
        Ok(out)
    }

    /// Whether a `Lost` or `Unleased` finding still holds now.
    async fn still_so(&self, f: &Finding) -> Result<bool> {
        let job = f.job.clone().unwrap_or_default();
        match f.class {
            Class::Lost => {
                let status: Option<String> = self
                    .redis
                    .query(
                        redis::cmd("HGET")
                            .arg(self.keys.job_unchecked(&job))
                            .arg("status"),
                    )
                    .await?;
                if status.as_deref() != Some("dispatched") {
                    return Ok(false);
                }
                // a look at the whole stream again: an entry added since the first read
                Ok(!self.stream_jobs(&f.key).await?.contains(&job))
            }
            Class::Unleased => {
                let f2: Vec<Option<String>> = self
                    .redis
                    .query(
                        redis::cmd("HMGET")
                            .arg(self.keys.job_unchecked(&job))
                            .arg(&["status", "lease"]),
                    )
                    .await?;
                let lease = f2.get(1).cloned().flatten().unwrap_or_default();
                if f2.first().cloned().flatten().as_deref() != Some("started") || lease.is_empty() {
                    return Ok(false);
                }
                let Some(p) = self
                    .group_read(
                        redis::cmd("XPENDING")
                            .arg(&f.key)
                            .arg(CONSUMER_GROUP)
                            .arg(&lease)
                            .arg(&lease)
                            .arg(1),
                    )
                    .await?
                else {
                    return Ok(true);
                };
                Ok(reply::array(&p)?.is_empty())
            }
            _ => Ok(true),
        }
    }

    pub(super) async fn audit_rest(&self, report: &mut AuditReport) -> Result<()> {
        // delayed-set members whose job is not waiting
        let mut start = 0usize;
        loop {
            let ids: Vec<String> = self
                .redis
                .query(
                    redis::cmd("ZRANGE")
                        .arg(self.keys.delayed())
                        .arg(start)
                        .arg(start + PAGE - 1),
                )
                .await?;
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HGET")
                    .arg(self.keys.job_unchecked(id))
                    .arg("status");
            }
            let rows = if ids.is_empty() {
                Vec::new()
            } else {
                self.redis.pipeline(&pipe).await?
            };
            for (id, r) in ids.iter().zip(rows) {
                let status = r.ok().and_then(|v| reply::text(&v).ok());
                if status.as_deref() != Some("waiting") {
                    let mut f = Finding::new(Class::StaleDelay, &self.keys.delayed());
                    f.job = Some(id.clone());
                    f.detail = format!("the job is {}", status.unwrap_or_else(|| "gone".into()));
                    report.findings.push(f);
                }
            }
            if ids.len() < PAGE {
                break;
            }
            start += PAGE;
        }
        // reply lists that will never expire
        let mut cursor = "0".to_string();
        loop {
            let (next, keys) = self
                .scan_page(
                    &cursor,
                    &format!("{}*", self.keys.reply_prefix()),
                    PAGE,
                    Some("list"),
                )
                .await?;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("PTTL").arg(k);
            }
            let rows = if keys.is_empty() {
                Vec::new()
            } else {
                self.redis.pipeline(&pipe).await?
            };
            for (k, r) in keys.iter().zip(rows) {
                if r.ok().and_then(|v| reply::int(&v).ok()) == Some(-1) {
                    let mut f = Finding::new(Class::ReplyWithoutTtl, k);
                    f.detail = "a reply list without a TTL".into();
                    report.findings.push(f);
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        // dead letters, for the record
        let mut cursor: Option<String> = None;
        loop {
            let page = self.dead_letters(cursor.as_deref(), PAGE).await?;
            for d in &page {
                let mut f = Finding::new(Class::Dead, &d.queue);
                f.entry = Some(d.entry.clone());
                f.job = Some(d.job_id.clone());
                f.detail.clone_from(&d.reason);
                report.findings.push(f);
            }
            if page.len() < PAGE {
                return Ok(());
            }
            cursor = page.last().map(|d| d.entry.clone());
        }
    }
}
