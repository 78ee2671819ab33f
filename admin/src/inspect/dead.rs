//! Reading the dead-letter stream (`hero:meta:dead`): its entries a page at a time, and the ones
//! that name given jobs, found through the index the functions keep in each dead-lettered
//! job's record (`dead`, the entry id: protocol 30) rather than by scanning the stream.

use redis::Value;

use super::Inspector;
use hero_protocol::error::Result;
use hero_protocol::reply;

/// One dead letter: a job recovery or the bridge gave up on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The entry id (its time: when the job was dead-lettered).
    pub entry: String,
    pub job_id: String,
    pub reason: String,
    /// The work stream (or legacy list) it came from.
    pub queue: String,
    /// The shard whose dead-letter stream holds it (0 in an unsharded namespace).
    pub shard: u16,
}

impl DeadLetter {
    fn decode(entry: &Value) -> Option<DeadLetter> {
        let [id, fields] = reply::array(entry).ok()? else {
            return None;
        };
        let mut d = DeadLetter {
            entry: reply::text(id).ok()?,
            job_id: String::new(),
            reason: String::new(),
            queue: String::new(),
            shard: 0,
        };
        for kv in reply::array(fields).ok()?.chunks(2) {
            let [k, v] = kv else { break };
            let v = reply::text(v).ok()?;
            match reply::text(k).ok()?.as_str() {
                "j" => d.job_id = v,
                "reason" => d.reason = v,
                "queue" => d.queue = v,
                _ => {}
            }
        }
        Some(d)
    }

    pub fn at_ms(&self) -> u64 {
        self.entry
            .split('-')
            .next()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "entry": self.entry,
            "job": self.job_id,
            "reason": self.reason,
            "queue": self.queue,
            "at_ms": self.at_ms(),
        });
        if self.shard > 0 {
            v["shard"] = self.shard.into();
        }
        v
    }
}

