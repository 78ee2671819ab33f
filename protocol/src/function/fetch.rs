//! The `hero_fetch` call (`fetch.lua`): a worker claims jobs in precedence order.

use super::{Call, Function};
use crate::clock;
use crate::error::{Error, Result};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;
use crate::reply::{array, int, text};
use redis::Value;

/// Up to `count` jobs for `consumer` from `streams`, taken in the order given (see
/// [`Keyspace::precedence`]); decode the reply with [`crate::function::FetchReply::decode`].
/// `xackdel` is [`crate::Capabilities::xackdel_flag`].
pub fn fetch(
    keys: &Keyspace,
    streams: &[String],
    consumer: &str,
    count: usize,
    xackdel: &str,
) -> Call {
    fetch_limited(keys, streams, consumer, count, xackdel, "", Records::None)
}

/// Which leased jobs' records a fetch hands back (ARGV[8] of `fetch.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Records {
    /// None: the caller reads each record (a backlog's plain reads cost Redis least).
    None,
    /// A fetch that comes up short hands them back (the jobs of a worker keeping up start
    /// without another round trip); a full one does not.
    WhenShort,
    /// Every fetch hands them back (protocol 29): for a client whose cost per command is
    /// higher than the read's (Node), one command a fetch instead of one a job.
    Always,
}

impl Records {
    fn arg(self) -> &'static str {
        match self {
            Records::None => "",
            Records::WhenShort => "1",
            Records::Always => "2",
        }
    }
}

/// What a fetch is told of the registry of streams (ARGV[9] of `fetch.lua`).
#[derive(Clone, Copy, Debug)]
pub enum RegistryCursor<'a> {
    /// `streams` are every stream the caller serves; nothing is answered of the registry.
    None,
    /// `streams` are every stream the caller serves; the answer says which are registered
    /// ([`crate::function::RegistryView`]).
    Ask,
    /// `streams` are the registered ones of the caller's, as of this signal id (from an
    /// earlier answer): read without asking the registry while it has not moved.
    Since(&'a str),
}

/// [`fetch`] under concurrency limits: `limits` as the Lua header describes ARGV[7]
/// (`<stream index> <max> <limit key>` triples, 1-based indexes; '' for none). With
/// `records`, a fetch hands back the records of the jobs it leased
/// ([`crate::function::Delivery::record`]), which saves the caller a read before it starts
/// them.
pub fn fetch_limited(
    keys: &Keyspace,
    streams: &[String],
    consumer: &str,
    count: usize,
    xackdel: &str,
    limits: &str,
    records: Records,
) -> Call {
    fetch_with(
        keys,
        streams,
        consumer,
        count,
        xackdel,
        limits,
        records,
        RegistryCursor::None,
    )
}

/// [`fetch_limited`] with a registry cursor: a worker naming many streams passes only the
/// registered ones ([`RegistryCursor::Since`]), so its fetch costs what those cost.
#[allow(clippy::too_many_arguments)]
pub fn fetch_with<S: AsRef<str>>(
    keys: &Keyspace,
    streams: &[S],
    consumer: &str,
    count: usize,
    xackdel: &str,
    limits: &str,
    records: Records,
    registry: RegistryCursor<'_>,
) -> Call {
    let mut c = Call::new(Function::Fetch, streams.len() + 4);
    c.key("queue registry set", keys.queues())
        .key("config hash", keys.config())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    for s in streams {
        c.key("work streams in precedence order", s.as_ref());
    }
    c.arg("consumer group", CONSUMER_GROUP)
        .arg("consumer name", consumer)
        .arg("count", count)
        .arg("job key prefix", keys.job_prefix())
        .arg("now ISO 8601", clock::now_iso())
        .arg("'1' when the server has XACKDEL", xackdel)
        .arg("concurrency limits", limits)
        .arg("records", records.arg());
    c.arg(
        "registry cursor",
        match registry {
            RegistryCursor::None => "",
            RegistryCursor::Ask => "*",
            RegistryCursor::Since(id) => id,
        },
    );
    c
}

// The reply: decoded here, beside the call that asks for it, and nowhere else.
/// One job leased to the caller by `hero_fetch`.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Index into the stream list the fetch was given.
    pub stream: usize,
    /// The entry id: also the lease (fencing token).
    pub entry: String,
    pub job_id: JobId,
    /// The job's record as the fetch read it after writing the lease, when the fetch handed it
    /// back (a short fetch asked for records); else the caller reads it.
    pub record: Option<Value>,
}

