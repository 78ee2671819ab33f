//! Batches (after Sidekiq Pro's): jobs submitted under one name, counted as they end, and
//! callback jobs submitted exactly once when every member ended (`on_complete`) or when every
//! member finished (`on_success`). The producer side lives here (`Client::batch`, `Batch`);
//! the counting is in the server functions (`function/batches.lua`), in the calls that create
//! and end members; reading a batch back is [`Batch::show`] and `Inspector::batches`.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::function::{close_batch, BatchClosed, CallbackSpec};
use crate::keys::Keyspace;
use crate::name::BatchName;
use crate::new_job::NewJob;
use crate::Submitted;

/// One batch of a namespace, by name. Members may be added until it is done (its callbacks
/// were submitted); a done batch is kept for the broker's retention time.
#[derive(Clone)]
pub struct Batch {
    client: Client,
    name: BatchName,
}

/// A batch as it stands.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BatchInfo {
    pub name: String,
    /// Members so far.
    pub total: u64,
    /// Members that have not ended.
    pub pending: u64,
    pub finished: u64,
    /// Members that ended error (stopped, timed out, dead-lettered, failed past their retries).
    pub failed: u64,
    pub created_at: String,
    /// Closed: its callbacks are named and are submitted once no member is pending.
    pub closed: bool,
    pub has_on_complete: bool,
    pub has_on_success: bool,
    /// When its callbacks were submitted.
    pub done_at: Option<String>,
    /// The on_complete callback job, once submitted.
    pub complete_id: Option<String>,
    /// The on_success callback job, once submitted (only when no member failed).
    pub success_id: Option<String>,
}

impl BatchInfo {
    /// `open`, `closed` (waiting for its last members) or `done`.
    pub fn state(&self) -> &'static str {
        if self.done_at.is_some() {
            "done"
        } else if self.closed {
            "closed"
        } else {
            "open"
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        v["state"] = self.state().into();
        v
    }

    /// Reads a batch hash's fields (as HGETALL gives them); `None` for an empty one (no batch).
    pub fn from_fields(name: &str, fields: &[(String, String)]) -> Option<BatchInfo> {
        if fields.is_empty() {
            return None;
        }
        let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
        let num = |k: &str| {
            get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0)
                .max(0) as u64
        };
        let text = |k: &str| get(k).filter(|v| !v.is_empty()).map(str::to_string);
        Some(BatchInfo {
            name: name.to_string(),
            total: num("total"),
            pending: num("pending"),
            finished: num("finished"),
            failed: num("failed"),
            created_at: get("created_at").unwrap_or_default().to_string(),
            closed: get("closed") == Some("1"),
            has_on_complete: get("on_complete").is_some(),
            has_on_success: get("on_success").is_some(),
            done_at: text("done_at"),
            complete_id: text("complete_id"),
            success_id: text("success_id"),
        })
    }
}

/// Reads batch `name` (`None` when there is none, or it expired).
pub async fn read_batch(
    redis: &crate::conn::Redis,
    keys: &Keyspace,
    name: &BatchName,
) -> Result<Option<BatchInfo>> {
    let fields: Vec<(String, String)> = redis
        .query(redis::cmd("HGETALL").arg(keys.batch(name)))
        .await?;
    Ok(BatchInfo::from_fields(name.as_str(), &fields))
}

impl Client {
    /// Batch `name` of this namespace (made with its first member).
    pub fn batch(&self, name: impl Into<String>) -> Result<Batch> {
        Ok(Batch {
            client: self.clone(),
            name: BatchName::new(name)?,
        })
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the client is a connection handle, of no use in a debug line
        f.debug_struct("Batch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Batch {
    pub fn name(&self) -> &BatchName {
        &self.name
    }

    /// Submits `jobs` as members, in one call; one result per job, in order. A job named in
    /// another batch is refused; a batch that is done takes no member (`Error::InvalidJob`).
    pub async fn add(&self, jobs: &[NewJob]) -> Result<Vec<Result<Submitted>>> {
        let mut members = Vec::with_capacity(jobs.len());
        for j in jobs {
            match j.record().batch.as_deref() {
                Some(b) if b != self.name.as_str() => {
                    return Err(Error::InvalidInput(format!(
                        "job {} is a member of batch {b}, not of {}",
                        j.id(),
                        self.name
                    )))
                }
                _ => members.push(j.clone().in_batch(&self.name)),
            }
        }
        self.client.submit_many(&members).await
    }

    /// Closes the batch: `on_complete` is submitted once every member ended, `on_success` once
    /// every member finished (never, if one failed); at least one must be given. Once no member
    /// is pending (now, or when the last one ends) they are submitted, exactly once however many
    /// brokers and workers run. Closing again before then replaces the callbacks.
    pub async fn close(
        &self,
        on_complete: Option<&NewJob>,
        on_success: Option<&NewJob>,
    ) -> Result<BatchClosed> {
        if on_complete.is_none() && on_success.is_none() {
            return Err(Error::InvalidInput(
                "close a batch with an on_complete or an on_success callback job".into(),
            ));
        }
        let keys = self.client.keys();
        let complete = on_complete
            .map(|j| CallbackSpec::new(keys, j))
            .transpose()?;
        let success = on_success.map(|j| CallbackSpec::new(keys, j)).transpose()?;
        let v: redis::Value = self
            .client
            .redis()
            .query(&close_batch(
                keys,
                &self.name,
                complete.as_ref(),
                success.as_ref(),
            ))
            .await?;
        BatchClosed::decode(&v)
    }

    /// The batch as it stands (`None` before its first member or close, and once expired).
    pub async fn show(&self) -> Result<Option<BatchInfo>> {
        read_batch(self.client.redis(), self.client.keys(), &self.name).await
    }
}

impl Client {
    /// Drops from the batch index the names whose batch expired (done, past the retention
    /// time): the broker's retention pass calls it. The oldest 500 names a call, where expired
    /// ones gather.
    pub async fn prune_batches(&self) -> Result<u64> {
        let index = self.keys().batches();
        let names: Vec<String> = self
            .redis()
            .query(redis::cmd("ZRANGE").arg(&index).arg(0).arg(499))
            .await?;
        if names.is_empty() {
            return Ok(0);
        }
        // a name no batch can have (written by hand) is dropped as well
        let (valid, mut gone): (Vec<_>, Vec<_>) = names
            .iter()
            .map(String::as_str)
            .partition(|n| BatchName::new(*n).is_ok());
        let mut pipe = redis::pipe();
        for n in &valid {
            if let Ok(name) = BatchName::new(*n) {
                pipe.cmd("EXISTS").arg(self.keys().batch(&name));
            }
        }
        for (n, r) in valid.iter().zip(self.redis().pipeline(&pipe).await?) {
            if matches!(r?, redis::Value::Int(0)) {
                gone.push(n);
            }
        }
        if gone.is_empty() {
            return Ok(0);
        }
        let _: i64 = self
            .redis()
            .query(redis::cmd("ZREM").arg(&index).arg(&gone))
            .await?;
        Ok(gone.len() as u64)
    }
}
