//! The control list: stop requests for jobs running here arrive as job ids pushed to the
//! worker's control lists; this loop BLPOPs them and interrupts the handlers at once.

use std::sync::Arc;
use std::time::Duration;

use hero_protocol::JobId;
use tokio_util::sync::CancellationToken;

use crate::inflight::CancelReason;
use crate::shared::Shared;
use hero_protocol::outage::Outage;

/// Waits on the worker's control lists and interrupts the jobs named there.
pub(crate) async fn control(s: Arc<Shared>, stop: CancellationToken) {
    let keys: Vec<String> = s
        .types
        .iter()
        .map(|t| {
            s.keys
                .ctl_instance(t, &s.consumer.group, &s.consumer.instance)
        })
        .collect();
    let block = Duration::from_secs(1);
    let mut outage = Outage::new("the wait for stop requests");
    let mut conn = None;
    loop {
        if conn.is_none() {
            match s.redis.dedicated(block).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    let delay = outage.failed(&e);
                    tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut blpop = redis::cmd("BLPOP");
        blpop.arg(&keys).arg(block.as_secs_f64());
        let popped = tokio::select! {
            _ = stop.cancelled() => return,
            r = blpop.query_async::<Option<(String, String)>>(c) => r,
        };
        match popped {
            Ok(Some((_, job_id))) => {
                outage.ok();
                // an id no JobId can hold names no job running here
                let Ok(job_id) = JobId::new(job_id) else {
                    continue;
                };
                if s.inflight.cancel(&job_id, None, CancelReason::Stopped) {
                    tracing::info!(job = %job_id, "stop request: handler interrupted");
                }
            }
            Ok(None) => outage.ok(),
            Err(e) => {
                conn = None;
                let delay = outage.failed(&e.into());
                tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
            }
        }
    }
}
