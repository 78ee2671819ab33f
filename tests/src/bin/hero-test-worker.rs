//! A worker process for crash tests: the real SDK with a handler that sleeps and answers with a
//! label, printing every worker event as one stdout line (`ready`, `started <id> <attempt>`,
//! `completion <id> <answer>`, `interrupted <id> <reason>`, `dropped <id> <reason>`,
//! `stopped <n>`), so a test can follow it and kill it with SIGKILL or SIGSTOP.
//!
//! Flags: --url U --namespace NS --types a,b --group G --instance I --concurrency N --lease-ms N
//! --presence-ms N --shutdown-ms N --sleep-ms N --label L --duties off (a broker or another
//! worker does the queue's upkeep). A script `sleep <ms>` overrides
//! --sleep-ms for that job; `fail <msg>` fails it.

use std::time::Duration;

use hero_worker::{Outcome, Worker, WorkerEvent};

fn line(s: String) {
    hero_testkit::say(&s);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    hero_testkit::init_tracing();
    let flags = hero_testkit::flags();
    let get = |k: &str, d: &str| flags.get(k).cloned().unwrap_or_else(|| d.to_string());
    let ms = |k: &str, d: u64| Duration::from_millis(get(k, &d.to_string()).parse().unwrap_or(d));
    let mut opts = hero_client::ClientOptions::new(get("url", "redis://127.0.0.1:6379"));
    opts.namespace = get("namespace", "hero");
    let client = hero_client::Client::with_options(opts).await?;
    let sleep = ms("sleep-ms", 0);
    let label = get("label", "w");
    let handler_label = label.clone();
    let mut builder = Worker::builder(client)
        .types(get("types", "test").split(',').map(str::to_string))
        .group(get("group", "default"))
        .concurrency(get("concurrency", "1").parse()?)
        .lease(ms("lease-ms", 30_000))
        .presence_ttl(ms("presence-ms", 15_000))
        .shutdown_deadline(ms("shutdown-ms", 30_000))
        .duties(get("duties", "on") != "off")
        .handler(move |job: hero_protocol::Job, _ctx| {
            let label = handler_label.clone();
            async move {
                let mut words = job.script.split_whitespace();
                match (words.next(), words.next()) {
                    (Some("sleep"), Some(n)) => {
                        tokio::time::sleep(Duration::from_millis(n.parse().unwrap_or(0))).await;
                    }
                    (Some("fail"), msg) => {
                        return Outcome::Fail(msg.unwrap_or("failed").to_string())
                    }
                    _ => {
                        if !sleep.is_zero() {
                            tokio::time::sleep(sleep).await;
                        }
                    }
                }
                Outcome::Done(label)
            }
        })
        .on_event(|e| {
            line(match e {
                WorkerEvent::Ready { consumer } => format!("ready {consumer}"),
                WorkerEvent::Started { job_id, attempt } => format!("started {job_id} {attempt}"),
                WorkerEvent::Completed {
                    job_id, completion, ..
                } => {
                    format!("completion {job_id} {}", completion.as_str())
                }
                WorkerEvent::Interrupted { job_id, reason } => {
                    format!("interrupted {job_id} {reason:?}")
                }
                WorkerEvent::Dropped { job_id, reason } => format!("dropped {job_id} {reason}"),
                WorkerEvent::Stopped { handed_back } => format!("stopped {handed_back}"),
            });
        });
    if let Some(instance) = flags.get("instance") {
        builder = builder.instance(instance.clone());
    }
    builder.build()?.run_until_signal().await?;
    Ok(())
}
