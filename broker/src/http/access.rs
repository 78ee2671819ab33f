//! Who may do what over HTTP, decided before any handler reads Redis.
//!
//! - **Hosts.** A request must name the broker by a host it answers to (`--http-host`, else
//!   [`HostRule`]'s defaults): a web page that rebinds its own DNS name to 127.0.0.1 still
//!   sends its own name, and is refused (421). The health checks are exempt (load balancers
//!   probe by address) and say nothing of jobs.
//! - **Tokens and sessions.** `Authorization: Bearer <token>` from programs; a signed session
//!   cookie ([`super::session`]) from browsers, set by the sign-in form (a POST) or by opening
//!   the link the broker prints (`?token=`, the first visit), which then sends the browser on
//!   to the same page without the token. Never the token itself in a cookie.
//! - **Changes come from this origin.** A POST is refused when the browser says it came from
//!   another site or another port (`Sec-Fetch-Site`, `Origin`), when a session cookie is all
//!   that authenticates it and it names no origin, and under `/api/` when it is not JSON: a
//!   cross-site form or `no-cors` fetch can send neither.
//! - **Redirects stay here**: only to a path of this server.

use std::net::{IpAddr, SocketAddr};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::Router;
use hero_protocol::clock;
use serde::Deserialize;

use super::origin::{bearer, foreign_origin, foreign_subresource};
use super::server::Settle;
use super::{dashboard, session, ApiError, App, HttpError, Role, MAX_BODY_BYTES};

/// How long a request's body may take to arrive, once its headers and credentials have.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The sign-in and sign-out forms' bodies, read before any credential is known: what a client
/// without a token can make the broker read and wait for (a token and a path fit in far less).
pub const FORM_MAX_BYTES: usize = 4 * 1024;
pub const FORM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The host names (or addresses) a request may name in its `Host` header.
#[derive(Debug, Clone)]
pub struct HostRule {
    names: Vec<String>,
    /// A wildcard bind with no `--http-host`: any IP address is accepted (a DNS-rebinding page
    /// always sends a name, never an address), names only from the list.
    any_ip: bool,
}

/// A host as compared: lower case, no trailing dot, an IPv6 address in brackets.
fn canonical(host: &str) -> Option<String> {
    let h = host.trim().trim_end_matches('.').to_ascii_lowercase();
    if h.is_empty() {
        return None;
    }
    let bare = h
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(&h);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        });
    }
    let name_ok = h.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    name_ok.then_some(h)
}

/// The host part of a `Host` header (or an origin's authority): without the port.
fn host_part(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

impl HostRule {
    /// From `--http-host` (none: localhost, the loopback addresses and the bound address; a
    /// wildcard bind: localhost and any address).
    pub fn new(given: &[String], bind: Option<SocketAddr>) -> Result<HostRule, HttpError> {
        if !given.is_empty() {
            let names = given
                .iter()
                .map(|h| canonical(h).ok_or_else(|| HttpError::BadHost(h.clone())))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(HostRule {
                names,
                any_ip: false,
            });
        }
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut any_ip = false;
        if let Some(addr) = bind {
            if addr.ip().is_unspecified() {
                any_ip = true;
            } else if let Some(c) = canonical(&addr.ip().to_string()) {
                if !names.contains(&c) {
                    names.push(c);
                }
            }
        }
        Ok(HostRule { names, any_ip })
    }

    /// Whether a request naming `host` (a `Host` header, with or without port) is served.
    pub fn allows(&self, host: &str) -> bool {
        let Some(h) = canonical(host_part(host)) else {
            return false;
        };
        self.names.contains(&h)
            || (self.any_ip && h.trim_matches(['[', ']']).parse::<IpAddr>().is_ok())
    }

    /// What is accepted, for the start-up log.
    pub fn describe(&self) -> String {
        let mut text = self.names.join(", ");
        if self.any_ip {
            text.push_str(
                " and any IP address (a wildcard --http address: name DNS names with --http-host)",
            );
        }
        text
    }
}

/// Compares without stopping at the first difference, so response times say nothing of how
/// much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl App {
    fn token_of(&self, role: Role) -> Option<&str> {
        match role {
            Role::Admin => self.token.as_deref(),
            Role::Read => self.read_token.as_deref(),
        }
    }

    /// The role of a token: 403 for one that is neither.
    fn role_of(&self, given: &str) -> Result<Role, ApiError> {
        let is = |role| {
            self.token_of(role)
                .is_some_and(|t| constant_time_eq(t.as_bytes(), given.as_bytes()))
        };
        if is(Role::Admin) {
            Ok(Role::Admin)
        } else if is(Role::Read) {
            Ok(Role::Read)
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the token is neither the broker's --http-token nor its --http-read-token",
            ))
        }
    }

    /// What a request may do: a bearer token first, else a session cookie, else open reads;
    /// 401 without any (or with a session that expired), 403 with a wrong token.
    pub fn role(&self, headers: &HeaderMap) -> Result<Role, ApiError> {
        if let Some(given) = bearer(headers) {
            return self.role_of(given);
        }
        let now = clock::now_ms();
        let mut session = false;
        for s in session::presented(headers, self.behind_tls) {
            session = true;
            if let Some(role) = session::verify(s, now, |r| self.token_of(r)) {
                return Ok(role);
            }
        }
        if self.open {
            return Ok(Role::Read);
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            if session {
                "the session has expired (or the broker's token changed): sign in again with the token, or send Authorization: Bearer <token>"
            } else {
                "this broker needs a token: send Authorization: Bearer <token> (its --http-token, or --http-read-token to read), or open the link it printed at start (…/?token=…)"
            },
        ))
    }

    /// Endpoints that change jobs, run the audit or reveal `env_vars`: the admin token (or a
    /// session signed with it) only.
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match self.role(headers) {
            Ok(Role::Admin) => Ok(()),
            Ok(Role::Read) if bearer(headers).is_none() && session::presented(headers, self.behind_tls).next().is_none() => {
                Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "this endpoint needs the admin token: send Authorization: Bearer <token> (the broker's --http-token)",
                ))
            }
            Ok(Role::Read) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the read-only token may not do this: it needs the broker's --http-token",
            )),
            Err(e) => Err(e),
        }
    }

    /// A `Set-Cookie` header carrying a new session for `role`.
    fn session_cookie(&self, role: Role) -> Option<HeaderValue> {
        let token = self.token_of(role)?;
        let value = session::issue(role, token, clock::now_ms());
        HeaderValue::from_str(&session::set_cookie(&value, self.behind_tls)).ok()
    }
}

