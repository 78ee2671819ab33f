//! Listing jobs by status through the structures the server functions already keep, never a
//! scan of every job (issue 27): what is queued is in the work streams, what runs is in their
//! pending lists, what waits is in the delayed set or named by a dependents hash (found through
//! the prerequisites index `Keyspace::waiting_on`), and what
//! ended is named by the retention stream, which the retention pass trims with the jobs. Each
//! page reads O(page + queues); the caller reads the candidates' records and keeps those whose
//! status still matches (a page may come back short: follow the cursor).
//!
//! A fair queue's queued jobs wait in its gate (`gate.lua`): they are listed after every
//! stream's entries, gate after gate.
//!
//! Cursors: `s:<stream index>:<entry id>` (streams, by their sorted keys), `g:<stream
//! index>:<key index>:<lane index>` (the gates), `z:<rank>` (the
//! delayed set), `d:<sscan cursor>` (the prerequisites index, then their dependents hashes), `r:<entry id>` (the retention stream,
//! newest first).

use redis::Value;

use super::Inspector;
use hero_protocol::error::Result;
use hero_protocol::job::Status;
use hero_protocol::keys::ENTRY_JOB_FIELD;
use hero_protocol::reply;

/// Candidate ids for one page, and the cursor of the next (None at the end).
pub(super) type Candidates = (Vec<String>, Option<String>);

