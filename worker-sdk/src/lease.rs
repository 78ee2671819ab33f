//! Leases of running jobs: renewed every third of the lease in one pipeline (a stopped job or
//! a lost lease interrupts the handler), and handed back without counting an attempt at
//! shutdown.

use std::sync::Arc;

use hero_client::function;
use hero_client::function::Recovery;
use hero_client::function::Renewal;
use hero_client::recovery::recover_stream;
use tokio_util::sync::CancellationToken;

use crate::inflight::CancelReason;
use crate::shared::Shared;

/// Renews every running delivery each third of the lease, in one pipeline, and interrupts the
/// handlers of jobs that were stopped or whose lease went to another delivery.
pub(crate) async fn renew(s: Arc<Shared>, stop: CancellationToken) {
    loop {
        // a queue policy may ask for a shorter lease than the worker's own
        let lease = s
            .policy
            .shortest_lease(&s.types)
            .map_or(s.lease, |l| l.min(s.lease));
        let every = lease / 3;
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(every) => {} }
        let running = s.inflight.snapshot();
        if running.is_empty() {
            continue;
        }
        let mut pipe = redis::pipe();
        for (job_id, stream, lease) in &running {
            pipe.add_command(
                function::renew(
                    &s.keys,
                    job_id,
                    &s.streams[*stream],
                    lease,
                    &s.consumer_name,
                )
                .into_cmd(),
            );
        }
        match s.redis.pipeline(&pipe).await {
            Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying next round"),
            Ok(results) => {
                for ((job_id, _, lease), r) in running.into_iter().zip(results) {
                    let reason = match r.and_then(|v| Renewal::decode(&v)) {
                        Ok(Renewal::Ok) => continue,
                        Ok(Renewal::Stopped) => CancelReason::Stopped,
                        Ok(Renewal::Lost) => CancelReason::LeaseLost,
                        Err(e) => {
                            tracing::warn!(job = %job_id, error = %e, "renewal failed");
                            continue;
                        }
                    };
                    tracing::info!(job = %job_id, ?reason, "interrupting the handler");
                    s.inflight.cancel(&job_id, Some(&lease), reason);
                }
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
