//! A queue's policy as the functions, workers and brokers read it: `Policy` (time limit, retry
//! budget, back-off, lease, retention, concurrency, rates, priority aging), `Policies` (every
//! queue's, as cached), the canonical queue name pause and policy keep, and the config hash's
//! counters that tell the functions which policies to apply. Setting a policy is the operator's
//! (`hero_admin::Admin::set_policy`).

use crate::error::{Error, Result};
use crate::name::Target;

/// The config hash's field counting the queues with a concurrency limit (see
/// `hero_admin::Admin::set_policy`).
pub const LIMITED_FIELD: &str = "limited";

/// The config hash's field counting the queues with a rate: while it is above 0 every fetch
/// reads the rates of its streams' queues.
pub const RATED_FIELD: &str = "rated";

/// The config hash's field counting the queues whose retries, back-off or retention the
/// completion and recovery functions apply themselves.
pub const POLICED_FIELD: &str = "policed";

/// The config hash's field counting the queues with priority aging: while it is above 0 every
/// fetch asks how long the head of each aging stream has waited (`aging_order` in `fetch.lua`).
pub const AGED_FIELD: &str = "aged";

/// The config hash's field counting the fair queues: while it is above 0, appending a job asks
/// whether its stream's queue is fair (its gate, `gate.lua`) and the fetch releases from gates.
pub const FAIR_FIELD: &str = "fair";

/// The canonical name of a queue as pause and policy keep it: `<type>[/<group>[/<instance>]]`,
/// checked (a priority is not part of it: a control covers every level).
pub fn queue_name(queue: &str) -> Result<String> {
    let (target, prio) = Target::parse_queue(queue)?;
    if prio != crate::name::Priority::DEFAULT || queue.contains(" prio ") {
        return Err(Error::InvalidInput(format!(
            "queue {queue:?}: name it without a priority; pause and policy cover every level"
        )));
    }
    Ok(target.name())
}

/// At most `max` of a queue's jobs start in any window of `per_ms` ms, across every worker,
/// checked by the fetch itself (a sliding window: `Keyspace::rate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rate {
    pub max: u32,
    pub per_ms: u64,
}

impl Rate {
    /// `<max>/<window>`: `100/s`, `10/1m`, `5/500ms`, `30/10s` (a bare unit is one of it).
    pub fn parse(s: &str) -> Result<Rate> {
        let bad = |why: &str| {
            Error::InvalidInput(format!(
                "rate {s:?}: {why}; write <max>/<window>, e.g. 100/s, 10/1m or 5/500ms"
            ))
        };
        let (max, per) = s.trim().split_once('/').ok_or_else(|| bad("no /"))?;
        let max: u32 = max
            .trim()
            .parse()
            .map_err(|_| bad("the max is not a whole number"))?;
        if max == 0 {
            return Err(bad(
                "a rate of 0 would start nothing (pause the queue instead)",
            ));
        }
        let per = per.trim();
        let per = if per.starts_with(|c: char| c.is_ascii_digit()) {
            per.to_string()
        } else {
            format!("1{per}")
        };
        let window =
            humantime::parse_duration(&per).map_err(|_| bad("the window is not a duration"))?;
        let per_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        if per_ms == 0 {
            return Err(bad("the window is shorter than a millisecond"));
        }
        Ok(Rate { max, per_ms })
    }
}

/// How a failed attempt's retry is delayed.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Backoff {
    /// `fixed` (always `base_ms`) or `exponential` (`base_ms` doubling per attempt).
    pub kind: BackoffKind,
    pub base_ms: u64,
    /// The longest delay, ms.
    pub cap_ms: u64,
    /// A share (0 to 1) by which each delay may vary either way, so a burst of failures does
    /// not come back as a burst.
    pub jitter: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackoffKind {
    Fixed,
    Exponential,
}

impl Backoff {
    /// The worker's default without a policy: 1 s doubling, capped at an hour, ±20 %.
    pub const DEFAULT: Backoff = Backoff {
        kind: BackoffKind::Exponential,
        base_ms: 1000,
        cap_ms: 3_600_000,
        jitter: 0.2,
    };

    /// The delay before the retry of failed attempt `attempt` (1 for the first), with `r` a
    /// random number in [0, 1) for the jitter.
    pub fn delay(&self, attempt: u32, r: f64) -> std::time::Duration {
        let base = match self.kind {
            BackoffKind::Fixed => self.base_ms,
            BackoffKind::Exponential => self
                .base_ms
                .saturating_mul(1u64 << attempt.saturating_sub(1).min(40)),
        }
        .min(self.cap_ms) as f64;
        let j = self.jitter.clamp(0.0, 1.0);
        let ms = base * (1.0 - j + 2.0 * j * r);
        std::time::Duration::from_millis(ms.max(0.0) as u64)
    }

