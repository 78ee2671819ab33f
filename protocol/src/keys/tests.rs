//! Golden tests of every key string, and the relations the Lua functions rely on.

use super::*;

fn ks() -> Keyspace {
    Keyspace::new(&Namespace::new("hero").unwrap())
}
fn t(s: &str) -> ScriptType {
    ScriptType::new(s).unwrap()
}
fn g(s: &str) -> GroupName {
    GroupName::new(s).unwrap()
}
fn i(s: &str) -> InstanceName {
    InstanceName::new(s).unwrap()
}

#[test]
fn every_key_matches_its_golden_name() {
    let k = ks();
    let id = JobId::new("abc").unwrap();
    let osis = Target::of_type(t("osis"));
    let io = Target::new(t("sal"), Some(g("io")), None);
    let inst = Target::new(t("sal"), Some(g("io")), Some(i("3")));
    let golden = [
        (k.job(&id), "hero:job:abc"),
        (k.job_prefix(), "hero:job:"),
        (k.job_unchecked("abc"), "hero:job:abc"),
        (k.job_pattern(), "hero:job:*"),
        (k.work(&osis, Priority::DEFAULT), "hero:q:work:type:osis"),
        (
            k.work(&osis, Priority::HIGHEST),
            "hero:q:work:type:osis:prio:0",
        ),
        (
            k.work(&io, Priority::DEFAULT),
            "hero:q:work:type:sal:group:io",
        ),
        (
            k.work(&io, Priority::new(2).unwrap()),
            "hero:q:work:type:sal:group:io:prio:2",
        ),
        (
            k.work(&inst, Priority::DEFAULT),
            "hero:q:work:type:sal:group:io:inst:3",
        ),
        (
            k.work(&inst, Priority::LOWEST),
            "hero:q:work:type:sal:group:io:inst:3:prio:9",
        ),
        (k.reply(&id), "hero:q:reply:abc"),
        (k.ctl_type(&t("osis")), "hero:q:ctl:type:osis"),
        (
            k.ctl_instance(&t("sal"), &g("io"), &i("3")),
            "hero:q:ctl:type:sal:group:io:inst:3",
        ),
        (
            k.presence(&t("osis"), &g("default"), &i("1")),
            "hero:meta:actor:inst:osis:default:1",
        ),
        (k.presence_pattern(), "hero:meta:actor:inst:*"),
        (k.consumers(), "hero:meta:consumers"),
        (k.queues(), "hero:meta:queues"),
        // the functions derive these from the registry's, the config's and a job's names
        (k.paused_queues(), "hero:meta:queues:paused"),
        (k.queue_signal(), "hero:meta:queues:new"),
        (k.paused_names(), "hero:meta:queues:paused:names"),
        (k.dependents(&id), "hero:deps:abc"),
        (k.policy(), "hero:meta:policy"),
        (k.limit("osis/io"), "hero:meta:limit:osis/io"),
        (k.cron(), "hero:meta:cron"),
        (k.cron_next(), "hero:meta:cron:next"),
        (k.delayed(), "hero:meta:delayed"),
        (k.dead_letter(), "hero:meta:dead"),
        (k.retention(), "hero:meta:retention"),
        (k.events(), "hero:meta:events"),
        (k.stats(), "hero:meta:stats"),
        (
            k.stats_minute("2026-11-23T11:40:07.123Z"),
            "hero:meta:stats:2026-11-23T11:40",
        ),
        (k.config(), "hero:meta:config"),
        (k.waiting_on(), "hero:meta:waiting_on"),
        (k.legacy_work_queue("w1"), "hero:work_queue:w1"),
        (k.legacy_actor_queue("osis"), "hero:job:actor_queue:osis"),
        (k.legacy_actor("actor7"), "hero:job:actor7"),
        (k.legacy_stop_queue("w1"), "hero:stop_queue:w1"),
        (k.legacy_reply(&id), "hero:reply:abc"),
        (k.legacy_reply_prefix(), "hero:reply:"),
        (k.bridge_registry(), "hero:meta:bridge"),
        (
            k.bridge_track(&LegacyQueue::WorkQueue("w1".into())),
            "hero:meta:bridge:work_queue:w1",
        ),
        (
            k.legacy_stop_for(&LegacyQueue::ActorQueue("osis".into())),
            "hero:stop_queue:osis",
        ),
    ];
    for (got, want) in golden {
        assert_eq!(got, want);
    }
}

