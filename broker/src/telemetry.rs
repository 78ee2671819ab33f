//! The `hero` binary's logging and tracing: log lines to stderr (`RUST_LOG`), and, when an OTLP
//! endpoint is configured (`--otlp`, `OTEL_EXPORTER_OTLP_ENDPOINT`), every span exported over
//! OTLP/HTTP (protobuf) by a batch processor on a thread of its own. Job spans cross processes
//! through the record's `traceparent` (`hero_protocol::trace`), so a producer, the handler it
//! caused and the broker's work on it land in one trace.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer as _;

/// Flushes the exporter when dropped: spans of the last second are not lost at exit.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.shutdown() {
                eprintln!("warning: flushing trace spans to the OTLP endpoint failed: {e}");
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {endpoint}: {reason}. Check --otlp (OTEL_EXPORTER_OTLP_ENDPOINT): an http:// URL of an OTLP/HTTP collector, e.g. http://127.0.0.1:4318")]
pub struct TelemetryError {
    endpoint: String,
    reason: String,
}

/// Installs the global subscriber: stderr logs, plus OTLP export when `otlp` names a
/// collector (its base URL, or the full `/v1/traces` URL).
pub fn init(otlp: Option<&str>) -> Result<Telemetry, TelemetryError> {
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "warn,hero_broker=info,hero_worker=info,hero_protocol=info".into()
            }),
        );
    let Some(endpoint) = otlp.map(str::trim).filter(|e| !e.is_empty()) else {
        tracing_subscriber::registry().with(fmt).init();
        return Ok(Telemetry { provider: None });
    };
    let url = if endpoint.ends_with("/v1/traces") {
        endpoint.to_string()
    } else {
        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
    };
    let exporter = SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .build()
        .map_err(|e| TelemetryError {
            endpoint: hero_protocol::shown_url(endpoint),
            reason: scrubbed(&e.to_string(), &url),
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("hero").build())
        .build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("hero"));
    tracing_subscriber::registry().with(fmt).with(otel).init();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// `text` (an exporter's error) with the endpoint's credentials hidden wherever it repeats them:
/// the URL as given and as shown, and its password on its own.
fn scrubbed(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &hero_protocol::shown_url(url));
    let userinfo = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .rsplit_once('@')
        .map(|(info, _)| info);
    if let Some(password) = userinfo.and_then(|i| i.split_once(':')).map(|(_, p)| p) {
        if !password.is_empty() {
            out = out.replace(password, "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_exporters_error_never_repeats_the_endpoints_password() {
        let url = "http://user:hunter2secret@[bad/v1/traces";
        let e = format!("invalid endpoint '{url}': invalid authority (hunter2secret)");
        let s = super::scrubbed(&e, url);
        assert!(!s.contains("hunter2secret"), "{s}");
        assert!(s.contains("user:***@"), "{s}");
    }
}
