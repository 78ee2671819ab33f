//! The operator's repairs, each one server function call so that a job is never in two places or
//! in none: dead letters retried or purged (`hero_dead`), a job moved to a queue
//! (`hero_requeue`); the audit's fixes join them.
//! Reads that choose what to repair are `crate::inspect`'s.

use redis::Value;

use crate::inspect::{AuditReport, Class, DeadLetter, Finding};
use crate::Admin;
use hero_protocol::error::{Error, Result};
use hero_protocol::function::{self, DeadAction, Repair};
use hero_protocol::job::{Placement, PLACEMENT_FIELDS};
use hero_protocol::name::JobId;
use hero_protocol::reply;

/// Dead letters per call: a call runs alone in Redis, so it stays short.
const PER_CALL: usize = 100;

/// What became of one dead letter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadOutcome {
    pub job_id: String,
    /// `requeued`, `purged`, `gone` (the record vanished during the call: the letter was
    /// dropped), `not_dead` (the job is no longer `error`: left alone), `missing` (no such
    /// letter), `no_record` (nothing to queue again: purge it), or `invalid` (its id, or its
    /// record's queue, can name no job of ours: left alone).
    pub answer: String,
}

/// Where a job was when [`Admin::requeue`] moved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requeued {
    /// The work stream it is queued in now.
    pub stream: String,
}

impl Admin {
    /// Marks a job tracked (`on`) or not: `hero jobs --tracked` and the API list the tracked
    /// jobs' state at a glance. A job that does not exist is an error; ids whose record is gone
    /// are dropped by [`Admin::drop_untracked`].
    pub async fn track(&self, id: &JobId, on: bool) -> Result<()> {
        if !self.others.is_empty() {
            return Box::pin(self.holder(id).await?.track(id, on)).await;
        }
        if on {
            let exists: bool = self
                .redis()
                .query(redis::cmd("EXISTS").arg(self.keys().job(id)))
                .await?;
            if !exists {
                return Err(Error::JobNotFound(id.to_string()));
            }
            let _: i64 = self
                .redis()
                .query(
                    redis::cmd("SADD")
                        .arg(self.keys().tracked())
                        .arg(id.as_str()),
                )
                .await?;
        } else {
            let _: i64 = self
                .redis()
                .query(
                    redis::cmd("SREM")
                        .arg(self.keys().tracked())
                        .arg(id.as_str()),
                )
                .await?;
        }
        Ok(())
    }

    /// Drops from the tracked set the ids whose record is gone (retention deleted it): the
    /// broker's retention pass calls it. O(tracked jobs), a page at a time.
    pub async fn prune_tracked(&self) -> Result<u64> {
        let key = self.keys().tracked();
        let mut cursor = "0".to_string();
        let mut dropped = 0;
        loop {
            let (next, ids): (String, Vec<String>) = self
                .redis()
                .query(
                    redis::cmd("SSCAN")
                        .arg(&key)
                        .arg(&cursor)
                        .arg("COUNT")
                        .arg(500),
                )
                .await?;
            if !ids.is_empty() {
                let mut pipe = redis::pipe();
                for id in &ids {
                    pipe.cmd("EXISTS").arg(self.keys().job_unchecked(id));
                }
                let mut gone = Vec::new();
                for (id, r) in ids.iter().zip(self.redis().pipeline(&pipe).await?) {
                    if matches!(r?, Value::Int(0)) {
                        gone.push(id.as_str());
                    }
                }
                if !gone.is_empty() {
                    dropped += gone.len() as u64;
                    let _: i64 = self
                        .redis()
                        .query(redis::cmd("SREM").arg(&key).arg(gone))
                        .await?;
                }
            }
            if next == "0" {
                return Ok(dropped);
            }
            cursor = next;
        }
    }

