//! The jobs a worker is running now: what the lease loop renews, what a stop request cancels,
//! and why a job was cancelled, so its task knows whether to record a result.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hero_protocol::JobId;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::report::Pending;

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
    /// What its handler reported and Redis has not been told yet.
    pub(crate) pending: Arc<Pending>,
}

/// A running job as the lease loop and the report flusher see it.
pub(crate) struct Held {
    pub job_id: JobId,
    /// Index of the job's stream in the worker's precedence list.
    pub stream: usize,
    pub lease: String,
    pub pending: Arc<Pending>,
}

impl Running {
    pub fn reason(&self) -> Option<CancelReason> {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
pub struct InFlight {
    jobs: Mutex<HashMap<JobId, Running>>,
    /// Wakes the report flusher when any running handler reported (`report::flush`).
    pub(crate) report_wake: Arc<Notify>,
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
            pending: Arc::new(Pending::new(self.report_wake.clone())),
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

    /// Every running job: its id, stream, lease and pending reports.
    pub(crate) fn snapshot(&self) -> Vec<Held> {
        self.lock()
            .iter()
            .map(|(id, r)| Held {
                job_id: id.clone(),
                stream: r.stream,
                lease: r.entry.clone(),
                pending: r.pending.clone(),
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
