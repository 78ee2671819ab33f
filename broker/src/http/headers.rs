//! What every answer carries, whatever produced it: the security headers, and errors as this
//! API's JSON.
//!
//! - The dashboard loads only its own script and style, is framed by no page (a framed "Purge
//!   all" button can be clicked through a decoy), sends no Referer to another origin, and is kept in no cache
//!   (pages show scripts, outputs and env values). Static assets keep their short cache.
//! - The framework answers some refusals itself in plain text (a body over the limit, a query
//!   that does not parse): they are rewritten as `{"error": "..."}` with the same status, so
//!   every documented error is the one answered.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, MAX_BODY_BYTES};

/// Only this server's script and style; no inline script, no frames, no plugins.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The layer: runs the request, then fixes up the answer.
pub async fn secure(State(behind_tls): State<bool>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let mut resp = as_json_error(resp).await;
    let h = resp.headers_mut();
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
    ];
    for (name, value) in fixed {
        h.insert(name, HeaderValue::from_static(value));
    }
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if behind_tls {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    resp
}

/// A 4xx/5xx answered in plain text by the framework, as this API's JSON error.
async fn as_json_error(resp: Response) -> Response {
    let status = resp.status();
    let plain = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|t| t.starts_with("text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return resp;
    }
    let (_, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .unwrap_or_default();
    let said = String::from_utf8_lossy(&text).trim().to_string();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "the request body is over {} KiB: send less (name fewer ids, or use {{\"all\": true}})",
            MAX_BODY_BYTES / 1024
        ),
        StatusCode::BAD_REQUEST if said.starts_with("Failed to deserialize query string") => {
            format!(
                "the query is not what this endpoint takes ({}): see docs/http.md for its parameters",
                said.trim_start_matches("Failed to deserialize query string: ")
            )
        }
        _ if said.is_empty() => status.canonical_reason().unwrap_or("refused").to_string(),
        _ => said,
    };
    ApiError::new(status, message).into_response()
}
