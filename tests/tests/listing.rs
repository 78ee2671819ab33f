//! Listing jobs by status costs O(page), never O(jobs) (issue 27): among 100,000 queued jobs a
//! page of the few finished, failed, waiting or running ones is found through the structures
//! the functions keep (retention stream, delayed set, dependents hashes, pending lists), and a
//! page of queued ones through the streams. The bound is asserted on the Redis commands a page
//! runs (what a scan of every job would multiply), and the time a page took is printed.

use std::time::{Duration, Instant};

use hero_admin::inspect::ListFilter;
use hero_client::Client;
use hero_protocol::{NewJob, Status};
use hero_testkit::{run_to_finish, InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};

const BULK: usize = 100_000;
const PAGE: usize = 50;

/// Commands the server ran since the last CONFIG RESETSTAT (the reset's own call aside).
async fn commands(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    info.lines()
        .filter(|l| {
            l.starts_with("cmdstat_")
                && !l.starts_with("cmdstat_config")
                && !l.starts_with("cmdstat_info")
        })
        .filter_map(|l| {
            l.split(',')
                .next()?
                .split("calls=")
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn a_page_by_status_among_100000_jobs_reads_o_of_the_page() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = server.conn().await;
    // 100,000 queued jobs no worker takes
    for b in 0..BULK / 1000 {
        let batch: Vec<NewJob> = (0..1000)
            .map(|i| {
                NewJob::builder("bulk", "x")
                    .id(format!("b-{b}-{i}"))
                    .build()
                    .unwrap()
            })
            .collect();
        for r in client.submit_many(&batch).await.unwrap() {
            r.unwrap();
        }
    }
    // 30 finished, 5 failed
    let w = InProcWorker::spawn(Worker::builder(client.clone()).types(["fin"]).handler(
        |job: hero_protocol::Job, _| async move {
            if job.script == "fail" {
                Outcome::Abort("no".into())
            } else {
                Outcome::Done("ok".into())
            }
        },
    ));
    let ended: Vec<NewJob> = (0..35)
        .map(|i| {
            let script = if i < 30 { "ok" } else { "fail" };
            NewJob::builder("fin", script)
                .id(format!("e-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    for r in client.submit_many(&ended).await.unwrap() {
        r.unwrap();
    }
    hero_testkit::wait_for("35 jobs ended", Duration::from_secs(60), || {
        let client = client.clone();
        async move {
            let mut n = 0;
            for i in 0..35 {
                let j = client
                    .get(&hero_protocol::JobId::new(format!("e-{i}")).ok()?)
                    .await
                    .ok()?;
                if matches!(j.status, Status::Finished | Status::Error) {
                    n += 1;
                }
            }
            (n == 35).then_some(())
        }
    })
    .await;
    w.stop().await;
    // 3 delayed, 1 waiting on a prerequisite, 1 running
    for i in 0..3 {
        let j = NewJob::builder("later", "x")
            .id(format!("w-{i}"))
            .delay(Duration::from_secs(3600))
            .build()
            .unwrap();
        client.submit(&j).await.unwrap();
    }
    let dependent = NewJob::builder("dep", "x")
        .id("w-dep")
        .after("b-0-0")
        .build()
        .unwrap();
    client.submit(&dependent).await.unwrap();
    run_to_finish(&client, &[]).await;
    let held = NewJob::builder("run", "x").id("r-0").build().unwrap();
    client.submit(&held).await.unwrap();
    let stream = hero_testkit::work_key("run");
    let fetch = hero_protocol::function::fetch(client.keys(), &[stream], "g:hold:1", 1, "0");
    let _: redis::Value = client.redis().query(&fetch).await.unwrap();

    let inspector = hero_admin::Inspector::from(&client);
    for (status, expected) in [
        (Status::Finished, 30),
        (Status::Error, 5),
        (Status::Waiting, 4),
        (Status::Started, 1),
        (Status::Dispatched, PAGE),
    ] {
        // a page, and every page after it up to the end or 50 jobs: what a user pages through
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut raw)
            .await
            .unwrap();
        let t0 = Instant::now();
        let mut found = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = inspector
                .list(&ListFilter::Status(status), cursor.as_deref(), PAGE)
                .await
                .unwrap();
            found.extend(page.jobs.into_iter().map(|j| (j.id, j.status)));
            cursor = page.next;
            if cursor.is_none() || found.len() >= PAGE {
                break;
            }
        }
        let took = t0.elapsed();
        let ran = commands(&mut raw).await;
        eprintln!(
            "{status:?}: {} jobs in {took:?}, {ran} Redis commands",
            found.len()
        );
        assert!(
            found.iter().all(|(_, s)| s == status.as_str()),
            "{status:?}: {found:?}"
        );
        assert_eq!(found.len(), expected, "{status:?}: {found:?}");
        // a scan of every job would run about BULK / PAGE commands; a page runs O(page)
        assert!(
            ran <= 4 * PAGE as u64 + 40,
            "{status:?}: {ran} commands for a page"
        );
    }
}

/// A cursor no page gave is the caller's error (a 4xx over HTTP), never Redis's: SCAN and
/// XRANGE would refuse it as a server error (found by `fuzz_http.rs`: `?cursor=⺀` was a 503).
#[tokio::test]
async fn a_cursor_no_page_gave_is_refused_as_bad_input() {
    let server = hero_testkit::RedisServer::start();
    let client = hero_client::Client::connect(&server.url()).await.unwrap();
    let inspector = hero_admin::Inspector::from(&client);
    let queue = hero_protocol::Target::of_type(hero_protocol::ScriptType::new("t").unwrap());
    for (filter, cursor) in [
        (hero_admin::ListFilter::All, "⺀"),
        (hero_admin::ListFilter::Tracked, "x1"),
        (
            hero_admin::ListFilter::Queue(queue, hero_protocol::Priority::DEFAULT),
            "not-an-id",
        ),
    ] {
        let e = inspector.list(&filter, Some(cursor), 10).await.unwrap_err();
        assert!(
            matches!(e, hero_protocol::Error::InvalidInput(_)),
            "{filter:?} {cursor:?}: {e}"
        );
    }
    let e = inspector.dead_letters(Some(" "), 10).await.unwrap_err();
    assert!(matches!(e, hero_protocol::Error::InvalidInput(_)), "{e}");
    let page = inspector
        .list(&hero_admin::ListFilter::All, Some("0"), 10)
        .await
        .unwrap();
    assert!(page.next.is_none());
}

/// A sparse status (40 failed jobs among 3,000 finished) is never answered with an empty page
/// while matches remain: a page reads on until it is full or the listing ends (the CLI, the
/// API and every language's listing go through it), and `hero jobs --status error` shows the
/// first rows at once.
#[tokio::test]
async fn a_sparse_status_fills_its_pages_and_never_answers_empty_while_matches_remain() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["sparse"])
            .concurrency(32)
            .handler(|job: hero_protocol::Job, _| async move {
                if job.script == "fail" {
                    Outcome::Abort("no".into())
                } else {
                    Outcome::Done("ok".into())
                }
            }),
    );
    let ids: Vec<String> = (0..3040).map(|i| format!("s-{i}")).collect();
    for chunk in ids.chunks(500) {
        let jobs: Vec<NewJob> = chunk
            .iter()
            .map(|id| {
                let n: usize = id[2..].parse().unwrap();
                let script = if n % 76 == 0 { "fail" } else { "ok" };
                NewJob::builder("sparse", script)
                    .id(id.as_str())
                    .build()
                    .unwrap()
            })
            .collect();
        for r in client.submit_many(&jobs).await.unwrap() {
            r.unwrap();
        }
    }
    hero_testkit::all_finished_or_failed(&server, &ids, Duration::from_secs(90)).await;
    w.stop().await;
    let inspector = hero_admin::Inspector::from(&client);
    let mut cursor: Option<String> = None;
    let mut found = 0;
    let mut pages = 0;
    loop {
        let page = inspector
            .list(&ListFilter::Status(Status::Error), cursor.as_deref(), 15)
            .await
            .unwrap();
        pages += 1;
        found += page.jobs.len();
        assert!(
            page.jobs.iter().all(|j| j.status == "error"),
            "{:?}",
            page.jobs
        );
        match page.next {
            Some(n) => {
                assert_eq!(
                    page.jobs.len(),
                    15,
                    "a page short of its limit with more to come"
                );
                cursor = Some(n);
            }
            None => break,
        }
    }
    assert_eq!(found, 40, "every failed job, in {pages} pages");
    let (code, out, err) = hero_testkit::hero_cli(
        &server.url(),
        &["jobs", "--status", "error", "--limit", "20"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches(" error ").count(), 20, "{out}");
    assert!(out.contains("more: hero jobs --cursor"), "{out}");
}
