//! Trace context across processes: a job submitted inside a span carries its W3C trace context
//! (`traceparent`), and the worker runs the handler inside a span of the same trace; with
//! `--otlp`, `hero` exports both spans to an OTLP/HTTP collector.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
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
        move |_j: hero_protocol::Job, _| {
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

/// Trace export over OTLP/HTTP: a collector (a small HTTP server here) receives the spans of
/// `hero run` and of the `hero worker` that ran the job, in the job's trace.
#[tokio::test]
async fn hero_exports_the_submit_and_handler_spans_of_one_trace_over_otlp() {
    use std::sync::{Arc, Mutex};

    use hero_testkit::{binary, hero_cli, Proc};

    let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post({
            let bodies = bodies.clone();
            move |body: axum::body::Bytes| {
                let bodies = bodies.clone();
                async move {
                    bodies.lock().unwrap().push(body.to_vec());
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let server = RedisServer::start();
    let url = server.url();
    let mut worker = Proc::spawn(
        &binary("hero"),
        &[
            "--redis-url",
            &url,
            "--otlp",
            &collector,
            "worker",
            "--types",
            "rhai",
        ],
        &[],
        None,
    );
    let (code, out, err) = hero_cli(
        &url,
        &[
            "--otlp", &collector, "--json", "run", "--type", "rhai", "40 + 2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let id = v["id"]
        .as_str()
        .expect("run --json names the job")
        .to_string();
    let (_, rec, _) = hero_cli(&url, &["--json", "status", &id]);
    let rec: serde_json::Value = serde_json::from_str(rec.trim()).unwrap();
    let tp = rec["traceparent"]
        .as_str()
        .expect("a job run from hero carries its trace")
        .to_string();
    let trace_hex = tp.split('-').nth(1).unwrap().to_string();
    let trace_bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&trace_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(Duration::from_secs(30)).await, 0);
    // `hero run` exported at exit, the worker at shutdown: both carry the job's trace id
    let holding = bodies
        .lock()
        .unwrap()
        .iter()
        .filter(|b| b.windows(16).any(|w| w == trace_bytes.as_slice()))
        .count();
    assert!(
        holding >= 2,
        "the trace's spans from both processes reached the collector ({holding} exports held it)"
    );
}
