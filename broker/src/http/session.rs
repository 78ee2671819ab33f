//! The dashboard's session cookie: what a browser keeps once it signed in, instead of a token.
//!
//! A cookie on 127.0.0.1 is sent to every port of that host, so whatever the browser keeps can
//! reach any local HTTP server the operator opens. The cookie therefore never holds a token: it
//! holds `v1.<role>.<expires ms>.<HMAC-SHA256>`, the MAC keyed by the token of that role. It
//! proves the browser once showed that token, lasts [`SESSION_TTL`], and stops working when the
//! token changes. It needs no state on the broker, so several brokers behind a load balancer
//! that share the tokens all accept it. Behind TLS (`--http-behind-tls`) it is named
//! `__Host-hero_session` and marked `Secure`, so no plain-HTTP page and no other subdomain can
//! set or read it.

use std::time::Duration;

use ring::hmac;

use super::Role;

/// How long a session lasts from sign-in, then the token again: short, because on plain HTTP a
/// cookie reaches every port of the host (docs/http.md "Threat model").
pub const SESSION_TTL: Duration = Duration::from_secs(2 * 3600);

/// The cookie's name over plain HTTP.
pub const COOKIE: &str = "hero_session";

/// The cookie's name behind TLS: the browser accepts it only with `Secure`, `Path=/` and no
/// `Domain`, so it is bound to this origin.
pub const HOST_COOKIE: &str = "__Host-hero_session";

fn key(token: &str) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, token.as_bytes())
}

fn role_letter(role: Role) -> &'static str {
    match role {
        Role::Read => "r",
        Role::Admin => "a",
    }
}

fn message(role: Role, expires_ms: u64) -> String {
    format!("hero-session.v1.{}.{expires_ms}", role_letter(role))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A session for `role`, signed with that role's `token`, valid until `now_ms` + the TTL.
pub fn issue(role: Role, token: &str, now_ms: u64) -> String {
    let expires = now_ms + SESSION_TTL.as_millis() as u64;
    let tag = hmac::sign(&key(token), message(role, expires).as_bytes());
    format!("v1.{}.{expires}.{}", role_letter(role), hex(tag.as_ref()))
}

/// The role a session proves, if its MAC is right for the token of the role it names and it
/// has not expired. `token_of` gives the configured token of a role.
pub fn verify<'t>(
    value: &str,
    now_ms: u64,
    token_of: impl Fn(Role) -> Option<&'t str>,
) -> Option<Role> {
    let mut parts = value.split('.');
    let (Some("v1"), Some(r), Some(expires), Some(tag), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let role = match r {
        "a" => Role::Admin,
        "r" => Role::Read,
        _ => return None,
    };
    let expires: u64 = expires.parse().ok()?;
    if expires <= now_ms {
        return None;
    }
    let tag = unhex(tag)?;
    let token = token_of(role)?;
    hmac::verify(&key(token), message(role, expires).as_bytes(), &tag).ok()?;
    Some(role)
}

/// The `Set-Cookie` value that keeps `session` in the browser.
pub fn set_cookie(session: &str, behind_tls: bool) -> String {
    let ttl = SESSION_TTL.as_secs();
    if behind_tls {
        format!("{HOST_COOKIE}={session}; Path=/; Max-Age={ttl}; HttpOnly; Secure; SameSite=Strict")
    } else {
        format!("{COOKIE}={session}; Path=/; Max-Age={ttl}; HttpOnly; SameSite=Strict")
    }
}

/// The `Set-Cookie` value that ends the session in the browser.
pub fn clear_cookie(behind_tls: bool) -> String {
    if behind_tls {
        format!("{HOST_COOKIE}=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict")
    } else {
        format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
    }
}

/// The sessions a request's cookies carry under the one name this deployment sets (`__Host-`
/// behind TLS, so a cookie tossed by a sibling host without the prefix is never read). Every
/// one is offered: a page on another port of the host can set a cookie of the same name that
/// the browser sends first, and it must not hide the operator's own.
pub fn presented(headers: &axum::http::HeaderMap, behind_tls: bool) -> impl Iterator<Item = &str> {
    let wanted = if behind_tls { HOST_COOKIE } else { COOKIE };
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(move |c| {
            let (name, value) = c.trim().split_once('=')?;
            (name == wanted).then_some(value)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: &str = "admin-token-0123456789";
    const READ: &str = "read-token-0123456789";

    #[allow(clippy::unnecessary_wraps)] // the shape `verify` takes
    fn tokens(role: Role) -> Option<&'static str> {
        Some(match role {
            Role::Admin => ADMIN,
            Role::Read => READ,
        })
    }

    #[test]
    fn a_session_proves_its_role_until_it_expires() {
        let s = issue(Role::Admin, ADMIN, 1_000);
        assert_eq!(verify(&s, 2_000, tokens), Some(Role::Admin));
        let r = issue(Role::Read, READ, 1_000);
        assert_eq!(verify(&r, 2_000, tokens), Some(Role::Read));
        let end = 1_000 + SESSION_TTL.as_millis() as u64;
        assert_eq!(verify(&s, end, tokens), None, "expired");
    }

    #[test]
    fn a_session_is_not_the_token_and_cannot_be_raised_or_extended() {
        let r = issue(Role::Read, READ, 1_000);
        assert!(!r.contains(READ) && !r.contains(ADMIN));
        let raised = r.replacen("v1.r.", "v1.a.", 1);
        assert_eq!(verify(&raised, 2_000, tokens), None);
        let parts: Vec<&str> = r.split('.').collect();
        let longer = format!("v1.r.{}.{}", parts[2].parse::<u64>().unwrap() + 1, parts[3]);
        assert_eq!(verify(&longer, 2_000, tokens), None);
        // signed by another broker's token: refused
        let other = issue(Role::Admin, "another-token-0123456789", 1_000);
        assert_eq!(verify(&other, 2_000, tokens), None);
        for junk in ["", "v1", "v1.a.x.y", "v1.a.99999999999999.zz", "v2.a.5.00"] {
            assert_eq!(verify(junk, 2_000, tokens), None, "{junk}");
        }
    }
}
