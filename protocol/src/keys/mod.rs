//! Every key string of the system, and nothing else builds one (SPEC §2).
//!
//! A [`Keyspace`] is a namespace (`hero` by default). In cluster mode the namespace is wrapped in
//! braces and becomes the hash tag (`{hero}:job:<id>`), so every key of a namespace lives in one
//! slot and every server-side function touches one slot. Each builder names its Redis type.

use crate::name::{
    BatchName, GroupName, InstanceName, JobId, Namespace, Priority, ScriptType, Target,
};

/// The minute of an RFC 3339 UTC time (`2026-11-23T11:40:07.123Z` → `2026-11-23T11:40`): the
/// name of a per-minute stats hash. The functions take the same first 16 characters
/// (`minute_key` in `prelude.lua`); `functions::keys` holds the two equal.
pub fn minute_of(at: &str) -> &str {
    at.get(..16).unwrap_or(at)
}

/// The consumer group every work stream carries; workers are its consumers.
pub const CONSUMER_GROUP: &str = "workers";

/// The stream field that holds a job id in every work-stream and dead-letter entry.
pub const ENTRY_JOB_FIELD: &str = "j";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyspace {
    /// `hero` or, in cluster mode, `{hero}`: the first segment of every key.
    prefix: String,
}

impl Keyspace {
    pub fn new(namespace: &Namespace) -> Self {
        Self {
            prefix: namespace.as_str().to_string(),
        }
    }

