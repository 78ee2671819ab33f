//! The broker's HTTP face (axum): the admin JSON API ([`api`]), `/metrics`, `/healthz` and
//! `/readyz` ([`metrics`]) and the dashboard ([`dashboard`]). Every handler reads Redis through
//! `hero_client::inspect` and changes it only through `hero_client::repair` and the client's
//! server-function calls, so it holds no state: any number of brokers may serve it at once.
//! This module owns the server's settings, the bind rules (no non-loopback address without a
//! token), the bearer-token check of mutating endpoints and the JSON error type.

pub mod api;
pub mod dashboard;
pub mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hero_client::Client;
use tokio_util::sync::CancellationToken;

/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7700";

/// Request bodies larger than this are refused with 413 before they are read whole.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Where and how the broker serves HTTP.
#[derive(Clone, Debug, Default)]
pub struct HttpConfig {
    /// `None`: HTTP off.
    pub addr: Option<SocketAddr>,
    /// The bearer token mutating endpoints require.
    pub token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("refusing to serve HTTP on {0} without a token: anyone who can reach it could stop and requeue jobs. Set --http-token (or HERO_HTTP_TOKEN, or --http-token-file), or bind a loopback address such as 127.0.0.1:7700")]
    OpenWithoutToken(SocketAddr),
    #[error("cannot listen on {addr}: {source}. Is another broker serving there? Choose another address with --http, or --http off")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("--http {0:?} is not an address: give host:port (e.g. 127.0.0.1:7700) or off")]
    BadAddress(String),
    #[error("cannot read the token file {path}: {source}")]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the token file {0} is empty: write the token into it")]
    EmptyToken(String),
}

impl HttpConfig {
    /// From the flag's text (`off` or host:port) and the token's sources; the flag wins over
    /// the file.
    pub fn parse(
        addr: &str,
        token: Option<String>,
        token_file: Option<&std::path::Path>,
    ) -> Result<HttpConfig, HttpError> {
        let addr = match addr.trim() {
            "off" | "" => None,
            a => Some(
                a.parse::<SocketAddr>()
                    .map_err(|_| HttpError::BadAddress(a.to_string()))?,
            ),
        };
        let token = match (token.filter(|t| !t.is_empty()), token_file) {
            (Some(t), _) => Some(t),
            (None, Some(path)) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| HttpError::TokenFile {
                        path: path.display().to_string(),
                        source,
                    })?;
                let t = text.trim().to_string();
                if t.is_empty() {
                    return Err(HttpError::EmptyToken(path.display().to_string()));
                }
                Some(t)
            }
            (None, None) => None,
        };
        let cfg = HttpConfig { addr, token };
        cfg.check()?;
        Ok(cfg)
    }

    /// A non-loopback address needs a token.
    pub fn check(&self) -> Result<(), HttpError> {
        match self.addr {
            Some(a) if !a.ip().is_loopback() && self.token.is_none() => {
                Err(HttpError::OpenWithoutToken(a))
            }
            _ => Ok(()),
        }
    }
}

/// What every handler shares: the client (a multiplexed connection) and the token.
#[derive(Clone)]
pub struct App {
    pub client: Client,
    token: Option<Arc<str>>,
    /// Cancelled when the broker stops: live streams (SSE) end then, so shutdown never waits
    /// on an open dashboard.
    pub stop: CancellationToken,
}

impl App {
    /// Mutating endpoints: 401 without a bearer token, 403 with a wrong one (or when the broker
    /// has none configured: nothing can match).
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let given = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let Some(given) = given else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this endpoint changes jobs: send Authorization: Bearer <token> (the broker's --http-token)",
            ));
        };
        match &self.token {
            Some(t) if constant_time_eq(t.as_bytes(), given.as_bytes()) => Ok(()),
            Some(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the bearer token is not the broker's --http-token",
            )),
            None => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "this broker has no --http-token configured, so nothing may change jobs over HTTP: restart it with one",
            )),
        }
    }
}

/// Compares without stopping at the first difference, so response times say nothing of how
/// much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An error answered as JSON `{"error": "..."}` with its status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<hero_client::Error> for ApiError {
    fn from(e: hero_client::Error) -> ApiError {
        use hero_client::Error as E;
        let status = match &e {
            E::InvalidName { .. } | E::InvalidInput(_) => StatusCode::BAD_REQUEST,
            E::JobNotFound(_) => StatusCode::NOT_FOUND,
            E::InvalidJob(_) => StatusCode::UNPROCESSABLE_ENTITY,
            E::Unreachable { .. } | E::Redis(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

/// The whole router: API, metrics and health, dashboard.
pub fn router(app: App) -> Router {
    Router::new()
        .merge(api::routes())
        .merge(metrics::routes())
        .merge(dashboard::routes())
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no such page or endpoint: see / for the dashboard and /api/queues for the API",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

/// Binds `cfg.addr` and serves until `stop`; returns the address it listens on (port 0 picks
/// one) and the server's task. `Ok(None)` when HTTP is off.
pub async fn serve(
    client: Client,
    cfg: &HttpConfig,
    stop: CancellationToken,
) -> Result<Option<(SocketAddr, tokio::task::JoinHandle<()>)>, HttpError> {
    cfg.check()?;
    let Some(addr) = cfg.addr else {
        return Ok(None);
    };
    metrics::install_recorder();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| HttpError::Bind { addr, source })?;
    let app = App {
        client,
        token: cfg.token.as_deref().map(Arc::from),
        stop: stop.clone(),
    };
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router(app))
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the HTTP server stopped");
        }
    });
    tracing::info!(url = %format!("http://{bound}/"), "serving HTTP");
    Ok(Some((bound, task)))
}
