//! The server-side half of the protocol: the `hero` Redis Functions library, assembled from one
//! Lua file per function (`function/*.lua`, each with a KEYS / ARGV / Returns / Errors header),
//! loaded when missing or stale, and the typed handle [`Function`] every call goes through.

use std::fmt;

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};

/// Bumped whenever any Lua file changes meaning; a server with another version is reloaded.
pub const LIBRARY_VERSION: &str = "11";

const PRELUDE: &str = include_str!("function/prelude.lua");

/// One server-side function. The set is closed so the compiler checks every call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    Version,
    Submit,
    Fetch,
    Complete,
    Renew,
    Stop,
    Recover,
    Promote,
    BridgeIn,
    BridgeOut,
    BridgeWatch,
    Expire,
}

impl Function {
    pub const ALL: [Function; 12] = [
        Function::Version,
        Function::Submit,
        Function::Fetch,
        Function::Complete,
        Function::Renew,
        Function::Stop,
        Function::Recover,
        Function::Promote,
        Function::BridgeIn,
        Function::BridgeOut,
        Function::BridgeWatch,
        Function::Expire,
    ];

    /// The registered name, as used with FCALL.
    pub fn name(self) -> &'static str {
        match self {
            Function::Version => "hero_version",
            Function::Submit => "hero_submit",
            Function::Fetch => "hero_fetch",
            Function::Complete => "hero_complete",
            Function::Renew => "hero_renew",
            Function::Stop => "hero_stop",
            Function::Recover => "hero_recover",
            Function::Promote => "hero_promote",
            Function::BridgeIn => "hero_bridge_in",
            Function::BridgeOut => "hero_bridge_out",
            Function::BridgeWatch => "hero_bridge_watch",
            Function::Expire => "hero_expire",
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Function::Version => include_str!("function/version.lua"),
            Function::Submit => include_str!("function/submit.lua"),
            Function::Fetch => include_str!("function/fetch.lua"),
            Function::Complete => include_str!("function/complete.lua"),
            Function::Renew => include_str!("function/renew.lua"),
            Function::Stop => include_str!("function/stop.lua"),
            Function::Recover => include_str!("function/recover.lua"),
            Function::Promote => include_str!("function/promote.lua"),
            Function::BridgeIn => include_str!("function/bridge_in.lua"),
            Function::BridgeOut => include_str!("function/bridge_out.lua"),
            Function::BridgeWatch => include_str!("function/bridge_watch.lua"),
            Function::Expire => include_str!("function/expire.lua"),
        }
    }

    /// An FCALL of this function; keys must come from the keys module.
    pub fn call<K: AsRef<str>>(self, keys: &[K]) -> redis::Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(self.name()).arg(keys.len());
        for k in keys {
            cmd.arg(k.as_ref());
        }
        cmd
    }
}

/// The library source as loaded with FUNCTION LOAD.
pub fn library_source() -> String {
    let mut src = String::from("#!lua name=hero\n");
    src.push_str(&format!("local VERSION = '{LIBRARY_VERSION}'\n"));
    src.push_str(PRELUDE);
    for f in Function::ALL {
        src.push('\n');
        src.push_str(f.source());
    }
    src.push('\n');
    for f in Function::ALL {
        src.push_str(&format!("redis.register_function('{0}', {0})\n", f.name()));
    }
    src
}

/// True when the error says the library (or one of its functions) is not on the server, as after
/// a restart of a Redis without persistence or a FUNCTION FLUSH.
pub fn is_missing(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    text.contains("Function not found") || text.contains("No such library")
}

/// Loads the library unless the server already has this version.
pub async fn ensure_loaded<C: ConnectionLike + Send>(conn: &mut C) -> Result<()> {
    let current: redis::RedisResult<String> =
        Function::Version.call::<&str>(&[]).query_async(conn).await;
    match current {
        Ok(v) if v == LIBRARY_VERSION => Ok(()),
        Ok(_) => load(conn).await,
        Err(e) if is_missing(&e) => load(conn).await,
        Err(e) => Err(e.into()),
    }
}

