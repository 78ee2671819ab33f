//! hero_renew: a lease renewed while held, lost once another delivery owns the job.

use super::*;

#[tokio::test]
async fn renew_reports_lost_when_another_delivery_owns_the_job() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, lease) = submit_and_fetch(&c, "n").await;
    let id = JobId::new("n").unwrap();
    let renew = |lease: String| function::renew(c.keys(), &id, &stream, &lease, "g:a:1");
    let v: redis::Value = c.redis().query(&renew(lease.clone())).await.unwrap();
    assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Ok);
    let r = recover_consumer(&c, &stream, "g:a:1", 5).await;
    assert_eq!(r.requeued, 1);
    let v: redis::Value = c.redis().query(&renew(lease)).await.unwrap();
    assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Lost);
}
