//! hero_renew: a lease renewed while held, lost once another delivery owns the job.

use super::*;

#[tokio::test]
async fn renew_reports_lost_when_another_delivery_owns_the_job() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, lease) = submit_and_fetch(&c, "n").await;
    let id = JobId::new("n").unwrap();
    let renew = |lease: String| function::renew(c.keys(), &id, &stream, &lease, "g:a:1", None);
    let v: redis::Value = c.redis().query(&renew(lease.clone())).await.unwrap();
    assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Ok);
    let r = recover_consumer(&c, &stream, "g:a:1", 5).await;
    assert_eq!(r.requeued, 1);
    let v: redis::Value = c.redis().query(&renew(lease)).await.unwrap();
    assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Lost);
}

#[tokio::test]
async fn renew_records_a_report_and_keeps_the_last_lines_when_the_lease_holds() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (stream, lease) = submit_and_fetch(&c, "p").await;
    let id = JobId::new("p").unwrap();
    let report = |percent: f64, lines: std::ops::Range<usize>| function::Report {
        progress: Some(hero_protocol::Progress {
            percent,
            message: format!("at {percent}"),
        }),
        lines: lines.map(|n| format!("line {n}")).collect(),
    };
    for (percent, lines) in [(10.0, 0..60), (70.5, 60..130)] {
        let call = function::renew(
            c.keys(),
            &id,
            &stream,
            &lease,
            "g:a:1",
            Some(&report(percent, lines)),
        );
        let v: redis::Value = c.redis().query(&call).await.unwrap();
        assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Ok);
    }
    let job = c.get(&id).await.unwrap();
    let p = job.progress.expect("progress recorded");
    assert_eq!((p.percent, p.message.as_str()), (70.5, "at 70.5"));
    assert_eq!(
        job.log.len(),
        hero_protocol::LOG_LINES,
        "the log keeps its last lines"
    );
    assert_eq!(job.log.first().map(String::as_str), Some("line 30"));
    assert_eq!(job.log.last().map(String::as_str), Some("line 129"));
    let kinds: Vec<String> = hero_admin::Inspector::from(&c)
        .events(
            &hero_admin::inspect::EventFilter {
                job: Some("p".into()),
                ..Default::default()
            },
            100,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event.clone())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "progress").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "logged").count(),
        2,
        "{kinds:?}"
    );

    // fenced: a delivery that lost its lease records nothing
    let r = recover_consumer(&c, &stream, "g:a:1", 5).await;
    assert_eq!(r.requeued, 1);
    let late = function::renew(
        c.keys(),
        &id,
        &stream,
        &lease,
        "g:a:1",
        Some(&report(99.0, 500..501)),
    );
    let v: redis::Value = c.redis().query(&late).await.unwrap();
    assert_eq!(Renewal::decode(&v).unwrap(), Renewal::Lost);
    let job = c.get(&id).await.unwrap();
    assert_eq!(job.progress.map(|p| p.percent), Some(70.5));
    assert_eq!(job.log.last().map(String::as_str), Some("line 129"));
}
