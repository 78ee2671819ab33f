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

use super::origin::local_path;
use super::{dashboard, session, ApiError, App, Role};

impl App {
    /// What sessions are signed with: both tokens, so a change of either ends them all.
    pub(super) fn session_key(&self) -> String {
        session::key_of(self.token.as_deref(), self.read_token.as_deref())
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
    // minted by a broker with these tokens (another's, on the same Redis, is no good here, and
    // is left unspent for the broker it belongs to): read, and only a code of ours spent
    let tag = session::key_tag(&app.session_key());
    let ours = |l: &Option<String>| {
        l.as_deref()
            .and_then(|l| l.split_once('.'))
            .is_some_and(|(_, t)| t == tag)
    };
    let key = app.client.keys().sign_in_code(code);
    let mut letter: Option<String> = None;
    if valid {
        let seen: Option<String> = match app.client.redis().query(redis::cmd("GET").arg(&key)).await
        {
            Ok(l) => l,
            Err(e) => return dashboard::sign_in(e.into(), next),
        };
        if ours(&seen) {
            letter = match app
                .client
                .redis()
                .query(redis::cmd("GETDEL").arg(&key))
                .await
            {
                Ok(l) => l,
                Err(e) => return dashboard::sign_in(e.into(), next),
            };
        }
    }
    let role = match letter.as_deref().and_then(|l| l.split_once('.')) {
        Some(("a", t)) if t == tag => Role::Admin,
        Some(("r", t)) if t == tag => Role::Read,
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
/// The code is bound to the broker's tokens (`session_key`): a broker with other tokens on the
/// same Redis does not take it.
pub async fn mint_code(
    client: &hero_client::Client,
    session_key: &str,
    role: Role,
    ttl: std::time::Duration,
) -> Result<String, hero_protocol::Error> {
    let code = session::new_id();
    let () = client
        .redis()
        .query(
            redis::cmd("SET")
                .arg(client.keys().sign_in_code(&code))
                .arg(format!(
                    "{}.{}",
                    session::letter(role),
                    session::key_tag(session_key)
                ))
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
