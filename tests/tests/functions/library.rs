//! The library as a whole: reloaded when lost, one slot in cluster mode, XACKDEL detection,
//! and two versions side by side.

use super::*;

#[tokio::test]
async fn functions_reload_when_the_server_lost_them() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let job = NewJob::builder("osis", "x").build().unwrap();
    assert!(c.submit(&job).await.unwrap().created);
}

/// Redis in cluster mode (one node holding every slot) refuses an FCALL whose declared keys
/// span two slots (CROSSSLOT), so running each function here proves its KEYS share the
/// namespace's slot. Keys a function derives (job hash, reply list) come from prefixes in the
/// same hash tag: `keys::tests::cluster_keys_share_the_namespace_hash_tag` pins those.
#[tokio::test]
async fn every_function_touches_one_slot_in_cluster_mode() {
    let server = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ]);
    let mut raw = server.conn().await;
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut raw)
        .await
        .unwrap();
    hero_testkit::wait_for("cluster state ok", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut raw)
                .await
                .ok()?;
            info.contains("cluster_state:ok").then_some(())
        }
    })
    .await;
    let mut opts = hero_client::ClientOptions::new(server.url());
    opts.cluster = true;
    let c = Client::with_options(opts).await.unwrap();
    let job = NewJob::builder("osis", "x")
        .id("cl")
        .retries(1)
        .build()
        .unwrap();
    c.submit(&job).await.unwrap();
    let stream = c.keys().work(job.target(), Priority::DEFAULT);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(got.jobs.len(), 1);
    let r = recover_consumer(&c, &stream, "g:a:1", 5).await;
    assert_eq!(r.requeued, 1);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(
        complete(&c, &stream, "cl", &got.jobs[0].entry, "done", "ok").await,
        Completion::Completed
    );
    let late = NewJob::builder("osis", "x").id("cl2").build().unwrap();
    c.submit(&late).await.unwrap();
    assert_eq!(
        c.stop(late.id()).await.unwrap(),
        hero_client::StopOutcome::Cancelled
    );
    assert_eq!(expire(&c, Duration::ZERO, 10).await.jobs, 2);
}

#[tokio::test]
async fn xackdel_is_used_only_when_the_server_has_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut raw)
        .await
        .unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap()
        .trim()
        .to_string();
    let (major, minor) = {
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    // XACKDEL arrived in 8.2; the client asks the server instead of reading the version
    assert_eq!(
        c.redis().caps().xackdel,
        (major, minor) >= (8, 2),
        "redis {version}"
    );
    // and the functions run with the flag the client detected
    let job = NewJob::builder("osis", "x").id("ack").build().unwrap();
    c.submit(&job).await.unwrap();
    let stream = c.keys().work(job.target(), Priority::DEFAULT);
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert_eq!(
        complete(&c, &stream, "ack", &got.jobs[0].entry, "done", "ok").await,
        Completion::Completed
    );
}

/// A rolling upgrade: processes of the last version still call their library while processes
/// of this one load theirs. Each version's library and functions carry the version in their
/// names, so both stay loaded, each process calls its own, and neither load replaces the other.
#[tokio::test]
async fn two_versions_of_the_library_serve_side_by_side() {
    let server = RedisServer::start();
    let mut raw = server.conn().await;
    let old_version = (function::LIBRARY_VERSION.parse::<u32>().unwrap() - 1).to_string();
    let load_old = || {
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(function::library_source_of(&old_version))
            .clone()
    };
    let version_of = |v: &str| {
        redis::cmd("FCALL")
            .arg(format!("hero_v{v}_version"))
            .arg(0)
            .clone()
    };
    // the old deployment is running
    let _: String = load_old().query_async(&mut raw).await.unwrap();
    // a new broker or worker starts: it loads its own library beside the old one
    let c = client(&server).await;
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(libraries.len(), 2, "both versions are loaded");
    let old: String = version_of(&old_version)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        old, old_version,
        "the old processes' functions are still there"
    );
    // an old process restarting loads its library again: the new one is untouched
    let _: String = load_old().query_async(&mut raw).await.unwrap();
    let new: String = version_of(function::LIBRARY_VERSION)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(new, function::LIBRARY_VERSION);
    // and the new version's calls go on working without a reload in between
    let job = NewJob::builder("osis", "x").id("up").build().unwrap();
    assert!(c.submit(&job).await.unwrap().created);
    let (stream, lease) = submit_and_fetch(&c, "up2").await;
    assert_eq!(
        complete(&c, &stream, "up2", &lease, "done", "ok").await,
        Completion::Completed
    );
}
