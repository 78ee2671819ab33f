//! Redis's own health as hero needs it, read by the broker's health pass: the maxmemory policy
//! and memory, persistence (AOF and RDB write status, the last save), loading; and whether Redis
//! lost data since this process last looked.
//!
//! Data loss is told by the namespace's epoch hash (`<ns>:meta:epoch`): an `id` made once by
//! the first process to find none, and a `seq` each health pass counts up, with `at` (Redis's
//! clock of that pass) and `unfinished` (the jobs then waiting, delayed or running). A process
//! remembers the last it saw. The epoch gone (or another id) is a Redis that came back empty
//! (a restart without persistence, a FLUSHALL, a fresh replica promoted); a `seq` below the one
//! remembered is a Redis that went back in time (restarted from an older snapshot, a lagging
//! replica promoted). Each is added to the hash's `lost` (a JSON array), which `hero audit`
//! reports, one finding a loss, until an operator acknowledges them (`hero audit --fix`).

use crate::conn::Redis;
use crate::error::Result;
use crate::keys::Keyspace;

/// What INFO says of Redis's memory and persistence.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisInfo {
    pub used_memory: u64,
    /// 0 for no limit.
    pub maxmemory: u64,
    pub policy: String,
    pub aof_enabled: bool,
    /// `ok` or `err` (the last AOF write failed: Redis refuses writes with MISCONF).
    pub aof_last_write_status: String,
    /// `ok` or `err` (the last background save failed: with stop-writes-on-bgsave-error, MISCONF).
    pub rdb_last_bgsave_status: String,
    /// Seconds since the epoch of the last successful RDB save.
    pub rdb_last_save_time: u64,
    pub rdb_changes_since_last_save: u64,
    pub loading: bool,
    pub run_id: String,
}

impl RedisInfo {
    /// From INFO's text (`field:value` lines).
    pub fn parse(text: &str) -> RedisInfo {
        let mut i = RedisInfo::default();
        for line in text.lines() {
            let Some((k, v)) = line.trim_end().split_once(':') else {
                continue;
            };
            let n = || v.parse::<u64>().unwrap_or(0);
            match k {
                "used_memory" => i.used_memory = n(),
                "maxmemory" => i.maxmemory = n(),
                "maxmemory_policy" => i.policy = v.to_string(),
                "aof_enabled" => i.aof_enabled = v == "1",
                "aof_last_write_status" => i.aof_last_write_status = v.to_string(),
                "rdb_last_bgsave_status" => i.rdb_last_bgsave_status = v.to_string(),
                "rdb_last_save_time" => i.rdb_last_save_time = n(),
                "rdb_changes_since_last_save" => i.rdb_changes_since_last_save = n(),
                "loading" => i.loading = v == "1",
                "run_id" => i.run_id = v.to_string(),
                _ => {}
            }
        }
        i
    }

    /// True when Redis refuses writes for a failed write to disk (MISCONF).
    pub fn disk_failing(&self) -> bool {
        self.aof_last_write_status == "err" || self.rdb_last_bgsave_status == "err"
    }

    pub async fn read(redis: &Redis) -> Result<RedisInfo> {
        let text: String = redis
            .query(
                redis::cmd("INFO")
                    .arg("server")
                    .arg("memory")
                    .arg("persistence"),
            )
            .await?;
        Ok(RedisInfo::parse(&text))
    }
}

/// The epoch hash as one pass saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Epoch {
    pub id: String,
    pub seq: u64,
    /// Redis's clock (ms) at the pass that counted `seq`.
    pub at_ms: u64,
    /// The jobs waiting, delayed or running at that pass.
    pub unfinished: u64,
}

/// What Redis lost, as a pass tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// The epoch is gone, or another: Redis came back with none of the namespace's data.
    Emptied { before: Epoch },
    /// `seq` went back: Redis holds the data of an older moment, `now.at_ms`.
    WentBack { before: Epoch, now: Epoch },
}

impl Loss {
    /// The ERROR line's text and the `lost` record's.
    pub fn describe(&self) -> String {
        let at = |ms: u64| crate::clock::iso(ms);
        match self {
            Loss::Emptied { before } => format!(
                "Redis lost the namespace's data: its epoch {} is gone (a restart without persistence, a FLUSHALL, or an empty replica promoted). Up to {} accepted jobs, unfinished at {}, and every job accepted since may be gone; nothing in Redis names them now. Check the producers' logs for what they submitted since then, and Redis's persistence (docs/guarantees.md)",
                before.id,
                before.unfinished,
                at(before.at_ms)
            ),
            Loss::WentBack { before, now } => format!(
                "Redis went back in time: it holds the data of {} (epoch pass {}), but this process saw pass {} at {}: a restart from an older snapshot, or a lagging replica promoted. What happened in between is lost: jobs accepted since {} may be gone, and jobs that ended since may run again ({} were unfinished then); `hero audit` shows what is inconsistent now",
                at(now.at_ms),
                now.seq,
                before.seq,
                at(before.at_ms),
                at(now.at_ms),
                now.unfinished
            ),
        }
    }
}

