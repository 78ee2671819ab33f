//! The broker's HTTP face (axum): the admin JSON API ([`api`]), `/metrics`, `/healthz` and
//! `/readyz` ([`metrics`]) and the dashboard ([`dashboard`]). Every handler reads Redis through
//! `hero_admin::inspect` and changes it only through `hero_admin::repair` and the client's
//! server-function calls, so it holds no state: any number of brokers may serve it at once.
//! This module owns the server's settings, the bind rules (no non-loopback address without an
//! admin token, no token shorter than [`MIN_TOKEN_LEN`]), the shared state of every handler and
//! the JSON error type. Who may do what is [`access`]'s (tokens, sessions, the Host allow-list,
//! the same-origin rule for changes, by what [`origin`] reads of where a request came from);
//! [`session`] signs the dashboard's cookie; [`server`]
//! accepts connections within their limits; [`headers`] puts the security headers on every
//! answer and turns the framework's plain-text refusals into this API's JSON; [`feed`] reads
//! the event log once per process for every open live stream.

pub mod access;
pub mod api;
pub mod dashboard;
pub mod feed;
pub mod headers;
pub mod metrics;
pub mod origin;
pub mod redact;
pub mod server;
pub mod session;
pub mod signin;
pub mod watched_io;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hero_client::Client;
use tokio_util::sync::CancellationToken;

/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7700";

/// Request bodies larger than this are refused with 413 before they are read whole.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A configured token shorter than this is refused at start: a token is the only thing between
/// the port and every job, and 16 characters of a random alphabet resist guessing over HTTP.
pub const MIN_TOKEN_LEN: usize = 16;

/// How long the printed link's one-time code is good for, unspent.
pub const CODE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Connections served at once by default (`--http-max-connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

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
    /// The `Host` names browsers may use (`--http-host`); empty: the defaults of
    /// [`access::HostRule`].
    pub hosts: Vec<String>,
    /// Reached through a TLS proxy: `__Host-` secure cookies, HSTS, https origins.
    pub behind_tls: bool,
    /// Connections served at once (`--http-max-connections`; at least 1).
    pub max_connections: usize,
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
    #[error("the {which} is {len} characters: give at least {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 16`), or leave it unset on a loopback address and use the link the broker prints")]
    ShortToken { which: &'static str, len: usize },
    #[error("--http-host {0:?} is not a host name or address: give a name such as hero.example.com, or an address such as 10.0.0.5 or [::1], without a scheme or port")]
    BadHost(String),
    #[error("--http-max-connections must be at least 1")]
    NoConnections,
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
            hosts: Vec::new(),
            behind_tls: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
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
        for (which, t) in [
            ("admin token", &self.token),
            ("read-only token", &self.read_token),
        ] {
            if let Some(t) = t.as_deref().filter(|t| t.chars().count() < MIN_TOKEN_LEN) {
                return Err(HttpError::ShortToken {
                    which,
                    len: t.chars().count(),
                });
            }
        }
        if self.max_connections == 0 {
            return Err(HttpError::NoConnections);
        }
        access::HostRule::new(&self.hosts, self.addr)?;
        match self.addr {
            Some(a) if !a.ip().is_loopback() && self.token.is_none() => {
                Err(HttpError::OpenWithoutToken(a))
            }
            Some(a) if !a.ip().is_loopback() && self.open => Err(HttpError::OpenNotLoopback(a)),
            _ => Ok(()),
        }
    }

    /// The address to open in a browser. When the broker made the admin token (no one else
    /// knows it) the link carries a one-time code for an admin session, spent by its first
    /// visit: never the token, which would stay in the browser's history. Otherwise the plain
    /// address (the operator signs in with the token configured).
    pub async fn link(
        &self,
        client: &Client,
        bound: SocketAddr,
    ) -> Result<String, hero_protocol::Error> {
        if self.generated {
            let key = session::key_of(self.token.as_deref(), self.read_token.as_deref());
            let code = signin::mint_code(client, &key, Role::Admin, CODE_TTL).await?;
            return Ok(format!("http://{bound}/?code={code}"));
        }
        Ok(format!("http://{bound}/"))
    }
}

/// What every handler shares: the client (a multiplexed connection), the tokens, the rules for
/// hosts and origins, and the one event-log reader of this process.
#[derive(Clone)]
pub struct App {
    pub client: Client,
    token: Option<Arc<str>>,
    read_token: Option<Arc<str>>,
    open: bool,
    behind_tls: bool,
    hosts: Arc<access::HostRule>,
    /// The live event feed every open stream (SSE) subscribes to.
    pub feed: feed::Feed,
    /// One audit at a time per process: it is the one O(jobs) read.
    pub audit: Arc<tokio::sync::Semaphore>,
    /// Cancelled when the broker stops: live streams (SSE) end then, so shutdown never waits
    /// on an open dashboard.
    pub stop: CancellationToken,
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

/// The whole router: API, metrics and health, dashboard, sign-in; every answer passes the
/// access guard and gets the security headers.
pub fn router(app: App) -> Router {
    Router::new()
        .merge(api::routes())
        .merge(metrics::routes())
        .merge(dashboard::routes())
        .merge(signin::routes())
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
        .layer(axum::middleware::from_fn_with_state(app.clone(), access::guard))
        .layer(axum::middleware::from_fn_with_state(
            app.behind_tls,
            headers::secure,
        ))
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
    let hosts = access::HostRule::new(&cfg.hosts, Some(bound))?;
    tracing::info!(accepted = %hosts.describe(), "HTTP: browsers may name this broker as");
    let app = App {
        feed: feed::Feed::new(client.clone(), stop.clone()),
        audit: Arc::new(tokio::sync::Semaphore::new(1)),
        client,
        token: cfg.token.as_deref().map(Arc::from),
        read_token: cfg.read_token.as_deref().map(Arc::from),
        open: cfg.open,
        behind_tls: cfg.behind_tls,
        hosts: Arc::new(hosts),
        stop: stop.clone(),
    };
    let limits = server::Limits::new(cfg.max_connections);
    let task = tokio::spawn(server::run(listener, router(app), limits, stop));
    tracing::info!(url = %format!("http://{bound}/"), "serving HTTP");
    Ok(Some((bound, task)))
}