impl Inspector {
    /// Up to about `limit` ids of jobs that may have `status`, from `cursor`.
    pub(super) async fn by_status(
        &self,
        status: Status,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Candidates> {
        match status {
            Status::Dispatched => self.in_streams(cursor, limit, false).await,
            Status::Started => self.in_streams(cursor, limit, true).await,
            Status::Waiting => self.waiting(cursor, limit).await,
            Status::Finished | Status::Error => self.ended(cursor, limit).await,
        }
    }

    /// The jobs the work streams' entries name (`pending`: only the delivered, not acknowledged
    /// ones), stream after stream in key order.
    async fn in_streams(
        &self,
        cursor: Option<&str>,
        limit: usize,
        pending: bool,
    ) -> Result<Candidates> {
        let mut streams = self.queue_streams().await?;
        streams.sort();
        if let Some(g) = cursor.and_then(|c| c.strip_prefix("g:")) {
            let (i, rest) = g
                .split_once(':')
                .and_then(|(i, rest)| Some((i.parse::<usize>().ok()?, rest)))
                .ok_or_else(|| super::bad_cursor(cursor.unwrap_or_default()))?;
            let from = super::fair::gate_cursor(rest)
                .ok_or_else(|| super::bad_cursor(cursor.unwrap_or_default()))?;
            return self.in_gates(&streams, i, from, Vec::new(), limit).await;
        }
        let (mut at, mut after) = match cursor.and_then(|c| c.strip_prefix("s:")) {
            Some(rest) => {
                let (i, id) = rest
                    .split_once(':')
                    .filter(|(_, id)| super::is_entry_id(id))
                    .ok_or_else(|| super::bad_cursor(cursor.unwrap_or_default()))?;
                (
                    i.parse::<usize>()
                        .map_err(|_| super::bad_cursor(cursor.unwrap_or_default()))?,
                    Some(id.to_string()),
                )
            }
            None if cursor.is_none() => (0, None),
            None => return Err(super::bad_cursor(cursor.unwrap_or_default())),
        };
        let mut ids = Vec::new();
        while at < streams.len() {
            let stream = &streams[at];
            let from = after.take().map_or("-".to_string(), |id| format!("({id}"));
            let want = limit - ids.len();
            let entries = if pending {
                self.pending_entries(stream, &from, want).await?
            } else {
                self.redis
                    .query::<Value>(
                        redis::cmd("XRANGE")
                            .arg(stream)
                            .arg(&from)
                            .arg("+")
                            .arg("COUNT")
                            .arg(want),
                    )
                    .await
                    .map(|v| entries_with_jobs(&v))
                    .unwrap_or_default()
            };
            let full = entries.len() == want;
            let last = entries.last().map(|(e, _)| e.clone());
            ids.extend(entries.into_iter().filter_map(|(_, j)| j));
            if full {
                let next = last.map(|e| format!("s:{at}:{e}"));
                return Ok((ids, next));
            }
            at += 1;
        }
        if pending {
            return Ok((ids, None));
        }
        // queued, too: a fair queue's jobs waiting in its gate (cursor `g:<stream>:<key>:<item>`)
        self.in_gates(&streams, 0, (0, 0), ids, limit).await
    }

    /// The jobs waiting in the fair gates of `streams` from stream `at`, after `ids`, up to
    /// `limit` in all.
    async fn in_gates(
        &self,
        streams: &[String],
        mut at: usize,
        mut from: super::fair::GateCursor,
        mut ids: Vec<String>,
        limit: usize,
    ) -> Result<Candidates> {
        if at >= streams.len() || ids.len() >= limit {
            let next = (at < streams.len()).then(|| format!("g:{at}:{}:{}", from.0, from.1));
            return Ok((ids, next));
        }
        // which of them have a gate at all: one round trip, not one per stream
        let mut pipe = redis::pipe();
        for s in &streams[at.min(streams.len())..] {
            pipe.cmd("EXISTS").arg(self.keys.fair_ring(s));
        }
        let gated: Vec<bool> = self
            .redis
            .pipeline(&pipe)
            .await?
            .into_iter()
            .map(|r| r.ok().and_then(|v| reply::int(&v).ok()) == Some(1))
            .collect();
        while at < streams.len() && ids.len() < limit {
            if !gated
                .get(at - (streams.len() - gated.len()))
                .copied()
                .unwrap_or(false)
            {
                at += 1;
                from = (0, 0);
                continue;
            }
            let (page, next) = self
                .gate_page(&streams[at], from, limit - ids.len())
                .await?;
            ids.extend(page);
            if let Some((k, l)) = next {
                return Ok((ids, Some(format!("g:{at}:{k}:{l}"))));
            }
            at += 1;
            from = (0, 0);
        }
        let next = (at < streams.len()).then(|| format!("g:{at}:0:0"));
        Ok((ids, next))
    }

    /// Up to `count` pending entries of `stream` from `from`, with the jobs they name.
    async fn pending_entries(
        &self,
        stream: &str,
        from: &str,
        count: usize,
    ) -> Result<Vec<(String, Option<String>)>> {
        let Some(rows) = self.pending_page(stream, from, count).await? else {
            return Ok(Vec::new());
        };
        let mut ids = Vec::new();
        let mut pipe = redis::pipe();
        for r in reply::array(&rows)? {
            let Some(id) = reply::array(r)?.first() else {
                continue;
            };
            let id = reply::text(id)?;
            pipe.cmd("XRANGE").arg(stream).arg(&id).arg(&id);
            ids.push(id);
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.redis.pipeline(&pipe).await?;
        Ok(ids
            .into_iter()
            .zip(found)
            .map(|(id, v)| {
                let job = v
                    .ok()
                    .and_then(|v| entries_with_jobs(&v).pop())
                    .and_then(|(_, j)| j);
                (id, job)
            })
            .collect())
    }

    /// The delayed set by rank, then the jobs the dependents hashes name.
    async fn waiting(&self, cursor: Option<&str>, limit: usize) -> Result<Candidates> {
        let rank = match cursor {
            None => Some(0),
            Some(c) => match c.strip_prefix("z:") {
                // a rank past any set's size is no cursor a page gave (and would overflow)
                Some(n) => Some(
                    n.parse::<usize>()
                        .ok()
                        .filter(|r| u32::try_from(*r).is_ok())
                        .ok_or_else(|| super::bad_cursor(cursor.unwrap_or_default()))?,
                ),
                None => None,
            },
        };
        if let Some(rank) = rank {
            let ids: Vec<String> = self
                .redis
                .query(
                    redis::cmd("ZRANGE")
                        .arg(self.keys.delayed())
                        .arg(rank)
                        .arg(rank + limit - 1),
                )
                .await?;
            if ids.len() == limit {
                return Ok((ids, Some(format!("z:{}", rank + limit))));
            }
            // the delayed set is done: the jobs waiting on prerequisites follow on this page
            let (more, next) = self.waiting_on_prerequisites("0", limit).await?;
            let mut ids = ids;
            ids.extend(more);
            return Ok((ids, next));
        }
        let scan = cursor
            .and_then(|c| c.strip_prefix("d:"))
            .filter(|n| n.parse::<u64>().is_ok())
            .ok_or_else(|| super::bad_cursor(cursor.unwrap_or_default()))?;
        self.waiting_on_prerequisites(scan, limit).await
    }

    /// One SSCAN page of the prerequisites index from `scan`, and the jobs waiting on them.
    async fn waiting_on_prerequisites(&self, scan: &str, limit: usize) -> Result<Candidates> {
        let (next, prerequisites): (String, Vec<String>) = self
            .redis
            .query(
                redis::cmd("SSCAN")
                    .arg(self.keys.waiting_on())
                    .arg(scan)
                    .arg("COUNT")
                    .arg(limit),
            )
            .await?;
        let mut ids = Vec::new();
        if !prerequisites.is_empty() {
            let mut pipe = redis::pipe();
            for p in &prerequisites {
                let p = hero_protocol::JobId::new(p).map_err(|e| {
                    hero_protocol::reply::unexpected(format!(
                        "{} names {p:?}: {e}",
                        self.keys.waiting_on()
                    ))
                })?;
                pipe.cmd("HKEYS").arg(self.keys.dependents(&p));
            }
            for r in self.redis.pipeline(&pipe).await? {
                let v = r?;
                for id in reply::array(&v)? {
                    ids.push(reply::text(id)?);
                }
            }
        }
        Ok((ids, (next != "0").then(|| format!("d:{next}"))))
    }

    /// The jobs the retention stream names, newest first: an entry per call that ended jobs.
    async fn ended(&self, cursor: Option<&str>, limit: usize) -> Result<Candidates> {
        let from = match cursor {
            None => "+".to_string(),
            Some(c) => format!(
                "({}",
                c.strip_prefix("r:")
                    .filter(|e| super::is_entry_id(e))
                    .ok_or_else(|| super::bad_cursor(cursor.unwrap_or_default()))?
            ),
        };
        let v: Value = self
            .redis
            .query(
                redis::cmd("XREVRANGE")
                    .arg(self.keys.retention())
                    .arg(&from)
                    .arg("-")
                    .arg("COUNT")
                    .arg(limit),
            )
            .await?;
        let mut ids = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut last = None;
        let entries = reply::array(&v)?;
        for entry in entries {
            let [id, fields] = reply::array(entry)? else {
                continue;
            };
            last = Some(reply::text(id)?);
            for kv in reply::array(fields)?.chunks(2) {
                if let [k, v] = kv {
                    if reply::text(k)? == "j" {
                        // a job ended twice (retried by hand) is named by two entries
                        for id in reply::text(v)?.split(' ') {
                            if !id.is_empty() && seen.insert(id.to_string()) {
                                ids.push(id.to_string());
                            }
                        }
                    }
                }
            }
            if ids.len() >= limit {
                break;
            }
        }
        let more = ids.len() >= limit || entries.len() == limit;
        Ok((ids, last.filter(|_| more).map(|e| format!("r:{e}"))))
    }
}

/// The entries of an XRANGE reply, each with the job its `j` field names.
fn entries_with_jobs(v: &Value) -> Vec<(String, Option<String>)> {
    let Ok(entries) = reply::array(v) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| {
            let [id, fields] = reply::array(e).ok()? else {
                return None;
            };
            let job = reply::array(fields)
                .ok()?
                .chunks(2)
                .find(|kv| {
                    kv.first().and_then(|k| reply::text(k).ok()).as_deref() == Some(ENTRY_JOB_FIELD)
                })
                .and_then(|kv| reply::text(kv.get(1)?).ok())
                .filter(|j| !j.is_empty());
            Some((reply::text(id).ok()?, job))
        })
        .collect()
}
