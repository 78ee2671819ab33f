//! Secrets are never printed (security review, finding 9): a Redis password (in the URL's user
//! information or a `pass=` parameter) and a collector's credentials appear in none of `hero
//! up`'s banner and logs, `--help` (clap would show the variables' values), an error about a
//! connection or a configuration file, the broker's log lines at start, or `hero config show`.
//! Each shows the URL with `***` where the password was (`hero_protocol::shown_url`).

use std::path::PathBuf;
use std::time::Duration;

use hero_testkit::{binary, free_port, Proc, RedisServer};

/// The password every test hides: distinctive, so no other text contains it by chance.
const PASSWORD: &str = "pw-9f2c1e7d-s3cret";

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hero-secrets-{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("create a temporary folder");
    dir
}

/// A redis-server that asks for [`PASSWORD`], on TCP and on a Unix socket in its own folder
/// (the kit still kills it by pid).
fn passworded_redis(dir: &std::path::Path) -> (RedisServer, PathBuf) {
    let socket = dir.join("redis.sock");
    let server = RedisServer::start_with(&[
        "--requirepass",
        PASSWORD,
        "--unixsocket",
        &socket.display().to_string(),
    ]);
    (server, socket)
}

fn tcp_url(server: &RedisServer) -> String {
    format!("redis://:{PASSWORD}@127.0.0.1:{}/0", server.port)
}

/// `hero <args>` with `env` (and none of the caller's `HERO_*`): (exit code, stdout, stderr).
fn hero(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = hero_testkit::hero_command();
    c.args(args).envs(env.iter().copied());
    hero_testkit::run_to_end(&mut c)
}

fn assert_hidden(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD),
        "{what} printed the password:\n{text}"
    );
}

#[tokio::test]
async fn hero_up_prints_the_url_with_its_password_hidden_and_the_dashboard_link_whole() {
    let dir = temp_dir("up");
    let (server, _) = passworded_redis(&dir);
    let url = tcp_url(&server);
    let mut up = Proc::spawn_with_stderr(
        &binary("hero"),
        &["up", "--workers", "1", "--http", "127.0.0.1:0"],
        &[("HERO_REDIS_URL", url.as_str())],
        Some(&dir),
    );
    up.expect_line("ready", Duration::from_secs(30)).await;
    let banner = up.output().join("\n");
    up.signal("TERM");
    assert_eq!(up.wait_exit(Duration::from_secs(30)).await, 0, "{banner}");
    let all = up.output_to_end(Duration::from_secs(10)).await.join("\n");
    assert_hidden("hero up", &all);
    // still a URL the user can use: the rest of it whole, and where the password is
    let shown = format!("redis://:***@127.0.0.1:{}/0", server.port);
    let redis_line = banner
        .lines()
        .find(|l| l.trim_start().starts_with("redis:"))
        .unwrap_or_else(|| panic!("no redis: line in\n{banner}"));
    assert!(
        redis_line.contains(&shown) && redis_line.contains("HERO_REDIS_URL"),
        "{redis_line}"
    );
    // the dashboard's link is the way in: a one-time code, printed whole; the token it made
    // is on the terminal for programs, never in the link
    let dashboard = banner
        .lines()
        .find(|l| l.trim_start().starts_with("dashboard:"))
        .unwrap_or_else(|| panic!("no dashboard: line in\n{banner}"));
    let code = dashboard
        .split_once("?code=")
        .and_then(|(_, t)| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no code in {dashboard}"));
    assert!(code.len() >= 16 && !code.contains('*'), "{dashboard}");
    let token = banner
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("API token: "))
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no API token line in\n{banner}"));
    assert!(token.len() >= 16 && !dashboard.contains(token), "{banner}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_shows_no_password_of_the_environment() {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:6390/0");
    let collector = format!("http://hero:{PASSWORD}@127.0.0.1:4318");
    let env = [
        ("HERO_REDIS_URL", url.as_str()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str()),
        ("HERO_HTTP_TOKEN", PASSWORD),
        ("HERO_HTTP_READ_TOKEN", PASSWORD),
    ];
    for args in [
        &["--help"][..],
        &["-h"],
        &["broker", "--help"],
        &["up", "--help"],
        &["worker", "--help"],
        &["help", "broker"],
    ] {
        let (code, out, err) = hero(args, &env);
        assert_eq!(code, 0, "hero {args:?}: {err}");
        assert_hidden(&format!("hero {args:?}"), &format!("{out}{err}"));
        // the variable is still named, so the reader knows where the setting comes from
        assert!(out.contains("HERO_REDIS_URL"), "hero {args:?}:\n{out}");
    }
}

