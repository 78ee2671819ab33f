//! The keys the functions derive rather than take in KEYS (a job's tag, uniqueness and
//! dependents keys, a batch and the batch index, a reply list, a minute's stats hash, the registry's companions, the
//! dual-push registry, the bridge's consumers)
//! are built in `prelude.lua` by the same rules as the client's keys module: this runs the
//! library's own helpers in the server and compares what they build with `Keyspace`.

use super::*;

/// The library's code without its registrations, run as a script that returns what `body`
/// builds (EVAL reaches the same local helpers the functions use).
fn helpers(body: &str) -> String {
    let lib: String = function::library_source()
        .lines()
        .filter(|l| !l.starts_with("#!lua") && !l.starts_with("redis.register_function"))
        .map(|l| format!("{l}\n"))
        .collect();
    format!("{lib}\n{body}\n")
}

#[tokio::test]
async fn the_functions_derive_the_keys_the_keys_module_builds() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let ns = |n: &str| hero_protocol::Namespace::new(n).unwrap();
    for (namespace, keys) in [
        ("hero", hero_protocol::Keyspace::new(&ns("hero"))),
        ("acme-2", hero_protocol::Keyspace::new(&ns("acme-2"))),
        (
            "{tenant7}",
            hero_protocol::Keyspace::cluster(&ns("tenant7")),
        ),
    ] {
        let id = JobId::new("job-42").unwrap();
        let now = "2026-11-23T11:40:07.123Z";
        let script = helpers(
            "local ns = ns_of(KEYS[1], ARGV[1])\n\
             local prefix_ns = ns_of(ARGV[5], '')\n\
             return { tag_key(ns, 'red'), unique_key(ns, 'u-1'), deps_key(KEYS[1], ARGV[1]),\n\
               minute_key(KEYS[2], ARGV[2]), queue_signal_key(KEYS[3]), paused_key(KEYS[3]),\n\
               paused_names_key(KEYS[3]), is_bridge_consumer(ARGV[3]) and 1 or 0,\n\
               is_bridge_consumer(ARGV[4]) and 1 or 0, tag_key(prefix_ns, 'blue'),\n\
               reply_prefix_of(ns) .. ARGV[1], bridge_registry_of(KEYS[3]),\n\
               waiting_on_key(ARGV[6]), policy_key_of(ARGV[6]),\n\
               limit_key_of(ARGV[6], 'osis/io'), rate_key_of(ARGV[6], 'osis'),\n\
               batch_key(ns, 'nightly-run'), batches_key_of(ARGV[6]) }",
        );
        let bridge = hero_protocol::LegacyQueue::ActorQueue("osis".into()).consumer();
        let got: Vec<redis::Value> = redis::cmd("EVAL")
            .arg(&script)
            .arg(3)
            .arg(keys.job(&id))
            .arg(keys.stats())
            .arg(keys.queues())
            .arg(id.as_str())
            .arg(now)
            .arg(&bridge)
            .arg("w1:osis:abc")
            .arg(keys.job_prefix())
            .arg(keys.config())
            .query_async(&mut conn)
            .await
            .expect("the library's helpers run as a script");
        let text = |v: &redis::Value| -> String { redis::from_redis_value(v.clone()).unwrap() };
        let int = |v: &redis::Value| -> i64 { redis::from_redis_value(v.clone()).unwrap() };
        assert_eq!(text(&got[0]), keys.tag("red"), "{namespace}: tag key");
        assert_eq!(text(&got[1]), keys.unique("u-1"), "{namespace}: unique key");
        assert_eq!(
            text(&got[2]),
            keys.dependents(&id),
            "{namespace}: dependents key"
        );
        assert_eq!(
            text(&got[3]),
            keys.stats_minute(now),
            "{namespace}: minute key"
        );
        assert_eq!(
            text(&got[4]),
            keys.queue_signal(),
            "{namespace}: signal key"
        );
        assert_eq!(
            text(&got[5]),
            keys.paused_queues(),
            "{namespace}: paused streams key"
        );
        assert_eq!(
            text(&got[6]),
            keys.paused_names(),
            "{namespace}: paused names key"
        );
        assert_eq!(int(&got[7]), 1, "the bridge's consumer {bridge}");
        assert!(hero_protocol::keys::is_bridge_consumer(&bridge));
        assert_eq!(int(&got[8]), 0, "a worker's consumer");
        assert_eq!(
            text(&got[9]),
            keys.tag("blue"),
            "{namespace}: tag key from the job prefix"
        );
        assert_eq!(text(&got[10]), keys.reply(&id), "{namespace}: reply list");
        assert_eq!(
            text(&got[11]),
            keys.bridge_registry(),
            "{namespace}: dual-push registry"
        );
        assert_eq!(
            text(&got[12]),
            keys.waiting_on(),
            "{namespace}: prerequisites index"
        );
        assert_eq!(text(&got[13]), keys.policy(), "{namespace}: policies");
        assert_eq!(
            text(&got[14]),
            keys.limit("osis/io"),
            "{namespace}: a limit's set"
        );
        assert_eq!(
            text(&got[15]),
            keys.rate("osis"),
            "{namespace}: a rate's log"
        );
        assert_eq!(
            text(&got[16]),
            keys.batch(&hero_protocol::BatchName::new("nightly-run").unwrap()),
            "{namespace}: a batch"
        );
        assert_eq!(
            text(&got[17]),
            keys.batches(),
            "{namespace}: the batch index"
        );
    }
}
