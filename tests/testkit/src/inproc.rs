//! Workers and brokers run inside the test process, their events on a channel, stopped when
//! dropped; and the tracing subscriber that shows the libraries' logs of a failing test.

use std::time::Duration;

/// Installs a tracing subscriber once (RUST_LOG decides), so failures show the libraries' logs.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A worker running in this test process, its events delivered on a channel.
pub struct InProcWorker {
    events: tokio::sync::mpsc::UnboundedReceiver<hero_worker::WorkerEvent>,
    stop: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<hero_worker::Result<()>>,
    pub consumer: String,
}

impl InProcWorker {
    pub fn spawn(builder: hero_worker::WorkerBuilder) -> InProcWorker {
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let worker = builder
            .on_event(move |e| {
                let _ = tx.send(e.clone());
            })
            .build()
            .expect("build worker");
        let consumer = worker.consumer().to_string();
        let stop = tokio_util::sync::CancellationToken::new();
        let handle = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
        InProcWorker {
            events,
            stop,
            handle,
            consumer,
        }
    }

    /// The next event for which `pick` returns Some, within `limit`; earlier ones are skipped.
    pub async fn next<T>(
        &mut self,
        limit: Duration,
        mut pick: impl FnMut(&hero_worker::WorkerEvent) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(e)) => {
                    if let Some(v) = pick(&e) {
                        return v;
                    }
                }
                Ok(None) => panic!("worker {} ended while an event was awaited", self.consumer),
                Err(_) => panic!(
                    "timed out after {limit:?} waiting for a worker event of {}",
                    self.consumer
                ),
            }
        }
    }

    /// Graceful shutdown; returns once the worker has stopped.
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("worker stops within 30 s")
            .expect("worker task")
            .expect("worker run");
    }
}

/// A broker running in this test process until the token is cancelled or it is dropped.
pub struct InProcBroker {
    stop: tokio_util::sync::CancellationToken,
}

impl InProcBroker {
    pub async fn spawn(url: &str, cfg: hero_broker::config::BrokerConfig) -> InProcBroker {
        let client = hero_client::Client::connect(url)
            .await
            .expect("broker connects");
        hero_broker::daemon::publish_config(&client, &cfg)
            .await
            .expect("publish config");
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(hero_broker::daemon::run(client, cfg, stop.clone()));
        InProcBroker { stop }
    }
}

impl Drop for InProcBroker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A worker of type `long` whose handler reports in two steps, each when the test moves the
/// returned sender on: at once `10% copying files` and the line `began copying`; at step 1
/// `60% indexing` and the lines `copied 3 files`, `indexing began`; at step 2 it finishes with
/// the output `indexed`. What the progress tests follow through the CLI and the dashboard.
pub fn stepped_reporter(
    client: &hero_client::Client,
) -> (InProcWorker, tokio::sync::watch::Sender<u32>) {
    let (step_tx, step_rx) = tokio::sync::watch::channel(0u32);
    let worker = InProcWorker::spawn(
        hero_worker::Worker::builder(client.clone())
            .types(["long"])
            .handler(
                move |_j: hero_protocol::Job, ctx: hero_worker::JobContext| {
                    let mut step = step_rx.clone();
                    async move {
                        ctx.progress(10.0, "copying files");
                        ctx.log("began copying");
                        let _ = step.wait_for(|s| *s >= 1).await;
                        ctx.progress(60.0, "indexing");
                        ctx.log("copied 3 files");
                        ctx.log("indexing began");
                        let _ = step.wait_for(|s| *s >= 2).await;
                        hero_worker::Outcome::Done("indexed".into())
                    }
                },
            ),
    );
    (worker, step_tx)
}
