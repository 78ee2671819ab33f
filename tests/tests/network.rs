//! Faults of the network between the system and Redis (the fault proxy of the test kit): a
//! half-open connection (no FIN, no data) is detected by the command timeouts and replaced, not
//! waited on forever; connections cut over and over, added latency and a narrow bandwidth lose
//! nothing and record nothing twice.

use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::NewJob;
use hero_testkit::RedisServer;
use hero_testkit::{all_finished, audit_consistent, binary, test_worker, FaultProxy, Proc};

fn broker(url: &str) -> Proc {
    Proc::spawn(
        &binary("hero"),
        &[
            "--redis-url",
            url,
            "broker",
            "--http",
            "off",
            "--lease-ms",
            "3000",
        ],
        &[],
        None,
    )
}

async fn submit(client: &Client, prefix: &str, n: usize) -> Vec<String> {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            NewJob::builder("net", "sleep 5")
                .id(format!("{prefix}-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    for r in client.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    jobs.iter().map(|j| j.id().to_string()).collect()
}

async fn finished_count(client: &Client) -> u64 {
    hero_admin::Inspector::from(client)
        .queues()
        .await
        .unwrap()
        .iter()
        .filter(|q| q.name == "net")
        .map(|q| q.finished)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_connection_is_detected_and_replaced() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port);
    let client = Client::connect(&server.url()).await.unwrap();
    let worker = test_worker(&proxy.url(), "net", "w", &["--concurrency", "4"]);
    let _broker = broker(&proxy.url());
    worker.expect_line("ready", Duration::from_secs(20)).await;
    let first = submit(&client, "before", 5).await;
    all_finished(&server, &first, Duration::from_secs(20)).await;

    let accepted = proxy.accepted();
    let frozen = proxy.half_open();
    assert!(
        frozen > 0,
        "the worker's and broker's connections go through the proxy"
    );
    let since = Instant::now();
    let after = submit(&client, "after", 5).await;
    // the frozen connections answer nothing, ever: only a command timeout gets past them
    all_finished(&server, &after, Duration::from_secs(60)).await;
    eprintln!(
        "half-open: {frozen} connections frozen, jobs ran again after {:?}",
        since.elapsed()
    );
    assert!(
        proxy.accepted() > accepted,
        "the worker connected anew instead of waiting on the frozen connection"
    );
    assert_eq!(finished_count(&client).await, 10, "each job recorded once");
    audit_consistent(&server.url(), Duration::from_secs(30)).await;
    let _ = worker;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cuts_latency_and_a_narrow_pipe_lose_nothing_and_record_nothing_twice() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port);
    let client = Client::connect(&server.url()).await.unwrap();
    let workers: Vec<_> = (0..2)
        .map(|i| {
            test_worker(
                &proxy.url(),
                "net",
                &format!("w{i}"),
                &["--concurrency", "8"],
            )
        })
        .collect();
    let _broker = broker(&proxy.url());
    for w in &workers {
        w.expect_line("ready", Duration::from_secs(20)).await;
    }
    let mut ids = Vec::new();
    let mut cuts = 0;
    for round in 0..20 {
        // latency of 50-500 ms and a pipe of 16 KiB/s come and go while connections are cut
        proxy.set_latency(Duration::from_millis([0, 50, 200, 500][round % 4]));
        proxy.set_bandwidth((round % 3 == 1).then_some(16 * 1024));
        ids.extend(submit(&client, &format!("r{round}"), 20).await);
        tokio::time::sleep(Duration::from_millis(150)).await;
        cuts += proxy.cut();
    }
    proxy.set_latency(Duration::ZERO);
    proxy.set_bandwidth(None);
    assert!(cuts > 20, "connections were cut ({cuts})");
    all_finished(&server, &ids, Duration::from_secs(90)).await;
    assert_eq!(
        finished_count(&client).await,
        ids.len() as u64,
        "every job recorded exactly once"
    );
    audit_consistent(&server.url(), Duration::from_secs(30)).await;
    for w in &workers {
        assert!(w.output().iter().any(|l| l.starts_with("completion")));
    }
}
