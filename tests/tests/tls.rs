//! TLS: a redis-server with a self-signed CA on a TLS port; a broker process, a worker and a
//! producer over `rediss://` submit, run, complete and audit; mutual TLS with a client
//! certificate; a wrong CA is refused with an error that says what to fix.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hero_client::{Client, ClientOptions};
use hero_protocol::conn::Tls;
use hero_protocol::{NewJob, Status};
use hero_testkit::{free_port, hero_cli, http_broker, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(30);

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA named `name` in `dir` (`<name>.pem`, `<name>.key`).
fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

/// A certificate `name` signed by CA `by`, for 127.0.0.1 / localhost, with extended usage `usage`.
fn leaf(dir: &Path, name: &str, by: &str, usage: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage={usage}\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{by}.pem"),
            "-CAkey",
            &format!("{by}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.pem"),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

fn certs() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hero-tls-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    ca(&dir, "ca");
    ca(&dir, "other-ca");
    leaf(&dir, "server", "ca", "serverAuth");
    leaf(&dir, "client", "ca", "clientAuth");
    dir
}

fn tls_server(dir: &Path, tls_port: u16, auth_clients: &str) -> RedisServer {
    let p = |f: &str| dir.join(f).display().to_string();
    let port = tls_port.to_string();
    RedisServer::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &p("server.pem"),
        "--tls-key-file",
        &p("server.key"),
        "--tls-ca-cert-file",
        &p("ca.pem"),
        "--tls-auth-clients",
        auth_clients,
    ])
}

async fn connect(url: &str, tls: Tls) -> hero_protocol::Result<Client> {
    let mut opts = ClientOptions::new(url);
    opts.tls = tls;
    Client::with_options(opts).await
}

#[tokio::test]
async fn jobs_run_over_tls_and_a_wrong_ca_is_refused_clearly() {
    let dir = certs();
    let tls_port = free_port();
    let _server = tls_server(&dir, tls_port, "optional");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let ca = dir.join("ca.pem");
    let with_ca = Tls {
        ca: Some(ca.clone()),
        ..Tls::default()
    };

    // a broker process and a worker over TLS
    let ca_arg = ca.display().to_string();
    let (_broker, _) = http_broker(&url, None, &["--tls-ca", &ca_arg]).await;
    let client = connect(&url, with_ca.clone()).await.unwrap();
    let _w = InProcWorker::spawn(
        Worker::builder(connect(&url, with_ca.clone()).await.unwrap())
            .types(["tls"])
            .concurrency(4)
            .handler(|j: hero_protocol::Job, _| async move { Outcome::Done(j.id.to_string()) }),
    );
    let jobs: Vec<NewJob> = (0..20)
        .map(|i| {
            NewJob::builder("tls", "x")
                .id(format!("tls-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    for r in client.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    for j in &jobs {
        assert_eq!(
            client.wait(j.id(), LIMIT).await.unwrap().status,
            Status::Finished
        );
    }
    let (report, _) = hero_admin::Admin::from(&client)
        .audit(false, &|_| {})
        .await
        .unwrap();
    assert!(report.is_consistent(), "{:?}", report.findings);
    let (code, out, err) = hero_cli(&url, &["--tls-ca", &ca_arg, "queues", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"finished\":20"), "{out}");

    // a CA that did not sign the server's certificate: refused, and the error says what to fix
    let wrong = connect(
        &url,
        Tls {
            ca: Some(dir.join("other-ca.pem")),
            ..Tls::default()
        },
    )
    .await
    .err()
    .expect("a wrong CA is refused");
    let text = wrong.to_string();
    assert!(matches!(wrong, hero_protocol::Error::Tls { .. }), "{text}");
    assert!(
        text.contains("--tls-ca") && text.contains("certificate"),
        "{text}"
    );
    let (code, _, err) = hero_cli(
        &url,
        &[
            "--tls-ca",
            &dir.join("other-ca.pem").display().to_string(),
            "queues",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("TLS with Redis"), "{err}");
    // no CA at all: the system's roots do not know this one either
    assert!(connect(&url, Tls::default()).await.is_err());
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let dir = certs();
    let tls_port = free_port();
    let _server = tls_server(&dir, tls_port, "yes");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let ca = Some(dir.join("ca.pem"));
    let without = connect(
        &url,
        Tls {
            ca: ca.clone(),
            ..Tls::default()
        },
    )
    .await;
    assert!(without.is_err(), "the server asks for a client certificate");
    let client = connect(
        &url,
        Tls {
            ca,
            cert: Some(dir.join("client.pem")),
            key: Some(dir.join("client.key")),
        },
    )
    .await
    .unwrap();
    let job = NewJob::builder("mtls", "x").build().unwrap();
    assert!(client.submit(&job).await.unwrap().created);
    let half = connect(
        &url,
        Tls {
            cert: Some(dir.join("client.pem")),
            ..Tls::default()
        },
    )
    .await
    .err()
    .unwrap();
    assert!(
        half.to_string()
            .contains("give both --tls-cert and --tls-key"),
        "{half}"
    );
}
