//! A `hero broker` process serving its HTTP face on a free loopback port, for the HTTP and
//! dashboard tests.

use std::time::Duration;

use crate::{binary, Proc};

/// A `hero broker` process serving HTTP on a free loopback port with admin token `token` (none:
/// the broker makes one and prints it in its link), plus `extra` flags; returns it and its base
/// URL (`http://127.0.0.1:<port>`, without the link's `?token=`).
pub async fn http_broker(url: &str, token: Option<&str>, extra: &[&str]) -> (Proc, String) {
    let mut args = vec!["--redis-url", url, "broker", "--http", "127.0.0.1:0"];
    if let Some(t) = token {
        args.extend_from_slice(&["--http-token", t]);
    }
    args.extend_from_slice(extra);
    let p = Proc::spawn(&binary("hero"), &args, &[], None);
    let line = p
        .expect_line("http: http://", Duration::from_secs(30))
        .await;
    let link = line.trim().trim_start_matches("http: ");
    let base = link
        .split('?')
        .next()
        .unwrap_or(link)
        .trim_end_matches('/')
        .to_string();
    (p, base)
}
