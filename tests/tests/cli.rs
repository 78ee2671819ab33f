//! The `hero` binary as an operator runs it: `hero up` then `hero run` prints the result;
//! bad input and an unreachable Redis give a clear message and a non-zero exit.

use std::path::PathBuf;
use std::time::Duration;

use hero_testkit::{binary, free_port, wait_for, Proc, RedisServer};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hero-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn hero(args: &[&str], cwd: &std::path::Path) -> (i32, String, String) {
    hero_testkit::run_to_end(hero_testkit::hero_command().args(args).current_dir(cwd))
}

#[tokio::test]
async fn hero_run_prints_42_when_hero_up_is_running() {
    let dir = temp_dir("up");
    let mut up = Proc::spawn(
        &binary("hero"),
        &["up", "--workers", "1", "--http", "127.0.0.1:0"],
        &[],
        Some(&dir),
    );
    up.expect_line("ready", Duration::from_secs(30)).await;
    let (code, out, err) = hero(&["run", "--type", "rhai", "40 + 2"], &dir);
    assert_eq!((code, out.trim()), (0, "42"), "stderr: {err}");
    readme_first_hero_line_runs_in_a_new_terminal(&dir);
    let (code, out, _) = hero(&["--json", "run", "--type", "rhai", "\"a\" + 1"], &dir);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["output"].as_str()),
        (Some("finished"), Some("a1"))
    );
    let (code, _, err) = hero(&["run", "--type", "rhai", "let x = ;"], &dir);
    assert_eq!(code, 1, "a failed job exits 1");
    assert!(err.contains("script error"), "{err}");
    up.signal("TERM");
    assert_eq!(up.wait_exit(Duration::from_secs(30)).await, 0);
    assert!(
        !dir.join(".hero/redis.url").exists(),
        "hero up cleaned up its URL file"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's first `hero` line, as written, in a new shell after the set-up's link step
/// (`scripts/link`, which `scripts/up` runs): `hero` is found on the PATH (cargo's bin folder,
/// here a throwaway one) and prints what the README says.
fn readme_first_hero_line_runs_in_a_new_terminal(dir: &std::path::Path) {
    let root = hero_testkit::workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("hero "))
        .expect("README names a hero command");
    let (command, said) = line.split_once('#').unwrap_or((line, ""));
    let cargo_home = dir.join("cargo-home");
    let linked = std::process::Command::new(root.join("scripts/link"))
        .arg(hero_testkit::binary("hero"))
        .env("CARGO_HOME", &cargo_home)
        .status()
        .unwrap();
    assert!(linked.success(), "scripts/link");
    let mut shell = std::process::Command::new("sh");
    shell
        .arg("-c")
        .arg(command.trim())
        .current_dir(dir)
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", cargo_home.join("bin").display()),
        )
        .env("HOME", dir);
    let (code, out, err) = hero_testkit::run_to_end(&mut shell);
    assert_eq!(code, 0, "{command}: {err}");
    // the README's comment says what it prints ("prints 42")
    let expected = said.trim().trim_start_matches("prints ").trim();
    assert_eq!(out.trim(), expected, "{command}");
}

#[test]
fn hero_version_names_the_release_and_the_protocol() {
    let (code, out, _) = hero_testkit::run_to_end(hero_testkit::hero_command().arg("--version"));
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!(
            "hero {} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            hero_protocol::function::LIBRARY_VERSION
        )
    );
}

