//! deploy/: the least-privilege ACL users of `deploy/redis/users.acl`, loaded into a real
//! redis-server as shipped, each doing its role's whole job (the broker loading the library,
//! a producer submitting and waiting, a worker running jobs, an operator reading everything)
//! and no more (another namespace's keys, admin commands and, for the operator, any write are
//! refused); the systemd units pass `systemd-analyze verify` where it exists.

use std::path::PathBuf;
use std::time::Duration;

use hero_client::Client;
use hero_protocol::{NewJob, Status};
use hero_testkit::{hero_cli, http_broker, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

fn deploy(path: &str) -> PathBuf {
    hero_testkit::workspace_root().join("deploy").join(path)
}

fn url_of(server: &RedisServer, user: &str) -> String {
    let role = user.trim_start_matches("hero-");
    server
        .url()
        .replace("redis://", &format!("redis://{user}:change-me-{role}@"))
}

/// Whether an error says Redis's ACL refused the command.
fn denied(e: &str) -> bool {
    e.contains("NOPERM") || e.contains("no permissions")
}

/// A command as `user`, answering the error text when Redis refused it.
async fn refused(url: &str, cmd: &mut redis::Cmd) -> String {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    match cmd.query_async::<redis::Value>(&mut c).await {
        Ok(v) => panic!("{cmd:?} was allowed: {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn each_role_of_the_acl_file_does_its_whole_job_and_no_more() {
    let acl = deploy("redis/users.acl");
    let server = RedisServer::start_with(&["--aclfile", acl.to_str().unwrap()]);
    let (broker_url, producer_url, worker_url, operator_url) = (
        url_of(&server, "hero-broker"),
        url_of(&server, "hero-producer"),
        url_of(&server, "hero-worker"),
        url_of(&server, "hero-operator"),
    );
    // nobody gets in without a user
    let mut raw =
        std::net::TcpStream::connect(server.url().trim_start_matches("redis://")).unwrap();
    std::io::Write::write_all(&mut raw, b"PING\r\n").unwrap();
    let mut answer = [0u8; 7];
    std::io::Read::read_exact(&mut raw, &mut answer).unwrap();
    assert_eq!(&answer, b"-NOAUTH", "the default user is off");

    // the broker loads the library and runs its loops (and the HTTP face's reads)
    let (_broker, base) = http_broker(
        &broker_url,
        Some("deploy-admin-token"),
        &["--http-read-token", "deploy-read-token"],
    )
    .await;

    // a producer submits (one delayed, one run-and-wait), a worker runs them
    let producer = Client::connect(&producer_url).await.unwrap();
    let jobs: Vec<NewJob> = (0..20)
        .map(|i| {
            NewJob::builder("acl", "x")
                .id(format!("acl-{i}"))
                .tag("acl")
                .build()
                .unwrap()
        })
        .collect();
    for r in producer.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    let delayed = NewJob::builder("acl", "x")
        .id("acl-delayed")
        .delay(Duration::from_millis(200))
        .build()
        .unwrap();
    producer.submit(&delayed).await.unwrap();
    let worker_client = Client::connect(&worker_url).await.unwrap();
    let _w = InProcWorker::spawn(
        Worker::builder(worker_client)
            .types(["acl"])
            .concurrency(4)
            .handler(|j: hero_protocol::Job, _| async move {
                if j.script == "fail" {
                    Outcome::Fail("no".into())
                } else {
                    Outcome::Done(j.id.to_string())
                }
            }),
    );
    let ran = producer
        .run(
            &NewJob::builder("acl", "x").id("acl-run").build().unwrap(),
            LIMIT,
        )
        .await
        .unwrap();
    assert_eq!(ran.status, Status::Finished);
    for j in jobs.iter().chain([&delayed]) {
        let r = producer.wait(j.id(), LIMIT).await.unwrap();
        assert_eq!(r.status, Status::Finished, "{}", j.id());
    }
    let retried = NewJob::builder("acl", "fail")
        .id("acl-fail")
        .retries(1)
        .build()
        .unwrap();
    producer.submit(&retried).await.unwrap();
    let r = producer.wait(retried.id(), LIMIT).await.unwrap();
    assert_eq!(
        r.status,
        Status::Error,
        "failed, retried through the broker, failed"
    );

    // the operator reads everything: the CLI's read commands and the HTTP face
    for args in [
        vec!["queues", "--json"],
        vec!["actors", "--json"],
        vec!["jobs", "--tag", "acl", "--json"],
        vec!["events", "--json"],
        vec!["status", "acl-1", "--history", "--json"],
        vec!["audit", "--json"],
        vec!["dead", "list", "--json"],
    ] {
        let mut a = vec!["--redis-url", operator_url.as_str()];
        a.extend(args.iter().copied());
        let (code, out, err) = hero_cli(&operator_url, &a);
        assert_eq!(code, 0, "operator: hero {args:?}: {out}{err}");
    }
    // the operator's read-only token reads the API, and changes nothing through it
    let http = reqwest::Client::new();
    let page = http
        .get(format!("{base}/api/queues"))
        .bearer_auth("deploy-read-token")
        .send()
        .await
        .unwrap();
    assert!(page.status().is_success());
    let stop = http
        .post(format!("{base}/api/jobs/acl-0/stop"))
        .bearer_auth("deploy-read-token")
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status().as_u16(), 403);

    // ... and writes nothing
    let (code, _, err) = hero_cli(&operator_url, &["submit", "--type", "acl", "x"]);
    assert_ne!(code, 0);
    assert!(denied(&err), "{err}");
    let e = refused(
        &operator_url,
        redis::cmd("HSET")
            .arg("hero:job:acl-1")
            .arg("status")
            .arg("x"),
    )
    .await;
    assert!(denied(&e), "{e}");

    // no role reads another namespace's keys, or runs admin commands; only the broker loads
    // the library
    for url in [&producer_url, &worker_url, &broker_url, &operator_url] {
        let e = refused(url, redis::cmd("GET").arg("other:secret")).await;
        assert!(denied(&e), "{e}");
        let e = refused(url, redis::cmd("CONFIG").arg("GET").arg("maxmemory")).await;
        assert!(denied(&e), "{e}");
        let e = refused(url, redis::cmd("KEYS").arg("*")).await;
        assert!(denied(&e), "{e}");
        let e = refused(url, redis::cmd("FUNCTION").arg("FLUSH")).await;
        assert!(denied(&e), "{e}");
    }
    for url in [&producer_url, &worker_url] {
        let e = refused(
            url,
            redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("#!lua name=evil\nredis.register_function('evil', function() return 1 end)"),
        )
        .await;
        assert!(denied(&e), "{e}");
    }
}

#[test]
fn the_systemd_units_verify_where_systemd_analyze_exists() {
    let units = [
        "systemd/hero-broker.service",
        "systemd/hero-worker@.service",
    ];
    for u in units {
        let text = std::fs::read_to_string(deploy(u)).unwrap();
        for needed in [
            "DynamicUser=yes",
            "ProtectSystem=strict",
            "Restart=",
            "TimeoutStopSec=",
        ] {
            assert!(text.contains(needed), "{u} has {needed}");
        }
    }
    let Ok(out) = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .args(units.iter().map(|u| deploy(u)))
        .output()
    else {
        eprintln!(
            "systemd-analyze not found: the units were checked for their hardening lines only"
        );
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    // the hero binary is not installed at /usr/local/bin here: that one complaint is expected
    let real: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("/usr/local/bin/hero"))
        .collect();
    assert!(real.is_empty(), "systemd-analyze verify: {err}");
}

#[test]
fn the_container_file_builds_where_a_container_engine_runs() {
    let file = deploy("container/Containerfile");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("AS build") && text.contains("USER 10001"),
        "multi-stage, non-root"
    );
    let engine = ["docker", "podman"].into_iter().find(|e| {
        std::process::Command::new(e)
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(engine) = engine else {
        eprintln!("skipped: no container engine runs here (docker info / podman info failed)");
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(engine)
        .args(["build", "-q", "-f"])
        .arg(&file)
        .args(["-t", "hero-broker:test"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{engine} build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
