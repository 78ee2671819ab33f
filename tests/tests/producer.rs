//! The producer API beyond submit: listing with cursors, run-and-wait falling back to the job
//! hash, and the presence a worker shows while it lives.

use std::collections::HashSet;
use std::time::Duration;

use hero_admin::ListFilter;
use hero_client::Client;
use hero_protocol::{GroupName, InstanceName, Job, NewJob, Priority, ScriptType, Status, Target};
use hero_testkit::keys;
use hero_testkit::{InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker, WorkerEvent};
use redis::AsyncCommands;

#[tokio::test]
async fn list_pages_through_every_job_by_queue_and_by_status() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let queued: Vec<NewJob> = (0..25)
        .map(|_| NewJob::builder("q", "x").build().unwrap())
        .collect();
    let later: Vec<NewJob> = (0..7)
        .map(|_| {
            NewJob::builder("q", "x")
                .delay(Duration::from_secs(600))
                .build()
                .unwrap()
        })
        .collect();
    client.submit_many(&queued).await.unwrap();
    client.submit_many(&later).await.unwrap();

    let queue = ListFilter::Queue(
        Target::of_type(ScriptType::new("q").unwrap()),
        Priority::DEFAULT,
    );
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let page = hero_admin::Inspector::from(&client)
            .list(&queue, cursor.as_deref(), 10)
            .await
            .unwrap();
        pages += 1;
        seen.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let want: Vec<String> = queued.iter().map(|j| j.id().to_string()).collect();
    assert_eq!(seen, want, "every queued job once, in queue order");
    assert!(pages >= 3);

    let mut waiting = HashSet::new();
    let mut cursor = None::<String>;
    for _ in 0..1000 {
        let page = hero_admin::Inspector::from(&client)
            .list(&ListFilter::Status(Status::Waiting), cursor.as_deref(), 5)
            .await
            .unwrap();
        waiting.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let want: HashSet<String> = later.iter().map(|j| j.id().to_string()).collect();
    assert_eq!(waiting, want);
}

#[tokio::test]
async fn wait_answers_from_the_job_hash_when_no_reply_will_come() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["v"])
        .handler(|_j: Job, _| async { Outcome::Done("kept".into()) });
    let mut w = InProcWorker::spawn(worker);
    // submitted without run: no reply list is ever written for it
    let job = NewJob::builder("v", "x").build().unwrap();
    client.submit(&job).await.unwrap();
    w.next(Duration::from_secs(10), |e| {
        matches!(e, WorkerEvent::Completed { .. }).then_some(())
    })
    .await;
    let mut raw = server.conn().await;
    let exists: bool = raw.exists(keys().reply(job.id())).await.unwrap();
    assert!(!exists);
    let r = client.wait(job.id(), Duration::from_secs(5)).await.unwrap();
    assert_eq!((r.status, r.output.as_str()), (Status::Finished, "kept"));
    w.stop().await;
}

#[tokio::test]
async fn run_times_out_with_a_clear_error_when_no_worker_takes_the_job() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let job = NewJob::builder("nobody", "x").build().unwrap();
    let err = client
        .run(&job, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(err, hero_protocol::Error::WaitTimedOut { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("dispatched"), "{err}");
}

#[tokio::test]
async fn presence_shows_a_live_worker_with_a_ttl_and_is_removed_on_exit() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let worker = Worker::builder(client.clone())
        .types(["a", "b"])
        .group("io")
        .instance("3")
        .presence_ttl(Duration::from_secs(6))
        .handler(|_j: Job, _| async { Outcome::Done(String::new()) });
    let mut w = InProcWorker::spawn(worker);
    w.next(Duration::from_secs(10), |e| {
        matches!(e, WorkerEvent::Ready { .. }).then_some(())
    })
    .await;
    let mut raw = server.conn().await;
    let presence = |t: &str| {
        keys().presence(
            &ScriptType::new(t).unwrap(),
            &GroupName::new("io").unwrap(),
            &InstanceName::new("3").unwrap(),
        )
    };
    for t in ["a", "b"] {
        let key = presence(t);
        let json: String = raw.get(&key).await.unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for field in [
            "pid",
            "hostname",
            "started_at",
            "version",
            "capabilities",
            "last_heartbeat",
        ] {
            assert!(v.get(field).is_some(), "presence has {field}: {json}");
        }
        let ttl: i64 = raw.pttl(&key).await.unwrap();
        assert!(ttl > 0 && ttl <= 6000, "presence expires by itself: {ttl}");
    }
    let live: Option<f64> = raw.zscore(keys().consumers(), &w.consumer).await.unwrap();
    assert!(live.is_some(), "liveness registered");
    let consumer = w.consumer.clone();
    w.stop().await;
    let exists: bool = raw.exists(presence("a")).await.unwrap();
    let live: Option<f64> = raw.zscore(keys().consumers(), &consumer).await.unwrap();
    assert!(
        !exists && live.is_none(),
        "a clean exit removes presence and liveness"
    );
}