    /// Runs the audit and, with `fix`, repairs each inconsistency (atomically per job, through
    /// [`Admin::fix`]) and audits again, a few rounds at most: a repair can leave another
    /// behind (a consumer whose stale entries were removed holds nothing now). Returns the
    /// last report and what each repair did.
    pub async fn audit(
        &self,
        fix: bool,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<(AuditReport, Vec<(Finding, bool)>)> {
        if !self.others.is_empty() {
            // every shard audited and repaired on its own; a finding names its shard's keys
            let mut all = AuditReport::default();
            let mut fixed = Vec::new();
            for (_, shard) in self.shards() {
                let (report, f) = Box::pin(shard.audit(fix, progress)).await?;
                all.findings.extend(report.findings);
                fixed.extend(f);
            }
            return Ok((all, fixed));
        }
        let inspector = self.inspector();
        let mut report = inspector.audit(progress).await?;
        let mut fixed = Vec::new();
        for _ in 0..3 {
            if !fix || report.is_consistent() {
                break;
            }
            for f in report.inconsistencies() {
                if let Some(done) = self.fix(f).await? {
                    fixed.push((f.clone(), done));
                }
            }
            report = inspector.audit(progress).await?;
        }
        Ok((report, fixed))
    }

    /// Repairs one inconsistency the audit found, re-checked inside Redis: `Ok(Some(true))`
    /// fixed, `Ok(Some(false))` it no longer held, `Ok(None)` nothing to repair (running,
    /// orphaned: recovery's, bridge, dead letters: `hero dead`'s).
    pub async fn fix(&self, f: &Finding) -> Result<Option<bool>> {
        let entry = f.entry.as_deref().unwrap_or_default();
        let job = f.job.as_deref().unwrap_or_default();
        let repair = match f.class {
            Class::Stale | Class::Foreign | Class::Missing => Repair::StaleEntry {
                stream: &f.key,
                entry,
                job,
            },
            Class::Lost => Repair::LostJob {
                stream: &f.key,
                job,
            },
            Class::Unleased => Repair::UnleasedJob {
                stream: &f.key,
                job,
            },
            Class::StaleDelay => Repair::StaleDelay { job },
            Class::ReplyWithoutTtl => Repair::ReplyTtl { key: &f.key },
            Class::IdleConsumer => Repair::IdleConsumer {
                stream: &f.key,
                consumer: f.consumer.as_deref().unwrap_or_default(),
            },
            // a stuck dependent is the operator's call: queue it (`hero requeue`) or end it
            // (`hero stop`), as its finding says
            Class::Running
            | Class::Orphaned
            | Class::Bridge
            | Class::Dead
            | Class::StuckDependent => return Ok(None),
            // what Redis lost cannot be brought back: fixing it is acknowledging it, so the
            // next audit reports only what is lost after
            Class::Dropped => {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(self.keys().stats())
                    .arg(hero_protocol::stats::field(
                        &f.key,
                        crate::inspect::LOST_ACKED,
                    ))
                    .arg(f.deliveries.unwrap_or(0));
                let _: redis::Value = self.redis().query(&cmd).await?;
                return Ok(Some(true));
            }
            // one acknowledgement takes every loss recorded (the findings share the field)
            Class::DataLoss => {
                let mut cmd = redis::cmd("HDEL");
                cmd.arg(self.keys().epoch()).arg("lost");
                let _: redis::Value = self.redis().query(&cmd).await?;
                return Ok(Some(true));
            }
        };
        let answer: String = self
            .redis()
            .query(&function::fix(self.keys(), repair))
            .await?;
        Ok(Some(answer == "fixed"))
    }

    /// Moves a job to the queue `to` (its own queue when `None`), wherever it is: a queued one
    /// leaves its queue, a running one has its lease revoked (its worker is told, its late
    /// completion is rejected), a delayed one leaves the delayed set, an ended one starts over
    /// with a fresh attempt budget. Never in two queues, never in none.
    /// [`Admin::requeue`] to `target` and/or `priority`: what is not given stays as the record
    /// has it (both `None`: the queue it is in).
    pub async fn requeue_to(
        &self,
        id: &JobId,
        target: Option<hero_protocol::Target>,
        priority: Option<hero_protocol::Priority>,
    ) -> Result<Requeued> {
        if !self.others.is_empty() {
            return Box::pin(self.holder(id).await?.requeue_to(id, target, priority)).await;
        }
        if target.is_none() && priority.is_none() {
            return self.requeue(id, None).await;
        }
        let values: Vec<Option<String>> = self
            .redis()
            .query(
                redis::cmd("HMGET")
                    .arg(self.keys().job(id))
                    .arg(&hero_protocol::job::PLACEMENT_FIELDS),
            )
            .await?;
        let current = Placement::read(&values);
        let target = match (target, &current) {
            (Some(t), _) => t,
            (None, Some(c)) => c.target.clone(),
            (None, None) => {
                return Err(Error::InvalidInput(format!(
                    "job {id} names no valid script type: say which queue to move it to (a type)"
                )))
            }
        };
        let priority = priority.or(current.map(|c| c.priority)).unwrap_or_default();
        self.requeue(id, Some(Placement { target, priority })).await
    }

    pub async fn requeue(&self, id: &JobId, to: Option<Placement>) -> Result<Requeued> {
        if !self.others.is_empty() {
            return Box::pin(self.holder(id).await?.requeue(id, to)).await;
        }
        let key = self.keys().job(id);
        let mut fields = PLACEMENT_FIELDS.to_vec();
        fields.push("worker_id");
        let mut cursor = "0-0".to_string();
        for _ in 0..10_000 {
            let f: Vec<Option<String>> = self
                .redis()
                .query(redis::cmd("HMGET").arg(&key).arg(&fields))
                .await?;
            if f.iter().all(Option::is_none) {
                return Err(Error::JobNotFound(id.to_string()));
            }
            let current = Placement::read(&f).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "job {id} names no valid script type, so it is in no queue of ours; give the queue to move it to"
                ))
            })?;
            let to = to.clone().unwrap_or_else(|| current.clone());
            let worker = f
                .get(PLACEMENT_FIELDS.len())
                .cloned()
                .flatten()
                .unwrap_or_default();
            let ctl = self
                .keys()
                .ctl_of_worker(&current.target.script_type, &worker);
            let seen = ctl.as_deref().map(|c| (c, worker.as_str()));
            let from = self.keys().work(&current.target, current.priority);
            let cmd = function::requeue(
                self.keys(),
                id,
                &from,
                &to,
                seen,
                &cursor,
                self.redis().caps().xackdel_flag(),
            );
            let v: Value = self.redis().query(&cmd).await?;
            let answer = reply::array(&v)?;
            let (word, next) = match answer {
                [w, c] => (reply::text(w)?, reply::text(c)?),
                _ => {
                    return Err(hero_protocol::reply::unexpected(
                        "hero_requeue answered other than {answer, cursor}",
                    ))
                }
            };
            match word.as_str() {
                "requeued" => {
                    return Ok(Requeued {
                        stream: self.keys().work(&to.target, to.priority),
                    })
                }
                "searching" => cursor = next,
                "changed" => cursor = "0-0".to_string(),
                "missing" => return Err(Error::JobNotFound(id.to_string())),
                other => {
                    return Err(hero_protocol::reply::unexpected(format!(
                        "hero_requeue answered {other:?}"
                    )))
                }
            }
        }
        Err(Error::InvalidInput(format!(
            "job {id} kept changing hands while it was being requeued; try again"
        )))
    }

    /// Queues the jobs of these dead letters again, each in the queue its record names, with a
    /// fresh attempt budget; each leaves the dead-letter stream in the same call.
    pub async fn retry_dead(&self, letters: &[DeadLetter]) -> Result<Vec<DeadOutcome>> {
        self.dead_letters_call(DeadAction::Retry, letters).await
    }

    /// Deletes these dead letters and, while they still say `error`, their jobs.
    pub async fn purge_dead(&self, letters: &[DeadLetter]) -> Result<Vec<DeadOutcome>> {
        self.dead_letters_call(DeadAction::Purge, letters).await
    }

    async fn dead_letters_call(
        &self,
        action: DeadAction,
        letters: &[DeadLetter],
    ) -> Result<Vec<DeadOutcome>> {
        if !self.others.is_empty() {
            // each letter on the shard whose stream holds it, answers in the letters' order
            let mut out = Vec::with_capacity(letters.len());
            for (n, shard) in self.shards() {
                let mine: Vec<DeadLetter> =
                    letters.iter().filter(|d| d.shard == n).cloned().collect();
                if !mine.is_empty() {
                    out.extend(Box::pin(shard.dead_letters_call(action, &mine)).await?);
                }
            }
            let order = |id: &str| letters.iter().position(|d| d.job_id == id);
            out.sort_by_key(|o| order(&o.job_id));
            return Ok(out);
        }
        let mut out = Vec::with_capacity(letters.len());
        for chunk in letters.chunks(PER_CALL) {
            // where each job goes back to: the queue its record names
            let mut pipe = redis::pipe();
            let mut valid = Vec::with_capacity(chunk.len());
            for d in chunk {
                match JobId::new(&d.job_id) {
                    Ok(id) => {
                        pipe.cmd("HMGET")
                            .arg(self.keys().job(&id))
                            .arg(&PLACEMENT_FIELDS);
                        valid.push((d, id));
                    }
                    Err(_) => out.push(DeadOutcome {
                        job_id: d.job_id.clone(),
                        answer: "invalid".into(),
                    }),
                }
            }
            if valid.is_empty() {
                continue;
            }
            let placements = self.redis().pipeline(&pipe).await?;
            let mut letters = Vec::with_capacity(valid.len());
            for ((d, id), r) in valid.into_iter().zip(placements) {
                let values: Vec<Option<String>> = r
                    .ok()
                    .and_then(|v| redis::from_redis_value(v).ok())
                    .unwrap_or_default();
                match (Placement::read(&values), action) {
                    (Some(p), _) => {
                        let stream = self.keys().work(&p.target, p.priority);
                        letters.push((d, id, stream));
                    }
                    // a purge needs no queue; any key of the namespace stands in for it
                    (None, DeadAction::Purge) => {
                        let stand_in = self.keys().job(&id);
                        letters.push((d, id, stand_in));
                    }
                    // no record, or one that names no queue: nowhere to queue it
                    (None, DeadAction::Retry) => out.push(DeadOutcome {
                        job_id: d.job_id.clone(),
                        answer: if values.iter().all(Option::is_none) {
                            "no_record".into()
                        } else {
                            "invalid".into()
                        },
                    }),
                }
            }
            if letters.is_empty() {
                continue;
            }
            let args: Vec<(&str, &JobId, &str)> = letters
                .iter()
                .map(|(d, id, s)| (d.entry.as_str(), id, s.as_str()))
                .collect();
            let v: Value = self
                .redis()
                .query(&function::dead(self.keys(), action, &args))
                .await?;
            let answers = reply::array(&v)?;
            if answers.len() != letters.len() {
                return Err(hero_protocol::reply::unexpected(format!(
                    "hero_dead answered {} values for {} dead letters",
                    answers.len(),
                    letters.len()
                )));
            }
            for ((d, _, _), a) in letters.iter().zip(answers) {
                out.push(DeadOutcome {
                    job_id: d.job_id.clone(),
                    answer: reply::text(a)?,
                });
            }
        }
        Ok(out)
    }
}
