//! Recurring jobs: with three brokers running, each tick of `every 1s` fires exactly once (the
//! tick is claimed by a compare-and-set in Redis) and a broker SIGKILLed mid-run changes
//! nothing; a tick missed while every broker was down fires once on return under the catch-up
//! policy and not at all under skip.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::cron::{CronEntry, CronJob, Missed};
use hero_testkit::{hero_cli, http_broker, wait_for, RedisServer};

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

#[tokio::test]
async fn three_brokers_fire_each_tick_once_and_a_killed_one_changes_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut brokers = Vec::new();
    for _ in 0..3 {
        brokers.push(http_broker(&url, None, &[]).await.0);
    }
    let (code, out, err) = hero_cli(
        &url,
        &["cron", "add", "tick", "every 1s", "--type", "cr", "x"],
    );
    assert_eq!(code, 0, "{out}{err}");
    fires_reach(&client, "tick", 4).await;
    brokers[0].kill9();
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
    for w in t.windows(2) {
        assert_eq!(
            w[1] - w[0],
            1000,
            "consecutive ticks, none missed or doubled: {t:?}"
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
    assert!(err.contains("not a duration"), "{err}");
}

#[tokio::test]
async fn a_tick_missed_while_every_broker_was_down_fires_once_under_catch_up_and_never_under_skip()
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
    let (mut broker, _) = http_broker(&url, None, &[]).await;
    fires_reach(&client, "cu", 2).await;
    fires_reach(&client, "sk", 2).await;
    broker.kill9();
    let last_cu = entry(&client, "cu").await.last_ms.unwrap();
    let last_sk = entry(&client, "sk").await.last_ms.unwrap();
    // every broker down across several ticks
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let back = hero_protocol::clock::now_ms();
    let (_broker, _) = http_broker(&url, None, &[]).await;
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
}

#[tokio::test]
async fn passes_racing_for_one_due_tick_fire_it_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .cron_add(&every_second("race", Missed::Skip))
        .await
        .unwrap();
    // the first pass only claims the first tick; the race is for that tick, once due
    let now = hero_protocol::clock::now_ms();
    hero_broker::loops::cron::pass(&client, now, Duration::from_secs(1))
        .await
        .unwrap();
    let due = entry(&client, "race").await.next_ms.unwrap();
    let mut racers = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let client = client.clone();
        racers.spawn(async move {
            hero_broker::loops::cron::pass(&client, due + 10, Duration::from_secs(1))
                .await
                .unwrap()
                .fired
        });
    }
    let mut fired = 0;
    while let Some(n) = racers.join_next().await {
        fired += n.unwrap();
    }
    assert_eq!(fired, 1, "twenty passes at once, one fire");
    assert_eq!(entry(&client, "race").await.fires, 1);
    assert_eq!(ticks(&server, "race").await, vec![due]);
}

/// Recurring jobs are fired by `hero broker` (croner's schedule): stored where no broker lives,
/// the producer is told so once, naming the Redis and its db; with one running, nothing is said.
#[tokio::test]
async fn a_recurring_job_stored_with_no_broker_says_nothing_will_fire_it() {
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
        err.contains("no `hero broker` runs in this namespace") && err.contains("/3"),
        "{err}"
    );
    let mut b = hero_testkit::hero_broker_logged(&url, &[]);
    b.saw("broker running", Duration::from_secs(20)).await;
    let client = Client::connect(&url).await.unwrap();
    hero_testkit::wait_for("the broker in the fleet", Duration::from_secs(20), || {
        let c = client.clone();
        async move {
            let f = hero_protocol::fleet::Fleet::read(c.redis(), c.keys())
                .await
                .ok()?;
            f.members
                .iter()
                .any(|m| m.role == hero_protocol::fleet::Role::Broker)
                .then_some(())
        }
    })
    .await;
    let (code, out, err) = add();
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("no `hero broker`"), "{err}");
    b.kill9();
}