async fn load<C: ConnectionLike + Send>(conn: &mut C) -> Result<()> {
    let r: redis::RedisResult<String> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_source())
        .query_async(conn)
        .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::protocol(format!(
            "FUNCTION LOAD of the hero library failed: {e}"
        ))),
    }
}

/// Error codes the functions raise as `HERO_<CODE> message`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerCode {
    BadArg,
    JobNotFound,
}

impl ServerCode {
    pub const ALL: [ServerCode; 2] = [ServerCode::BadArg, ServerCode::JobNotFound];

    pub fn as_str(self) -> &'static str {
        match self {
            ServerCode::BadArg => "HERO_BAD_ARG",
            ServerCode::JobNotFound => "HERO_JOB_NOT_FOUND",
        }
    }

    pub fn parse(s: &str) -> Option<ServerCode> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ServerCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `hero_fetch` call: up to `count` jobs for `consumer` from `streams`, taken in the order
/// given (see [`crate::Keyspace::precedence`]); decode its reply with
/// [`crate::reply::FetchReply::decode`]. `xackdel` is [`crate::Capabilities::xackdel_flag`].
pub fn fetch(
    keys: &crate::Keyspace,
    streams: &[String],
    consumer: &str,
    count: usize,
    xackdel: &str,
) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(Function::Fetch.name())
        .arg(streams.len() + 1)
        .arg(keys.queues())
        .arg(streams)
        .arg(crate::keys::CONSUMER_GROUP)
        .arg(consumer)
        .arg(count)
        .arg(keys.job_prefix())
        .arg(crate::clock::now_iso())
        .arg(xackdel);
    cmd
}

/// Which deliveries of a stream one `hero_recover` call takes back.
#[derive(Clone, Copy, Debug)]
pub enum Recovery<'a> {
    /// Every pending entry of this consumer (a dead worker's); each delivery counts as an
    /// attempt.
    Consumer(&'a str),
    /// Every pending entry of this consumer, a live worker giving its own jobs back: the
    /// deliveries do not count.
    HandBack(&'a str),
    /// Entries idle longer than this many ms, whoever holds them.
    Idle(u64),
}

/// One `hero_recover` call over `stream` from `cursor` ('0-0' to start), at most `count`
/// entries; decode its reply with [`crate::reply::Recovered::decode`]. `xackdel` is
/// [`crate::Capabilities::xackdel_flag`].
pub fn recover(
    keys: &crate::Keyspace,
    stream: &str,
    which: Recovery<'_>,
    count: usize,
    max_attempts: u32,
    cursor: &str,
    xackdel: &str,
) -> redis::Cmd {
    let mut cmd = Function::Recover.call(&[
        stream.to_string(),
        keys.dead_letter(),
        keys.config(),
        keys.retention(),
    ]);
    cmd.arg(crate::keys::CONSUMER_GROUP);
    let handback = match which {
        Recovery::Consumer(c) => {
            cmd.arg("consumer").arg(c).arg(0);
            "0"
        }
        Recovery::HandBack(c) => {
            cmd.arg("consumer").arg(c).arg(0);
            "1"
        }
        Recovery::Idle(ms) => {
            cmd.arg("idle").arg(keys.reclaimer()).arg(ms);
            "0"
        }
    };
    cmd.arg(count)
        .arg(keys.job_prefix())
        .arg(keys.reply_prefix())
        .arg(max_attempts)
        .arg(cursor)
        .arg(handback)
        .arg(crate::clock::now_iso())
        .arg(xackdel);
    cmd
}

/// One `hero_expire` call: deletes the jobs of at most `entries` retention entries older than
/// `retention`; decode its reply with [`crate::reply::Expired::decode`].
pub fn expire(
    keys: &crate::Keyspace,
    retention: std::time::Duration,
    entries: usize,
) -> redis::Cmd {
    let mut cmd = Function::Expire.call(&[keys.retention()]);
    cmd.arg(keys.job_prefix())
        .arg(retention.as_millis() as u64)
        .arg(entries);
    cmd
}

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
}