/// A path of this server to send a browser to: `//evil.example/` and `/\evil.example` would
/// leave it, so leading slashes and backslashes fold into one slash; a control character
/// (a browser drops a tab from a URL, so `/\t/evil.example` leaves too) sends to `/`.
pub fn local_path(to: &str) -> String {
    if !to.starts_with('/') || to.contains(|c: char| c.is_control()) {
        return "/".to_string();
    }
    format!("/{}", to.trim_start_matches(['/', '\\']))
}

/// The request with its body read whole within `timeout` and `max` bytes: a client that sends
/// a body a byte at a time holds a connection no longer than its headers. Once read, the
/// connection is settled (`server::Settle`): nothing of it waits on the client any more.
async fn with_body(
    req: Request,
    max: usize,
    timeout: std::time::Duration,
) -> Result<Request, ApiError> {
    let settle = req.extensions().get::<Settle>().cloned();
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        // said at once: waiting for a body refused anyway would hold the connection for nothing
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over {} KiB: send less", max / 1024),
        ));
    }
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(timeout, axum::body::to_bytes(body, max)).await;
    if let Some(s) = settle {
        s.settled();
    }
    match read {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, axum::body::Body::from(bytes))),
        Ok(Err(_)) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is over {} KiB (or was cut off): send less",
                max / 1024
            ),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body did not arrive within {timeout:?}"),
        )),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// Every request passes here first: the host, then (for a change) the origin and the body's