    /// The cluster form: the namespace is the hash tag of every key.
    pub fn cluster(namespace: &Namespace) -> Self {
        Self {
            prefix: format!("{{{namespace}}}"),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace or shard tag, without the braces of the cluster form.
    pub fn shard_tag(&self) -> &str {
        self.prefix
            .strip_prefix('{')
            .and_then(|p| p.strip_suffix('}'))
            .unwrap_or(&self.prefix)
    }

    /// The keyspace of another shard of this namespace, whose tag is `tag` (`crate::shard`),
    /// in the same form (plain, or braced for a cluster).
    pub fn with_tag(&self, tag: &str) -> Keyspace {
        let prefix = if self.prefix.starts_with('{') {
            format!("{{{tag}}}")
        } else {
            tag.to_string()
        };
        Keyspace { prefix }
    }

    /// Hash: a sharded namespace's queue policies as the operator set them (queue → JSON), on
    /// shard 0; each shard's [`Keyspace::policy`] holds its share of limits and rates.
    pub fn whole_policies(&self) -> String {
        format!("{}:meta:policy:whole", self.prefix)
    }

    /// Hash: the shard map of a sharded namespace (`crate::shard`), on shard 0: `k`, `epoch`,
    /// `history`, `tag:<n>`, `drain:<n>`. Absent for an unsharded namespace.
    pub fn shard_map(&self) -> String {
        format!("{}:meta:shards", self.prefix)
    }

    /// Hash: the job record (SPEC §3).
    pub fn job(&self, id: &JobId) -> String {
        format!("{}{id}", self.job_prefix())
    }

    /// The job hash named by an id read back from Redis (a stream entry, a sorted set), which
    /// may not be a valid [`JobId`]: it is the key that id names, so a bad one is reported as
    /// what it is rather than rejected before it can be looked at.
    pub fn job_unchecked(&self, id: &str) -> String {
        format!("{}{id}", self.job_prefix())
    }

    /// The part of [`Keyspace::job`] before the id, for functions that derive a job key from a
    /// stream entry, and for SCAN patterns.
    pub fn job_prefix(&self) -> String {
        format!("{}:job:", self.prefix)
    }

    /// Set: the ids of the jobs an operator tracks (`hero track`); an id whose record is gone
    /// is dropped when the tracked jobs are listed.
    pub fn tracked(&self) -> String {
        format!("{}:meta:tracked", self.prefix)
    }

    /// Set: the ids of the jobs carrying tag `tag`, added by `hero_submit` and removed with the
    /// job by `hero_expire` (`<ns>:job:<id>` → `<ns>:tag:<tag>`, derived in the functions).
    pub fn tag(&self, tag: &str) -> String {
        format!("{}:tag:{tag}", self.prefix)
    }

    /// Hash: batch `name`'s counts (`total`, `pending`, `finished`, `failed`), its callbacks once
    /// closed and their job ids once done (`batches.lua`); derived in the functions from a
    /// member's job key (`<ns>:job:<id>` → `<ns>:batch:<name>`). Expires after the retention
    /// time once done.
    pub fn batch(&self, name: &BatchName) -> String {
        format!("{}:batch:{name}", self.prefix)
    }

    /// Sorted set: every batch's name → when it was made (ms), for listing them; derived in the
    /// functions from the config hash's key (`batches_key_of`). A name whose batch expired is
    /// skipped by readers and pruned by the broker's retention pass.
    pub fn batches(&self) -> String {
        format!("{}:meta:batches", self.prefix)
    }

    /// String: the id of the job holding uniqueness key `key` (with a TTL); `hero_submit`
    /// derives it from the job key (`<ns>:job:<id>` → `<ns>:unique:<key>`).
    pub fn unique(&self, key: &str) -> String {
        format!("{}:unique:{key}", self.prefix)
    }

    /// Stream: a work queue (type, group or instance level), at a priority level. The default
    /// level has no `:prio:` suffix.
    /// What every work stream's key starts with (`<ns>:q:work:`), for a SCAN that finds the
    /// queues without the registry.
    pub fn work_prefix(&self) -> String {
        format!("{}:q:work:", self.prefix)
    }

    pub fn work(&self, target: &Target, priority: Priority) -> String {
        let mut key = format!("{}:q:work:type:{}", self.prefix, target.script_type);
        if let Some(group) = &target.group {
            key.push_str(":group:");
            key.push_str(group.as_str());
            if let Some(instance) = &target.instance {
                key.push_str(":inst:");
                key.push_str(instance.as_str());
            }
        }
        if priority != Priority::DEFAULT {
            key.push_str(&format!(":prio:{priority}"));
        }
        key
    }

    /// How an operator names the queue of a work stream key: `<type>[/<group>[/<instance>]]`,
    /// with ` prio <n>` at another level than the default; any other key comes back as it is.
    pub fn queue_name(&self, stream: &str) -> String {
        let Some(rest) = stream
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix(":q:work:type:"))
        else {
            return stream.to_string();
        };
        let (path, prio) = match rest.split_once(":prio:") {
            Some((path, p)) => (path, Some(p)),
            None => (rest, None),
        };
        let mut name = path.replacen(":group:", "/", 1).replacen(":inst:", "/", 1);
        if let Some(p) = prio {
            name.push_str(" prio ");
            name.push_str(p);
        }
        name
    }

    /// The streams a worker of `types` in `group` / `instance` reads, in precedence order:
    /// instance → group → type, within each priority 0 first, with types varying fastest.
    pub fn precedence(
        &self,
        types: &[ScriptType],
        group: &GroupName,
        instance: &InstanceName,
    ) -> Vec<String> {
        self.precedence_at(types, group, instance, &Priority::all().collect::<Vec<_>>())
    }

    /// [`Keyspace::precedence`] for the priority levels `priorities` only (given highest first).
    pub fn precedence_at(
        &self,
        types: &[ScriptType],
        group: &GroupName,
        instance: &InstanceName,
        priorities: &[Priority],
    ) -> Vec<String> {
        let levels = [
            (Some(group.clone()), Some(instance.clone())),
            (Some(group.clone()), None),
            (None, None),
        ];
        let mut keys = Vec::with_capacity(levels.len() * priorities.len() * types.len());
        for (g, i) in &levels {
            for &priority in priorities {
                for t in types {
                    let target = Target {
                        script_type: t.clone(),
                        group: g.clone(),
                        instance: i.clone(),
                    };
                    keys.push(self.work(&target, priority));
                }
            }
        }
        keys
    }

    /// SCAN pattern matching every job hash (and the legacy per-actor lists that share the
    /// prefix: scan with `TYPE hash`).
    pub fn job_pattern(&self) -> String {
        format!("{}*", self.job_prefix())
    }

    /// List: the run-and-wait reply of one job (expires).
    pub fn reply(&self, id: &JobId) -> String {
        format!("{}{id}", self.reply_prefix())
    }

    /// The part of [`Keyspace::reply`] before the id, for functions that derive it.
    pub fn reply_prefix(&self) -> String {
        format!("{}:q:reply:", self.prefix)
    }

    /// List: control messages for every worker of a script type.
    pub fn ctl_type(&self, script_type: &ScriptType) -> String {
        format!("{}:q:ctl:type:{script_type}", self.prefix)
    }

    /// List: control messages (ids of jobs to stop) for one worker instance.
    pub fn ctl_instance(
        &self,
        script_type: &ScriptType,
        group: &GroupName,
        instance: &InstanceName,
    ) -> String {
        format!(
            "{}:q:ctl:type:{script_type}:group:{group}:inst:{instance}",
            self.prefix
        )
    }

    /// The control list of the worker whose `worker_id` is `worker`, for a job of
    /// `script_type`; `None` when `worker` names no worker of ours (a legacy one, or none).
    pub fn ctl_of_worker(&self, script_type: &ScriptType, worker: &str) -> Option<String> {
        let c = crate::name::ConsumerName::parse(worker).ok()?;
        Some(self.ctl_instance(script_type, &c.group, &c.instance))
    }

    /// String with TTL: presence JSON of one worker instance.
    pub fn presence(
        &self,
        script_type: &ScriptType,
        group: &GroupName,
        instance: &InstanceName,
    ) -> String {
        format!(
            "{}:meta:actor:inst:{script_type}:{group}:{instance}",
            self.prefix
        )
    }

    /// SCAN pattern matching every presence key.
    pub fn presence_pattern(&self) -> String {
        format!("{}:meta:actor:inst:*", self.prefix)
    }

    /// Hash: the live processes of protocol 29 and later, name → JSON (`crate::fleet`).
    pub fn fleet(&self) -> String {
        format!("{}:meta:fleet", self.prefix)
    }

    /// Sorted set: consumer name → liveness deadline (ms since the epoch).
    pub fn consumers(&self) -> String {
        format!("{}:meta:consumers", self.prefix)
    }

    /// A fair stream's ring: the limit keys with jobs in its gate, in turn (`gate.lua`).
    pub fn fair_ring(&self, stream: &str) -> String {
        format!("{stream}:fair")
    }

    /// A fair stream's lane of one limit key ('' for jobs without one): its gated jobs, FIFO,
    /// each `<id> <ms queued>` or `<id> <ms queued> <attempts>`.
    pub fn fair_lane(&self, stream: &str, limit_key: &str) -> String {
        format!("{stream}:fair:{limit_key}")
    }

    /// Set: the limit keys paused in fair queues (`hero pause <type> --key`), members
    /// `<queue name>|<limit key>`; their jobs stay in their lanes (`gate.lua`).
    pub fn held(&self) -> String {
        format!("{}:meta:held", self.prefix)
    }

    /// String: a dashboard session (its role's letter, `a` or `r`) while it lasts; the signed
    /// cookie names it, and signing out deletes it, on every broker at once.
    pub fn session(&self, sid: &str) -> String {
        format!("{}:meta:session:{sid}", self.prefix)
    }

    /// String: a one-time sign-in code the broker printed in its link (the role's letter),
    /// spent (GETDEL) by the first visit.
    pub fn sign_in_code(&self, code: &str) -> String {
        format!("{}:meta:signin:{code}", self.prefix)
    }

    /// Set: every work stream that exists, so the broker can walk them without SCAN.
    pub fn queues(&self) -> String {
        format!("{}:meta:queues", self.prefix)
    }

    /// Stream: one entry per work stream registered (`s` = the stream), capped at ~100: the
    /// workers' wake-up waits watch it instead of every stream they could read (derived by the
    /// functions from the registry's name).
    pub fn queue_signal(&self) -> String {
        format!("{}:meta:queues:new", self.prefix)
    }

    /// Set: the work streams of paused queues, out of [`Keyspace::queues`] while paused (the
    /// functions derive it from the registry's name: keep the suffix).
    pub fn paused_queues(&self) -> String {
        format!("{}:meta:queues:paused", self.prefix)
    }

    /// Set: the queue names an operator paused (`<type>[/<group>[/<instance>]]`), each covering
    /// every stream under it (derived from the registry's name by the functions, like
    /// [`Keyspace::paused_queues`]).
    pub fn paused_names(&self) -> String {
        format!("{}:meta:queues:paused:names", self.prefix)
    }

    /// Hash: a prerequisite's dependents, dependent job id → its work stream, while it has
    /// some that wait (derived from the job key by the functions: `<ns>:deps:<id>`).
    pub fn dependents(&self, id: &JobId) -> String {
        format!("{}:deps:{id}", self.prefix)
    }

    /// Set: the ids of the prerequisites that have a dependents hash
    /// ([`Keyspace::dependents`]), kept by the functions with it (derived from the config
    /// hash's key: `waiting_on_key` in `dependencies.lua`): the jobs waiting on prerequisites
    /// are listed through it, never through every key.
    pub fn waiting_on(&self) -> String {
        format!("{}:meta:waiting_on", self.prefix)
    }

    /// Hash: queue name (`<type>` or `<type>/<group>`) → its policy as JSON
    /// (`hero_client::queue::Policy`).
    pub fn policy(&self) -> String {
        format!("{}:meta:policy", self.prefix)
    }

    /// Sorted set: the running jobs of a queue with a concurrency limit (job id → the ms it
    /// was leased), kept by the fetch.
    pub fn limit(&self, queue: &str) -> String {
        format!("{}:meta:limit:{queue}", self.prefix)
    }

    /// Sorted set: the jobs of a queue with a rate policy started in its last window (job id →
    /// ms started); written by the fetch (derived from the config hash's key: `rate_key_of` in
    /// `prelude.lua`), trimmed to the window as it reads it, expires after one.
    pub fn rate(&self, queue: &str) -> String {
        format!("{}:meta:rate:{queue}", self.prefix)
    }

    /// Hash: recurring jobs by name → their spec as JSON (`hero_client::cron::CronJob`).
    pub fn cron(&self) -> String {
        format!("{}:meta:cron", self.prefix)
    }

    /// Hash: recurring job name → the ms of its next tick, claimed by `hero_cron` (the
    /// compare-and-set that makes one broker fire each tick).
    pub fn cron_next(&self) -> String {
        format!("{}:meta:cron:next", self.prefix)
    }

    /// Sorted set: job id → run-at (ms) of delayed jobs and retries.
    pub fn delayed(&self) -> String {
        format!("{}:meta:delayed", self.prefix)
    }

    /// Stream: dead letters (`j`, `reason`, `queue`).
    pub fn dead_letter(&self) -> String {
        format!("{}:meta:dead", self.prefix)
    }

    /// Stream: finished jobs waiting out their retention, one entry per call that ended jobs
    /// (`t` = the `finished_at` it wrote, `j` = the job ids, space-separated); the broker deletes
    /// them once the retention time has passed (`hero_expire`).
    pub fn retention(&self) -> String {
        format!("{}:meta:retention", self.prefix)
    }

    /// Stream: the event log, one entry per change of a job's state (`e` event, `j` job id, and
    /// `q`, `w`, `a`, `r`, `d` where they apply), capped at about `events_max` entries.
    pub fn events(&self) -> String {
        format!("{}:meta:events", self.prefix)
    }

    /// Hash: stats kept on write, per work stream `<stream>`: counters `<stream>|finished`,
    /// `|failed`, `|retried`, `|recovered`, `|dead`, the gauge `|delayed`, and histogram buckets
    /// `<stream>|wait|<b>` and `<stream>|run|<b>` (b: times in [2^b - 1, 2^(b+1) - 1) ms).
    pub fn stats(&self) -> String {
        format!("{}:meta:stats", self.prefix)
    }

    /// Hash: the counters of the minute that holds `at` (an RFC 3339 UTC time, as
    /// `clock::iso` writes it), fields as in [`Keyspace::stats`]; written by the functions
    /// (`<stats>:<minute>`, the minute as [`minute_of`] names it), expires 2 h after its first
    /// write.
    pub fn stats_minute(&self, at: &str) -> String {
        format!("{}:meta:stats:{}", self.prefix, minute_of(at))
    }

    /// Hash: the broker's settings (`retention_ms`, `reply_ttl_ms`, `lease_ms`, `events_max`,
    /// `legacy_reply_prefix`, `bridged`: how many dual-push mappings the bridge registry holds);
    /// the server functions read them. Also `deps`, kept by the functions: how many jobs have a
    /// dependents hash (a completion looks for dependents only while it is above 0), read with
    /// the settings so that the hot path asks nothing more.
    pub fn config(&self) -> String {
        format!("{}:meta:config", self.prefix)
    }

    /// Hash: the namespace's epoch (`crate::health`): `id`, `seq`, `at`, `unfinished`, and
    /// `lost` once a process found Redis lost data.
    pub fn epoch(&self) -> String {
        format!("{}:meta:epoch", self.prefix)
    }

    /// The memory flag: the maxmemory policy as Redis's INFO last gave it, kept a second by the
    /// functions that read it (`hero_submit` refuses jobs under an evicting one, `hero_beat`
    /// answers it).
    pub fn memory(&self) -> String {
        format!("{}:meta:memory", self.prefix)
    }

    /// Hash with a TTL: the duty lease (`hero_duties`): `holder`, the process doing the queue's
    /// upkeep, and when its paced duties are next due; it expires with the lease.
    pub fn duties(&self) -> String {
        format!("{}:meta:duties", self.prefix)
    }

    /// The consumer name the broker uses while it reclaims idle entries.
    pub fn reclaimer(&self) -> String {
        "hero-broker-reclaim".to_string()
    }

    // Legacy names served by the bridge (seed 001, seed 000 motivation).

    /// List: legacy work queue of one worker (`LPUSH` by producers, `BLPOP` by actors).
    pub fn legacy_work_queue(&self, worker_id: &str) -> String {
        format!("{}:work_queue:{worker_id}", self.prefix)
    }

    /// List: legacy per-type actor queue.
    pub fn legacy_actor_queue(&self, suffix: &str) -> String {
        format!("{}:job:actor_queue:{suffix}", self.prefix)
    }

    /// List: legacy per-actor queue of the in-crate Rhai actor (shares the job hash prefix).
    pub fn legacy_actor(&self, actor_id: &str) -> String {
        format!("{}:job:{actor_id}", self.prefix)
    }

    /// List: legacy stop queue of one worker.
    pub fn legacy_stop_queue(&self, worker_id: &str) -> String {
        format!("{}:stop_queue:{worker_id}", self.prefix)
    }

    /// List: legacy reply of one job.
    pub fn legacy_reply(&self, id: &JobId) -> String {
        format!("{}:reply:{id}", self.prefix)
    }

    /// Prefix of every legacy reply list (the functions append the job id in compatibility
    /// mode; the broker publishes it in the config hash).
    pub fn legacy_reply_prefix(&self) -> String {
        format!("{}:reply:", self.prefix)
    }

    /// The list of one legacy queue.
    pub fn legacy_queue(&self, q: &LegacyQueue) -> String {
        match q {
            LegacyQueue::WorkQueue(id) => self.legacy_work_queue(id),
            LegacyQueue::ActorQueue(suffix) => self.legacy_actor_queue(suffix),
            LegacyQueue::Actor(id) => self.legacy_actor(id),
        }
    }

    /// The legacy stop queue of the worker behind a legacy queue.
    pub fn legacy_stop_for(&self, q: &LegacyQueue) -> String {
        self.legacy_stop_queue(q.worker_id())
    }

    /// Sorted set: job id → next deadline (ms) of the jobs the bridge handed to the legacy
    /// actors of one legacy queue (or dual-pushed to it), until the job hash says they ended.
    pub fn bridge_track(&self, q: &LegacyQueue) -> String {
        format!("{}:meta:bridge:{}", self.prefix, q.short())
    }

    /// Hash: work stream → JSON of the dual-push mapping that copies its submits to a legacy
    /// list (`list`, `stop`, `track`, `worker`, `pickup_ms`); read by `hero_submit`.
    pub fn bridge_registry(&self) -> String {
        format!("{}:meta:bridge", self.prefix)
    }

    /// Parses a legacy queue's full key (`<ns>:work_queue:<id>`, `<ns>:job:actor_queue:<s>`,
    /// `<ns>:job:<actor_id>`) in this namespace.
    pub fn parse_legacy_queue(&self, key: &str) -> Result<LegacyQueue, crate::Error> {
        let bad = |why: &str| crate::Error::InvalidInput(format!("legacy queue {key:?}: {why}"));
        let rest = key
            .strip_prefix(&self.prefix)
            .and_then(|r| r.strip_prefix(':'))
            .ok_or_else(|| bad(&format!("must start with {}:", self.prefix)))?;
        let q = if let Some(id) = rest.strip_prefix("work_queue:") {
            LegacyQueue::WorkQueue(id.to_string())
        } else if let Some(s) = rest.strip_prefix("job:actor_queue:") {
            LegacyQueue::ActorQueue(s.to_string())
        } else if let Some(id) = rest.strip_prefix("job:") {
            LegacyQueue::Actor(id.to_string())
        } else {
            return Err(bad(
                "expected <ns>:work_queue:<worker_id>, <ns>:job:actor_queue:<suffix> or <ns>:job:<actor_id>",
            ));
        };
        let id = q.worker_id();
        if id.is_empty()
            || id.len() > 128
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(bad(
                "its worker id must be 1-128 characters of [A-Za-z0-9_.-]",
            ));
        }
        Ok(q)
    }
}

