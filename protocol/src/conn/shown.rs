//! A URL as it may be shown: in a message, a log line, `hero up`'s banner, `hero config show`.
//! Every place that prints a Redis URL (or any URL a user gives, such as an OTLP endpoint)
//! prints it through [`shown_url`], so a password never reaches a terminal, a log collector or
//! a bug report (the Node client's `shownUrl` in `node/src/connect.ts` is its twin).

/// What a hidden password reads as.
pub const HIDDEN: &str = "***";

/// Query parameters that carry a password (redis-rs reads `pass` and `password` on
/// `redis+unix://` URLs).
const SECRET_PARAMS: [&str; 2] = ["pass", "password"];

/// `url` with its password shown as `***`: `redis://:***@127.0.0.1:6390/0`,
/// `rediss://user:***@host`, `redis+unix:///run/redis.sock?pass=***`. The user name stays (it
/// tells which ACL user connects); a URL without a password comes back whole. It never fails:
/// a URL too broken to parse is shown with everything before its last `@` hidden, so a
/// mistyped URL in an error message does not print the password it carries either.
pub fn shown_url(url: &str) -> String {
    // first the query's passwords (their values may hold an `@`), then the authority's
    let url = hide_params(url);
    let scheme_end = url.find("://").map(|s| s + 3);
    // a password may hold any character, `@` included: the user information ends at the last
    // `@` (a URL without a scheme starts with it)
    let Some(at) = url.rfind('@') else {
        return url;
    };
    let start = scheme_end.unwrap_or(0).min(at);
    let userinfo = &url[start..at];
    let shown = match userinfo.split_once(':') {
        Some((user, password)) if !password.is_empty() => format!("{user}:{HIDDEN}"),
        Some(_) => userinfo.to_string(),
        // `redis://name@host`: redis-rs reads a lone name as the user, with no password; but
        // text that is no user name, or a URL without a scheme, may be a password written alone
        None if scheme_end.is_some() && is_user_name(userinfo) => userinfo.to_string(),
        None => HIDDEN.to_string(),
    };
    format!("{}{shown}{}", &url[..start], &url[at..])
}

/// `url` with the values of its password parameters hidden, each up to the next `&`.
fn hide_params(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(i) = rest.find(['?', '&']) {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let end = rest.find('&').unwrap_or(rest.len());
        match rest[..end].split_once('=') {
            Some((k, v))
                if !v.is_empty() && SECRET_PARAMS.iter().any(|s| k.eq_ignore_ascii_case(s)) =>
            {
                out.push_str(k);
                out.push('=');
                out.push_str(HIDDEN);
                rest = &rest[end..];
            }
            _ => {}
        }
    }
    out.push_str(rest);
    out
}

/// Whether `s` reads as an ACL user name (letters, digits, `-`, `_`, `.`), not as a path or
/// a password.
fn is_user_name(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn a_password_is_shown_as_stars_and_the_rest_whole() {
        for (url, shown) in [
            (
                "redis://:s3cret@127.0.0.1:6390/0",
                "redis://:***@127.0.0.1:6390/0",
            ),
            ("rediss://user:s3cret@host", "rediss://user:***@host"),
            (
                "redis+sentinel://:s3cret@h1:26379,h2:26379/mymaster/2",
                "redis+sentinel://:***@h1:26379,h2:26379/mymaster/2",
            ),
            (
                "redis+cluster://app:s3cret@h1:7000,h2:7001",
                "redis+cluster://app:***@h1:7000,h2:7001",
            ),
            // a password holding `@`, `:`, `/` or `?`, unescaped as people type them
            ("redis://:p@ss:w/o?rd@h:1/0", "redis://:***@h:1/0"),
            (
                "redis+unix:///run/redis.sock?db=1&pass=s3cret",
                "redis+unix:///run/redis.sock?db=1&pass=***",
            ),
            (
                "unix:///run/redis.sock?user=app&password=s3cret",
                "unix:///run/redis.sock?user=app&password=***",
            ),
            (
                "http://u:s3cret@collector:4318",
                "http://u:***@collector:4318",
            ),
            // no scheme (a mistyped URL in an error message)
            (
                "redis//:s3cret@127.0.0.1:6390",
                "redis//:***@127.0.0.1:6390",
            ),
            ("s3cret@127.0.0.1:6390", "***@127.0.0.1:6390"),
            ("redis://s3/cret@h:1", "redis://***@h:1"),
            (
                "unix:///run/redis.sock?db=1&pass=s3cret?x",
                "unix:///run/redis.sock?db=1&pass=***",
            ),
            (
                "unix:///run/redis.sock?pass=s3@cret",
                "unix:///run/redis.sock?pass=***",
            ),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
    }

    #[test]
    fn a_url_without_a_password_is_shown_whole() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1:6379/3",
            "redis://default@h:1",
            "redis://user:@h:1",
            "rediss://h:6380",
            "unix:///run/redis.sock",
            "redis+unix:///run/redis.sock?db=2",
            "",
            "not a url",
        ] {
            assert_eq!(shown_url(url), url);
        }
    }
}
