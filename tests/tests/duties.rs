//! The queue's upkeep with no `hero broker` (issue 59): workers alone, each taking its turn
//! through `hero_duties`, promote delayed jobs and retries, recover a killed worker's job, end
//! jobs past their time limit, call a batch back, sample queue depths and delete ended jobs
//! past their retention, in the db their URL names; many workers do each duty once (one holder of the duty lease), and a holder killed
//! -9 is replaced within seconds. Python's and Node's workers drive the same function (their
//! `test_duties` suites).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hero_client::Client;
use hero_protocol::policy::{Backoff, BackoffKind};
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{keys, test_worker, wait_for, Proc, RedisServer};
use redis::AsyncCommands;

async fn ended(client: &Client, id: &str, limit: Duration) -> hero_protocol::Job {
    let id = JobId::new(id).unwrap();
    wait_for(&format!("{id} ended"), limit, || {
        let (c, id) = (client.clone(), id.clone());
        async move {
            let j = c.get(&id).await.ok()?;
            matches!(j.status, Status::Finished | Status::Error).then_some(j)
        }
    })
    .await
}

/// Which of `workers` has the consumer name `consumer` (their `ready` lines).
fn holder_of(workers: &[Proc], consumer: &str) -> usize {
    workers
        .iter()
        .position(|w| w.output().iter().any(|l| l == &format!("ready {consumer}")))
        .unwrap_or_else(|| panic!("no worker is {consumer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_alone_do_every_duty_in_the_db_of_their_url() {
    let server = RedisServer::start();
    let url = format!("{}/3", server.url());
    let client = Client::connect(&url).await.unwrap();
    // retention short, so it is seen working (the config hash is where every language reads it)
    let mut raw = server.conn().await;
    let _: () = redis::cmd("SELECT")
        .arg(3)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = raw
        .hset(keys().config(), "retention_ms", 1500)
        .await
        .unwrap();
    // a job no one serves: the depth sample of its queue (the dashboard's chart) counts it
    let unserved = NewJob::builder("unserved", "x")
        .id("unserved")
        .build()
        .unwrap();
    client.submit(&unserved).await.unwrap();
    let flags = ["--presence-ms", "1500", "--concurrency", "4"];
    let a = test_worker(&url, "alone", "a", &flags);
    a.saw("ready", Duration::from_secs(20)).await;
    wait_for("the depth sample", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            let minute = keys().stats_minute(&hero_protocol::clock::now_iso());
            let field = format!("{}:q:work:type:unserved|waiting", keys().prefix());
            let n: Option<i64> = raw.hget(minute, field).await.ok()?;
            (n == Some(1)).then_some(())
        }
    })
    .await;

    // a delayed job runs once its time has come
    let t0 = Instant::now();
    let delayed = NewJob::builder("alone", "x")
        .id("delayed")
        .delay(Duration::from_millis(1500))
        .build()
        .unwrap();
    client.submit(&delayed).await.unwrap();
    // a failing job with a budget is retried on its back-off, then ends error
    let retried = NewJob::builder("alone", "fail again")
        .id("retried")
        .retries(2)
        .backoff(Backoff {
            kind: BackoffKind::Fixed,
            base_ms: 300,
            cap_ms: 300,
            jitter: 0.0,
        })
        .build()
        .unwrap();
    client.submit(&retried).await.unwrap();
    let j = ended(&client, "delayed", Duration::from_secs(20)).await;
    assert_eq!(j.status, Status::Finished);
    assert!(
        t0.elapsed() >= Duration::from_millis(1400),
        "not before its time"
    );
    let j = ended(&client, "retried", Duration::from_secs(20)).await;
    assert_eq!((j.status, j.attempts), (Status::Error, 3), "{j:?}");
    assert_eq!(a.starts_seen("retried", 3).await, 3);

    // a job past its time limit ends
    let limited = NewJob::builder("alone", "sleep 20000")
        .id("limited")
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    client.submit(&limited).await.unwrap();
    let j = ended(&client, "limited", Duration::from_secs(20)).await;
    assert_eq!(j.status, Status::Error, "{j:?}");

    // a worker killed -9 mid-job: its job runs again on the other worker
    let b = test_worker(&url, "alone", "b", &flags);
    b.saw("ready", Duration::from_secs(20)).await;
    let long = NewJob::builder("alone", "sleep 1500")
        .id("orphan")
        .build()
        .unwrap();
    client.submit(&long).await.unwrap();
    let (runner, other) = wait_for("the long job started", Duration::from_secs(20), || {
        let (sa, sb) = (a.starts("orphan"), b.starts("orphan"));
        async move {
            match (sa, sb) {
                (1, 0) => Some((0, 1)),
                (0, 1) => Some((1, 0)),
                _ => None,
            }
        }
    })
    .await;
    let mut ws = [a, b];
    ws[runner].kill9();
    let j = ended(&client, "orphan", Duration::from_secs(30)).await;
    assert_eq!(j.status, Status::Finished, "{j:?}");
    assert_eq!(
        ws[other].starts_seen("orphan", 1).await,
        1,
        "run again on the live worker"
    );

    // a batch calls back once its members ended
    let batch = client.batch("together").unwrap();
    let members: Vec<NewJob> = ["m1", "m2"]
        .iter()
        .map(|id| NewJob::builder("alone", "x").id(*id).build().unwrap())
        .collect();
    batch.add(&members).await.unwrap();
    let callback = NewJob::builder("alone", "x")
        .id("called-back")
        .build()
        .unwrap();
    batch.close(Some(&callback), None).await.unwrap();
    let j = ended(&client, "called-back", Duration::from_secs(20)).await;
    assert_eq!(j.status, Status::Finished, "{j:?}");

    // retention: the ended jobs go once it passed
    wait_for("the ended jobs deleted", Duration::from_secs(20), || {
        let c = client.clone();
        async move {
            let gone = c.get(&JobId::new("delayed").unwrap()).await.is_err();
            gone.then_some(())
        }
    })
    .await;
    // all of it in db 3, nothing in db 0
    let in_db0: Vec<String> = server.conn().await.keys("hero:*").await.unwrap();
    assert!(in_db0.is_empty(), "db 0 untouched: {in_db0:?}");
    ws[other].kill9();
}

