//! Redis Cluster: three masters with a replica each, two namespaces whose hash tags live on
//! different shards. In each namespace the core scenarios pass against the cluster seeds URL
//! (`redis+cluster://`): submit and complete, precedence, kill -9 recovery, fencing of a
//! stalled worker, the legacy bridge, stats and the audit. Then the master of one namespace is
//! killed mid-run and the cluster's failover is followed: work carries on within seconds; a
//! manual failover in the other makes its old master answer MOVED, which is followed too. Last,
//! one worker serves both namespaces, the first before the second.

use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use hero_client::{Client, ClientOptions};
use hero_protocol::{Keyspace, NewJob, Status};
use hero_testkit::{
    binary, hero_cli, http_broker, run_to_finish, say, test_worker, wait_for, InProcWorker, Proc,
    RedisCluster,
};
use hero_worker::{Outcome, Worker};

const LIMIT: Duration = Duration::from_secs(20);

async fn client(url: &str, ns: &str) -> Client {
    let mut opts = ClientOptions::new(url);
    opts.namespace = ns.to_string();
    Client::with_options(opts).await.unwrap()
}

fn worker(url: &str, ns: &str, label: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["--namespace", ns, "--presence-ms", "1000"];
    args.extend_from_slice(extra);
    test_worker(url, "c", label, &args)
}

/// Two namespaces whose slots are owned by different masters.
async fn two_shards(cluster: &RedisCluster) -> [(String, usize); 2] {
    let mut found: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let ns = format!("ns{i}");
        let master = cluster.master_of(&format!("{{{ns}}}")).await;
        if found.iter().all(|(_, m)| *m != master) {
            found.push((ns, master));
        }
        if found.len() == 2 {
            break;
        }
    }
    [found[0].clone(), found[1].clone()]
}