/// What a process remembers of the epoch between passes.
#[derive(Debug, Default)]
pub struct EpochWatch {
    last: Option<Epoch>,
    /// The losses this process recorded, written again with each new one.
    losses: Vec<serde_json::Value>,
}

/// The epoch's `lost`: a JSON array of `{at, what}` (one object, as a first writer of 31 may
/// have left it, reads as an array of one).
pub fn lost_records(raw: Option<&str>) -> Vec<serde_json::Value> {
    match raw.and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok()) {
        Some(serde_json::Value::Array(items)) => items,
        Some(one @ serde_json::Value::Object(_)) => vec![one],
        _ => Vec::new(),
    }
}

impl EpochWatch {
    /// One pass: counts the epoch up (made when missing) with Redis's time and the number of
    /// unfinished jobs, and compares it with what this process saw last. A loss is also written
    /// into the epoch hash as `lost`, for `hero audit`.
    pub async fn pass(
        &mut self,
        redis: &Redis,
        keys: &Keyspace,
        unfinished: u64,
    ) -> Result<Option<Loss>> {
        let key = keys.epoch();
        let fresh = uuid::Uuid::new_v4().simple().to_string();
        let mut pipe = redis::pipe();
        pipe.cmd("HSETNX").arg(&key).arg("id").arg(&fresh);
        pipe.cmd("HMGET")
            .arg(&key)
            .arg("id")
            .arg("seq")
            .arg("at")
            .arg("unfinished");
        pipe.cmd("HINCRBY").arg(&key).arg("seq").arg(1);
        pipe.cmd("TIME");
        let mut r = redis.pipeline(&pipe).await?.into_iter();
        let made: i64 =
            redis::from_redis_value(r.next().unwrap_or(Ok(redis::Value::Nil))?).unwrap_or(0);
        let seen: Vec<Option<String>> =
            redis::from_redis_value(r.next().unwrap_or(Ok(redis::Value::Nil))?).unwrap_or_default();
        let seq: u64 =
            redis::from_redis_value(r.next().unwrap_or(Ok(redis::Value::Nil))?).unwrap_or(0);
        let time: Vec<String> =
            redis::from_redis_value(r.next().unwrap_or(Ok(redis::Value::Nil))?).unwrap_or_default();
        let now_ms = time
            .first()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
            * 1000
            + time.get(1).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) / 1000;
        let field = |i: usize| seen.get(i).cloned().flatten().unwrap_or_default();
        let stored = Epoch {
            id: field(0),
            seq: field(1).parse().unwrap_or(0),
            at_ms: field(2).parse().unwrap_or(0),
            unfinished: field(3).parse().unwrap_or(0),
        };
        let mut set = redis::cmd("HSET");
        set.arg(&key)
            .arg("at")
            .arg(now_ms)
            .arg("unfinished")
            .arg(unfinished);
        let _: redis::Value = redis.query(&set).await?;
        let current = Epoch {
            id: stored.id.clone(),
            seq,
            at_ms: now_ms,
            unfinished,
        };
        let loss = match self.last.take() {
            Some(before) if made == 1 || before.id != stored.id => Some(Loss::Emptied { before }),
            // `seq` as this pass found it, before its own count: below the last one this
            // process counted, Redis went back
            Some(before) if stored.seq < before.seq => Some(Loss::WentBack {
                before,
                now: stored,
            }),
            _ => None,
        };
        self.last = Some(current);
        if let Some(loss) = &loss {
            // every loss not yet acknowledged, oldest first (an older record may itself have
            // gone back with the data: what this process saw is written again with it)
            let mut get = redis::cmd("HGET");
            get.arg(&key).arg("lost");
            let mut records = lost_records(redis.query::<Option<String>>(&get).await?.as_deref());
            records.push(serde_json::json!({
                "at": crate::clock::iso(now_ms),
                "what": loss.describe(),
            }));
            self.losses.retain(|l| !records.contains(l));
            records.splice(0..0, self.losses.drain(..));
            self.losses.clone_from(&records);
            let mut cmd = redis::cmd("HSET");
            cmd.arg(&key)
                .arg("lost")
                .arg(serde_json::Value::Array(records).to_string());
            let _: redis::Value = redis.query(&cmd).await?;
        }
        Ok(loss)
    }
}