#[tokio::test]
async fn list_returns_an_empty_last_page_when_nothing_matches() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let page = hero_admin::Inspector::from(&client)
        .list(&ListFilter::Status(Status::Waiting), None, 10)
        .await
        .unwrap();
    assert!(page.jobs.is_empty() && page.next.is_none());
    let queue = ListFilter::Queue(
        Target::of_type(ScriptType::new("none").unwrap()),
        Priority::DEFAULT,
    );
    let page = hero_admin::Inspector::from(&client)
        .list(&queue, None, 10)
        .await
        .unwrap();
    assert!(page.jobs.is_empty() && page.next.is_none());
}

/// The client's calls go over a connection of their own when Redis is reached over TCP: it too
/// must log in with the URL's password and use the URL's database, as redis-rs's does.
#[tokio::test]
async fn a_client_logs_in_and_uses_the_database_its_url_names() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}/3", server.port);
    let client = Client::connect(&url).await.unwrap();
    let job = NewJob::builder("q", "x").build().unwrap();
    client.submit(&job).await.unwrap();
    let read = client.get(job.id()).await.unwrap();
    assert_eq!(read.status, Status::Dispatched);
    let key = client.keys().job(job.id());
    let in_db = |db: u8| {
        let url = format!("redis://:s3cret@127.0.0.1:{}/{db}", server.port);
        let key = key.clone();
        async move {
            let mut raw = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            raw.exists::<_, bool>(&key).await.unwrap()
        }
    };
    assert!(in_db(3).await, "the job is in the URL's database");
    assert!(!in_db(0).await, "and not in database 0");

    let wrong = format!("redis://:nope@127.0.0.1:{}/3", server.port);
    let e = Client::connect(&wrong)
        .await
        .err()
        .expect("a wrong password is refused");
    assert!(e.to_string().contains("127.0.0.1"), "{e}");
}

/// What `Redis::pipeline` and `Redis::query` answer over the lane: each command its own result
/// or error, in order, and replies of any size whole however they are split on the wire.
#[tokio::test]
async fn each_command_of_a_pipeline_gets_its_own_answer_whatever_its_size() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let redis = client.redis();
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("t:k").arg("v");
    pipe.cmd("HGETALL").arg("t:k");
    pipe.cmd("GET").arg("t:k");
    pipe.cmd("GET").arg("t:missing");
    let r = redis.pipeline(&pipe).await.unwrap();
    assert_eq!(r.len(), 4);
    assert!(r[0].is_ok());
    let wrong = r[1].as_ref().unwrap_err().to_string();
    assert!(wrong.contains("WRONGTYPE"), "{wrong}");
    assert_eq!(
        r[2].as_ref().unwrap(),
        &redis::Value::BulkString(b"v".to_vec())
    );
    assert_eq!(r[3].as_ref().unwrap(), &redis::Value::Nil);

    // one value larger than any read, and one reply of very many small values
    let big = "x".repeat(3 << 20);
    let _: () = redis
        .query(redis::cmd("SET").arg("t:big").arg(&big))
        .await
        .unwrap();
    let back: String = redis.query(redis::cmd("GET").arg("t:big")).await.unwrap();
    assert_eq!(back.len(), big.len());
    let items: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let _: () = redis
        .query(redis::cmd("RPUSH").arg("t:list").arg(&items))
        .await
        .unwrap();
    let all: Vec<String> = redis
        .query(redis::cmd("LRANGE").arg("t:list").arg(0).arg(-1))
        .await
        .unwrap();
    assert_eq!(all, items);
    let refused = redis
        .query::<String>(redis::cmd("GET").arg("t:list"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("WRONGTYPE"), "{refused}");
}

