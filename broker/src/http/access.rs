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

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hero_protocol::clock;

use super::origin::{bearer, foreign_origin, foreign_subresource, ROLE_HEADER, WHO_HEADER};
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
    pub(super) fn role_of(&self, given: &str) -> Result<Role, ApiError> {
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

    /// What a request may do: a bearer token first, else a session cookie whose record still
    /// exists in Redis (the highest role among the live ones a request presents, so a session
    /// cookie tossed in by a page on another port cannot stand in front of the operator's own),
    /// else open reads; 401 without any (or with sessions ended or expired), 403 with a wrong
    /// token. Answers the live session's id too (for signing out).
    pub async fn role(&self, headers: &HeaderMap) -> Result<(Role, Option<String>), ApiError> {
        if let Some(given) = bearer(headers) {
            return self.role_of(given).map(|r| (r, None));
        }
        let now = clock::now_ms();
        let mut presented = false;
        let mut signed = Vec::new();
        for s in session::presented(headers, self.behind_tls).take(8) {
            presented = true;
            if let Some(v) = session::verify(s, now, &self.session_key()) {
                signed.push(v);
            }
        }
        if !signed.is_empty() {
            let mut pipe = redis::pipe();
            for (_, sid) in &signed {
                pipe.cmd("GET").arg(self.client.keys().session(sid));
            }
            let live = self.client.redis().pipeline(&pipe).await?;
            let best = signed
                .into_iter()
                .zip(live)
                .filter(|((role, _), v)| {
                    v.as_ref()
                        .ok()
                        .and_then(|v| hero_protocol::reply::text(v).ok())
                        .is_some_and(|l| l == session::letter(*role))
                })
                .map(|(s, _)| s)
                .max_by_key(|(role, _)| *role);
            if let Some((role, sid)) = best {
                return Ok((role, Some(sid)));
            }
        }
        if self.open {
            return Ok((Role::Read, None));
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            if presented {
                "the session has ended (signed out) or expired, or the broker's token changed: sign in again with the token, or send Authorization: Bearer <token>"
            } else {
                "this broker needs a token: send Authorization: Bearer <token> (its --http-token, or --http-read-token to read), or sign in on the dashboard's form (or open the link it printed at start)"
            },
        ))
    }

    /// Endpoints that change jobs, run the audit or reveal `env_vars`: the admin token, or a
    /// session the operator signed in for changes. Reads the role the guard resolved for this
    /// request ([`ROLE_HEADER`], set by the guard alone).
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let role = headers.get(ROLE_HEADER).and_then(|v| v.to_str().ok());
        let credential = bearer(headers).is_some()
            || session::presented(headers, self.behind_tls)
                .next()
                .is_some();
        match role {
            Some("admin") => Ok(()),
            Some(_) if !credential => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this endpoint needs the admin token: send Authorization: Bearer <token> (the broker's --http-token)",
            )),
            Some(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "this session or token may read only: changes need the broker's --http-token (sign in again and tick \"allow changes\", or send Authorization: Bearer <token>)",
            )),
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this endpoint needs the admin token: send Authorization: Bearer <token>",
            )),
        }
    }
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
/// type, then the token or session; the printed link's one-time `?code=` becomes a session and
/// a redirect to the same page without it (a `?token=` signs nothing in: a link from another
/// site could sign the browser into the attacker's session, and the address stays in the
/// history).
pub async fn guard(State(app): State<App>, mut req: Request, next: Next) -> Response {
    // only this guard says which role a request has (`App::authorize` reads it)
    req.headers_mut().remove(ROLE_HEADER);
    req.headers_mut().remove(WHO_HEADER);
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
    let (token_q, code_q) = {
        let query = |name: &str| -> Option<String> {
            req.uri().query().and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix(name))
                    .map(str::to_string)
            })
        };
        (query("token="), query("code="))
    };
    if token_q.is_some() {
        return dashboard::sign_in(
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "a token in the address signs nothing in (a link from another site could sign this browser in, and the address stays in the history): type the token in the form, or open the link with a one-time code the broker printed",
            ),
            &without_token(&here),
        );
    }
    if let Some(code) = code_q {
        let headers = req.headers().clone();
        return super::signin::spend_code(&app, &headers, &code, &without_token(&here)).await;
    }
    match app.role(req.headers()).await {
        Ok((role, sid)) => {
            let mut req = req;
            req.extensions_mut().insert(role);
            let role_name = if role == Role::Admin { "admin" } else { "read" };
            req.headers_mut()
                .insert(ROLE_HEADER, HeaderValue::from_static(role_name));
            let who = match (sid, bearer(req.headers()).is_some()) {
                (Some(sid), _) => format!("session:{sid}"),
                (None, true) => format!("token:{role_name}"),
                (None, false) => "open".to_string(),
            };
            if let Ok(v) = HeaderValue::from_str(&who) {
                req.headers_mut().insert(WHO_HEADER, v);
            }
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
        .filter(|kv| !kv.starts_with("token=") && !kv.starts_with("code=") && !kv.is_empty())
        .collect();
    if rest.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", rest.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::origin::local_path;
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
