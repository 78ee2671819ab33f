//! What running handlers report of themselves (progress, log lines, a failure's trace): kept per job until it is
//! handed to Redis, coalesced so a handler reporting in a tight loop costs one call per flush
//! period for the whole worker, and handed over with the lease renewal (`lease`) when one is due
//! anyway (the flush loop is `lease::flush_reports`). A handler that reports nothing costs
//! nothing: no slot is ever dirty, no call is made. This module holds the data only and imports
//! nothing of the worker's: the job's context and the running-job table both hold a `Pending`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hero_protocol::function::Report;
use hero_protocol::{Progress, LOG_LINES};
use tokio::sync::Notify;

/// How long reports gather before they are sent: one call a flush period at most, for every
/// job of the worker at once.
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// One running job's reports not yet handed to Redis.
#[derive(Debug, Default)]
pub struct Pending {
    report: Mutex<Report>,
    /// The trace of this attempt's failure, when the handler gave one ([`crate::JobContext::fail`]):
    /// handed to `hero_complete` with the outcome, never with a renewal.
    trace: Mutex<Option<String>>,
    /// Wakes the worker's flusher; shared by every job of the worker.
    wake: Arc<Notify>,
}

impl Pending {
    pub(crate) fn new(wake: Arc<Notify>) -> Pending {
        Pending {
            report: Mutex::default(),
            trace: Mutex::default(),
            wake,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Report> {
        self.report.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn progress(&self, percent: f64, message: &str) {
        self.lock().progress = Some(Progress {
            percent: if percent.is_nan() {
                0.0
            } else {
                percent.clamp(0.0, 100.0)
            },
            message: message.to_string(),
        });
        self.wake.notify_one();
    }

    pub(crate) fn log(&self, line: &str) {
        {
            let mut r = self.lock();
            // the job keeps its last LOG_LINES only: older unsent ones would be dropped there
            if r.lines.len() >= LOG_LINES {
                r.lines.remove(0);
            }
            r.lines.push(line.to_string());
        }
        self.wake.notify_one();
    }

    pub(crate) fn set_trace(&self, trace: String) {
        *self.trace.lock().unwrap_or_else(|e| e.into_inner()) = Some(trace);
    }

    /// The attempt's trace, once: the outcome takes it.
    pub(crate) fn take_trace(&self) -> Option<String> {
        self.trace.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The reports gathered since the last take, if any.
    pub(crate) fn take(&self) -> Option<Report> {
        let r = std::mem::take(&mut *self.lock());
        (!r.is_empty()).then_some(r)
    }

    /// Puts back a report that could not be sent, before anything gathered since.
    pub(crate) fn restore(&self, mut sent: Report) {
        let mut r = self.lock();
        if r.progress.is_none() {
            r.progress = sent.progress.take();
        }
        sent.lines.append(&mut r.lines);
        let over = sent.lines.len().saturating_sub(LOG_LINES);
        sent.lines.drain(..over);
        r.lines = sent.lines;
    }
}
