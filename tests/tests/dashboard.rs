//! The dashboard in a real browser: headless Chromium (Debian's `chromium`) driven through
//! WebDriver (`chromedriver`, by fantoccini) against a real broker and redis-server. It loads
//! the queues page and reads the right counts, opens a job's page, retries a dead-lettered job
//! from its page with the token and sees it finish, and sees a new job appear in the live feed
//! without reloading. Screenshots of the main pages go to `target/screenshots/`.

use std::time::Duration;

use fantoccini::{Client as Browser, Locator};
use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{
    batch_done, browser, dead_letter, http_broker, queue_idle, run_to_finish, shot,
    sign_in_browser, stepped_reporter, text_of, wait_for, InProcWorker, RedisServer,
};
use hero_worker::{Outcome, Worker};

const TOKEN: &str = "dash-token-0123456789";

/// A handler's error with a cause: its chain is the failed attempt's trace.
#[derive(Debug)]
struct Invoice(std::io::Error);

impl std::fmt::Display for Invoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sending the invoice to the mail relay failed")
    }
}

impl std::error::Error for Invoice {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Waits until a job's page says the job finished (the page follows it, then reloads).
async fn page_shows_finished(b: &Browser) {
    wait_for(
        "the job's page to show it finished",
        Duration::from_secs(10),
        || {
            let b = b.clone();
            async move {
                let el = b.find(Locator::Css("#job")).await.ok()?;
                (el.attr("data-status").await.ok()?? == "finished").then_some(())
            }
        },
    )
    .await;
}

#[tokio::test]
async fn the_dashboard_shows_counts_a_jobs_page_retries_a_dead_letter_and_feeds_live_events() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    dead_letter(&client, "dl", "dead-1").await;
    let _w = InProcWorker::spawn(
        Worker::builder(client.clone())
            .types(["web", "dl"])
            .instance("dash")
            .handler(|j: hero_protocol::Job, _| async move {
                Outcome::Done(format!("ran {}", j.script))
            }),
    );
    let jobs: Vec<NewJob> = (0..3)
        .map(|n| {
            NewJob::builder("web", format!("job {n}"))
                .id(format!("web-{n}"))
                .build()
                .unwrap()
        })
        .collect();
    run_to_finish(&client, &jobs).await;
    queue_idle(&client, "idle", "idle", 2).await;
    hero_admin::Admin::from(&client)
        .pause("idle")
        .await
        .unwrap();
    // a long job that reports its progress step by step, each step when the test says so
    let (_long, step_tx) = stepped_reporter(&client);
    let (_broker, base) = http_broker(&url, Some(TOKEN), &[]).await;
    let (_driver, b, profile) = browser(false).await;