#[tokio::test]
async fn a_connection_error_shows_the_url_without_its_password() {
    let dir = temp_dir("errors");
    let (server, socket) = passworded_redis(&dir);
    let socket = socket.display().to_string();
    let dead = free_port();
    for (url, expected) in [
        // the right server, a wrong password
        (
            format!("redis://:wrong-{PASSWORD}@127.0.0.1:{}/0", server.port),
            format!("redis://:***@127.0.0.1:{}/0", server.port),
        ),
        // nothing listens there
        (
            format!("redis://hero:{PASSWORD}@127.0.0.1:{dead}/0"),
            format!("redis://hero:***@127.0.0.1:{dead}/0"),
        ),
        // no socket there; the password in a parameter, as redis-rs reads it on a socket
        (
            format!("unix://{socket}.gone?pass={PASSWORD}"),
            format!("unix://{socket}.gone?pass=***"),
        ),
        // a mistyped URL, refused before any connection
        (
            format!("redis//:{PASSWORD}@127.0.0.1:{}/0", server.port),
            format!("redis//:***@127.0.0.1:{}/0", server.port),
        ),
    ] {
        let (code, out, err) = hero(&["status", "x"], &[("HERO_REDIS_URL", url.as_str())]);
        assert_eq!(code, 2, "{url}: {out}{err}");
        assert_hidden(
            &format!("an error about {expected}"),
            &format!("{out}{err}"),
        );
        assert!(err.contains(&expected), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_configuration_file_error_does_not_quote_the_line() {
    let dir = temp_dir("file");
    let file = dir.join("hero.toml");
    // an unterminated string: toml's own message quotes the line it fails on
    std::fs::write(
        &file,
        format!("namespace = \"app\"\nredis_url = \"redis://:{PASSWORD}@127.0.0.1:6390/0\n"),
    )
    .expect("write the file");
    let file = file.display().to_string();
    let (code, out, err) = hero(&["--config", &file, "config", "show"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert_hidden("a TOML error", &format!("{out}{err}"));
    assert!(err.contains("line 2, column"), "{err}");
    // a value of the wrong type is named by its type, not quoted
    std::fs::write(
        dir.join("hero.toml"),
        format!("redis_url = [[\"redis://:{PASSWORD}@127.0.0.1:6390/0\"]]\n"),
    )
    .expect("write the file");
    let (code, out, err) = hero(&["--config", &file, "config", "show"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert_hidden("a wrong type", &format!("{out}{err}"));
    assert!(err.contains("redis_url"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_broker_logs_its_url_at_start_without_the_password() {
    let dir = temp_dir("broker");
    let (server, socket) = passworded_redis(&dir);
    let over_socket = format!("redis+unix://{}?pass={PASSWORD}", socket.display());
    for url in [tcp_url(&server), over_socket] {
        let mut broker = Proc::spawn_with_stderr(
            &binary("hero"),
            &["broker", "--http", "127.0.0.1:0"],
            &[("HERO_REDIS_URL", url.as_str()), ("RUST_LOG", "debug")],
            Some(&dir),
        );
        // the ready line: the broker names the Redis it serves
        let ready = broker
            .expect_line("broker running", Duration::from_secs(30))
            .await;
        assert_hidden("the broker's ready line", &ready);
        assert!(ready.contains("***"), "{ready}");
        broker.signal("TERM");
        assert_eq!(broker.wait_exit(Duration::from_secs(30)).await, 0);
        let all = broker
            .output_to_end(Duration::from_secs(10))
            .await
            .join("\n");
        assert_hidden("hero broker", &all);
        // the dashboard's link carries a one-time code, never the token
        assert!(all.contains("?code=") && !all.contains("?token="), "{all}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_show_masks_every_secret() {
    let dir = temp_dir("show");
    let (server, socket) = passworded_redis(&dir);
    let collector = format!("http://hero:{PASSWORD}@127.0.0.1:4318");
    let over_socket = format!("redis+unix://{}?db=0&pass={PASSWORD}", socket.display());
    for (url, shown) in [
        (
            tcp_url(&server),
            format!("redis://:***@127.0.0.1:{}/0", server.port),
        ),
        (
            over_socket,
            format!("redis+unix://{}?db=0&pass=***", socket.display()),
        ),
    ] {
        for json in [false, true] {
            let mut args = vec!["config", "show"];
            if json {
                args.insert(0, "--json");
            }
            let (code, out, err) = hero(
                &args,
                &[
                    ("HERO_REDIS_URL", url.as_str()),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str()),
                    ("HERO_HTTP_TOKEN", PASSWORD),
                    ("HERO_HTTP_READ_TOKEN", PASSWORD),
                ],
            );
            assert_eq!(code, 0, "{err}");
            assert_hidden("hero config show", &format!("{out}{err}"));
            assert!(out.contains(&shown), "{out}");
            assert!(out.contains("http://hero:***@127.0.0.1:4318"), "{out}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
