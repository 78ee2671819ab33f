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
    // the record does not name a queued job's entry: the stop leaves it, the next fetch drops it
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 1).await;
    assert!(got.jobs.is_empty());
    let dropped: Vec<(&str, &str)> = got
        .dropped
        .iter()
        .map(|d| (d.job_id.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(dropped, [("s", "stale")]);
    let mut raw = server.conn().await;
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 0, "the stale entry is deleted");
    let r = c.get(job.id()).await.unwrap();
    assert_eq!(
        (r.status, r.error.as_deref()),
        (hero_protocol::Status::Error, Some("stopped"))
    );
}
