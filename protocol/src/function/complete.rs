//! The `hero_complete` call (`complete.lua`): a worker records a batch of outcomes, each fenced
//! by its lease.

use super::{Call, Function};
use crate::error::{Error, Result};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::name::JobId;
use crate::reply::{array, text};
use redis::Value;

/// How a delivery ended, as `hero_complete` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Success; the text is the output.
    Done,
    /// Failure, retried at the retry time while the job's retry budget lasts.
    Fail,
    /// The handler asked for a retry at the retry time; an error once the budget is spent.
    Retry,
    /// Failure that is never retried.
    Abort,
    /// Failure retried at the retry time whatever the job's budget says: the worker applied
    /// its queue's retry budget (a policy) already.
    Again,
}

impl Ending {
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Done => "done",
            Ending::Fail => "fail",
            Ending::Retry => "retry",
            Ending::Abort => "abort",
            Ending::Again => "again",
        }
    }
}

/// The delivery an outcome belongs to, as the worker read it: the job, the stream it came from,
/// its lease (the entry id it was fetched with) and the job's `reply` field ('' when it has
/// none), which tells `hero_complete` whom to answer without reading the record again.
#[derive(Clone, Copy, Debug)]
pub struct Leased<'a> {
    pub id: &'a JobId,
    pub stream: &'a str,
    pub lease: &'a str,
    pub reply: &'a str,
}

/// One delivery's outcome, as [`CompleteBatch::push`] records it.
#[derive(Clone, Copy, Debug)]
pub struct Ended<'a> {
    /// The delivery it belongs to.
    pub held: Leased<'a>,
    pub ending: Ending,
    /// The output (done) or the error (otherwise).
    pub text: &'a str,
    /// When a failed attempt may run again (ms since the epoch); read only for [`Ending::Fail`],
    /// [`Ending::Retry`] and [`Ending::Again`].
    pub retry_at_ms: u64,
    /// How long the attempt ran (the run-time histogram's sample), when known.
    pub ran: Option<std::time::Duration>,
}

/// The words of the header for each key and argument a job adds, in order.
const JOB_KEYS: [&str; 3] = ["job hash", "its work stream", "its reply list"];
const JOB_ARGS: [&str; 7] = [
    "lease",
    "outcome",
    "output or error text",
    "retry-at ms",
    "job id",
    "the job's `reply` field",
    "run ms",
];

/// One `hero_complete` call recording a batch of outcomes (decode its reply with
/// [`crate::function::Completion::decode_many`], one answer per [`CompleteBatch::push`]).
pub struct CompleteBatch<'a> {
    keys: &'a Keyspace,
    now_iso: String,
    xackdel: String,
    /// Per job, the three keys of [`JOB_KEYS`].
    job_keys: Vec<String>,
    /// Per job, the seven arguments of [`JOB_ARGS`].
    job_args: Vec<String>,
    /// The job ids joined by spaces (a [`JobId`] holds none): the retention entry.
    ids: String,
    /// The worker's consumer name, for the event log.
    consumer: String,
    /// `<job index> <ms>` pairs: the TTL each such job gets when this call ends it.
    retention: String,
    /// Per failed attempt that has one, its job index and its trace (the trailing pairs).
    traces: Vec<(usize, String)>,
    /// Per success that returned a value, its job index and the value's MessagePack bytes
    /// (trailing pairs too, the index written `v<i>`: since protocol 33).
    values: Vec<(usize, Vec<u8>)>,
}

/// The most of a trace a call sends (the function keeps as much, `TRACE_MAX` in finish.lua): a
/// runaway traceback costs neither the round trip nor the record more.
pub const TRACE_MAX: usize = 16 * 1024;

