//! A batch's hash as it reads back (`BatchInfo`, `read_batch`). Batches (after Sidekiq Pro's)
//! are jobs submitted under one name, counted as they end by the server functions
//! (`function/batches.lua`), with callback jobs submitted exactly once; the producer's side is
//! `hero_client::Batch`, the listing `hero_admin::Inspector::batches`.

use crate::error::Result;
use crate::keys::Keyspace;
use crate::name::BatchName;

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
