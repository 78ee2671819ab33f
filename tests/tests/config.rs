//! One configuration: flags, then `HERO_*` variables, then the TOML file (`--config`), then
//! the defaults; unknown keys and bad values are errors naming the key and the file; `hero
//! config show` prints the merged settings with secrets masked; a broker started from the file
//! alone runs with its settings.

use std::time::Duration;

use hero_testkit::{binary, free_port, wait_for, Proc, RedisServer};

fn hero(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = hero_testkit::hero_command();
    c.args(args).envs(env.iter().copied());
    hero_testkit::run_to_end(&mut c)
}

fn file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!(
        "hero-config-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn flags_beat_the_environment_which_beats_the_file_which_beats_the_defaults() {
    let cfg = file(
        "hero.toml",
        r#"
redis_url = "redis://hero-broker:s3cret@127.0.0.1:6390"
namespace = "prod"
[broker]
lease_ms = 45000
retention_secs = 600
http_token = "tok-123"
[worker]
types = ["rhai", "osis"]
concurrency = 16
"#,
    );
    let show = |args: &[&str], env: &[(&str, &str)]| -> serde_json::Value {
        let mut a = vec!["--config", cfg.as_str()];
        a.extend_from_slice(args);
        a.extend_from_slice(&["config", "show", "--json"]);
        let (code, out, err) = hero(&a, env);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let v = show(&[], &[]);
    assert_eq!(v["broker"]["lease_ms"], 45000, "the file over the default");
    assert_eq!(
        v["broker"]["max_attempts"], 5,
        "the default where the file is silent"
    );
    assert_eq!(v["worker"]["concurrency"], 16);
    assert_eq!(v["worker"]["types"], serde_json::json!(["rhai", "osis"]));
    assert_eq!(v["namespace"], "prod");
    let v = show(
        &[],
        &[("HERO_LEASE_MS", "5000"), ("HERO_NAMESPACE", "staging")],
    );
    assert_eq!(
        v["broker"]["lease_ms"], 5000,
        "the environment over the file"
    );
    assert_eq!(v["namespace"], "staging");
    let v = show(&["--namespace", "cli"], &[("HERO_NAMESPACE", "staging")]);
    assert_eq!(v["namespace"], "cli", "a flag over the environment");
    // secrets masked
    let text = show(&[], &[]).to_string();
    assert!(
        !text.contains("s3cret") && !text.contains("tok-123"),
        "{text}"
    );
    assert!(
        text.contains("redis://hero-broker:***@127.0.0.1:6390"),
        "{text}"
    );
}

#[test]
fn an_unknown_key_or_a_bad_value_names_the_key_and_the_file() {
    for (body, key) in [
        ("[worker]\nconcurency = 3\n", "worker.concurency"),
        ("[broker]\nlease_ms = \"soon\"\n", "broker.lease_ms"),
        ("colour = \"blue\"\n", "colour"),
        ("[nonsense]\nx = 1\n", "[nonsense]"),
    ] {
        let cfg = file("bad.toml", body);
        let (code, _, err) = hero(&["--config", &cfg, "config", "show"], &[]);
        assert_eq!(code, 2, "{body}: {err}");
        assert!(err.contains(key) && err.contains(&cfg), "{body}: {err}");
    }
    let (code, _, err) = hero(&["--config", "/nonexistent/hero.toml", "queues"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/hero.toml"), "{err}");
}

#[tokio::test]
async fn a_broker_started_from_the_file_alone_runs_with_its_settings() {
    let server = RedisServer::start();
    let cfg = file(
        "broker.toml",
        &format!(
            "redis_url = \"{}\"\nnamespace = \"fromfile\"\n[broker]\nlease_ms = 4321\nhttp = \"off\"\n",
            server.url()
        ),
    );
    let _broker = Proc::spawn(&binary("hero"), &["--config", &cfg, "broker"], &[], None);
    let mut raw = server.conn().await;
    let lease: String = wait_for(
        "the broker to publish its settings",
        Duration::from_secs(20),
        || {
            let mut raw = raw.clone();
            async move {
                redis::cmd("HGET")
                    .arg("fromfile:meta:config")
                    .arg("lease_ms")
                    .query_async::<Option<String>>(&mut raw)
                    .await
                    .ok()
                    .flatten()
            }
        },
    )
    .await;
    assert_eq!(lease, "4321");
    let _: () = redis::cmd("PING").query_async(&mut raw).await.unwrap();
}
