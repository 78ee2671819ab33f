//! Typed forms of what the server functions return, decoded from raw Redis values. A reply of
//! the wrong shape is an [`Error::Protocol`], never a panic.

use redis::Value;

use crate::error::{Error, Result};
use crate::name::JobId;

pub(crate) fn text(v: &Value) -> Result<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        Value::Okay => Ok("OK".into()),
        other => Err(Error::protocol(format!("expected a string, got {other:?}"))),
    }
}

pub(crate) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => text(other)?
            .parse()
            .map_err(|_| Error::protocol(format!("expected an integer, got {other:?}"))),
    }
}

pub(crate) fn array(v: &Value) -> Result<&[Value]> {
    match v {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(&[]),
        other => Err(Error::protocol(format!("expected an array, got {other:?}"))),
    }
}

/// Field/value pairs of a flat HGETALL-style array, taking the strings out of the reply rather
/// than copying them (a worker reads a record per job).
pub fn pairs(v: Value) -> Result<Vec<(String, String)>> {
    let items = match v {
        Value::Array(items) => items,
        Value::Nil => Vec::new(),
        other => return Err(Error::protocol(format!("expected an array, got {other:?}"))),
    };
    if items.len() % 2 != 0 {
        return Err(Error::protocol("odd number of items in a field/value list"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut items = items.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        out.push((owned_text(k)?, owned_text(v)?));
    }
    Ok(out)
}

/// A job hash's text fields, and its payload's bytes.
pub type Record = (Vec<(String, String)>, Option<Vec<u8>>);

/// A job hash as HGETALL answers it, for [`crate::Job::from_record`]: the field/value pairs as
/// text, except the `payload` field, whose bytes are taken as they are (MessagePack is binary).
pub fn record(v: Value) -> Result<Record> {
    let items = match v {
        Value::Array(items) => items,
        Value::Nil => Vec::new(),
        other => return Err(Error::protocol(format!("expected an array, got {other:?}"))),
    };
    if items.len() % 2 != 0 {
        return Err(Error::protocol("odd number of items in a field/value list"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut payload = None;
    let mut items = items.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        let k = owned_text(k)?;
        if k == "payload" {
            if let Value::BulkString(b) = v {
                payload = Some(b);
                continue;
            }
        }
        out.push((k, owned_text(v)?));
    }
    Ok((out, payload))
}

/// [`text`] of a reply the caller owns: a bulk string becomes the String without a copy.
fn owned_text(v: Value) -> Result<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8(b)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
        other => text(&other),
    }
}

/// `hero_submit`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitReply {
    /// False when the id existed already, or the submit was a duplicate (nothing was written).
    pub created: bool,
    /// The job's status now (the holder's, for a duplicate).
    pub status: String,
    /// The job holding the submit's uniqueness key, when it was a duplicate.
    pub duplicate_of: Option<String>,
}

impl SubmitReply {
    /// The answers of a batched `hero_submit`, one per job (kind, status pairs in one list).
    pub fn decode_many(v: &Value, expected: usize) -> Result<Vec<Self>> {
        let items = array(v)?;
        if items.len() != 2 * expected {
            return Err(Error::protocol(format!(
                "hero_submit answered {} values for {expected} jobs; expected a kind and a status each",
                items.len()
            )));
        }
        items
            .chunks(2)
            .map(|c| {
                let kind = text(&c[0])?;
                Ok(SubmitReply {
                    created: kind == "created",
                    status: text(&c[1])?,
                    duplicate_of: kind.strip_prefix("duplicate:").map(str::to_string),
                })
            })
            .collect()
    }
}

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

/// What `hero_complete` did with one delivery's outcome (SPEC §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// This delivery's result is the recorded one.
    Completed,
    /// The job goes back to the delayed set for another attempt.
    Retrying,
    /// The job had already ended (for example it was stopped).
    AlreadyCompleted,
    /// Another delivery owns the job now; this result was not recorded.
    LeaseLost,
}

impl Completion {
    pub fn as_str(self) -> &'static str {
        match self {
            Completion::Completed => "completed",
            Completion::Retrying => "retrying",
            Completion::AlreadyCompleted => "already_completed",
            Completion::LeaseLost => "lease_lost",
        }
    }

    pub fn decode(v: &Value) -> Result<Self> {
        let s = text(v)?;
        [
            Completion::Completed,
            Completion::Retrying,
            Completion::AlreadyCompleted,
            Completion::LeaseLost,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
        .ok_or_else(|| Error::protocol(format!("hero_complete answered {s:?}")))
    }

    /// The answers of a batched `hero_complete`, one per job; `expected` is how many it
    /// recorded.
    pub fn decode_many(v: &Value, expected: usize) -> Result<Vec<Self>> {
        let items = array(v)?;
        if items.len() != expected {
            return Err(Error::protocol(format!(
                "hero_complete answered {} results for {expected} jobs",
                items.len()
            )));
        }
        items.iter().map(Completion::decode).collect()
    }
}

/// What `hero_renew` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    Ok,
    /// The job ended while running (stopped): interrupt the handler.
    Stopped,
    /// Another delivery owns the job: interrupt the handler, its result would be rejected.
    Lost,
}

impl Renewal {
    pub fn decode(v: &Value) -> Result<Self> {
        match text(v)?.as_str() {
            "ok" => Ok(Renewal::Ok),
            "stopped" => Ok(Renewal::Stopped),
            "lost" => Ok(Renewal::Lost),
            other => Err(Error::protocol(format!("hero_renew answered {other:?}"))),
        }
    }
}

/// What `hero_expire` did in one call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Retention entries taken (and deleted).
    pub entries: u64,
    /// Jobs deleted.
    pub jobs: u64,
    /// More entries were due than the call took.
    pub more: bool,
}

impl Expired {
    pub fn decode(v: &Value) -> Result<Self> {
        match array(v)? {
            [e, j, m] => Ok(Expired {
                entries: int(e)? as u64,
                jobs: int(j)? as u64,
                more: int(m)? != 0,
            }),
            _ => Err(Error::protocol(
                "hero_expire reply is not {entries, jobs, more}",
            )),
        }
    }
}

/// What `hero_recover` did in one call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub requeued: u64,
    pub dead: u64,
    pub dropped: u64,
    /// `0-0` when the pass is done.
    pub cursor: String,
}

impl Recovered {
    pub fn decode(v: &Value) -> Result<Self> {
        match array(v)? {
            [r, d, x, c] => Ok(Recovered {
                requeued: int(r)? as u64,
                dead: int(d)? as u64,
                dropped: int(x)? as u64,
                cursor: text(c)?,
            }),
            _ => Err(Error::protocol(
                "hero_recover reply is not {requeued, dead, dropped, cursor}",
            )),
        }
    }
}
