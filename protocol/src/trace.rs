//! W3C trace context across processes: the producer's current span, written into the job
//! record's `traceparent` field when a job is built, and the parent a worker gives the span it
//! runs the handler in. Spans are the `tracing` crate's; the trace and span ids are
//! OpenTelemetry's (through `tracing-opentelemetry`), so a process that installs its layer
//! (and an exporter, when it wants one) sees producer and handler in one trace. Without that
//! layer there is no trace id and nothing is written.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `00-<trace id>-<span id>-<flags>` of the current span, when it belongs to a trace.
pub fn current_traceparent() -> Option<String> {
    let current = tracing::Span::current();
    // no span, or one no subscriber records: nothing to carry, and nothing to pay per job
    if current.is_disabled() {
        return None;
    }
    let cx = current.context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The remote parent a `traceparent` names (`None` when it is not W3C trace context).
pub fn parent_context(traceparent: &str) -> Option<opentelemetry::Context> {
    let mut parts = traceparent.split('-');
    let (Some("00"), Some(trace), Some(span), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let sc = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        TraceState::default(),
    );
    sc.is_valid()
        .then(|| opentelemetry::Context::new().with_remote_span_context(sc))
}