/// An entry `hero_fetch` acknowledged and deleted without handing it out.
#[derive(Clone, Debug)]
pub struct Dropped {
    pub stream: usize,
    pub entry: String,
    /// What the entry names: any string, as it came from the stream.
    pub job_id: String,
    /// `missing` (no job hash, or one without a status), `foreign` (the key holds another
    /// type), `stale` (the job is no longer dispatched) or `legacy` (a legacy actor took it).
    /// One more comes from the client, not the function: `invalid_id`, a job leased under an
    /// id no [`JobId`] can hold (a legacy producer's). It is not run; its lease idles out and
    /// recovery dead-letters it once its attempts are spent.
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub struct FetchReply {
    pub jobs: Vec<Delivery>,
    pub dropped: Vec<Dropped>,
    /// Empty when the fetch got all it asked for; else per stream the id to XREAD BLOCK from.
    pub cursors: Vec<String>,
    /// A queue's concurrency limit held jobs back: no new entry wakes the caller when a slot
    /// frees, so it looks again soon rather than blocking long.
    pub limited: bool,
    /// With a registry cursor given ([`crate::function::RegistryCursor`]): what the fetch saw
    /// of the registry of streams.
    pub registry: Option<RegistryView>,
}

/// The registry as a fetch given a registry cursor saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryView {
    /// The id of the registry's signal stream's last entry: while it stays the same, no stream
    /// was registered, paused or resumed.
    pub signal: String,
    /// Asked with [`crate::function::RegistryCursor::Ask`]: the streams given that are
    /// registered (0-based indexes).
    pub registered: Vec<usize>,
    /// The registry moved since the cursor given: the fetch claimed nothing, and the caller
    /// names every stream again.
    pub stale: bool,
}

impl FetchReply {
    /// For a fetch given a subset of the caller's `all` streams (`named`: their indexes, in the
    /// order given): turns the reply's stream indexes and cursors into indexes of the whole
    /// list (the cursors one per stream plus the signal stream's, empty for streams not named).
    pub fn renumber(&mut self, named: &[usize], all: usize) -> Result<()> {
        let to_all = |i: usize| {
            named.get(i).copied().ok_or_else(|| {
                Error::protocol(format!(
                    "hero_fetch named stream {} of the {} given",
                    i + 1,
                    named.len()
                ))
            })
        };
        for d in &mut self.jobs {
            d.stream = to_all(d.stream)?;
        }
        for d in &mut self.dropped {
            d.stream = to_all(d.stream)?;
        }
        if !self.cursors.is_empty() {
            let mut cursors = vec![String::new(); all + 1];
            let mut given = std::mem::take(&mut self.cursors).into_iter();
            for &i in named {
                if let Some(c) = given.next() {
                    cursors[i] = c;
                }
            }
            if let Some(signal) = given.next() {
                cursors[all] = signal;
            }
            self.cursors = cursors;
        }
        Ok(())
    }

    pub fn decode(v: &Value) -> Result<Self> {
        match array(v)? {
            [parts @ .., records, signal, registered] if parts.len() == 4 => {
                let mut reply = Self::decode_parts(parts, Some(array(records)?.to_vec()))?;
                reply.registry = Some(RegistryView::decode(signal, registered)?);
                Ok(reply)
            }
            [parts @ .., records] if parts.len() == 4 => {
                Self::decode_parts(parts, Some(array(records)?.to_vec()))
            }
            parts => Self::decode_parts(parts, None),
        }
    }

    /// [`FetchReply::decode`], moving the records out of the reply instead of copying them.
    pub fn decode_owned(mut v: Value) -> Result<Self> {
        let registry = match &mut v {
            Value::Array(parts) if parts.len() == 7 => {
                let registered = parts.pop().unwrap_or(Value::Nil);
                let signal = parts.pop().unwrap_or(Value::Nil);
                Some(RegistryView::decode(&signal, &registered)?)
            }
            _ => None,
        };
        let records = match &mut v {
            Value::Array(parts) if parts.len() == 5 => parts.pop(),
            _ => None,
        };
        let records = match records {
            Some(Value::Array(r)) => Some(r),
            Some(Value::Nil) | None => None,
            Some(other) => {
                return Err(Error::protocol(format!(
                    "hero_fetch records are not an array: {other:?}"
                )))
            }
        };
        let mut reply = Self::decode_parts(array(&v)?, records)?;
        reply.registry = registry;
        Ok(reply)
    }

