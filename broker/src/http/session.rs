//! The dashboard's session cookie: what a browser keeps once it signed in, instead of a token.
//!
//! A cookie on 127.0.0.1 is sent to every port of that host, so whatever the browser keeps can
//! reach any local HTTP server the operator opens. The cookie therefore never holds a token: it
//! holds `v2.<role>.<expires ms>.<session id>.<HMAC-SHA256>`, the MAC keyed by the broker's
//! tokens (`App::session_key`). It proves the browser once showed a token, lasts
//! [`SESSION_TTL`], and stops working when a token changes; its role is what the operator
//! signed in for (a session of the admin token is read-only unless asked for changes); and it
//! names a record in Redis (`Keyspace::session`) that
//! must still exist, so signing out ends it on every broker at once (a page that stole the
//! cookie replays it in vain), while brokers behind a load balancer stay stateless. Behind TLS
//! (`--http-behind-tls`) it is named `__Host-hero_session` and marked `Secure`, so no
//! plain-HTTP page and no other subdomain can set or read it.

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

fn message(role: Role, expires_ms: u64, sid: &str) -> String {
    format!("hero-session.v2.{}.{expires_ms}.{sid}", role_letter(role))
}

/// A role's letter in the session record and the cookie.
pub fn letter(role: Role) -> &'static str {
    role_letter(role)
}

/// What sessions (and sign-in codes) are bound to: both of a broker's tokens, so a change of
/// either ends them all, and a broker with other tokens sharing the Redis takes none of them.
pub fn key_of(token: Option<&str>, read_token: Option<&str>) -> String {
    format!(
        "{}\n{}",
        token.unwrap_or_default(),
        read_token.unwrap_or_default()
    )
}

/// A short public tag of a session key (SHA-256, 16 hex digits): what a sign-in code's record
/// carries to say which brokers may spend it, without the tokens.
pub fn key_tag(key: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    hex(&d.as_ref()[..8])
}

/// A new random session id (also a sign-in code): 128 bits, hex.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
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

/// A session `sid` for `role`, signed with `token` (the session key), valid until `now_ms` +
/// the TTL (while its record in Redis lasts too).
pub fn issue(role: Role, token: &str, now_ms: u64, sid: &str) -> String {
    let expires = now_ms + SESSION_TTL.as_millis() as u64;
    let tag = hmac::sign(&key(token), message(role, expires, sid).as_bytes());
    format!(
        "v2.{}.{expires}.{sid}.{}",
        role_letter(role),
        hex(tag.as_ref())
    )
}

/// The role and session id a cookie proves, if its MAC is right for the session key `token`
/// and it has not expired (whether its record still exists is the caller's to ask).
pub fn verify(value: &str, now_ms: u64, token: &str) -> Option<(Role, String)> {
    let mut parts = value.split('.');
    let (Some("v2"), Some(r), Some(expires), Some(sid), Some(tag), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if sid.is_empty() || sid.len() > 64 || !sid.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
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
    hmac::verify(&key(token), message(role, expires, sid).as_bytes(), &tag).ok()?;
    Some((role, sid.to_string()))
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
    const SID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_session_proves_its_role_and_id_until_it_expires() {
        let s = issue(Role::Admin, ADMIN, 1_000, SID);
        assert_eq!(
            verify(&s, 2_000, ADMIN),
            Some((Role::Admin, SID.to_string()))
        );
        let r = issue(Role::Read, ADMIN, 1_000, SID);
        assert_eq!(verify(&r, 2_000, ADMIN).map(|v| v.0), Some(Role::Read));
        let end = 1_000 + SESSION_TTL.as_millis() as u64;
        assert_eq!(verify(&s, end, ADMIN), None, "expired");
    }

    #[test]
    fn a_session_is_not_the_token_and_cannot_be_raised_extended_or_renamed() {
        let r = issue(Role::Read, ADMIN, 1_000, SID);
        assert!(!r.contains(ADMIN));
        let raised = r.replacen("v2.r.", "v2.a.", 1);
        assert_eq!(verify(&raised, 2_000, ADMIN), None);
        let parts: Vec<&str> = r.split('.').collect();
        let longer = format!(
            "v2.r.{}.{}.{}",
            parts[2].parse::<u64>().unwrap() + 1,
            parts[3],
            parts[4]
        );
        assert_eq!(verify(&longer, 2_000, ADMIN), None);
        let renamed = r.replace(SID, "ffffffffffffffffffffffffffffffff");
        assert_eq!(verify(&renamed, 2_000, ADMIN), None);
        // signed by another broker's token: refused
        let other = issue(Role::Admin, "another-token-0123456789", 1_000, SID);
        assert_eq!(verify(&other, 2_000, ADMIN), None);
        for junk in [
            "",
            "v2",
            "v2.a.x.y.z",
            "v1.a.99999999999999.zz",
            "v2.a.5.g.00",
        ] {
            assert_eq!(verify(junk, 2_000, ADMIN), None, "{junk}");
        }
    }
}