/// Group commit: single submits made at once from many tasks share server calls, and each
/// caller gets its own answer (an id that exists answers `created: false`, as alone).
#[tokio::test]
async fn concurrent_single_submits_share_calls_and_each_gets_its_own_answer() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .submit(&NewJob::builder("gc", "x").id("taken").build().unwrap())
        .await
        .unwrap();
    let mut raw = server.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..200 {
        let client = client.clone();
        tasks.spawn(async move {
            let id = if n == 7 {
                "taken".to_string()
            } else {
                format!("gc-{n}")
            };
            let job = NewJob::builder("gc", "x").id(&id).build().unwrap();
            (id, client.submit(&job).await.unwrap())
        });
    }
    let mut ids = HashSet::new();
    while let Some(r) = tasks.join_next().await {
        let (id, answer) = r.unwrap();
        assert_eq!(
            answer.id.as_str(),
            id,
            "each caller gets its own job's answer"
        );
        assert_eq!(answer.created, id != "taken", "{id}");
        ids.insert(id);
    }
    assert_eq!(ids.len(), 200);
    let len: usize = raw.xlen(hero_testkit::work_key("gc")).await.unwrap();
    assert_eq!(
        len, 200,
        "199 new entries and the first one: nothing queued twice"
    );
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .unwrap();
    let calls: u64 = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_fcall:"))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .expect("fcall in commandstats");
    assert!(calls < 200, "200 submits at once took {calls} server calls");
}

/// Blocking waits borrow from a pool of `pool_size` connections: with one, a second waiter
/// waits for the first to give it back, and when it is not given back in time the waiter fails
/// with an error that names `--pool-size` instead of hanging.
#[tokio::test]
async fn blocking_waits_share_a_pool_of_the_configured_size() {
    let server = RedisServer::start();
    let mut opts = hero_client::ClientOptions::new(server.url());
    opts.pool_size = 1;
    let client = Client::with_options(opts).await.unwrap();
    let block = Duration::from_secs(1);
    let held = client.redis().dedicated(block).await.unwrap();
    let e = client
        .redis()
        .dedicated(block)
        .await
        .err()
        .expect("the pool is empty");
    assert!(e.to_string().contains("--pool-size"), "{e}");
    drop(held);
    // given back: the next waiter gets it
    client.redis().dedicated(block).await.unwrap();
}

/// A waiter that gives up on its blocked command (a timeout, a `select!`, a worker stopping)
/// does not hand the still-blocked connection to the next borrower: Redis would run the next
/// command only once the old block ended. The bench's latency scenario started 165 ms late
/// behind a stopped worker's 1 s BLPOP before this.
#[tokio::test]
async fn an_abandoned_block_never_delays_the_next_borrower() {
    let server = RedisServer::start();
    let mut opts = hero_client::ClientOptions::new(server.url());
    opts.pool_size = 1;
    let client = Client::with_options(opts).await.unwrap();
    let block = Duration::from_secs(8);
    let mut conn = client.redis().dedicated(block).await.unwrap();
    let mut blpop = redis::cmd("BLPOP");
    blpop.arg("nothing-here").arg(block.as_secs());
    // given up on after 100 ms: the BLPOP is still blocked in Redis
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        blpop.query_async::<redis::Value>(&mut conn),
    )
    .await;
    assert!(gave_up.is_err(), "nothing was pushed: the BLPOP blocks");
    drop(conn);
    let t0 = std::time::Instant::now();
    let mut next = client.redis().dedicated(block).await.unwrap();
    let pong: String = tokio::time::timeout(
        Duration::from_secs(5),
        redis::cmd("PING").query_async(&mut next),
    )
    .await
    .expect("the next borrower waited on the abandoned block")
    .unwrap();
    assert_eq!(pong, "PONG");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t0.elapsed()
    );
}

/// The submit asks one EXISTS for a whole batch and reads a record only when a key exists: an
/// id given twice in one batch is still one job, the second answered as existing.
#[tokio::test]
async fn an_id_given_twice_in_one_batch_is_one_job() {
    let server = RedisServer::start();
    let client = hero_client::Client::connect(&server.url()).await.unwrap();
    let mut raw = server.conn().await;
    let jobs: Vec<NewJob> = ["twice", "other", "twice"]
        .iter()
        .map(|id| NewJob::builder("dup", "x").id(*id).build().unwrap())
        .collect();
    let answers: Vec<bool> = client
        .submit_many(&jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.unwrap().created)
        .collect();
    assert_eq!(answers, [true, true, false]);
    let len: usize = raw.xlen(hero_testkit::work_key("dup")).await.unwrap();
    assert_eq!(len, 2, "the id given twice is queued once");
}
