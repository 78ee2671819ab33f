//! The broker's periodic loops, each a pass over Redis repeated until the broker stops:
//! [`recover`] (jobs of dead workers, idle deliveries), [`promote`] (due delayed jobs and
//! retries), [`retention`] (ended jobs past their retention time). Stats and cron passes join
//! them here. Every pass moves jobs only through server functions, so brokers never double a
//! move and a crash between two calls leaves each job in one place.

pub mod promote;
pub mod recover;
pub mod retention;

use tokio_util::sync::CancellationToken;

/// Runs `pass` every `poll` until `stop` is cancelled: how many jobs each pass moved is added to
/// the counter `metric` (and logged as `what` was done to them); a failed pass is logged and the
/// next one comes at the usual time.
pub(crate) async fn every<F, Fut>(
    what: &'static str,
    metric: &'static str,
    poll: std::time::Duration,
    stop: CancellationToken,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = hero_client::Result<u64>>,
{
    loop {
        match pass().await {
            Ok(n) if n > 0 => {
                metrics::counter!(metric).increment(n);
                tracing::debug!(jobs = n, "{what}");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "a pass that {what} failed; retrying"),
        }
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(poll) => {} }
    }
}