/// Twenty workers started together: each delayed job is promoted once (one `dispatched` event,
/// one run); the holder of the duties killed -9 is replaced within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_workers_promote_each_job_and_fire_each_tick_once_and_a_killed_holder_is_replaced() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    // a recurring job every second, fired by the twenty workers' duties (priority 3: a stream
    // of its own, so the delayed jobs' counts below are theirs alone)
    let mut each = hero_testkit::cron_job(
        "each",
        "every 1s",
        "many",
        hero_protocol::cron::Missed::Skip,
    );
    each.job.priority = Some(3);
    client.cron_add(&each).await.unwrap();
    let mut workers: Vec<Proc> = (0..20)
        .map(|i| test_worker(&server.url(), "many", &format!("w{i}"), &[]))
        .collect();
    for w in &workers {
        w.saw("ready", Duration::from_secs(30)).await;
    }
    let ids: Vec<String> = (0..200).map(|i| format!("d{i}")).collect();
    let jobs: Vec<NewJob> = ids
        .iter()
        .map(|id| {
            NewJob::builder("many", "x")
                .id(id.as_str())
                .delay(Duration::from_millis(1000))
                .build()
                .unwrap()
        })
        .collect();
    for r in client.submit_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    for id in &ids {
        ended(&client, id, Duration::from_secs(30)).await;
    }
    // the `started` lines the workers wrote before the results, once read
    wait_for("every start read", Duration::from_secs(10), || {
        let all = ids
            .iter()
            .all(|id| workers.iter().map(|w| w.starts(id)).sum::<usize>() >= 1);
        async move { all.then_some(()) }
    })
    .await;
    let runs: HashMap<&String, usize> = ids
        .iter()
        .map(|id| (id, workers.iter().map(|w| w.starts(id)).sum()))
        .collect();
    assert!(runs.values().all(|&n| n == 1), "each ran once: {runs:?}");
    let stats: HashMap<String, String> = server.conn().await.hgetall(keys().stats()).await.unwrap();
    let sum = |suffix: &str| -> i64 {
        stats
            .get(&format!("hero:q:work:type:many{suffix}"))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(
        (sum("|finished"), sum("|delayed")),
        (200, 0),
        "each promoted once: {stats:?}"
    );

    // the holder killed -9: another worker holds the duties within 5 s
    let mut raw = server.conn().await;
    let holder: String = raw.hget(keys().duties(), "holder").await.unwrap();
    let gone = holder_of(&workers, &holder);
    workers[gone].kill9();
    let killed = Instant::now();
    let next: String = wait_for("another holder", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        let holder = holder.clone();
        async move {
            let h: Option<String> = raw.hget(keys().duties(), "holder").await.ok()?;
            h.filter(|h| *h != holder)
        }
    })
    .await;
    assert!(
        killed.elapsed() <= Duration::from_secs(5),
        "replaced in {:?}",
        killed.elapsed()
    );
    // and it does the duties: a delayed job submitted now runs
    let late = NewJob::builder("many", "x")
        .id("late")
        .delay(Duration::from_millis(200))
        .build()
        .unwrap();
    client.submit(&late).await.unwrap();
    let j = ended(&client, "late", Duration::from_secs(10)).await;
    assert_eq!(j.status, Status::Finished, "promoted by {next}");

    // each recurring tick fired once, and ran once, through the holder's death
    let fired_after = |ms: u64| {
        let client = client.clone();
        async move {
            let list = hero_admin::Admin::from(&client).cron_list().await.ok()?;
            let e = list.into_iter().find(|e| e.job.name == "each")?;
            (e.last_ms? > ms).then_some(())
        }
    };
    let since = hero_protocol::clock::now_ms() + 2000;
    wait_for(
        "ticks after the new holder took over",
        Duration::from_secs(15),
        || fired_after(since),
    )
    .await;
    hero_admin::Admin::from(&client)
        .cron_pause("each", true)
        .await
        .unwrap();
    let mut ticks: Vec<u64> = {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("hero:job:cron-each-*")
            .query_async(&mut raw)
            .await
            .unwrap();
        keys.iter()
            .filter_map(|k| k.rsplit('-').next()?.parse().ok())
            .collect()
    };
    ticks.sort_unstable();
    // some before the holder's death, and some the next holder fired (waited for above)
    assert!(ticks.len() >= 3, "{ticks:?}");
    for w in ticks.windows(2) {
        // one a second; the ticks due while the killed holder's lease ran out (3 s) were
        // more than 1 s late when the next holder came: skipped, never doubled
        assert!(
            (w[1] - w[0]) % 1000 == 0 && w[1] > w[0] && w[1] - w[0] <= 5000,
            "{ticks:?}"
        );
    }
    let live: Vec<&Proc> = workers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != gone)
        .map(|(_, w)| w)
        .collect();
    for t in &ticks {
        let id = format!("cron-each-{t}");
        ended(&client, &id, Duration::from_secs(10)).await;
        let runs: usize =
            live.iter().map(|w| w.starts(&id)).sum::<usize>() + workers[gone].starts(&id);
        assert!(runs <= 1, "{id} ran {runs} times");
    }
    for (i, w) in workers.iter_mut().enumerate() {
        if i != gone {
            w.kill9();
        }
    }
}

