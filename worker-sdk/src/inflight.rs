//! The jobs a worker is running now: what the lease loop renews, what a stop request cancels,
//! and why a job was cancelled, so its task knows whether to record a result.

use std::collections::HashMap;
use std::sync::Mutex;

use hero_client::JobId;
use tokio_util::sync::CancellationToken;

/// Why a running job's handler was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// `hero stop`: the job already ended `error`/`stopped` in Redis.
    Stopped,
    /// Another delivery owns the job; a result would be rejected.
    LeaseLost,
    /// The worker's shutdown deadline passed; the job is handed back.
    Shutdown,
}

#[derive(Clone, Debug)]
pub struct Running {
    /// Index of the job's stream in the worker's precedence list.
    pub stream: usize,
    /// The entry id: the lease.
    pub entry: String,
    pub cancel: CancellationToken,
    reason: std::sync::Arc<Mutex<Option<CancelReason>>>,
}

impl Running {
    pub fn reason(&self) -> Option<CancelReason> {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
pub struct InFlight {
    jobs: Mutex<HashMap<JobId, Running>>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Running>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert(&self, job_id: &JobId, stream: usize, entry: &str) -> Running {
        let running = Running {
            stream,
            entry: entry.to_string(),
            cancel: CancellationToken::new(),
            reason: std::sync::Arc::default(),
        };
        self.lock().insert(job_id.clone(), running.clone());
        running
    }

    pub fn remove(&self, job_id: &JobId) {
        self.lock().remove(job_id);
    }

    /// Interrupts a job if it is running here with this lease (`None`: any lease). The first
    /// reason given sticks.
    pub fn cancel(&self, job_id: &JobId, lease: Option<&str>, reason: CancelReason) -> bool {
        let jobs = self.lock();
        match jobs.get(job_id) {
            Some(r) if lease.is_none_or(|l| l == r.entry) => {
                r.reason
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(reason);
                r.cancel.cancel();
                true
            }
            _ => false,
        }
    }

    pub fn cancel_all(&self, reason: CancelReason) {
        let ids: Vec<JobId> = self.lock().keys().cloned().collect();
        for id in ids {
            self.cancel(&id, None, reason);
        }
    }

    /// (job id, stream index, lease) of every running job.
    pub fn snapshot(&self) -> Vec<(JobId, usize, String)> {
        self.lock()
            .iter()
            .map(|(id, r)| (id.clone(), r.stream, r.entry.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