/// A legacy list queue the bridge serves (seed 001; seed 000 names the other two forms). The
/// id is also the legacy worker id its stop queue is named after.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LegacyQueue {
    /// `<ns>:work_queue:<worker_id>`
    WorkQueue(String),
    /// `<ns>:job:actor_queue:<suffix>`
    ActorQueue(String),
    /// `<ns>:job:<actor_id>`
    Actor(String),
}

impl LegacyQueue {
    /// The legacy worker id (`hero:stop_queue:<worker_id>`, the job's `worker_id`).
    pub fn worker_id(&self) -> &str {
        match self {
            LegacyQueue::WorkQueue(id) | LegacyQueue::ActorQueue(id) | LegacyQueue::Actor(id) => id,
        }
    }

    /// A name without the namespace, for the bridge's own keys and consumer name.
    pub fn short(&self) -> String {
        match self {
            LegacyQueue::WorkQueue(id) => format!("work_queue:{id}"),
            LegacyQueue::ActorQueue(s) => format!("actor_queue:{s}"),
            LegacyQueue::Actor(id) => format!("actor:{id}"),
        }
    }

    /// The consumer (in the work stream's group) under which the bridge holds the entries of
    /// jobs it handed to this queue's legacy actors. Recovery never reclaims a `bridge:`
    /// consumer's entries: the bridge's watch decides when such a job is abandoned.
    pub fn consumer(&self) -> String {
        format!("{BRIDGE_CONSUMER_PREFIX}{}", self.short())
    }
}

/// Consumers whose names start with this belong to the legacy bridge (`hero_recover` skips
/// them by the same prefix: `is_bridge_consumer` in `prelude.lua`).
pub const BRIDGE_CONSUMER_PREFIX: &str = "bridge:";

/// Whether a consumer of a work stream's group is the legacy bridge's (see
/// [`LegacyQueue::consumer`]), not a worker's.
pub fn is_bridge_consumer(consumer: &str) -> bool {
    consumer.starts_with(BRIDGE_CONSUMER_PREFIX)
}

#[cfg(test)]
mod tests;