#[test]
fn instance_target_without_group_uses_default_group() {
    let target = Target::new(t("osis"), None, Some(i("2")));
    assert_eq!(
        ks().work(&target, Priority::DEFAULT),
        "hero:q:work:type:osis:group:default:inst:2"
    );
}

#[test]
fn cluster_keys_share_the_namespace_hash_tag() {
    let k = Keyspace::cluster(&Namespace::new("hero").unwrap());
    assert_eq!(k.job(&JobId::new("x").unwrap()), "{hero}:job:x");
    assert_eq!(
        k.work(&Target::of_type(t("v")), Priority::DEFAULT),
        "{hero}:q:work:type:v"
    );
    assert_eq!(k.delayed(), "{hero}:meta:delayed");
    assert!(k.job_prefix().starts_with("{hero}:") && k.reply_prefix().starts_with("{hero}:"));
}

#[test]
fn precedence_is_instance_then_group_then_type_with_priority_inside() {
    let keys = ks().precedence(&[t("osis")], &g("default"), &i("1"));
    assert_eq!(keys.len(), 30);
    assert_eq!(keys[0], "hero:q:work:type:osis:group:default:inst:1:prio:0");
    assert_eq!(keys[5], "hero:q:work:type:osis:group:default:inst:1");
    assert_eq!(keys[9], "hero:q:work:type:osis:group:default:inst:1:prio:9");
    assert_eq!(keys[10], "hero:q:work:type:osis:group:default:prio:0");
    assert_eq!(keys[20], "hero:q:work:type:osis:prio:0");
    assert_eq!(keys[29], "hero:q:work:type:osis:prio:9");
}

#[test]
fn legacy_queues_parse_from_their_keys_and_back() {
    let k = ks();
    for key in [
        "hero:work_queue:w1",
        "hero:job:actor_queue:osis",
        "hero:job:actor7",
    ] {
        let q = k.parse_legacy_queue(key).unwrap();
        assert_eq!(k.legacy_queue(&q), key);
    }
    assert_eq!(
        k.parse_legacy_queue("hero:job:actor_queue:osis")
            .unwrap()
            .consumer(),
        "bridge:actor_queue:osis"
    );
    for bad in [
        "other:work_queue:w1",
        "hero:q:work:type:x",
        "hero:work_queue:",
        "hero:job:a b",
    ] {
        assert!(k.parse_legacy_queue(bad).is_err(), "{bad}");
    }
}

#[test]
fn queue_names_are_what_operators_type() {
    let k = Keyspace::new(&Namespace::new("hero").unwrap());
    let t = |s: &str| ScriptType::new(s).unwrap();
    let g = GroupName::new("io").unwrap();
    let i = InstanceName::new("3").unwrap();
    let full = Target::new(t("osis"), Some(g.clone()), Some(i));
    assert_eq!(k.queue_name(&k.work(&full, Priority::DEFAULT)), "osis/io/3");
    let grouped = Target::new(t("osis"), Some(g), None);
    assert_eq!(
        k.queue_name(&k.work(&grouped, Priority::new(0).unwrap())),
        "osis/io prio 0"
    );
    assert_eq!(
        k.queue_name(&k.work(&Target::of_type(t("v")), Priority::DEFAULT)),
        "v"
    );
    assert_eq!(k.queue_name("other:key"), "other:key");
}