    fn decode_parts(parts: &[Value], records: Option<Vec<Value>>) -> Result<Self> {
        let (jobs, dropped, cursors, limited) = match parts {
            [jobs, dropped, cursors] => (jobs, dropped, cursors, false),
            [jobs, dropped, cursors, limited] => (jobs, dropped, cursors, int(limited)? == 1),
            _ => {
                return Err(Error::protocol(
                    "hero_fetch reply is not {jobs, dropped, cursors, limited[, records]}",
                ))
            }
        };
        let index = |v: &Value| -> Result<usize> { Ok((int(v)? - 1).max(0) as usize) };
        let jobs = array(jobs)?;
        if jobs.len() % 3 != 0 {
            return Err(Error::protocol(
                "hero_fetch jobs are not stream, entry, id triples",
            ));
        }
        // one record per job when there are any; none (empty) when the fetch was full
        let mut records = records.filter(|r| !r.is_empty());
        if records.as_ref().is_some_and(|r| r.len() != jobs.len() / 3) {
            return Err(Error::protocol(
                "hero_fetch records do not match its jobs one to one",
            ));
        }
        let mut delivered = Vec::with_capacity(jobs.len() / 3);
        let mut unusable = Vec::new();
        for (k, j) in jobs.chunks(3).enumerate() {
            let (stream, entry, raw) = (index(&j[0])?, text(&j[1])?, text(&j[2])?);
            match JobId::new(&raw) {
                Ok(job_id) => delivered.push(Delivery {
                    stream,
                    entry,
                    job_id,
                    record: records
                        .as_mut()
                        .and_then(|r| r.get_mut(k))
                        .map(|r| std::mem::replace(r, Value::Nil)),
                }),
                Err(_) => unusable.push(Dropped {
                    stream,
                    entry,
                    job_id: raw,
                    reason: "invalid_id".into(),
                }),
            }
        }
        let jobs = delivered;
        let mut dropped = array(dropped)?
            .iter()
            .map(|d| match array(d)? {
                [i, entry, id, reason] => Ok(Dropped {
                    stream: index(i)?,
                    entry: text(entry)?,
                    job_id: text(id)?,
                    reason: text(reason)?,
                }),
                _ => Err(Error::protocol(
                    "hero_fetch dropped item is not {stream, entry, id, reason}",
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        dropped.extend(unusable);
        let cursors = array(cursors)?
            .iter()
            .map(text)
            .collect::<Result<Vec<_>>>()?;
        Ok(FetchReply {
            jobs,
            dropped,
            cursors,
            limited,
            registry: None,
        })
    }
}

impl RegistryView {
    fn decode(signal: &Value, registered: &Value) -> Result<Self> {
        let signal = text(signal)?;
        if matches!(registered, Value::BulkString(_) | Value::SimpleString(_)) {
            return if text(registered)? == "stale" {
                Ok(RegistryView {
                    signal,
                    registered: Vec::new(),
                    stale: true,
                })
            } else {
                Err(Error::protocol(
                    "hero_fetch registered is neither a list of indexes nor 'stale'",
                ))
            };
        }
        let registered = array(registered)?
            .iter()
            .map(|i| Ok((int(i)? - 1).max(0) as usize))
            .collect::<Result<Vec<_>>>()?;
        Ok(RegistryView {
            signal,
            registered,
            stale: false,
        })
    }
}
/// A fetched job's record, read after the fetch (or handed back by a short one), judged against
/// the delivery that leased it.
#[derive(Debug)]
// made once per job and moved straight into its task: boxing the record would cost an
// allocation a job for nothing
#[allow(clippy::large_enum_variant)]
pub enum Fetched {
    /// The record still says this delivery runs the job: run it. `job` is the decoded record
    /// (or the field that does not decode: the job ends `error` naming it); `reply` its `reply`
    /// field, handed back with the outcome.
    Leased {
        job: std::result::Result<crate::job::Job, crate::error::DecodeError>,
        reply: String,
    },
    /// A stop or recovery took the job away between the fetch and the read, and dealt with its
    /// entry too: forget it.
    Stale,
}

/// Reads the record of a job leased with entry `entry` (the reply of `HGETALL <key>`): run only
/// while its status is `started` and its lease this entry.
pub fn read_fetched(key: &str, record: Value, entry: &str) -> Result<Fetched> {
    let (fields, binary) = crate::reply::record(record)?;
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if field("status") != Some("started") || field("lease") != Some(entry) {
        return Ok(Fetched::Stale);
    }
    let reply = field("reply").unwrap_or_default().to_string();
    let job = crate::job::Job::from_record(key, (fields, binary));
    Ok(Fetched::Leased { job, reply })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetched_job_runs_only_while_its_record_carries_this_lease() {
        let hash = |pairs: &[(&str, &str)]| {
            Value::Array(
                pairs
                    .iter()
                    .flat_map(|(k, v)| [k, v])
                    .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                    .collect(),
            )
        };
        let ns = crate::name::Namespace::new("hero").unwrap();
        let key = Keyspace::new(&ns).job(&JobId::new("j").unwrap());
        let leased = |v| matches!(read_fetched(&key, v, "1-0"), Ok(Fetched::Leased { .. }));
        assert!(leased(hash(&[
            ("status", "started"),
            ("lease", "1-0"),
            ("script", "x")
        ])));
        // stopped between the fetch and the read
        assert!(!leased(hash(&[
            ("status", "error"),
            ("lease", "1-0"),
            ("error", "stopped")
        ])));
        // recovered and fetched again by another worker under a new entry
        assert!(!leased(hash(&[("status", "started"), ("lease", "5-0")])));
        // gone (retention, or deleted by hand)
        assert!(!leased(hash(&[])));
    }
}
