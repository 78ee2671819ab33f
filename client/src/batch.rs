//! Batches (after Sidekiq Pro's): jobs submitted under one name, counted as they end, and
//! callback jobs submitted exactly once when every member ended (`on_complete`) or when every
//! member finished (`on_success`). The producer side lives here (`Client::batch`, `Batch`);
//! the counting is in the server functions (`function/batches.lua`), in the calls that create
//! and end members; reading a batch back is [`Batch::show`] and `hero_admin::Inspector::batches`.

use crate::client::Client;
use hero_protocol::batch::{read_batch, BatchInfo};
use hero_protocol::function::{close_batch, BatchClosed, CallbackSpec};
use hero_protocol::{BatchName, Error, NewJob, Result};

use crate::Submitted;

/// One batch of a namespace, by name. Members may be added until it is done (its callbacks
/// were submitted); a done batch is kept for the broker's retention time.
#[derive(Clone)]
pub struct Batch {
    client: Client,
    name: BatchName,
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
        let home = self.home().await?;
        let keys = home.keys();
        let complete = on_complete
            .map(|j| CallbackSpec::new(keys, j))
            .transpose()?;
        let success = on_success.map(|j| CallbackSpec::new(keys, j)).transpose()?;
        let v: redis::Value = home
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
        let home = self.home().await?;
        read_batch(home.redis(), home.keys(), &self.name).await
    }

    /// The client of the batch's shard (in a sharded namespace, its name's home).
    async fn home(&self) -> Result<Client> {
        let name = self.name.clone();
        self.client
            .for_key(self.name.as_str(), move |k| k.batch(&name))
            .await
    }
}