async fn core_scenarios(cluster: &RedisCluster, url: &str, ns: &str) {
    let keys = Keyspace::cluster(&ns.parse().unwrap());
    let legacy = keys.legacy_work_queue("old");
    let bridge = format!("{legacy}=legacy,out");
    let (_broker, _) = http_broker(
        url,
        None,
        &[
            "--namespace",
            ns,
            "--bridge",
            &bridge,
            "--lease-ms",
            "30000",
        ],
    )
    .await;
    let c = client(url, ns).await;

    // precedence: queued before any worker, taken instance → group → type
    for (id, group, instance) in [
        ("p-type", None, None),
        ("p-group", Some("g"), None),
        ("p-inst", Some("g"), Some("i")),
    ] {
        let mut b = NewJob::builder("c", "x").id(id);
        if let Some(g) = group {
            b = b.group(g);
        }
        if let Some(i) = instance {
            b = b.instance(i);
        }
        c.submit(&b.build().unwrap()).await.unwrap();
    }
    let w = worker(url, ns, "W", &["--group", "g", "--instance", "i"]);
    for id in ["p-inst", "p-group", "p-type"] {
        let line = w.expect_line("started", LIMIT).await;
        assert!(line.contains(id), "{ns}: expected {id} next, got {line}");
    }

    // submit and complete
    let jobs: Vec<NewJob> = (0..50)
        .map(|i| {
            NewJob::builder("c", "x")
                .id(format!("j-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    run_to_finish(&c, &jobs).await;

    // kill -9 recovery: the job of a killed worker runs again elsewhere, once its presence ends
    drop(w);
    let mut k = worker(url, ns, "K", &[]);
    k.expect_line("ready", LIMIT).await;
    let long = NewJob::builder("c", "sleep 2000")
        .id("killed")
        .build()
        .unwrap();
    c.submit(&long).await.unwrap();
    k.expect_line("started killed", LIMIT).await;
    k.kill9();
    let quick = NewJob::builder("c", "x").id("fenced").build().unwrap();
    let b = worker(url, ns, "B", &["--lease-ms", "30000"]);
    b.expect_line("started killed 2", LIMIT).await;
    b.expect_line("completion killed completed", LIMIT).await;
    say(&format!("{ns}: the killed worker's job runs again"));

    // fencing: a stalled worker's late completion is refused
    let a = worker(url, ns, "A", &["--lease-ms", "30000"]);
    a.expect_line("ready", LIMIT).await;
    drop(b);
    let stalled = NewJob::builder("c", "sleep 1500")
        .id("stalled")
        .build()
        .unwrap();
    c.submit(&stalled).await.unwrap();
    a.expect_line("started stalled", LIMIT).await;
    a.signal("STOP");
    let b = worker(url, ns, "B", &[]);
    b.expect_line("completion stalled completed", LIMIT).await;
    a.signal("CONT");
    a.expect_line("completion stalled lease_lost", LIMIT).await;
    let record = c.get(stalled.id()).await.unwrap();
    assert_eq!(
        (record.status, record.output.as_deref()),
        (Status::Finished, Some("B"))
    );
    run_to_finish(&c, &[quick]).await;

    // the bridge: a job for a legacy actor reaches its list on the namespace's shard
    let node = &cluster.nodes[cluster.master_of(keys.prefix()).await];
    let actor = Proc::spawn(
        &binary("hero-legacy-actor"),
        &[
            "--url",
            &node.url(),
            "--queue",
            &legacy,
            "--label",
            "legacy",
            "--prefix",
            keys.prefix(),
        ],
        &[],
        None,
    );
    let old = NewJob::builder("legacy", "x")
        .id("bridged")
        .build()
        .unwrap();
    c.submit(&old).await.unwrap();
    actor.expect_line("ran bridged", LIMIT).await;
    let r = c.wait(old.id(), LIMIT).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "legacy"));

    // stats kept on write count each finished job once, per queue (the legacy job's once the
    // bridge saw its actor finish it)
    let finished = |stats: &serde_json::Value, queue: &str| {
        stats["queues"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|q| q["queue"] == queue)
            .and_then(|q| q["finished"].as_u64())
    };
    let expected = [Some(54), Some(1), Some(1), Some(1)];
    let mut last = String::new();
    let deadline = Instant::now() + LIMIT;
    loop {
        let (code, out, err) = hero_cli(url, &["--namespace", ns, "queues", "--json"]);
        assert_eq!(code, 0, "{out}{err}");
        let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
        let got = ["c", "c/g", "c/g/i", "legacy"].map(|q| finished(&stats, q));
        if got == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: finished {got:?}, not {expected:?}: {last}"
        );
        last = out;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for("a clean audit", LIMIT, || {
        let c = c.clone();
        async move {
            let (report, _) = hero_admin::Admin::from(&c)
                .audit(false, &|_| {})
                .await
                .ok()?;
            report.is_consistent().then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn two_namespaces_on_two_shards_pass_the_core_scenarios_and_survive_a_failover() {
    let mut cluster = RedisCluster::start(3, 1).await;
    let url = cluster.url();
    let [(a, master_a), (b, master_b)] = two_shards(&cluster).await;
    say(&format!("{a} on node {master_a}, {b} on node {master_b}"));
    for ns in [&a, &b] {
        core_scenarios(&cluster, &url, ns).await;
    }

    // a failover mid-run: the master of namespace a dies while jobs flow
    let (_broker, _) = http_broker(&url, None, &["--namespace", &a]).await;
    let _w = worker(&url, &a, "F", &["--concurrency", "4"]);
    let c = client(&url, &a).await;
    let before: Vec<NewJob> = (0..100)
        .map(|i| {
            NewJob::builder("c", "x")
                .id(format!("f-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    run_to_finish(&c, &before).await;
    cluster.nodes[master_a].kill();
    let killed = Instant::now();
    let promoted = wait_for(
        "a replica to take over the slot",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            let tag = format!("{{{a}}}");
            async move {
                let m = cluster.master_of(&tag).await;
                (m != master_a).then_some(m)
            }
        },
    )
    .await;
    say(&format!(
        "node {promoted} took over after {:?}",
        killed.elapsed()
    ));
    let after = NewJob::builder("c", "x")
        .id("after-failover")
        .build()
        .unwrap();
    wait_for(
        "a submit to reach the new master",
        Duration::from_secs(10),
        || {
            let (c, j) = (c.clone(), after.clone());
            async move { c.submit(&j).await.ok() }
        },
    )
    .await;
    let r = c.wait(after.id(), Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.status, Status::Finished);
    say(&format!(
        "work resumed {:?} after the kill",
        killed.elapsed()
    ));
    // the other namespace never noticed
    let other = client(&url, &b).await;
    let (_ob, _) = http_broker(&url, None, &["--namespace", &b]).await;
    let _ow = worker(&url, &b, "O", &[]);
    run_to_finish(
        &other,
        &[NewJob::builder("c", "x").id("other").build().unwrap()],
    )
    .await;

    // a manual failover in namespace b: its old master lives on as a replica and answers MOVED,
    // which sends every call to the new one
    let port_b = format!("master_port:{}", cluster.nodes[master_b].port);
    let mut replica = None;
    for (i, n) in cluster
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.pid() != 0)
    {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut n.conn().await)
            .await
            .unwrap();
        if info.contains(&port_b) {
            replica = Some(i);
        }
    }
    let replica = replica.expect("namespace b's master has a replica");
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query_async(&mut cluster.nodes[replica].conn().await)
        .await
        .unwrap();
    wait_for(
        "the replica to take over by hand",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            let tag = format!("{{{b}}}");
            async move { (cluster.master_of(&tag).await == replica).then_some(()) }
        },
    )
    .await;
    run_to_finish(
        &other,
        &[NewJob::builder("c", "x").id("moved").build().unwrap()],
    )
    .await;

    // one worker in both namespaces, one slot: a's jobs first, then b's (precedence across
    // namespaces), each of them once
    let mut ids = Vec::new();
    for i in 0..3 {
        for (c, ns) in [(&c, &a), (&other, &b)] {
            let job = NewJob::builder("m", "x")
                .id(format!("{ns}-{i}"))
                .build()
                .unwrap();
            c.submit(&job).await.unwrap();
            ids.push(job.id().to_string());
        }
    }
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = order.clone();
    let w = InProcWorker::spawn(
        Worker::builder(client(&url, &a).await)
            .also(client(&url, &b).await)
            .types(["m"])
            .concurrency(1)
            .handler(move |j: hero_protocol::Job, _| {
                seen.lock().unwrap().push(j.id.to_string());
                async move { Outcome::Done("both".into()) }
            }),
    );
    wait_for("the worker of two namespaces to run all six", LIMIT, || {
        let n = order.lock().unwrap().len();
        async move { (n == 6).then_some(()) }
    })
    .await;
    w.stop().await;
    let expected: Vec<String> = [&a, &a, &a, &b, &b, &b]
        .iter()
        .zip([0, 1, 2, 0, 1, 2])
        .map(|(ns, i)| format!("{ns}-{i}"))
        .collect();
    assert_eq!(*order.lock().unwrap(), expected);
}
