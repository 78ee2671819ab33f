//! Leases of running jobs: renewed every third of the lease in one pipeline (a stopped job or
//! a lost lease interrupts the handler), carrying what the handlers reported since the last
//! call (`report`; `flush_reports` sends them sooner when a handler reported), and handed back
//! without counting an attempt at shutdown.

use std::sync::Arc;

use hero_protocol::function;
use hero_protocol::function::Recovery;
use hero_protocol::function::{Renewal, Report};
use hero_protocol::recovery::recover_stream;
use tokio_util::sync::CancellationToken;

use crate::inflight::{CancelReason, Held};
use crate::report::FLUSH_EVERY;
use crate::shared::Shared;

/// Renews every running delivery each third of the lease, in one pipeline, and interrupts the
/// handlers of jobs that were stopped or whose lease went to another delivery.
pub(crate) async fn renew(s: Arc<Shared>, stop: CancellationToken) {
    loop {
        // a queue policy, or the brokers, may ask for a shorter lease than the worker's own
        let lease = s
            .policy
            .shortest_lease(&s.types)
            .map_or(s.lease, |l| l.min(s.lease));
        let brokers = s
            .brokers_lease_ms
            .load(std::sync::atomic::Ordering::Acquire);
        let lease = if brokers > 0 {
            lease.min(std::time::Duration::from_millis(brokers))
        } else {
            lease
        };
        let every = lease / 3;
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(every) => {} }
        let running: Vec<_> = s
            .inflight
            .snapshot()
            .into_iter()
            .map(|h| {
                // what a handler reported since the last flush rides on this renewal
                let report = h.pending.take();
                (h, report)
            })
            .collect();
        if running.is_empty() {
            continue;
        }
        renew_each(&s, running).await;
    }
}

/// Renews each delivery in one pipeline, recording the report given with it, and interrupts
/// the handlers of jobs that were stopped or whose lease went to another delivery. A report
/// that could not be sent goes back to its job, to be sent with the next call.
pub(crate) async fn renew_each(s: &Shared, mut running: Vec<(Held, Option<Report>)>) {
    if s.hold_reports.load(std::sync::atomic::Ordering::Acquire) {
        // held back while an older process would refuse them (see presence::hold_reports)
        for (_, report) in &mut running {
            *report = None;
        }
    }
    let mut pipe = redis::pipe();
    for (h, report) in &running {
        pipe.add_command(
            function::renew(
                &s.keys,
                &h.job_id,
                &s.streams[h.stream],
                &h.lease,
                &s.consumer_name,
                report.as_ref(),
            )
            .into_cmd(),
        );
    }
    match s.redis.pipeline(&pipe).await {
        Err(e) => {
            hero_protocol::outage::report("lease renewal (retried next round)", &e);
            for (h, report) in running {
                if let Some(r) = report {
                    h.pending.restore(r);
                }
            }
        }
        Ok(results) => {
            for ((h, _), r) in running.into_iter().zip(results) {
                let reason = match r.and_then(|v| Renewal::decode(&v)) {
                    Ok(Renewal::Ok) => continue,
                    Ok(Renewal::Stopped) => CancelReason::Stopped,
                    Ok(Renewal::Lost) => CancelReason::LeaseLost,
                    Err(e) => {
                        tracing::warn!(job = %h.job_id, error = %e, "renewal failed");
                        continue;
                    }
                };
                tracing::info!(job = %h.job_id, ?reason, "interrupting the handler");
                s.inflight.cancel(&h.job_id, Some(&h.lease), reason);
            }
        }
    }
}

/// Puts every delivery this worker still holds back into its stream without counting an
/// attempt, so another worker takes it at once. Returns how many went back.
pub(crate) async fn hand_back(s: &Shared) -> u64 {
    let mut total = 0;
    for stream in &s.streams {
        let which = Recovery::HandBack(&s.consumer_name);
        // a hand-back does not count an attempt, so no budget applies
        match recover_stream(&s.redis, &s.keys, stream, which, u32::MAX).await {
            Ok(taken) => total += taken.requeued,
            Err(e) => {
                tracing::warn!(error = %e, stream, "hand-back failed; the broker will recover these jobs");
            }
        }
    }
    total
}

/// Sends the reports of the running jobs (`report::Pending`) once they have gathered for
/// [`FLUSH_EVERY`], each with a renewal of its lease ([`renew_each`]), until `stop`.
pub(crate) async fn flush_reports(s: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = s.inflight.report_wake.notified() => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(FLUSH_EVERY) => {}
        }
        let dirty: Vec<_> = s
            .inflight
            .snapshot()
            .into_iter()
            .filter_map(|r| r.pending.take().map(|rep| (r, Some(rep))))
            .collect();
        if !dirty.is_empty() {
            renew_each(&s, dirty).await;
        }
    }
}
