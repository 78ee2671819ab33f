//! The broker's HTTP face (axum): the admin JSON API ([`api`]), `/metrics`, `/healthz` and
//! `/readyz` ([`metrics`]) and the dashboard ([`dashboard`]). Every handler reads Redis through
//! `hero_admin::inspect` and changes it only through `hero_admin::repair` and the client's
//! server-function calls, so it holds no state: any number of brokers may serve it at once.
//! This module owns the server's settings, the bind rules (no non-loopback address without an
//! admin token), who may do what (`guard`: every request but the health checks and the static
//! assets needs a token; the read-only token reads with `env_vars` values redacted, the admin
//! token also changes jobs, runs the audit and may reveal them) and the JSON error type.

pub mod api;
pub mod dashboard;
pub mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hero_client::Client;
use tokio_util::sync::CancellationToken;

/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7700";

/// Request bodies larger than this are refused with 413 before they are read whole.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The cookie a browser keeps the token in once it opened a link carrying `?token=`.
pub const TOKEN_COOKIE: &str = "hero_token";

/// Where and how the broker serves HTTP.
#[derive(Clone, Debug, Default)]
pub struct HttpConfig {
    /// `None`: HTTP off.
    pub addr: Option<SocketAddr>,
    /// The admin token: every read, `env_vars` values on request, the audit, and every change.
    pub token: Option<String>,
    /// The read-only token: every read but the audit, `env_vars` values redacted.
    pub read_token: Option<String>,
    /// Reads need no token (`--http-open`, a trusted loopback only); changes still need the
    /// admin token.
    pub open: bool,
    /// No admin token was configured, so one was made at start: it is printed with the
    /// address, as Jupyter does, and known to no one else.
    pub generated: bool,
}

/// What a request may do, from the token it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads, with `env_vars` values redacted; no audit, no change.
    Read,
    /// Everything.
    Admin,
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
    #[error("--http-open lets anyone who reaches {0} read every job: it is for a trusted loopback only. Bind 127.0.0.1, or give a read-only token (--http-read-token) instead")]
    OpenNotLoopback(SocketAddr),
    #[error("--http-read-token is the same as the admin token: give the read-only token a value of its own")]
    SameTokens,
}

impl HttpConfig {
    /// From the flag's text (`off` or host:port) and the token's sources; the flag wins over
    /// the file.
    pub fn parse(
        addr: &str,
        token: Option<String>,
        token_file: Option<&std::path::Path>,
        read_token: Option<String>,
        open: bool,
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
        let mut cfg = HttpConfig {
            addr,
            token,
            read_token: read_token.filter(|t| !t.is_empty()),
            open,
            generated: false,
        };
        cfg.check()?;
        if cfg.addr.is_some() && cfg.token.is_none() {
            // a loopback address without a token: one made now, printed with the address
            cfg.token = Some(uuid::Uuid::new_v4().simple().to_string());
            cfg.generated = true;
        }
        Ok(cfg)
    }

    /// A non-loopback address needs an admin token, and never serves reads without one.
    pub fn check(&self) -> Result<(), HttpError> {
        if self.token.is_some() && self.token == self.read_token {
            return Err(HttpError::SameTokens);
        }
        match self.addr {
            Some(a) if !a.ip().is_loopback() && self.token.is_none() => {
                Err(HttpError::OpenWithoutToken(a))
            }
            Some(a) if !a.ip().is_loopback() && self.open => Err(HttpError::OpenNotLoopback(a)),
            _ => Ok(()),
        }
    }

    /// The address to open in a browser: with the admin token in it when the broker made that
    /// token (no one else knows it), else without (the operator configured it).
    pub fn link(&self, bound: SocketAddr) -> String {
        match (&self.token, self.generated) {
            (Some(t), true) => format!("http://{bound}/?token={t}"),
            _ => format!("http://{bound}/"),
        }
    }
}