impl Inspector {
    /// Dead letters oldest first, `limit` from after `cursor` (an entry id); the page's last
    /// entry is the next cursor.
    /// In a sharded namespace, the shards' streams merged by entry id (time).
    pub async fn dead_letters(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>> {
        if self.others.is_empty() {
            return self.dead_letters_here(cursor, limit).await;
        }
        let mut all = Vec::new();
        for (n, shard) in self.shards() {
            for mut d in shard.dead_letters_here(cursor, limit).await? {
                d.shard = n;
                all.push(d);
            }
        }
        all.sort_by_key(|d| entry_order(&d.entry));
        all.truncate(limit.clamp(1, 10_000));
        Ok(all)
    }

    async fn dead_letters_here(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>> {
        if let Some(c) = cursor.filter(|c| !super::is_entry_id(c)) {
            return Err(super::bad_cursor(c));
        }
        let start = cursor.map_or_else(|| "-".to_string(), |c| format!("({c}"));
        let v: Value = self
            .redis
            .query(
                redis::cmd("XRANGE")
                    .arg(self.keys.dead_letter())
                    .arg(start)
                    .arg("+")
                    .arg("COUNT")
                    .arg(limit.clamp(1, 10_000)),
            )
            .await?;
        Ok(reply::array(&v)?
            .iter()
            .filter_map(DeadLetter::decode)
            .collect())
    }

    /// Every dead letter, oldest first, a page of 1000 per round trip.
    pub async fn all_dead_letters(&self) -> Result<Vec<DeadLetter>> {
        let mut letters = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.dead_letters(cursor.as_deref(), 1000).await?;
            let done = page.len() < 1000;
            cursor = page.last().map(|d| d.entry.clone());
            letters.extend(page);
            if done {
                return Ok(letters);
            }
        }
    }

    /// The dead letters of `ids`, in order; `Err(id)` names the first without one. Costs
    /// O(ids), never a scan per id: one pipeline reads every record's `dead` (the entry id of
    /// its letter), one more reads those entries, and at most one bounded read of the newest
    /// letters serves every record that names none (see [`Inspector::dead_letter`]); per shard
    /// in a sharded namespace.
    pub async fn dead_letters_of(
        &self,
        ids: &[String],
    ) -> Result<std::result::Result<Vec<DeadLetter>, String>> {
        let found = self.dead_letters_found(ids).await?;
        let mut letters = Vec::with_capacity(ids.len());
        for (id, d) in ids.iter().zip(found) {
            match d {
                Some(d) => letters.push(d),
                None => return Ok(Err(id.clone())),
            }
        }
        Ok(Ok(letters))
    }

    /// The latest dead letter naming `job_id`, if any (of every shard's stream in a sharded
    /// namespace). Found through the index the functions keep (protocol 30): the record's
    /// `dead` names its letter's entry, so this costs an HMGET and an XRANGE of that one entry,
    /// however many letters the stream holds; a letter trimmed from the stream answers `None`.
    /// A record that names none (no record, one ended `error` or one a worker runs: its letter,
    /// if any, was written by a process older than protocol 30, or by the bridge refusing a
    /// legacy push) is looked for among the newest [`FALLBACK_LETTERS`] letters only, one
    /// bounded XREVRANGE: an older letter is still listed by [`Inspector::dead_letters`] (`hero
    /// dead list`), never found here by scanning the whole stream.
    pub async fn dead_letter(&self, job_id: &str) -> Result<Option<DeadLetter>> {
        let found = self.dead_letters_found(&[job_id.to_string()]).await?;
        Ok(found.into_iter().next().flatten())
    }

    /// Per id, its latest letter over every shard.
    async fn dead_letters_found(&self, ids: &[String]) -> Result<Vec<Option<DeadLetter>>> {
        if self.others.is_empty() {
            return self.letters_of_here(ids).await;
        }
        let mut newest: Vec<Option<DeadLetter>> = vec![None; ids.len()];
        for (n, shard) in self.shards() {
            for (best, found) in newest.iter_mut().zip(shard.letters_of_here(ids).await?) {
                let Some(mut d) = found else { continue };
                d.shard = n;
                if best
                    .as_ref()
                    .is_none_or(|b| entry_order(&d.entry) > entry_order(&b.entry))
                {
                    *best = Some(d);
                }
            }
        }
        Ok(newest)
    }

    /// Per id, its letter in this shard's stream: by the record's index, else (for a record that
    /// may have a letter written without one) among the newest letters.
    async fn letters_of_here(&self, ids: &[String]) -> Result<Vec<Option<DeadLetter>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET")
                .arg(self.keys.job_unchecked(id))
                .arg(DEAD_FIELD)
                .arg("status");
        }
        // per id: the entry its record names, or whether a letter without one may exist
        let mut named: Vec<Option<String>> = Vec::with_capacity(ids.len());
        let mut unindexed = vec![false; ids.len()];
        for (i, r) in self.redis.pipeline(&pipe).await?.into_iter().enumerate() {
            // a job key holding another type is foreign data: as good as no record
            let fields = r
                .ok()
                .and_then(|v| {
                    reply::array(&v)
                        .ok()
                        .map(|a| a.iter().map(|f| reply::text(f).ok()).collect::<Vec<_>>())
                })
                .unwrap_or_default();
            let entry = fields.first().cloned().flatten();
            let status = fields.get(1).cloned().flatten();
            match entry.filter(|e| super::is_entry_id(e)) {
                Some(e) => named.push(Some(e)),
                None => {
                    named.push(None);
                    unindexed[i] = may_have_unindexed_letter(status.as_deref());
                }
            }
        }
        let mut found: Vec<Option<DeadLetter>> = vec![None; ids.len()];
        if named.iter().any(Option::is_some) {
            let mut pipe = redis::pipe();
            for e in named.iter().flatten() {
                pipe.cmd("XRANGE")
                    .arg(self.keys.dead_letter())
                    .arg(e)
                    .arg(e);
            }
            let mut replies = self.redis.pipeline(&pipe).await?.into_iter();
            for (i, e) in named.iter().enumerate() {
                if e.is_none() {
                    continue;
                }
                let v = replies.next().unwrap_or(Ok(Value::Nil))?;
                // trimmed (or purged by hand): no letter; one naming another job is not its own
                found[i] = reply::array(&v)?
                    .first()
                    .and_then(DeadLetter::decode)
                    .filter(|d| d.job_id == ids[i]);
            }
        }
        if unindexed.iter().any(|u| *u) {
            let v: Value = self
                .redis
                .query(
                    redis::cmd("XREVRANGE")
                        .arg(self.keys.dead_letter())
                        .arg("+")
                        .arg("-")
                        .arg("COUNT")
                        .arg(FALLBACK_LETTERS),
                )
                .await?;
            // newest first: the first letter naming a job is its latest
            let mut newest: std::collections::HashMap<String, DeadLetter> =
                std::collections::HashMap::new();
            for d in reply::array(&v)?.iter().filter_map(DeadLetter::decode) {
                newest.entry(d.job_id.clone()).or_insert(d);
            }
            for (i, id) in ids.iter().enumerate() {
                if unindexed[i] {
                    found[i] = newest.get(id).cloned();
                }
            }
        }
        Ok(found)
    }
}

/// The record field that names a dead-lettered job's letter (its entry id), written by the
/// functions that dead-letter a job (protocol 30: `hero_recover`, `hero_bridge_watch`) and
/// removed by a retry (`hero_dead`) or a requeue.
pub const DEAD_FIELD: &str = "dead";

/// How many of the newest letters a reader looks through for a job whose record names none.
pub const FALLBACK_LETTERS: usize = 1000;

/// Whether a record of `status` (`None`: no record) that names no letter may still have one: a
/// letter written before protocol 30 names a job that ended `error`, and the bridge's refusal of
/// a legacy push names a job with no record or one a worker runs. A queued or finished job has
/// none (a retry or a requeue made it so), so its page costs no read of the stream.
fn may_have_unindexed_letter(status: Option<&str>) -> bool {
    matches!(status, None | Some("error" | "started"))
}

/// An entry id as (ms, sequence), to order entries of several streams by time.
fn entry_order(entry: &str) -> (u64, u64) {
    let (ms, seq) = entry.split_once('-').unwrap_or((entry, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}