/// A delayed submit where no live process does the upkeep is told once, naming the Redis and
/// its db; with a worker running (duties on by default) nothing is said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_submit_with_no_one_doing_the_upkeep_is_told_naming_the_db() {
    let server = RedisServer::start();
    let url = format!("{}/3", server.url());
    let submit =
        || hero_testkit::hero_cli(&url, &["submit", "--type", "nobody", "--delay", "5s", "x"]);
    let (code, out, err) = submit();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("no live process does the queue's upkeep") && err.contains("/3"),
        "{err}"
    );
    assert_eq!(err.matches("queue's upkeep").count(), 1, "once: {err}");
    let mut w = test_worker(&url, "nobody", "w", &[]);
    w.saw("ready", Duration::from_secs(20)).await;
    let mut raw = server.conn().await;
    let _: () = redis::cmd("SELECT")
        .arg(3)
        .query_async(&mut raw)
        .await
        .unwrap();
    wait_for("a holder of the duties", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            raw.exists::<_, bool>(keys().duties())
                .await
                .ok()?
                .then_some(())
        }
    })
    .await;
    let (code, out, err) = submit();
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("queue's upkeep"), "{err}");
    w.kill9();
}

/// With no broker, the holder of the duties keeps the fleet summary (`fleet_lacks`: what live
/// older processes lack, those of before protocol 29 found by their presence), which hero-py and
/// Node refuse submits by, written by `hero_duties` in any language and equal to Rust's reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_keeps_the_fleet_summary_with_no_broker() {
    let server = RedisServer::start();
    let mut raw = server.conn().await;
    let now: (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let old = serde_json::json!({
        "role": "worker", "protocol": 26, "version": "hero-py 0.26.0",
        "expires_ms": now.0 * 1000 + 120_000,
    });
    let _: () = raw
        .hset(keys().fleet(), "default:old:1", old.to_string())
        .await
        .unwrap();
    let mut w = test_worker(&server.url(), "summary", "w", &[]);
    w.saw("ready", Duration::from_secs(20)).await;
    // and a live worker of before protocol 29: no fleet entry, only its presence and liveness
    let ancient = serde_json::json!({"consumer": "default:ancient:1", "version": "hero-py 0.25.1"});
    let _: () = raw
        .set(
            "hero:meta:actor:inst:summary:default:ancient",
            ancient.to_string(),
        )
        .await
        .unwrap();
    let _: () = raw
        .zadd(
            keys().consumers(),
            "default:ancient:1",
            now.0 * 1000 + 120_000,
        )
        .await
        .unwrap();
    let lacks: String = wait_for("the fleet summary", Duration::from_secs(25), || {
        let mut raw = raw.clone();
        async move {
            let s: String = raw.hget(keys().config(), "fleet_lacks").await.ok()?;
            s.contains("ancient").then_some(s)
        }
    })
    .await;
    assert!(
        lacks.contains("\"batch\"") && lacks.contains("default:old:1"),
        "{lacks}"
    );
    // the same reading as Rust's (lib/fleet.lua is its port)
    let client = Client::connect(&server.url()).await.unwrap();
    let fleet = hero_protocol::fleet::Fleet::read(client.redis(), client.keys())
        .await
        .unwrap();
    let lua: serde_json::Value = serde_json::from_str(&lacks).unwrap();
    assert_eq!(lua, fleet.summary(), "{lacks}");
    w.kill9();
}

