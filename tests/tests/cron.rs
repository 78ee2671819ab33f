//! Recurring jobs, fired by the duties of the workers (no `hero broker`): with three workers
//! running, each tick of `every 1s` fires exactly once, the holder SIGKILLed mid-run changes
//! nothing; a tick missed while every process was down fires once on return under the catch-up
//! policy and not at all under skip; the zone a schedule names is the one its ticks fire in.
//! The engine's own answers (DST, `L`, `W`, `#`) are tests/cron_engine.rs's.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::cron::{CronEntry, CronJob, Missed};
use hero_testkit::{hero_cli, test_worker, wait_for, Proc, RedisServer};

const LIMIT: Duration = Duration::from_secs(40);

fn every_second(name: &str, missed: Missed) -> CronJob {
    hero_testkit::cron_job(name, "every 1s", "cr", missed)
}

async fn entry(client: &Client, name: &str) -> CronEntry {
    hero_admin::Admin::from(client)
        .cron_list()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.job.name == name)
        .unwrap()
}

async fn fires_reach(client: &Client, name: &str, n: u64) {
    wait_for(&format!("{name} to fire {n} times"), LIMIT, || {
        let client = client.clone();
        let name = name.to_string();
        async move { (entry(&client, &name).await.fires >= n).then_some(()) }
    })
    .await;
}

/// The ticks whose job exists, sorted.
async fn ticks(server: &RedisServer, name: &str) -> Vec<u64> {
    let mut raw = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("hero:job:cron-{name}-*"))
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut t: Vec<u64> = keys
        .iter()
        .map(|k| k.rsplit('-').next().unwrap().parse().unwrap())
        .collect();
    t.sort_unstable();
    t
}

/// A worker of type `cr` (duties on, as by default), ready.
async fn worker(url: &str, label: &str) -> Proc {
    let w = test_worker(url, "cr", label, &["--presence-ms", "1000"]);
    w.saw("ready", Duration::from_secs(20)).await;
    w
}

/// The worker holding the duties now (its label is the holder's prefix), by the lease hash.
async fn holder(server: &RedisServer) -> String {
    let mut raw = server.conn().await;
    wait_for("a holder of the duties", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            redis::cmd("HGET")
                .arg("hero:meta:duties")
                .arg("holder")
                .query_async::<Option<String>>(&mut raw)
                .await
                .ok()
                .flatten()
        }
    })
    .await;
    redis::cmd("HGET")
        .arg("hero:meta:duties")
        .arg("holder")
        .query_async::<String>(&mut raw)
        .await
        .unwrap()
}

#[tokio::test]
async fn three_workers_fire_each_tick_once_and_a_killed_holder_changes_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut workers = Vec::new();
    for i in 0..3 {
        workers.push(worker(&url, &format!("w{i}")).await);
    }
    let (code, out, err) = hero_cli(
        &url,
        &["cron", "add", "tick", "every 1s", "--type", "cr", "x"],
    );
    assert_eq!(code, 0, "{out}{err}");
    fires_reach(&client, "tick", 4).await;
    // the holder's name is its consumer name, which holds its label
    let held_by = holder(&server).await;
    let victim = workers
        .iter()
        .position(|w| {
            w.output()
                .iter()
                .any(|l| l.contains("ready") && l.contains(&held_by))
        })
        .unwrap_or(0);
    workers[victim].kill9();
    fires_reach(&client, "tick", 10).await;
    hero_admin::Admin::from(&client)
        .cron_pause("tick", true)
        .await
        .unwrap();
    let fires = entry(&client, "tick").await.fires;
    let t = ticks(&server, "tick").await;
    assert_eq!(
        t.len() as u64,
        fires,
        "every fire made its own tick's job (no tick claimed twice)"
    );
    assert!(t.len() >= 10, "{t:?}");
    // a tick due while the killed holder's lease ran out (3 s) was late by more than the 1 s a
    // skip-policy tick may be: skipped, never doubled
    for w in t.windows(2) {
        assert!(
            w[1] > w[0] && (w[1] - w[0]) % 1000 == 0 && w[1] - w[0] <= 5000,
            "ticks in order, none doubled: {t:?}"
        );
    }
    let (_, list, _) = hero_cli(&url, &["cron", "list"]);
    assert!(
        list.contains("tick") && list.contains("every 1s") && list.contains("yes"),
        "{list}"
    );
    // paused: no tick fires for a while
    let before = entry(&client, "tick").await.fires;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        entry(&client, "tick").await.fires,
        before,
        "a paused job does not fire"
    );
    let (code, _, err) = hero_cli(&url, &["cron", "add", "bad", "every soon", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("every soon"), "{err}");
    for (i, w) in workers.iter_mut().enumerate() {
        if i != victim {
            w.kill9();
        }
    }
}