/// What every handler shares: the client (a multiplexed connection) and the tokens.
#[derive(Clone)]
pub struct App {
    pub client: Client,
    token: Option<Arc<str>>,
    read_token: Option<Arc<str>>,
    open: bool,
    /// Cancelled when the broker stops: live streams (SSE) end then, so shutdown never waits
    /// on an open dashboard.
    pub stop: CancellationToken,
}

impl App {
    /// The token a request carries: `Authorization: Bearer <token>`, else the cookie a link
    /// with `?token=` set.
    fn presented(headers: &HeaderMap) -> Option<&str> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        bearer.or_else(|| {
            headers
                .get_all(header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(';'))
                .find_map(|c| c.trim().strip_prefix(TOKEN_COOKIE)?.strip_prefix('='))
        })
    }

    /// The role of a token: 403 for one that is neither.
    fn role_of(&self, given: &str) -> Result<Role, ApiError> {
        let is = |t: &Option<Arc<str>>| {
            t.as_ref()
                .is_some_and(|t| constant_time_eq(t.as_bytes(), given.as_bytes()))
        };
        if is(&self.token) {
            Ok(Role::Admin)
        } else if is(&self.read_token) {
            Ok(Role::Read)
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the token is neither the broker's --http-token nor its --http-read-token",
            ))
        }
    }

    /// What a request may do: 401 without a token (unless reads are open), 403 with a wrong one.
    pub fn role(&self, headers: &HeaderMap) -> Result<Role, ApiError> {
        match Self::presented(headers) {
            Some(given) => self.role_of(given),
            None if self.open => Ok(Role::Read),
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this broker needs a token: send Authorization: Bearer <token> (its --http-token, or --http-read-token to read), or open the link it printed at start (…/?token=…)",
            )),
        }
    }

    /// Endpoints that change jobs, run the audit or reveal `env_vars`: the admin token only.
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match self.role(headers) {
            Ok(Role::Admin) => Ok(()),
            Ok(Role::Read) if Self::presented(headers).is_none() => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this endpoint needs the admin token: send Authorization: Bearer <token> (the broker's --http-token)",
            )),
            Ok(Role::Read) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the read-only token may not do this: it needs the broker's --http-token",
            )),
            Err(e) => Err(e),
        }
    }
}

/// Every request but the health checks and the static assets passes here: a `?token=` link
/// sets the cookie and sends the browser on without the token in its address; a request
/// without a valid token is answered 401 or 403 before any handler reads Redis.
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if matches!(path, "/healthz" | "/readyz") || path.starts_with("/assets/") {
        return next.run(req).await;
    }
    let query_token = req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("token="))
            .map(str::to_string)
    });
    // a browser's page gets a page back; the API, /metrics and the event stream get JSON
    let page = !(path.starts_with("/api/") || path == "/metrics");
    let refuse = |e: ApiError| {
        if page {
            dashboard::sign_in(e)
        } else {
            e.into_response()
        }
    };
    if let Some(given) = query_token {
        if let Err(e) = app.role_of(&given) {
            return refuse(e);
        }
        let rest: Vec<&str> = req
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|kv| !kv.starts_with("token=") && !kv.is_empty())
            .collect();
        let to = if rest.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{}", rest.join("&"))
        };
        let cookie = format!("{TOKEN_COOKIE}={given}; Path=/; HttpOnly; SameSite=Strict");
        let mut resp = axum::response::Redirect::to(&to).into_response();
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().insert(header::SET_COOKIE, v);
        }
        return resp;
    }
    match app.role(req.headers()) {
        Ok(role) => {
            let mut req = req;
            req.extensions_mut().insert(role);
            next.run(req).await
        }
        Err(e) => refuse(e),
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

impl From<hero_protocol::Error> for ApiError {
    fn from(e: hero_protocol::Error) -> ApiError {
        use hero_protocol::Error as E;
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
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed here: reads are GET, actions (stop, requeue, retry, purge, audit fix) are POST"),
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
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
        read_token: cfg.read_token.as_deref().map(Arc::from),
        open: cfg.open,
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