#[tokio::test]
async fn hero_exits_non_zero_with_a_clear_message_when_input_is_bad() {
    let server = RedisServer::start();
    let dir = temp_dir("bad");
    let url = server.url();
    let (code, _, err) = hero(
        &[
            "--redis-url",
            &url,
            "submit",
            "--type",
            "no spaces allowed",
            "1",
        ],
        &dir,
    );
    assert_eq!(code, 2);
    assert!(err.contains("invalid script type"), "{err}");
    let (code, _, err) = hero(
        &["--redis-url", &url, "submit", "--priority", "12", "1"],
        &dir,
    );
    assert_eq!(code, 2);
    assert!(err.contains("priority 12"), "{err}");
    let (code, _, err) = hero(&["--redis-url", &url, "status", "no-such-job"], &dir);
    assert_eq!(code, 2);
    assert!(err.contains("not found"), "{err}");
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let (code, _, err) = hero(&["--redis-url", &dead, "status", "x"], &dir);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot reach Redis") && err.contains("HERO_REDIS_URL"),
        "{err}"
    );
    // a URL of another scheme is not a server that cannot be reached: say which are accepted
    let (code, _, err) = hero(&["--redis-url", "http://nope", "status", "x"], &dir);
    assert_eq!(code, 2);
    assert!(
        err.contains("not a Redis URL scheme")
            && err.contains("rediss")
            && !err.contains("cannot reach"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn hero_submit_status_jobs_and_stop_work_against_a_redis() {
    let server = RedisServer::start();
    let dir = temp_dir("ops");
    let url = server.url();
    let (code, out, _) = hero(
        &[
            "--redis-url",
            &url,
            "submit",
            "--id",
            "op-1",
            "--delay-ms",
            "600000",
            "1",
        ],
        &dir,
    );
    assert_eq!((code, out.trim()), (0, "op-1"));
    let (_, out, _) = hero(&["--redis-url", &url, "status", "op-1"], &dir);
    assert_eq!(out.trim(), "waiting");
    let (_, out, _) = hero(
        &["--redis-url", &url, "--json", "jobs", "--status", "waiting"],
        &dir,
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["jobs"][0]["id"].as_str(), Some("op-1"));
    let (code, out, _) = hero(&["--redis-url", &url, "stop", "op-1"], &dir);
    assert_eq!((code, out.trim()), (0, "op-1: cancelled"));
    let (_, out, _) = hero(&["--redis-url", &url, "--json", "status", "op-1"], &dir);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["error"].as_str()),
        (Some("error"), Some("stopped"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `hero` process turns transparent huge pages off for itself (as Redis does): with them on,
/// the worker stalled in huge-page zeroing and its p99 submit→start stayed near 6.7 ms.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn hero_runs_with_transparent_huge_pages_off() {
    let server = RedisServer::start();
    let url = server.url();
    let worker = hero_testkit::hero_worker(&url, &["--concurrency", "1"]);
    // a job it ran says main has run its set-up
    let client = hero_client::Client::connect(&url).await.unwrap();
    let job = hero_protocol::NewJob::builder("rhai", "40 + 2")
        .build()
        .unwrap();
    let done = client.run(&job, Duration::from_secs(30)).await.unwrap();
    assert_eq!(done.status, hero_protocol::Status::Finished);
    let status = std::fs::read_to_string(format!("/proc/{}/status", worker.pid())).unwrap();
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(str::trim);
    // kernels before 5.0 have no such line: nothing to check there
    if let Some(thp) = thp {
        assert_eq!(thp, "0", "THP_enabled of `hero worker` in {status}");
    }
}

/// `hero … | head`: a command whose reader has gone ends by SIGPIPE as every Unix tool does
/// (status 141 in a shell), with no panic or backtrace on stderr, for a command that talks to
/// Redis and for one that does not.
#[cfg(unix)]
#[tokio::test]
async fn a_cli_writing_into_a_closed_pipe_ends_quietly_by_sigpipe() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let server = RedisServer::start();
    let url = server.url();
    for args in [&["queues", "--json"][..], &["actors"], &["--help"]] {
        // a pipe whose reader is gone before the command starts: its first write meets EPIPE
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let child = hero_testkit::hero_command()
            .args(args)
            .env("HERO_REDIS_URL", &url)
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc_sigpipe()),
            "hero {args:?} into a closed pipe: {:?}, stderr {err}",
            out.status
        );
        assert!(!err.contains("panicked"), "hero {args:?}: {err}");
    }
}

/// SIGPIPE's number on every Unix this runs on.
#[cfg(unix)]
fn libc_sigpipe() -> i32 {
    13
}

/// `hero up`'s Redis ends with it, however it ends: SIGKILL leaves it no time to stop Redis.
#[tokio::test]
async fn hero_ups_redis_never_outlives_it() {
    let dir = std::env::temp_dir().join(format!("hero-up-pdeath-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut up = Proc::spawn(
        &binary("hero"),
        &["up", "--workers", "0", "--http", "off"],
        &[],
        Some(&dir),
    );
    up.saw("ready", Duration::from_secs(30)).await;
    let children =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", up.pid(), up.pid()))
            .unwrap_or_default();
    let mut redis_pids: Vec<u32> = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", up.pid()))
        .unwrap()
        .flatten()
    {
        let kids = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in kids
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.starts_with("redis-server") {
                redis_pids.push(pid);
            }
        }
    }
    assert_eq!(redis_pids.len(), 1, "hero up's redis-server ({children})");
    up.kill9();
    let pid = redis_pids[0];
    wait_for(
        "redis-server gone",
        Duration::from_secs(15),
        || async move {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // gone, or a zombie reaped by init
            (state.is_empty() || state.contains(") Z ")).then_some(())
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
