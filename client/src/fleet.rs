//! The producer's side of the fleet (`hero_protocol::fleet`): a submit that uses a feature an
//! older live process would refuse or not serve (a batch, a limit key, tags, a uniqueness key)
//! is refused with an error naming those processes. A plain job costs nothing here; a gated one
//! reads the fleet at most every `fleet::REFRESH` (one pipelined call), never per job.

use std::sync::Arc;

use hero_protocol::error::Result;
use hero_protocol::fleet::{Feature, Fleet};
use hero_protocol::new_job::NewJob;

use crate::client::Client;

/// The gated features `job` uses.
pub fn features_of(job: &NewJob) -> Vec<Feature> {
    let r = job.record();
    let mut out = Vec::new();
    if r.unique.is_some() {
        out.push(Feature::Unique);
    }
    if !r.tags.is_empty() {
        out.push(Feature::Tags);
    }
    if r.limit_key.is_some() {
        out.push(Feature::LimitKey);
    }
    if r.batch.is_some() {
        out.push(Feature::Batch);
    }
    if r.backoff.is_some() || r.keep.is_some() || r.keep_failed.is_some() {
        out.push(Feature::JobPolicy);
    }
    out
}

impl Client {
    /// The live fleet, read again when older than `fleet::REFRESH`.
    pub async fn fleet(&self) -> Result<Arc<Fleet>> {
        if let Some(f) = self.fleet_cache().fresh() {
            return Ok(f);
        }
        let f = Arc::new(Fleet::read(self.redis(), self.keys()).await?);
        self.fleet_cache().keep(f.clone());
        Ok(f)
    }

    /// Refuses `jobs` when one uses a feature a live older process would refuse or not serve.
    pub(crate) async fn check_fleet(&self, jobs: &[NewJob]) -> Result<()> {
        for job in jobs {
            let features = features_of(job);
            if features.is_empty() {
                continue;
            }
            let fleet = self.fleet().await?;
            fleet.require(&format!("job {}", job.id()), &features)?;
        }
        Ok(())
    }
}