/// A worker hung whole (SIGSTOP) cannot end its job at the time limit, and its liveness holds
/// (a long presence TTL): only the upkeep can, and with no broker another worker's duties do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_workers_job_past_its_time_limit_is_ended_by_another_workers_duties() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut holder = test_worker(&server.url(), "elsewhere", "h", &[]);
    holder.saw("ready", Duration::from_secs(20)).await;
    let mut hung = test_worker(
        &server.url(),
        "hung",
        "s",
        &["--duties", "off", "--presence-ms", "60000"],
    );
    hung.saw("ready", Duration::from_secs(20)).await;
    let job = NewJob::builder("hung", "sleep 30000")
        .id("stuck")
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    client.submit(&job).await.unwrap();
    hung.saw("started stuck", Duration::from_secs(20)).await;
    hung.signal("STOP");
    let j = ended(&client, "stuck", Duration::from_secs(20)).await;
    assert_eq!(j.status, Status::Error, "{j:?}");
    assert!(
        j.error.as_deref().unwrap_or_default().contains("timeout"),
        "{j:?}"
    );
    hung.signal("CONT");
    hung.kill9();
    holder.kill9();
}

/// The time limits' walk over running jobs ends at the newest delivery pending when it began:
/// with new deliveries between its calls, as under load, it gets through and waits its second,
/// where it used to chase them call after call without end (a call every ms or two, moving
/// nothing, a quarter of Redis's time at 50,000 jobs/s).
#[tokio::test]
async fn the_time_limits_walk_gets_through_while_new_deliveries_come() {
    use hero_protocol::function::{self, FetchReply};
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let jobs: Vec<NewJob> = (0..600)
        .map(|i| {
            NewJob::builder("walk", "x")
                .id(format!("w{i}"))
                .build()
                .unwrap()
        })
        .collect();
    client.submit_many(&jobs).await.unwrap();
    let stream = hero_testkit::work_key("walk");
    let take = |n: usize| {
        let call = function::fetch(
            client.keys(),
            std::slice::from_ref(&stream),
            "g:walk:1",
            n,
            "0",
        );
        let client = client.clone();
        async move {
            let v: redis::Value = client.redis().query(&call).await.unwrap();
            FetchReply::decode(&v).unwrap().jobs.len()
        }
    };
    // recovery off: the consumer fetching here has no heartbeat
    let duties = function::duties(
        client.keys(),
        "holder-1",
        Duration::from_secs(30),
        100,
        false,
        "0",
    );
    let step = || {
        let (client, call) = (client.clone(), duties.clone());
        async move {
            let v: redis::Value = client.redis().query(&call).await.unwrap();
            function::Duties::parse(&v).unwrap()
        }
    };
    assert_eq!(take(150).await, 150);
    let first = step().await;
    assert!(first.held && first.more, "100 of 150 walked: {first:?}");
    assert_eq!(take(100).await, 100, "100 more delivered meanwhile");
    let second = step().await;
    assert!(
        !second.more,
        "the walk ends at the 150th, not at the deliveries since: {second:?}"
    );
    assert_eq!(second.timed_out, 0);
}