impl Ending {
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Done => "done",
            Ending::Fail => "fail",
            Ending::Retry => "retry",
            Ending::Abort => "abort",
        }
    }
}

/// The delivery an outcome belongs to, as the worker read it: the job, the stream it came from,
/// its lease (the entry id it was fetched with) and the job's `reply` field ('' when it has
/// none), which tells `hero_complete` whom to answer without reading the record again.
#[derive(Clone, Copy, Debug)]
pub struct Leased<'a> {
    pub id: &'a crate::JobId,
    pub stream: &'a str,
    pub lease: &'a str,
    pub reply: &'a str,
}

/// One `hero_complete` call recording a batch of outcomes (decode its reply with
/// [`crate::reply::Completion::decode_many`], one answer per [`CompleteBatch::push`]).
pub struct CompleteBatch<'a> {
    keys: &'a crate::Keyspace,
    key_list: Vec<String>,
    args: Vec<String>,
    /// The job ids joined by spaces (a [`crate::JobId`] holds none): the retention entry.
    ids: String,
}

impl<'a> CompleteBatch<'a> {
    /// `now_iso` stamps every job of the batch; `xackdel` is [`crate::Capabilities::xackdel_flag`].
    pub fn new(keys: &'a crate::Keyspace, now_iso: &str, xackdel: &str) -> Self {
        CompleteBatch {
            keys,
            key_list: vec![keys.delayed(), keys.config(), keys.retention()],
            args: vec![
                crate::keys::CONSUMER_GROUP.to_string(),
                now_iso.to_string(),
                xackdel.to_string(),
            ],
            ids: String::new(),
        }
    }

    /// Adds the outcome of one delivery; `retry_at_ms` is read only for [`Ending::Fail`] and
    /// [`Ending::Retry`].
    pub fn push(&mut self, d: Leased<'_>, ending: Ending, text: &str, retry_at_ms: u64) {
        self.key_list.extend([
            self.keys.job(d.id),
            d.stream.to_string(),
            self.keys.reply(d.id),
        ]);
        self.args.extend([
            d.lease.to_string(),
            ending.as_str().to_string(),
            text.to_string(),
            retry_at_ms.to_string(),
            d.id.as_str().to_string(),
            d.reply.to_string(),
        ]);
        if !self.ids.is_empty() {
            self.ids.push(' ');
        }
        self.ids.push_str(d.id.as_str());
    }

    pub fn len(&self) -> usize {
        (self.key_list.len() - 3) / 3
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn cmd(&self) -> redis::Cmd {
        let mut cmd = Function::Complete.call(&self.key_list);
        cmd.arg(&self.args[..3]).arg(&self.ids).arg(&self.args[3..]);
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_in_the_lua_sources_is_a_server_code() {
        let mut sources = vec![PRELUDE];
        sources.extend(Function::ALL.iter().map(|f| f.source()));
        let mut seen = Vec::new();
        for src in sources {
            let mut rest = src;
            while let Some(at) = rest.find("HERO_") {
                let code: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                    .collect();
                if code != "HERO_" {
                    // `HERO_<CODE>` in a comment is the pattern, not a code
                    assert!(
                        ServerCode::parse(&code).is_some(),
                        "{code} is raised in Lua but not in ServerCode"
                    );
                    seen.push(code);
                }
                rest = &rest[at + 5..];
            }
        }
        for c in ServerCode::ALL {
            assert!(
                seen.iter().any(|s| s == c.as_str()),
                "{c} is in ServerCode but no Lua raises it"
            );
        }
    }

    #[test]
    fn every_function_file_has_a_header_and_defines_its_function() {
        for f in Function::ALL {
            let src = f.source();
            assert!(
                src.starts_with(&format!("-- {}:", f.name())),
                "{} header",
                f.name()
            );
            assert!(
                src.contains("-- Returns:"),
                "{} documents its returns",
                f.name()
            );
            assert!(src.contains(&format!("local function {}(", f.name())));
        }
        assert!(library_source().contains("redis.register_function('hero_recover', hero_recover)"));
    }
}
