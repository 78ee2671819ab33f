//! Where a request comes from, as the browser says it (`Sec-Fetch-Site`, `Sec-Fetch-Mode`,
//! `Origin`), and whether a program's bearer token or only a browser's session cookie
//! authenticates it: what the access rules ([`super::access`]) and the dashboard's audit page
//! (which a link from another site must not set off) decide by.

use axum::http::{header, HeaderMap, HeaderValue};

use super::session;

/// The token of `Authorization: Bearer <token>`, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Why a change is refused as coming from elsewhere, if it is: a browser names where a request
/// comes from (`Sec-Fetch-Site`, `Origin`); a page on another port of this host is another
/// origin though the same site, so only `same-origin` passes. Behind TLS the origin's scheme
/// must be https. A change that only a session cookie authenticates must name its origin.
pub fn foreign_origin(headers: &HeaderMap, behind_tls: bool) -> Option<String> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    // a browser that sends Sec-Fetch-Site says where the request came from, and a page cannot
    // forge it; `Origin` may then be `null` for the dashboard's own forms
    let site = text("sec-fetch-site");
    match site {
        Some("same-origin") => return None,
        Some("none") | None => {}
        Some(site) => {
            return Some(format!(
                "the browser says this request came from a {site} page"
            ));
        }
    }
    let host = text(header::HOST.as_str()).unwrap_or_default();
    if let Some(origin) = text(header::ORIGIN.as_str()) {
        let authority = if behind_tls {
            origin.strip_prefix("https://")
        } else {
            origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"))
        };
        if !authority.is_some_and(|a| a.eq_ignore_ascii_case(host)) {
            return Some(format!("it came from the page of {origin}, not of {host}"));
        }
        return None;
    }
    let by_cookie =
        bearer(headers).is_none() && session::presented(headers, behind_tls).next().is_some();
    by_cookie.then(|| {
        "a browser's change must name its origin (Origin), and this one names none".to_string()
    })
}

/// A request only a session cookie authenticates, sent by a page of another site (another port
/// of this host is one) as a subresource (an image, a `no-cors` fetch): refused, so such a page
/// cannot make the operator's browser run heavy reads (`/audit?run=1`). Following a link here
/// (a navigation) is allowed; it reads a page the other site cannot see.
pub fn foreign_subresource(headers: &HeaderMap, behind_tls: bool) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    matches!(text("sec-fetch-site"), Some("same-site" | "cross-site"))
        && text("sec-fetch-mode") != Some("navigate")
        && bearer(headers).is_none()
        && session::presented(headers, behind_tls).next().is_some()
}

/// Whether the request came from this origin (or was typed or bookmarked): for what a
/// navigation from another site must not set off.
pub fn same_origin(headers: &HeaderMap) -> bool {
    matches!(
        headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()),
        None | Some("same-origin" | "none")
    )
}

/// The request header the guard sets to the credential it resolved: `token:<role>` (a token's
/// holders share it), `session:<id>`, or `open`.
pub const WHO_HEADER: &str = "x-hero-resolved-credential";

/// The credential the guard resolved for a request, and whether it is the admin's: what the
/// live streams are counted by.
pub fn credential(headers: &HeaderMap) -> (String, bool) {
    let who = headers
        .get(WHO_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("open")
        .to_string();
    let admin = headers.get(ROLE_HEADER).and_then(|v| v.to_str().ok()) == Some("admin");
    (who, admin)
}

/// The request header the guard sets to the role it resolved (`admin` or `read`), after
/// removing any a client sent: how handlers' [`App::authorize`] knows it.
pub const ROLE_HEADER: &str = "x-hero-resolved-role";

/// A path of this server to send a browser to: `//evil.example/` and `/\evil.example` would
/// leave it, so leading slashes and backslashes fold into one slash; a control character
/// (a browser drops a tab from a URL, so `/\t/evil.example` leaves too) sends to `/`.
pub fn local_path(to: &str) -> String {
    if !to.starts_with('/') || to.contains(|c: char| c.is_control()) {
        return "/".to_string();
    }
    format!("/{}", to.trim_start_matches(['/', '\\']))
}
