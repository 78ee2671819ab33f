//! Batches as an operator lists them: the newest first from the batch index, each read whole.
//! O(page): a name whose batch expired is skipped (the broker's retention pass prunes it).

use super::Inspector;
use hero_protocol::batch::{read_batch, BatchInfo};
use hero_protocol::error::Result;
use hero_protocol::name::BatchName;

impl Inspector {
    /// The newest `limit` batches (open, closed or done), newest first.
    pub async fn batches(&self, limit: usize) -> Result<Vec<BatchInfo>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let names: Vec<String> = self
            .redis
            .query(
                redis::cmd("ZRANGE")
                    .arg(self.keys.batches())
                    .arg(0)
                    .arg(limit - 1)
                    .arg("REV"),
            )
            .await?;
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let Ok(name) = BatchName::new(&n) else {
                continue;
            };
            if let Some(b) = read_batch(&self.redis, &self.keys, &name).await? {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// One batch, by name (`None` when there is none, or it expired).
    pub async fn batch(&self, name: &BatchName) -> Result<Option<BatchInfo>> {
        read_batch(&self.redis, &self.keys, name).await
    }
}