/// type, then the token or session; a `?token=` link becomes a session and a redirect to the
/// same page without it.
pub async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if matches!(path.as_str(), "/healthz" | "/readyz") {
        return next.run(req).await;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            req.uri()
                .authority()
                .map(axum::http::uri::Authority::as_str)
        })
        .unwrap_or_default()
        .to_string();
    if req.headers().get_all(header::HOST).iter().count() > 1 {
        return ApiError::bad_request("the request names its Host twice").into_response();
    }
    // an absolute-form request (`GET http://name/ HTTP/1.1`) names its host twice: both count
    let named = req
        .uri()
        .authority()
        .map(axum::http::uri::Authority::as_str);
    if !app.hosts.allows(&host) || named.is_some_and(|a| !app.hosts.allows(a)) {
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!("this broker is not served as {host:?}: it answers to {}; an operator adds a name with --http-host", app.hosts.describe()),
        )
        .into_response();
    }
    if path.starts_with("/assets/") {
        return next.run(req).await;
    }
    let change = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if change {
        if let Some(why) = foreign_origin(req.headers(), app.behind_tls) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                format!("refused a change from another origin: {why}. Changes come from the dashboard's own pages, or from programs with Authorization: Bearer <token>"),
            )
            .into_response();
        }
    }
    if foreign_subresource(req.headers(), app.behind_tls) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "refused: a page of another site (or another port of this host) asked for this with the operator's session; open the dashboard itself",
        )
        .into_response();
    }
    if matches!(path.as_str(), "/sign-in" | "/sign-out") {
        return match with_body(req, FORM_MAX_BYTES, FORM_TIMEOUT).await {
            Ok(req) => next.run(req).await,
            Err(e) => e.into_response(),
        };
    }
    // a browser's page gets a page back; the API, /metrics and the event stream get JSON
    let page = !(path.starts_with("/api/") || path == "/metrics");
    let here = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };
    let refuse = |e: ApiError| {
        if page {
            dashboard::sign_in(e, &without_token(&here))
        } else {
            e.into_response()
        }
    };
    let query_token = req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("token="))
            .map(str::to_string)
    });
    if let Some(given) = query_token {
        let role = match app.role_of(&given) {
            Ok(role) => role,
            Err(e) => return refuse(e),
        };
        let mut resp = Redirect::to(&local_path(&without_token(&here))).into_response();
        if let Some(cookie) = app.session_cookie(role) {
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        return resp;
    }
    match app.role(req.headers()) {
        Ok(role) => {
            let mut req = req;
            req.extensions_mut().insert(role);
            // a client with a credential may take its time over a body
            if let Some(s) = req.extensions().get::<Settle>() {
                s.settled();
            }
            if change && path.starts_with("/api/") {
                // every change of the API is the admin's: the read-only token is told so first
                if let Err(e) = app.authorize(req.headers()) {
                    return e.into_response();
                }
                // only a POST has a route to change anything (the router answers any other
                // method 405); a form or a `no-cors` fetch can send only GET, HEAD and POST
                if *req.method() == Method::POST && !is_json(req.headers()) {
                    return ApiError::new(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "a change to the API is sent as JSON: add Content-Type: application/json (the body may be empty or {})",
                    )
                    .into_response();
                }
            }
            if change {
                // only now, with the request's credentials checked, is its body waited for
                req = match with_body(req, MAX_BODY_BYTES, BODY_TIMEOUT).await {
                    Ok(req) => req,
                    Err(e) => return e.into_response(),
                };
            }
            next.run(req).await
        }
        Err(e) => refuse(e),
    }
}

/// A path and query without its `token=` pair.
fn without_token(path_and_query: &str) -> String {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.starts_with("token=") && !kv.is_empty())
        .collect();
    if rest.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", rest.join("&"))
    }
}

pub fn routes() -> Router<App> {
    Router::new()
        .route("/sign-in", post(sign_in))
        .route("/sign-out", post(sign_out))
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
    #[serde(default)]
    next: String,
}

/// The sign-in form's POST: a session for the token's role and back to the page asked for; a
/// wrong token gets the form again. A POST keeps the token out of the address and the history.
async fn sign_in(State(app): State<App>, raw: Bytes) -> Response {
    let Ok(form) = serde_urlencoded::from_bytes::<SignIn>(&raw) else {
        return dashboard::sign_in(
            ApiError::bad_request("the sign-in form sends token=<token>: type the broker's token"),
            "/",
        );
    };
    let next = local_path(if form.next.is_empty() {
        "/"
    } else {
        &form.next
    });
    match app.role_of(form.token.trim()) {
        Ok(role) => {
            let mut resp = Redirect::to(&next).into_response();
            if let Some(cookie) = app.session_cookie(role) {
                resp.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            resp
        }
        Err(e) => dashboard::sign_in(e, &next),
    }
}

/// Ends the browser's session.
async fn sign_out(State(app): State<App>) -> Response {
    let mut resp = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie(app.behind_tls)) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_by_default_are_loopback_names_and_the_bound_address() {
        let r = HostRule::new(&[], Some("127.0.0.1:7700".parse().unwrap())).unwrap();
        for ok in [
            "localhost:7700",
            "LOCALHOST",
            "127.0.0.1:7700",
            "[::1]:7700",
            "localhost.",
        ] {
            assert!(r.allows(ok), "{ok}");
        }
        for no in [
            "evil.example:7700",
            "127.0.0.1.nip.io:7700",
            "",
            "10.0.0.5:7700",
            "localhost:x",
        ] {
            assert!(!r.allows(no), "{no}");
        }
        let wild = HostRule::new(&[], Some("0.0.0.0:7700".parse().unwrap())).unwrap();
        assert!(wild.allows("10.0.0.5:7700") && wild.allows("[fe80::1]:7700"));
        assert!(!wild.allows("rebind.evil.example:7700"));
        let named = HostRule::new(&["Hero.Example.com".into()], None).unwrap();
        assert!(named.allows("hero.example.com:443") && !named.allows("127.0.0.1"));
        for bad in ["http://x", "x:80", "a b", "", "x/y"] {
            assert!(HostRule::new(&[bad.into()], None).is_err(), "{bad}");
        }
    }

    #[test]
    fn redirects_never_leave_the_server() {
        assert_eq!(local_path("//evil.example/"), "/evil.example/");
        assert_eq!(local_path("/\\evil.example"), "/evil.example");
        assert_eq!(local_path("https://evil.example"), "/");
        assert_eq!(local_path("/jobs?status=error"), "/jobs?status=error");
        assert_eq!(
            without_token("/jobs?token=x&status=error"),
            "/jobs?status=error"
        );
    }
}
