//! Signing in and out: the sign-in form's POST (a session read-only unless the operator asks
//! for changes), the printed link's one-time code (spent by its first visit, refused from
//! another site), the session's record in Redis and its cookie, and sign-out, which deletes the
//! record so the session ends on every broker. `access` checks what a request presents;
//! `session` signs and reads the cookie.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::Router;
use hero_protocol::clock;
use serde::Deserialize;

use super::access::local_path;
use super::{dashboard, session, ApiError, App, Role};

impl App {
    /// What sessions are signed with: both tokens, so a change of either ends them all.
    pub(super) fn session_key(&self) -> String {
        format!(
            "{}\n{}",
            self.token.as_deref().unwrap_or_default(),
            self.read_token.as_deref().unwrap_or_default()
        )
    }

    /// A `Set-Cookie` header carrying a new session for `role`, its record stored in Redis for
    /// as long as the cookie lasts.
    async fn session_cookie(&self, role: Role) -> Result<HeaderValue, ApiError> {
        let token = self.session_key();
        let sid = session::new_id();
        let ttl = session::SESSION_TTL.as_millis() as u64;
        let () = self
            .client
            .redis()
            .query(
                redis::cmd("SET")
                    .arg(self.client.keys().session(&sid))
                    .arg(session::letter(role))
                    .arg("PX")
                    .arg(ttl),
            )
            .await?;
        let value = session::issue(role, &token, clock::now_ms(), &sid);
        HeaderValue::from_str(&session::set_cookie(&value, self.behind_tls)).map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the session cookie is not a header value",
            )
        })
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
    /// `1`/`on`: the operator asks for a session that may change jobs (the admin token only);
    /// without it a session reads only, whatever the token.
    #[serde(default)]
    changes: String,
}

/// The sign-in form's POST: a session for the token's role (read-only unless the operator
/// ticked "allow changes" with the admin token) and back to the page asked for; a wrong token
/// gets the form again. A POST keeps the token out of the address and the history.
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
            let asked = matches!(form.changes.as_str(), "1" | "on" | "true");
            let role = if asked { role } else { Role::Read };
            signed_in(&app, role, &next).await
        }
        Err(e) => dashboard::sign_in(e, &next),
    }
}

/// A redirect to `next` carrying a new session for `role`.
async fn signed_in(app: &App, role: Role, next: &str) -> Response {
    match app.session_cookie(role).await {
        Ok(cookie) => {
            let mut resp = Redirect::to(next).into_response();
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
            resp
        }
        Err(e) => dashboard::sign_in(e, next),
    }
}

/// The printed link's one-time code: spent (GETDEL) by its first visit, which gets the session
/// the broker minted it for; refused from another site (a page cannot sign the operator in,
/// even with a code it got), and once spent.
pub(super) async fn spend_code(app: &App, headers: &HeaderMap, code: &str, next: &str) -> Response {
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    if !matches!(site, "none" | "same-origin") {
        return dashboard::sign_in(
            ApiError::new(StatusCode::FORBIDDEN, "a sign-in link opened from another site signs nothing in: open it from the terminal that printed it"),
            next,
        );
    }
    let valid = !code.is_empty() && code.len() <= 64 && code.bytes().all(|b| b.is_ascii_hexdigit());
    let letter: Option<String> = if valid {
        match app
            .client
            .redis()
            .query(redis::cmd("GETDEL").arg(app.client.keys().sign_in_code(code)))
            .await
        {
            Ok(l) => l,
            Err(e) => return dashboard::sign_in(e.into(), next),
        }
    } else {
        None
    };
    let role = match letter.as_deref() {
        Some("a") => Role::Admin,
        Some("r") => Role::Read,
        _ => {
            return dashboard::sign_in(
                ApiError::new(StatusCode::UNAUTHORIZED, "this sign-in link was used already (each is good once) or is not this broker's: sign in with the token, or restart the broker for a new link"),
                next,
            )
        }
    };
    signed_in(app, role, next).await
}

/// A one-time code for a printed link, good for `ttl`, granting `role`'s session to the first
/// visit (`?code=`): the broker's link at start.
pub async fn mint_code(
    client: &hero_client::Client,
    role: Role,
    ttl: std::time::Duration,
) -> Result<String, hero_protocol::Error> {
    let code = session::new_id();
    let () = client
        .redis()
        .query(
            redis::cmd("SET")
                .arg(client.keys().sign_in_code(&code))
                .arg(session::letter(role))
                .arg("PX")
                .arg(ttl.as_millis() as u64),
        )
        .await?;
    Ok(code)
}

/// Ends the browser's session everywhere: its record in Redis is deleted, so the cookie is
/// refused by every broker, wherever a copy of it went; the browser is told to forget its
/// cookies and storage (`Clear-Site-Data`; the dashboard's script clears its own storage too).
async fn sign_out(State(app): State<App>, headers: HeaderMap) -> Response {
    if let Ok((_, Some(sid))) = app.role(&headers).await {
        if let Err(e) = app
            .client
            .redis()
            .query::<i64>(redis::cmd("DEL").arg(app.client.keys().session(&sid)))
            .await
        {
            return ApiError::from(e).into_response();
        }
    }
    let mut resp = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie(app.behind_tls)) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp.headers_mut().insert(
        "clear-site-data",
        HeaderValue::from_static("\"cookies\", \"storage\""),
    );
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
