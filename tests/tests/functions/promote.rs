//! hero_promote: a delayed job queued once, however many brokers promote it.

use super::*;

#[tokio::test]
async fn delayed_job_waits_then_promote_queues_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let job = NewJob::builder("osis", "x")
        .id("later")
        .delay(Duration::from_secs(60))
        .build()
        .unwrap();
    assert_eq!(c.submit(&job).await.unwrap().status, "waiting");
    let target = Target::of_type(t("osis"));
    let stream = c.keys().work(&target, Priority::DEFAULT);
    let cmd = function::promote(c.keys(), job.id(), &stream, &clock::now_iso());
    let first: String = c.redis().query(&cmd).await.unwrap();
    let second: String = c.redis().query(&cmd).await.unwrap();
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("promoted", "gone"),
        "a second broker's promote is a no-op"
    );
    assert_eq!(fetch(&c, "g:a:1", &[stream], 1).await.jobs.len(), 1);
}