    /// `fixed:<base>` or `exponential:<base>[:<cap>]` (humantime durations: `500ms`, `2s`),
    /// with an optional `,jitter=<0..1>`.
    pub fn parse(s: &str) -> Result<Backoff> {
        let bad = |why: &str| {
            Error::InvalidInput(format!(
                "back-off {s:?}: {why}; give fixed:<delay> or exponential:<base>[:<cap>], optionally ,jitter=0.2"
            ))
        };
        let (spec, jitter) = match s.split_once(",jitter=") {
            Some((spec, j)) => (
                spec,
                j.parse::<f64>()
                    .ok()
                    .filter(|j| (0.0..=1.0).contains(j))
                    .ok_or_else(|| bad("jitter is not a number from 0 to 1"))?,
            ),
            None => (s, 0.2),
        };
        let mut parts = spec.split(':');
        let kind = match parts.next() {
            Some("fixed") => BackoffKind::Fixed,
            Some("exponential" | "exp") => BackoffKind::Exponential,
            _ => return Err(bad("unknown kind")),
        };
        let dur = |p: Option<&str>| -> Result<Option<u64>> {
            p.map(|d| {
                humantime::parse_duration(d)
                    .map(|d| d.as_millis() as u64)
                    .map_err(|e| bad(&format!("{d:?} is not a duration ({e})")))
            })
            .transpose()
        };
        let base_ms = dur(parts.next())?.ok_or_else(|| bad("the delay is missing"))?;
        let cap_ms = dur(parts.next())?.unwrap_or(match kind {
            BackoffKind::Fixed => base_ms,
            BackoffKind::Exponential => 3_600_000,
        });
        if parts.next().is_some() {
            return Err(bad("too many parts"));
        }
        Ok(Backoff {
            kind,
            base_ms,
            cap_ms: cap_ms.max(base_ms),
            jitter,
        })
    }
}

/// A queue's policy: what applies to its jobs unless a job says otherwise. Set per type or per
/// type/group (the group's wins); every field is optional.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    /// A job's time limit when it names none (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The retry budget: a job gets at least this many retries after a failed first attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// How long a delivery may go unrenewed before the broker hands it out again (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// How long the queue's ended jobs are kept (ms), when shorter than the broker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<u64>,
    /// At most this many of the queue's jobs run at once, across every worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// At most this many of the queue's jobs start in a window, across every worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// At most this many of the queue's jobs sharing a limit key (`NewJobBuilder::limit_key`)
    /// start in a window; the others wait in the delayed set until their key has room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_rate: Option<Rate>,
    /// Priority aging (ms): a job of the queue that has waited this long is served as if one
    /// priority level higher, and one more for each further period, so a steady stream of
    /// higher-priority work cannot starve a level forever. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aging_ms: Option<u64>,
    /// Fair share: within each priority level, the queue's jobs are served by their limit key
    /// in turns (round robin), not first in, first out (ARCHITECTURE.md "Fair share within a
    /// queue"). `Some(true)` only: clearing is clearing the policy's field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair: Option<bool>,
    /// Turns per round of a limit key under fair share (default 1 each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_weights: Option<std::collections::BTreeMap<String, u32>>,
    /// At most this many running jobs of one limit key across every worker (fair queues only:
    /// a key's jobs wait in its lane of the gate until it has room).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_concurrency: Option<u32>,
}

impl Policy {
    pub fn is_empty(&self) -> bool {
        *self == Policy::default()
    }

    /// `self` with every field `other` sets replaced by its value.
    pub fn merged(mut self, other: &Policy) -> Policy {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f.clone_from(&other.$f); } )* };
        }
        take!(
            timeout_ms,
            retries,
            backoff,
            lease_ms,
            retention_ms,
            concurrency,
            rate,
            key_rate,
            aging_ms,
            fair,
            fair_weights,
            key_concurrency
        );
        self
    }
}

/// Every queue's policy, as read at once: what workers and brokers cache.
#[derive(Clone, Debug, Default)]
pub struct Policies {
    by_queue: std::collections::HashMap<String, Policy>,
}

