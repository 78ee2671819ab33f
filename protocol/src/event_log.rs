//! The event log's entries as every reader sees them: one entry decoded into the events it holds
//! (jobs of one call share an entry), and the filter a reader applies (job, queue, type, kind).
//! The operator's reads (hero-admin's `Inspector::events`, `follow`) and the producer's
//! subscription (hero-client's `Client::events`, and `wait`) are built on these.

use redis::Value;

use crate::keys::Keyspace;
use crate::name::{ScriptType, Target};
use crate::reply;

/// One change of a job's state, as the function that made it logged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The entry id: `<ms>-<seq>`, the time of the change.
    pub id: String,
    /// The kind's name ([`crate::event::EventKind`]; see [`Event::kind`]). Kept as written, so a kind
    /// a newer protocol adds still reads.
    pub event: String,
    pub job_id: String,
    /// The work stream, where there is one.
    pub queue: Option<String>,
    /// The worker's consumer name, or a legacy worker id.
    pub worker: Option<String>,
    pub attempt: Option<u32>,
    /// The error, the way it was recovered, or another detail.
    pub reason: Option<String>,
    /// When a waiting job is due (ms since the epoch).
    pub due_ms: Option<u64>,
}

impl Event {
    /// When the change happened (ms since the epoch), from the entry id.
    pub fn at_ms(&self) -> u64 {
        self.id
            .split('-')
            .next()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    }

    /// Decodes one XRANGE-style entry into the events it holds: one per job it names (jobs of
    /// one call that share event, stream and worker share an entry, their ids and attempts
    /// space-separated). An entry that is not an event (foreign data) holds none.
    pub fn decode(entry: &Value) -> Vec<Event> {
        Self::decode_entry(entry).unwrap_or_default()
    }

    fn decode_entry(entry: &Value) -> Option<Vec<Event>> {
        let [id, fields] = reply::array(entry).ok()? else {
            return None;
        };
        let id = reply::text(id).ok()?;
        let fields = reply::array(fields).ok()?;
        let mut attempts = String::new();
        let mut e = Event {
            id,
            event: String::new(),
            job_id: String::new(),
            queue: None,
            worker: None,
            attempt: None,
            reason: None,
            due_ms: None,
        };
        for pair in fields.chunks(2) {
            let [k, v] = pair else { break };
            let (k, v) = (reply::text(k).ok()?, reply::text(v).ok()?);
            match k.as_str() {
                "e" => e.event = v,
                "j" => e.job_id = v,
                "q" => e.queue = Some(v),
                "w" => e.worker = Some(v),
                "a" => attempts = v,
                "r" => e.reason = Some(v),
                "d" => e.due_ms = v.parse().ok(),
                _ => {}
            }
        }
        if e.event.is_empty() || e.job_id.is_empty() {
            return None;
        }
        let ids = std::mem::take(&mut e.job_id);
        if !ids.contains(' ') {
            // one job: an entry of its own, whose reason or id may hold spaces
            e.job_id = ids;
            e.attempt = attempts.parse().ok();
            return Some(vec![e]);
        }
        let mut attempts = attempts.split(' ');
        Some(
            ids.split(' ')
                .map(|id| Event {
                    job_id: id.to_string(),
                    attempt: attempts.next().and_then(|a| a.parse().ok()),
                    ..e.clone()
                })
                .collect(),
        )
    }

    /// The kind, when it is one this version knows.
    pub fn kind(&self) -> Option<crate::event::EventKind> {
        self.event.parse().ok()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "at_ms": self.at_ms(),
            "event": self.event,
            "job": self.job_id,
            "queue": self.queue,
            "worker": self.worker,
            "attempt": self.attempt,
            "reason": self.reason,
            "due_ms": self.due_ms,
        })
    }
}

/// Which events a reader wants; every field set must match.
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    pub job: Option<String>,
    /// One queue, every priority level of it (its work stream key at the default level).
    pub queue: Option<Target>,
    /// Every queue of a script type.
    pub script_type: Option<ScriptType>,
    pub event: Option<crate::event::EventKind>,
}

impl EventFilter {
    pub fn matches(&self, keys: &Keyspace, e: &Event) -> bool {
        if self.job.as_ref().is_some_and(|j| *j != e.job_id) {
            return false;
        }
        if self.event.is_some_and(|ev| ev.as_str() != e.event) {
            return false;
        }
        // a stream key and what may follow it: the end, or a deeper level / priority suffix
        let under = |base: &str, exact: bool| {
            e.queue.as_deref().is_some_and(|q| {
                q == base
                    || q.strip_prefix(base).is_some_and(|rest| {
                        if exact {
                            rest.starts_with(":prio:")
                        } else {
                            rest.starts_with(':')
                        }
                    })
            })
        };
        if let Some(t) = &self.queue {
            if !under(&keys.work(t, crate::Priority::DEFAULT), true) {
                return false;
            }
        }
        if let Some(t) = &self.script_type {
            let base = keys.work(&Target::of_type(t.clone()), crate::Priority::DEFAULT);
            if !under(&base, false) {
                return false;
            }
        }
        true
    }
}
