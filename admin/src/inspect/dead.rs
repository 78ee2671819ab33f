//! Reading the dead-letter stream (`hero:meta:dead`): its entries a page at a time, and the one
//! that names a job.

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

    /// The dead letters of `ids`, in order; `Err(id)` names the first without one.
    pub async fn dead_letters_of(
        &self,
        ids: &[String],
    ) -> Result<std::result::Result<Vec<DeadLetter>, String>> {
        let mut letters = Vec::with_capacity(ids.len());
        for id in ids {
            match self.dead_letter(id).await? {
                Some(d) => letters.push(d),
                None => return Ok(Err(id.clone())),
            }
        }
        Ok(Ok(letters))
    }

    /// The latest dead letter naming `job_id`, if any (a scan of the stream, newest first; of
    /// every shard's in a sharded namespace).
    pub async fn dead_letter(&self, job_id: &str) -> Result<Option<DeadLetter>> {
        if self.others.is_empty() {
            return self.dead_letter_here(job_id).await;
        }
        let mut newest: Option<DeadLetter> = None;
        for (n, shard) in self.shards() {
            if let Some(mut d) = shard.dead_letter_here(job_id).await? {
                d.shard = n;
                if newest
                    .as_ref()
                    .is_none_or(|b| entry_order(&d.entry) > entry_order(&b.entry))
                {
                    newest = Some(d);
                }
            }
        }
        Ok(newest)
    }

    async fn dead_letter_here(&self, job_id: &str) -> Result<Option<DeadLetter>> {
        let mut end = "+".to_string();
        loop {
            let v: Value = self
                .redis
                .query(
                    redis::cmd("XREVRANGE")
                        .arg(self.keys.dead_letter())
                        .arg(&end)
                        .arg("-")
                        .arg("COUNT")
                        .arg(1000),
                )
                .await?;
            let page: Vec<DeadLetter> = reply::array(&v)?
                .iter()
                .filter_map(DeadLetter::decode)
                .collect();
            if let Some(d) = page.iter().find(|d| d.job_id == job_id) {
                return Ok(Some(d.clone()));
            }
            match page.last() {
                Some(last) if page.len() == 1000 => end = format!("({}", last.entry),
                _ => return Ok(None),
            }
        }
    }
}

/// An entry id as (ms, sequence), to order entries of several streams by time.
fn entry_order(entry: &str) -> (u64, u64) {
    let (ms, seq) = entry.split_once('-').unwrap_or((entry, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}
