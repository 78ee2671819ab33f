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

/// The words of the header for each argument a job adds, in order.
const JOB_ARGS: [&str; 4] = ["lease", "job id", "code", "output or error text"];

/// One outcome as pushed, kept until the call groups the batch by stream.
struct Pushed {
    stream: String,
    /// The four arguments of [`JOB_ARGS`].
    args: [String; 4],
    /// The retry time, for the outcomes that retry.
    retry_at: Option<u64>,
    /// The record's `reply` field, when someone waits.
    reply: Option<String>,
    /// Its queue policy's retention (ms).
    retention: Option<u64>,
    trace: Option<String>,
    value: Option<Vec<u8>>,
}

/// One `hero_complete` call recording a batch of outcomes (decode its reply with
/// [`CompleteBatch::answers`], one answer per [`CompleteBatch::push`], in push order).
///
/// Since protocol 34 the call takes each stream once and the jobs grouped by stream, four
/// arguments a job: the batch is grouped here, in the order its streams were first pushed, and
/// the answers are put back in push order.
pub struct CompleteBatch<'a> {
    keys: &'a Keyspace,
    now_iso: String,
    xackdel: String,
    jobs: Vec<Pushed>,
    /// The job ids joined by spaces (a [`JobId`] holds none): the retention entry.
    ids: String,
    /// The worker's consumer name, for the event log.
    consumer: String,
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
            jobs: Vec::new(),
            ids: String::new(),
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
        // the outcome's letter and the run time: one short string, most often the same for a
        // whole batch of short jobs, which the function then parses once
        let letter = match ending {
            Ending::Done => 'd',
            Ending::Fail => 'f',
            Ending::Retry => 'r',
            Ending::Abort => 'a',
            Ending::Again => 'g',
        };
        let code = match ran {
            Some(r) => format!("{letter}{}", r.as_millis()),
            None => letter.to_string(),
        };
        let retries = matches!(ending, Ending::Fail | Ending::Retry | Ending::Again);
        self.jobs.push(Pushed {
            stream: d.stream.to_string(),
            args: [
                d.lease.to_string(),
                d.id.as_str().to_string(),
                code,
                text.to_string(),
            ],
            retry_at: retries.then_some(retry_at_ms),
            reply: (!d.reply.is_empty()).then(|| d.reply.to_string()),
            retention: None,
            trace: None,
            value: None,
        });
        if !self.ids.is_empty() {
            self.ids.push(' ');
        }
        self.ids.push_str(d.id.as_str());
    }

    /// The job pushed last expires `ms` after this call ends it (its queue policy's retention,
    /// shorter than the broker's), in the same call: nothing is left to a second command.
    pub fn expire_after(&mut self, ms: u64) {
        if let Some(last) = self.jobs.last_mut() {
            last.retention = Some(ms);
        }
    }

    /// The job pushed last failed with `trace` (its error chain, traceback or stack): stored in
    /// its record's `trace` field, bounded. Only failures carry one; a success's is ignored.
    pub fn trace(&mut self, trace: &str) {
        if let Some(last) = self.jobs.last_mut() {
            if !trace.is_empty() {
                last.trace = Some(bounded_trace(trace).to_string());
            }
        }
    }

    /// The job pushed last returned `value` (MessagePack bytes): stored as its record's
    /// `value` beside its output text when it ends finished; a failure's is ignored.
    pub fn value(&mut self, value: &[u8]) {
        if let Some(last) = self.jobs.last_mut() {
            last.value = Some(value.to_vec());
        }
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The streams of the batch in the order they were first pushed, and the jobs (push
    /// indexes) grouped by them: the order the call passes them in.
    fn grouped(&self) -> (Vec<&str>, Vec<usize>, Vec<usize>) {
        let mut streams: Vec<&str> = Vec::new();
        let mut of_job = Vec::with_capacity(self.jobs.len());
        for j in &self.jobs {
            // a batch names few streams (most often one): a scan beats a map
            let s = match streams.iter().position(|s| *s == j.stream) {
                Some(s) => s,
                None => {
                    streams.push(&j.stream);
                    streams.len() - 1
                }
            };
            of_job.push(s);
        }
        let mut counts = vec![0usize; streams.len()];
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by_key(|&i| of_job[i]);
        for &s in &of_job {
            counts[s] += 1;
        }
        (streams, counts, order)
    }

    /// The call recording every outcome pushed so far.
    pub fn call(&self) -> Call {
        let (streams, counts, order) = self.grouped();
        let mut c = Call::new(Function::Complete, 6 + streams.len());
        c.key("delayed zset", self.keys.delayed())
            .key("config hash", self.keys.config())
            .key("retention stream", self.keys.retention())
            .key("event log", self.keys.events())
            .key("stats hash", self.keys.stats())
            .key("queue registry set", self.keys.queues());
        for s in &streams {
            c.key("the batch's work streams", *s);
        }
        let mut retention = String::new();
        for (at, &i) in order.iter().enumerate() {
            if let Some(ms) = self.jobs[i].retention {
                if !retention.is_empty() {
                    retention.push(' ');
                }
                retention.push_str(&format!("{at} {ms}"));
            }
        }
        let counts = counts
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        c.arg("consumer group", CONSUMER_GROUP)
            .arg("now ISO 8601", &self.now_iso)
            .arg("'1' when the server has XACKDEL", &self.xackdel)
            .arg("the batch's job ids joined", &self.ids)
            .arg("consumer name", &self.consumer)
            .arg("retention per job", &retention)
            .arg("job key prefix", self.keys.job_prefix())
            .arg("how many jobs of the batch each stream", &counts);
        for &i in &order {
            for (label, a) in JOB_ARGS.iter().zip(&self.jobs[i].args) {
                c.arg(label, a);
            }
        }
        // unlabelled: their positions follow the batch's length, which the header check's
        // fixed and repeating positions cannot name (the header defines them in words)
        for (at, &i) in order.iter().enumerate() {
            let j = &self.jobs[i];
            if let Some(t) = &j.retry_at {
                c.arg("", format!("t{at}")).arg("", t.to_string());
            }
            if let Some(r) = &j.reply {
                c.arg("", format!("w{at}")).arg("", r);
            }
            if let Some(t) = &j.trace {
                c.arg("", at.to_string()).arg("", t);
            }
            if let Some(v) = &j.value {
                c.arg("", format!("v{at}")).arg("", v.as_slice());
            }
        }
        c
    }

    /// The answers of [`CompleteBatch::call`], one per job in push order.
    pub fn answers(&self, v: &Value) -> Result<Vec<Completion>> {
        let (_, _, order) = self.grouped();
        let given = Completion::decode_many(v, order.len())?;
        let mut out = vec![Completion::LeaseLost; order.len()];
        for (at, &i) in order.iter().enumerate() {
            out[i] = given[at];
        }
        Ok(out)
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