#[tokio::test]
async fn a_tick_missed_while_every_process_was_down_fires_once_under_catch_up_and_never_under_skip()
{
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .cron_add(&every_second("cu", Missed::CatchUp))
        .await
        .unwrap();
    client
        .cron_add(&every_second("sk", Missed::Skip))
        .await
        .unwrap();
    let mut w = worker(&url, "a").await;
    fires_reach(&client, "cu", 2).await;
    fires_reach(&client, "sk", 2).await;
    w.kill9();
    let last_cu = entry(&client, "cu").await.last_ms.unwrap();
    let last_sk = entry(&client, "sk").await.last_ms.unwrap();
    // every process down across several ticks
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let back = hero_protocol::clock::now_ms();
    let mut w = worker(&url, "b").await;
    fires_reach(&client, "cu", entry(&client, "cu").await.fires + 2).await;
    fires_reach(&client, "sk", entry(&client, "sk").await.fires + 2).await;
    let during = |t: &[u64], last: u64| t.iter().filter(|&&x| x > last && x < back).count();
    let cu = ticks(&server, "cu").await;
    let sk = ticks(&server, "sk").await;
    assert_eq!(
        during(&cu, last_cu),
        1,
        "catch-up fires the missed tick once: {cu:?}"
    );
    assert_eq!(during(&sk, last_sk), 0, "skip fires no missed tick: {sk:?}");
    w.kill9();
}

/// Holders racing for one due tick (a lease that ran out while its holder was mid-call makes
/// two): each call claims and fires in one step, so the tick fires once.
#[tokio::test]
async fn holders_racing_for_one_due_tick_fire_it_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut hourly = every_second("race", Missed::Skip);
    hourly.schedule = "every 1h".into();
    client.cron_add(&hourly).await.unwrap();
    let due = hero_protocol::clock::now_ms() - 200;
    let mut raw = server.conn().await;
    let _: () = redis::cmd("HSET")
        .arg(client.keys().cron_next())
        .arg("race")
        .arg(due)
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..20 {
        let client = client.clone();
        racers.spawn(async move {
            // each racer takes the lease as its own (as after the last holder's ran out)
            let _: hero_protocol::Result<()> = client
                .redis()
                .query(redis::cmd("DEL").arg(client.keys().duties()))
                .await;
            let call = hero_protocol::function::duties(
                client.keys(),
                &format!("racer-{i}"),
                Duration::from_secs(3),
                100,
                false,
                "0",
            );
            let v: redis::Value = client.redis().query(&call).await.unwrap();
            hero_protocol::function::Duties::parse(&v).unwrap().fired
        });
    }
    let mut fired = 0;
    while let Some(n) = racers.join_next().await {
        fired += n.unwrap();
    }
    assert_eq!(fired, 1, "twenty holders in a race, one fire");
    assert_eq!(entry(&client, "race").await.fires, 1);
    assert_eq!(ticks(&server, "race").await, vec![due]);
    assert!(entry(&client, "race").await.next_ms.unwrap() > due + 1000);
}

/// The zone a schedule names is the one its ticks fire in: `*/2 * H * * *` with H this hour
/// in Asia/Kolkata (UTC+5:30, so never this hour in UTC) fires every 2 s; the same in UTC
/// with Kolkata's hour never fires.
#[tokio::test]
async fn a_schedule_fires_in_the_zone_it_names() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    // Kolkata's hour now and in 30 s (a test run across its hour's end takes both)
    let hour = |ms: u64| (ms / 1000 + 5 * 3600 + 1800) / 3600 % 24;
    let now = hero_protocol::clock::now_ms();
    let hours = format!("{},{}", hour(now), hour(now + 30_000));
    let mut kolkata = every_second("kolkata", Missed::Skip);
    kolkata.schedule = format!("*/2 * {hours} * * *");
    kolkata.tz = "Asia/Kolkata".into();
    let mut utc = kolkata.clone();
    utc.name = "utc".into();
    utc.tz = "UTC".into();
    client.cron_add(&kolkata).await.unwrap();
    client.cron_add(&utc).await.unwrap();
    let mut w = worker(&url, "z").await;
    fires_reach(&client, "kolkata", 3).await;
    let t = ticks(&server, "kolkata").await;
    assert!(t.iter().all(|x| x % 2000 == 0), "{t:?}");
    assert_eq!(entry(&client, "utc").await.fires, 0);
    assert!(
        entry(&client, "utc").await.next_ms.unwrap() > now + 3_600_000,
        "UTC's next tick is hours away"
    );
    w.kill9();
}

/// The ticks are fired by whoever does the duties: a recurring job stored where no live
/// process does them says so once, naming the Redis and its db; with a worker running,
/// nothing is said.
#[tokio::test]
async fn a_recurring_job_stored_where_no_process_does_the_duties_says_nothing_will_fire_it() {
    let server = RedisServer::start();
    let url = format!("{}/3", server.url());
    let add = || {
        hero_cli(
            &url,
            &["cron", "add", "lonely", "every 1h", "--type", "cr", "x"],
        )
    };
    let (code, out, err) = add();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("no live process does the queue's upkeep") && err.contains("/3"),
        "{err}"
    );
    let mut w = worker(&url, "here").await;
    let (code, out, err) = add();
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("no live process"), "{err}");
    w.kill9();
}