/// `text` cut to at most [`TRACE_MAX`] bytes, on a character boundary, keeping its start (an
/// error chain and a stack name the failure first).
pub fn bounded_trace(text: &str) -> &str {
    if text.len() <= TRACE_MAX {
        return text;
    }
    let mut end = TRACE_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl<'a> CompleteBatch<'a> {
    /// `now_iso` stamps every job of the batch; `xackdel` is [`crate::Capabilities::xackdel_flag`];
    /// `consumer` is the worker's consumer name.
    pub fn new(keys: &'a Keyspace, now_iso: &str, xackdel: &str, consumer: &str) -> Self {
        CompleteBatch {
            consumer: consumer.to_string(),
            keys,
            now_iso: now_iso.to_string(),
            xackdel: xackdel.to_string(),
            job_keys: Vec::new(),
            job_args: Vec::new(),
            ids: String::new(),
            retention: String::new(),
            traces: Vec::new(),
            values: Vec::new(),
        }
    }

    /// Adds the outcome of one delivery.
    pub fn push(&mut self, e: Ended<'_>) {
        let Ended {
            held: d,
            ending,
            text,
            retry_at_ms,
            ran,
        } = e;
        // A job no one waits on never has its reply list touched, so its stream stands in for
        // it: a key Redis has already turned into a Lua string in this call, where a reply key
        // of its own cost ~1.7 k instructions a job (`benches/profile_functions.py`).
        let reply_list = if d.reply.is_empty() {
            d.stream.to_string()
        } else {
            self.keys.reply(d.id)
        };
        self.job_keys
            .extend([self.keys.job(d.id), d.stream.to_string(), reply_list]);
        self.job_args.extend([
            d.lease.to_string(),
            ending.as_str().to_string(),
            text.to_string(),
            retry_at_ms.to_string(),
            d.id.as_str().to_string(),
            d.reply.to_string(),
            ran.map(|r| r.as_millis().to_string()).unwrap_or_default(),
        ]);
        if !self.ids.is_empty() {
            self.ids.push(' ');
        }
        self.ids.push_str(d.id.as_str());
    }

    /// The job pushed last expires `ms` after this call ends it (its queue policy's retention,
    /// shorter than the broker's), in the same call: nothing is left to a second command.
    pub fn expire_after(&mut self, ms: u64) {
        if let Some(last) = self.len().checked_sub(1) {
            if !self.retention.is_empty() {
                self.retention.push(' ');
            }
            self.retention.push_str(&format!("{last} {ms}"));
        }
    }

    /// The job pushed last failed with `trace` (its error chain, traceback or stack): stored in
    /// its record's `trace` field, bounded. Only failures carry one; a success's is ignored.
    pub fn trace(&mut self, trace: &str) {
        if let Some(last) = self.len().checked_sub(1) {
            if !trace.is_empty() {
                self.traces.push((last, bounded_trace(trace).to_string()));
            }
        }
    }

    /// The job pushed last returned `value` (MessagePack bytes): stored as its record's
    /// `value` beside its output text when it ends finished; a failure's is ignored.
    pub fn value(&mut self, value: &[u8]) {
        if let Some(last) = self.len().checked_sub(1) {
            self.values.push((last, value.to_vec()));
        }
    }

    pub fn len(&self) -> usize {
        self.job_keys.len() / JOB_KEYS.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The call recording every outcome pushed so far.
    pub fn call(&self) -> Call {
        let mut c = Call::new(Function::Complete, 6 + self.job_keys.len());
        c.key("delayed zset", self.keys.delayed())
            .key("config hash", self.keys.config())
            .key("retention stream", self.keys.retention())
            .key("event log", self.keys.events())
            .key("stats hash", self.keys.stats())
            .key("queue registry set", self.keys.queues());
        for (i, k) in self.job_keys.iter().enumerate() {
            c.key(JOB_KEYS[i % JOB_KEYS.len()], k);
        }
        c.arg("consumer group", CONSUMER_GROUP)
            .arg("now ISO 8601", &self.now_iso)
            .arg("'1' when the server has XACKDEL", &self.xackdel)
            .arg("the batch's job ids joined", &self.ids)
            .arg("consumer name", &self.consumer)
            .arg("retention per job", &self.retention);
        for (i, a) in self.job_args.iter().enumerate() {
            c.arg(JOB_ARGS[i % JOB_ARGS.len()], a);
        }
        // unlabelled: their positions follow the batch's length, which the header check's
        // fixed and repeating positions cannot name (the header defines them in words)
        for (i, t) in &self.traces {
            c.arg("", i.to_string()).arg("", t);
        }
        for (i, v) in &self.values {
            c.arg("", format!("v{i}")).arg("", v.as_slice());
        }
        c
    }
}

// The reply: decoded here, beside the call that asks for it, and nowhere else.
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
