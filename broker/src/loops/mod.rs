//! The broker's own periodic loops, each a pass over Redis repeated until the broker stops:
//! [`batch_ends`] (batch ends of old workers) and [`health`] (Redis's own: its memory policy,
//! disk, and whether it lost data). The queue's upkeep (promotion, recovery, time limits,
//! retention, depth samples, recurring jobs' ticks) is not here: every worker and broker does
//! it through `hero_duties` (`hero_protocol::duties`); nor is retiring drained shards
//! (`hero_client::Client::retire_drained_shards`, which the daemon and every Rust worker run).
//! Every pass moves jobs only through server functions, so brokers never double a move and a
//! crash between two calls leaves each job in one place.

pub mod batch_ends;
pub mod health;

use hero_protocol::outage::Outage;
use tokio_util::sync::CancellationToken;

/// Runs one pass of the loop `name`, recording its time (`hero_broker_loop_seconds`) and, when
/// it fails, an error (`hero_broker_loop_errors_total`), for `/metrics`.
pub(crate) async fn timed<T>(
    name: &'static str,
    pass: impl std::future::Future<Output = hero_protocol::Result<T>>,
) -> hero_protocol::Result<T> {
    let t0 = std::time::Instant::now();
    let r = pass.await;
    metrics::histogram!("hero_broker_loop_seconds", "loop" => name)
        .record(t0.elapsed().as_secs_f64());
    if r.is_err() {
        metrics::counter!("hero_broker_loop_errors_total", "loop" => name).increment(1);
    }
    r
}

/// Runs `pass` every `poll` until `stop` is cancelled: how many jobs each pass moved is added to
/// the counter `metric` (and logged as `what` was done to them). A failing pass backs off (100 ms
/// doubling to 5 s, never sooner than `poll`) and is logged as an [`Outage`]: the first failure
/// at once, then at most one line every 30 s with the count, and one line when it recovers.
/// Each pass is [`timed`] as the loop `name`.
pub(crate) async fn every<F, Fut>(
    what: &'static str,
    name: &'static str,
    metric: &'static str,
    poll: std::time::Duration,
    stop: CancellationToken,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = hero_protocol::Result<u64>>,
{
    let mut outage = Outage::new(format!("the {name} pass"));
    loop {
        let wait = match timed(name, pass()).await {
            Ok(n) => {
                outage.ok();
                if n > 0 {
                    metrics::counter!(metric).increment(n);
                    tracing::debug!(jobs = n, "{what}");
                }
                poll
            }
            Err(e) => outage.failed(&e).max(poll),
        };
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(wait) => {} }
    }
}
