//! Trace context across processes: a job submitted inside a span carries its W3C trace context
//! (`traceparent`), and the worker runs the handler inside a span of the same trace.

use std::time::Duration;

use hero_client::{Client, JobId, NewJob, Status};
use hero_testkit::{InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

fn trace_id_of(span: &tracing::Span) -> String {
    span.context().span().span_context().trace_id().to_string()
}

#[tokio::test]
async fn a_job_submitted_inside_a_span_is_handled_inside_a_span_of_the_same_trace() {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("hero-test")));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let _w = InProcWorker::spawn(Worker::builder(client.clone()).types(["traced"]).handler(
        move |_j: hero_client::Job, _| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(trace_id_of(&tracing::Span::current()));
                Outcome::Done("ok".into())
            }
        },
    ));

    let producer = tracing::info_span!("producer");
    let (want, job) = {
        let _in = producer.enter();
        let job = NewJob::builder("traced", "x").id("t-1").build().unwrap();
        (trace_id_of(&producer), job)
    };
    assert_ne!(
        want, "00000000000000000000000000000000",
        "the producer's span is traced"
    );
    let tp = job
        .job()
        .traceparent
        .clone()
        .expect("the job carries the trace context");
    assert!(tp.starts_with(&format!("00-{want}-")), "{tp}");
    client.submit(&job).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the handler ran")
        .unwrap();
    assert_eq!(got, want, "the handler's span is in the producer's trace");
    let r = client
        .wait(&JobId::new("t-1").unwrap(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.status, Status::Finished);

    // outside any span: no trace context, and the handler's span starts a trace of its own
    let plain = NewJob::builder("traced", "x").id("t-2").build().unwrap();
    assert_eq!(plain.job().traceparent, None);
    client.submit(&plain).await.unwrap();
    let other = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the handler ran")
        .unwrap();
    assert_ne!(other, want);
}
