//! hero_stop: a queued job cancelled so no fetch gets it.

use super::*;

#[tokio::test]
async fn stop_cancels_a_queued_job_so_no_fetch_gets_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "x").id("s").build().unwrap();
    c.submit(&job).await.unwrap();
    assert_eq!(
        c.stop(job.id()).await.unwrap(),
        hero_client::StopOutcome::Cancelled
    );
    let stream = c
        .keys()
        .work(&Target::of_type(t("osis")), Priority::DEFAULT);
    // the stop deletes the queued job's entry (found among the undelivered ones): no fetch
    // gets the job, and none has an entry to drop
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert!(got.jobs.is_empty());
    assert!(got.dropped.is_empty(), "{:?}", got.dropped);
    let mut raw = server.conn().await;
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 0, "the entry is deleted");
    let r = c.get(job.id()).await.unwrap();
    assert_eq!(
        (r.status, r.error.as_deref()),
        (hero_protocol::Status::Error, Some("stopped"))
    );
}