impl Policies {
    /// The policy of the queue of `script_type` and `group`: the type's, with the
    /// type/group's over it. `None` when neither has one.
    pub fn of(&self, script_type: &str, group: Option<&str>) -> Option<Policy> {
        let t = self.by_queue.get(script_type);
        let g = group.and_then(|g| self.by_queue.get(&format!("{script_type}/{g}")));
        match (t, g) {
            (None, None) => None,
            (Some(t), None) => Some(t.clone()),
            (None, Some(g)) => Some(g.clone()),
            (Some(t), Some(g)) => Some(t.clone().merged(g)),
        }
    }

    /// The queue whose concurrency limit covers `script_type` / `group`, and the limit: the
    /// type/group's when it sets one, else the type's.
    pub fn limit_of(&self, script_type: &str, group: Option<&str>) -> Option<(String, u32)> {
        if let Some(g) = group {
            let q = format!("{script_type}/{g}");
            if let Some(n) = self.by_queue.get(&q).and_then(|p| p.concurrency) {
                return Some((q, n));
            }
        }
        self.by_queue
            .get(script_type)
            .and_then(|p| p.concurrency)
            .map(|n| (script_type.to_string(), n))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Policy)> {
        self.by_queue.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }
}

/// Every queue's policy (one HGETALL), for the caches of workers and brokers. An entry that does
/// not decode (written by hand) is skipped with a warning: it must not take every queue's
/// policy with it.
pub async fn read_policies(
    redis: &crate::conn::Redis,
    keys: &crate::keys::Keyspace,
) -> Result<Policies> {
    read_policies_from(redis, &keys.policy()).await
}

/// [`read_policies`] from another hash of the same form (a sharded namespace's whole
/// policies, `Keyspace::whole_policies`).
pub async fn read_policies_from(redis: &crate::conn::Redis, key: &str) -> Result<Policies> {
    let raw: Vec<(String, String)> = redis.query(redis::cmd("HGETALL").arg(key)).await?;
    let mut by_queue = std::collections::HashMap::new();
    for (q, r) in raw {
        match decode_policy(&q, &r) {
            Ok(p) => {
                by_queue.insert(q, p);
            }
            Err(e) => tracing::warn!(error = %e, "ignoring a queue policy"),
        }
    }
    Ok(Policies { by_queue })
}

pub fn decode_policy(queue: &str, raw: &str) -> Result<Policy> {
    serde_json::from_str(raw).map_err(|e| {
        Error::InvalidInput(format!(
            "the policy of queue {queue} is not valid JSON of a policy ({e}); set it again with hero queue set {queue} ..."
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_reads_as_operators_write_it() {
        let r = |s: &str| Rate::parse(s).map(|r| (r.max, r.per_ms));
        assert_eq!(r("100/s").unwrap(), (100, 1000));
        assert_eq!(r("10/1m").unwrap(), (10, 60_000));
        assert_eq!(r("5/500ms").unwrap(), (5, 500));
        assert_eq!(r(" 30 / 10s ").unwrap(), (30, 10_000));
        for bad in ["0/s", "x/s", "5", "5/soon", "5/0s"] {
            let e = Rate::parse(bad).unwrap_err().to_string();
            assert!(e.contains("100/s"), "{bad}: {e}");
        }
    }

    #[test]
    fn backoff_parses_and_follows_its_kind_within_jitter() {
        let e = Backoff::parse("exponential:100ms:1s,jitter=0").unwrap();
        let ms = |a| e.delay(a, 0.5).as_millis();
        assert_eq!((ms(1), ms(2), ms(3), ms(5)), (100, 200, 400, 1000));
        let f = Backoff::parse("fixed:2s").unwrap();
        assert_eq!(f.delay(7, 0.0).as_millis(), 1600, "-20 % at r = 0");
        assert_eq!(f.delay(7, 0.999_999).as_millis(), 2399);
        assert!(Backoff::parse("linear:1s").is_err());
        assert!(Backoff::parse("fixed:soon").is_err());
        assert!(Backoff::parse("fixed:1s,jitter=2").is_err());
    }

    #[test]
    fn a_group_policy_overrides_its_types_field_by_field() {
        let mut p = Policies::default();
        p.by_queue.insert(
            "t".into(),
            Policy {
                retries: Some(2),
                concurrency: Some(3),
                ..Policy::default()
            },
        );
        p.by_queue.insert(
            "t/g".into(),
            Policy {
                retries: Some(5),
                ..Policy::default()
            },
        );
        let of_g = p.of("t", Some("g")).unwrap();
        assert_eq!((of_g.retries, of_g.concurrency), (Some(5), Some(3)));
        assert_eq!(p.limit_of("t", Some("g")), Some(("t".into(), 3)));
        assert_eq!(p.of("u", None), None);
    }
}