    // without the token a page asks for it; given in the form, it opens the dashboard
    b.goto(&format!("{base}/")).await.unwrap();
    text_of(&b, "#sign-in").await;
    shot(&b, "sign-in").await;
    b.find(Locator::Css("#sign-in input[name='token']"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    b.find(Locator::Css("#sign-in button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text_of(&b, "#queues").await;
    // signed in again, for changes (the form above gave a read-only session)
    sign_in_browser(&b, &base, TOKEN).await;
    // the queues page, with the right counts
    b.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(
        text_of(&b, "#queues tr[data-queue='idle'] td[data-f='waiting']").await,
        "2"
    );
    assert_eq!(
        text_of(&b, "#queues tr[data-queue='web'] td[data-f='finished']").await,
        "3"
    );
    assert_eq!(
        text_of(&b, "#queues tr[data-queue='dl'] td[data-f='dead']").await,
        "1"
    );
    assert_eq!(text_of(&b, "#total-waiting").await, "2");
    assert_eq!(
        text_of(&b, "#queues tr[data-queue='idle'] td:last-child").await,
        "paused"
    );
    assert_eq!(
        text_of(&b, "#queues tr[data-queue='web'] td:last-child").await,
        "active"
    );
    shot(&b, "queues").await;

    // a job's page: record, output, history
    b.goto(&format!("{base}/jobs/web-1")).await.unwrap();
    assert_eq!(text_of(&b, "#output").await, "ran job 1");
    let history = text_of(&b, "#history").await;
    for e in ["submitted", "started", "finished"] {
        assert!(history.contains(e), "history shows {e}: {history}");
    }
    shot(&b, "job").await;

    // a failed job's page: its error, and the trace of its last failed attempt
    let _failing = InProcWorker::spawn(Worker::builder(client.clone()).types(["boom"]).handler(
        |_, ctx: hero_worker::JobContext| async move {
            ctx.fail(&Invoice(std::io::Error::other(
                "connection refused (os error 111)",
            )))
        },
    ));
    client
        .submit(
            &NewJob::builder("boom", "send the invoice")
                .id("boom-1")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    wait_for("boom-1 to fail", Duration::from_secs(20), || {
        let c = client.clone();
        async move {
            let j = c.get(&JobId::new("boom-1").ok()?).await.ok()?;
            (j.status == Status::Error).then_some(())
        }
    })
    .await;
    b.goto(&format!("{base}/jobs/boom-1")).await.unwrap();
    let trace = text_of(&b, "#trace").await;
    assert!(
        trace.contains("connection refused (os error 111)") && trace.contains("caused by:"),
        "{trace}"
    );
    shot(&b, "job-trace").await;

    // retry a dead letter from its page, with the token typed into the page
    b.goto(&format!("{base}/jobs/dead-1")).await.unwrap();
    b.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    b.find(Locator::Css("#token-form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    shot(&b, "dead-letter-job").await;
    b.find(Locator::Css("#retry"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // the click's request is under way: the job is still `error` until it lands, so wait for
    // the finish itself rather than for the job to be ended
    wait_for("the retried job to run", Duration::from_secs(20), || {
        let client = client.clone();
        async move {
            (client.status(&JobId::new("dead-1").unwrap()).await.ok()? == Status::Finished)
                .then_some(())
        }
    })
    .await;
    // the page reloads itself after the retry and shows the job finished
    page_shows_finished(&b).await;
    assert_eq!(text_of(&b, "#output").await, "ran x");
    shot(&b, "retried-job").await;

    // a running job's page follows its progress and log without a reload
    client
        .submit(
            &NewJob::builder("long", "work")
                .id("long-1")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    wait_for(
        "the long job's first report",
        Duration::from_secs(10),
        || {
            let client = client.clone();
            async move {
                let j = client.get(&JobId::new("long-1").unwrap()).await.ok()?;
                (j.progress?.message == "copying files").then_some(())
            }
        },
    )
    .await;
    b.goto(&format!("{base}/jobs/long-1")).await.unwrap();
    assert_eq!(text_of(&b, "#progress-text").await, "10% copying files");
    assert_eq!(text_of(&b, "#job-log").await, "began copying");
    // a mark on this document: a reload would lose it
    b.execute("window.heroMark = 1", vec![]).await.unwrap();
    step_tx.send(1).unwrap();
    wait_for(
        "the job's page to show the next step",
        Duration::from_secs(10),
        || {
            let b = b.clone();
            async move {
                let t = b
                    .find(Locator::Css("#progress-text"))
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                (t == "60% indexing").then_some(())
            }
        },
    )
    .await;
    assert_eq!(
        text_of(&b, "#job-log").await,
        "began copying\ncopied 3 files\nindexing began"
    );
    let bar = b
        .execute(
            "return document.getElementById('progress-bar').value",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(bar, serde_json::json!(60));
    assert_eq!(
        b.execute("return window.heroMark", vec![]).await.unwrap(),
        serde_json::json!(1),
        "the page was not reloaded"
    );
    shot(&b, "job-progress").await;
    step_tx.send(2).unwrap();
    // once it ends the page shows the output
    page_shows_finished(&b).await;
    assert_eq!(text_of(&b, "#output").await, "indexed");

    // a new job appears in the live feed without a reload
    b.goto(&format!("{base}/")).await.unwrap();
    text_of(&b, "#feed").await;
    // the page says when its event stream is open: from then on, nothing logged is missed
    wait_for(
        "the live feed's stream to open",
        Duration::from_secs(10),
        || {
            let b = b.clone();
            async move {
                let el = b.find(Locator::Css("#feed")).await.ok()?;
                (el.attr("data-live").await.ok()?? == "open").then_some(())
            }
        },
    )
    .await;
    let job = NewJob::builder("web", "live").id("live-1").build().unwrap();
    client.submit(&job).await.unwrap();
    b.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#feed a[href='/jobs/live-1']"))
        .await
        .expect("the new job in the live feed");
    let url_now = b.current_url().await.unwrap();
    assert_eq!(url_now.path(), "/", "no navigation happened");
    shot(&b, "live-feed").await;

    // a batch on its page: counts and its callback job
    let batch = client.batch("dash-batch").unwrap();
    let members: Vec<NewJob> = (0..2)
        .map(|n| {
            NewJob::builder("web", "member")
                .id(format!("dash-m-{n}"))
                .build()
                .unwrap()
        })
        .collect();
    batch.add(&members).await.unwrap();
    let cb = NewJob::builder("cbq", "report()")
        .id("dash-batch-cb")
        .build()
        .unwrap();
    batch.close(Some(&cb), None).await.unwrap();
    batch_done(&client, "dash-batch", Duration::from_secs(20)).await;
    b.goto(&format!("{base}/batches")).await.unwrap();
    assert_eq!(
        text_of(
            &b,
            "#batches tr[data-batch='dash-batch'] td[data-f='finished']"
        )
        .await,
        "2"
    );
    assert!(text_of(&b, "#batches tr[data-batch='dash-batch']")
        .await
        .contains("dash-batch-cb"));
    shot(&b, "batches").await;

    for (path, name) in [
        ("/actors", "actors"),
        ("/dead", "dead"),
        ("/audit?run=1", "audit"),
        ("/events", "events"),
        ("/jobs", "jobs"),
    ] {
        b.goto(&format!("{base}{path}")).await.unwrap();
        let text = text_of(&b, "main").await;
        if name == "actors" {
            // each worker's and broker's protocol, and its types and host from its presence
            let protocol = hero_protocol::function::LIBRARY_VERSION;
            assert!(
                text.contains("Protocol") && text.contains(protocol) && text.contains("Brokers"),
                "{text}"
            );
            assert!(
                text.contains("web, dl"),
                "the types a worker serves: {text}"
            );
        }
        shot(&b, name).await;
    }
    assert!(
        text_of(&b, "main").await.contains("web-"),
        "the jobs list shows jobs"
    );
    b.goto(&format!("{base}/audit?run=1")).await.unwrap();
    assert!(text_of(&b, "#audit-result").await.starts_with("Consistent"));

    // a narrow window
    b.set_window_size(420, 800).await.unwrap();
    b.goto(&format!("{base}/")).await.unwrap();
    text_of(&b, "#queues").await;
    shot(&b, "queues-narrow").await;

    b.close().await.unwrap();
    let _ = std::fs::remove_dir_all(profile);

    // the system's dark scheme gives the dark palette
    let (_driver, b, profile) = browser(true).await;
    sign_in_browser(&b, &base, TOKEN).await;
    text_of(&b, "#queues").await;
    let bg = b
        .execute(
            "return getComputedStyle(document.body).backgroundColor",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        bg,
        serde_json::json!("rgb(17, 21, 28)"),
        "the dark palette's background"
    );
    shot(&b, "queues-dark").await;
    b.close().await.unwrap();
    let _ = std::fs::remove_dir_all(profile);
}
