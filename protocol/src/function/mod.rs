//! The server-side half of the protocol: the hero Redis Functions library, assembled from one
//! Lua file per function (`function/*.lua`, each with a KEYS / ARGV / Returns / Errors header),
//! loaded when missing, and one typed call builder per function beside its Lua file. Every
//! FCALL in the workspace is built here: keys come from the keys module, arguments in the
//! order of the Lua header, which `tests::every_builder_follows_its_lua_header` holds them to.
//!
//! Versions live side by side. The library of protocol version `N` is named `hero_vN` and
//! registers its functions as `hero_vN_<name>`, so during a rolling upgrade the old workers keep
//! calling the old library while new processes load and call theirs; neither reloads the other.
//! `docs/protocol.md` (Upgrades) says how an upgrade proceeds and when the old library goes.

mod batch;
mod batch_ends;
mod beat;
mod bridge_in;
mod bridge_out;
mod bridge_watch;
mod clean;
mod complete;
mod counts;
mod cron;
mod dead;
mod drain;
mod duties;
mod expire;
mod fetch;
mod fix;
mod keys;
mod list;
mod pause;
mod policy;
mod promote;
mod recover;
mod remove;
mod renew;
mod requeue;
mod stop;
mod submit;

#[cfg(test)]
mod header_check;

pub use batch::{close_batch, BatchClosed, CallbackSpec};
pub use batch_ends::batch_ends;
pub use beat::{beat, Beat};
pub use bridge_in::bridge_in;
pub use bridge_out::bridge_out;
pub use bridge_watch::{bridge_watch, Watch};
pub use clean::{clean, Cleaned};
pub use complete::{bounded_trace, CompleteBatch, Completion, Ended, Ending, Leased, TRACE_MAX};
pub use counts::{counts, StreamCounts};
pub use cron::{cron, cron_next, CronStored};
pub use dead::{dead, DeadAction};
pub use drain::{drain, Drained};
pub use duties::{duties, Duties};
pub use expire::{expire, Expired};
pub use fetch::{
    fetch, fetch_limited, fetch_with, read_fetched, Delivery, Dropped, FetchReply, Fetched,
    Records, RegistryCursor, RegistryView,
};
pub use fix::{fix, Repair};
pub use keys::{fair_keys, KeysPage};
pub use list::{list, Listed, LIST_STATES};
pub use pause::{pause, pause_key};
pub use policy::set_policy;
pub use promote::{fail_unqueueable, promote};
pub use recover::{recover, Recovered, Recovery};
pub use remove::{remove, Removed};
pub use renew::{renew, Renewal, Report};
pub use requeue::requeue;
pub use stop::{stop, stop_job, StopWhy};
pub use submit::{submit, SubmitReply};

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};

/// The protocol version: bumped whenever any Lua file changes meaning. It names the library and
/// every function in it, so a server may hold several versions at once.
macro_rules! version {
    () => {
        "35"
    };
}

/// The registered name of a function of this version: `hero_v<version>_<short>`.
macro_rules! versioned {
    ($short:literal) => {
        concat!("hero_v", version!(), "_", $short)
    };
}

pub const LIBRARY_VERSION: &str = version!();

/// The library's name for FUNCTION LOAD / DELETE / LIST.
pub const LIBRARY_NAME: &str = concat!("hero_v", version!());

/// The shared helpers every function may use, one file a topic (`lib/*.lua`; `lib/keys.lua`
/// opens with the table of contents), concatenated in an order where each helper comes after
/// the helpers it calls.
const PRELUDE: &str = concat!(
    include_str!("lib/keys.lua"),
    "\n",
    include_str!("lib/streams.lua"),
    "\n",
    include_str!("lib/settings.lua"),
    "\n",
    include_str!("lib/events.lua"),
    "\n",
    include_str!("lib/stats.lua"),
    "\n",
    include_str!("lib/registry.lua"),
    "\n",
    include_str!("lib/checks.lua"),
    "\n",
    include_str!("lib/finish.lua"),
    "\n",
    include_str!("lib/legacy.lua"),
    "\n",
    include_str!("lib/policy.lua"),
    "\n",
    include_str!("lib/gate.lua"),
    "\n",
    include_str!("lib/batches.lua"),
    "\n",
    include_str!("lib/dependencies.lua"),
    "\n",
    include_str!("lib/records.lua"),
    "\n",
    include_str!("lib/submits.lua"),
    "\n",
    include_str!("lib/fleet.lua"),
    "\n",
    include_str!("lib/zones.lua"),
    "\n",
    include_str!("lib/tz.lua"),
    "\n",
    include_str!("lib/cron_engine.lua")
);

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
    Dead,
    Requeue,
    Fix,
    Pause,
    Cron,
    Batch,
    BatchEnds,
    Counts,
    Remove,
    Policy,
    Beat,
    Duties,
    CronNext,
    Clean,
    Drain,
    List,
    Keys,
}

impl Function {
    pub const ALL: [Function; 29] = [
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
        Function::Dead,
        Function::Requeue,
        Function::Fix,
        Function::Pause,
        Function::Cron,
        Function::Batch,
        Function::BatchEnds,
        Function::Counts,
        Function::Remove,
        Function::Policy,
        Function::Beat,
        Function::Duties,
        Function::CronNext,
        Function::Clean,
        Function::Drain,
        Function::List,
        Function::Keys,
    ];

    /// Writes nothing: registered `no-writes` and called with FCALL_RO, so a read-only ACL user
    /// (deploy/redis/users.acl's operator) may call it.
    pub fn read_only(self) -> bool {
        matches!(
            self,
            Function::Version
                | Function::Counts
                | Function::CronNext
                | Function::List
                | Function::Keys
        )
    }

    /// Runs when Redis is at its maxmemory (`allow-oom`): the calls that move a job already
    /// accepted towards its end, or free memory (retention), so a full Redis drains instead of
    /// locking up: its workers finish what was acknowledged and retention makes room. What adds
    /// jobs (submit, the bridge's intake, cron, requeue) is refused with OOM, as is any plain
    /// command that adds data. The heartbeat runs too, so a live process never looks dead
    /// because Redis is full, and removing an ended job frees memory.
    pub fn allow_oom(self) -> bool {
        matches!(
            self,
            Function::Fetch
                | Function::Complete
                | Function::Renew
                | Function::Stop
                | Function::Recover
                | Function::Promote
                | Function::Expire
                | Function::Dead
                | Function::Remove
                | Function::Beat
                | Function::Duties
                | Function::Clean
                | Function::Drain
        )
    }

    /// The name without library and version, as the Lua source defines it (`hero_<short>`).
    pub fn short(self) -> &'static str {
        match self {
            Function::Version => "version",
            Function::Submit => "submit",
            Function::Fetch => "fetch",
            Function::Complete => "complete",
            Function::Renew => "renew",
            Function::Stop => "stop",
            Function::Recover => "recover",
            Function::Promote => "promote",
            Function::BridgeIn => "bridge_in",
            Function::BridgeOut => "bridge_out",
            Function::BridgeWatch => "bridge_watch",
            Function::Expire => "expire",
            Function::Dead => "dead",
            Function::Requeue => "requeue",
            Function::Fix => "fix",
            Function::Pause => "pause",
            Function::Cron => "cron",
            Function::Batch => "batch",
            Function::BatchEnds => "batch_ends",
            Function::Counts => "counts",
            Function::Remove => "remove",
            Function::Policy => "policy",
            Function::Beat => "beat",
            Function::Duties => "duties",
            Function::CronNext => "cron_next",
            Function::Clean => "clean",
            Function::Drain => "drain",
            Function::List => "list",
            Function::Keys => "keys",
        }
    }

    /// The registered name of this version, as used with FCALL.
    pub fn name(self) -> &'static str {
        match self {
            Function::Version => versioned!("version"),
            Function::Submit => versioned!("submit"),
            Function::Fetch => versioned!("fetch"),
            Function::Complete => versioned!("complete"),
            Function::Renew => versioned!("renew"),
            Function::Stop => versioned!("stop"),
            Function::Recover => versioned!("recover"),
            Function::Promote => versioned!("promote"),
            Function::BridgeIn => versioned!("bridge_in"),
            Function::BridgeOut => versioned!("bridge_out"),
            Function::BridgeWatch => versioned!("bridge_watch"),
            Function::Expire => versioned!("expire"),
            Function::Dead => versioned!("dead"),
            Function::Requeue => versioned!("requeue"),
            Function::Fix => versioned!("fix"),
            Function::Pause => versioned!("pause"),
            Function::Cron => versioned!("cron"),
            Function::Batch => versioned!("batch"),
            Function::BatchEnds => versioned!("batch_ends"),
            Function::Counts => versioned!("counts"),
            Function::Remove => versioned!("remove"),
            Function::Policy => versioned!("policy"),
            Function::Beat => versioned!("beat"),
            Function::Duties => versioned!("duties"),
            Function::CronNext => versioned!("cron_next"),
            Function::Clean => versioned!("clean"),
            Function::Drain => versioned!("drain"),
            Function::List => versioned!("list"),
            Function::Keys => versioned!("keys"),
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Function::Version => include_str!("version.lua"),
            Function::Submit => include_str!("submit.lua"),
            Function::Fetch => include_str!("fetch.lua"),
            Function::Complete => include_str!("complete.lua"),
            Function::Renew => include_str!("renew.lua"),
            Function::Stop => include_str!("stop.lua"),
            Function::Recover => include_str!("recover.lua"),
            Function::Promote => include_str!("promote.lua"),
            Function::BridgeIn => include_str!("bridge_in.lua"),
            Function::BridgeOut => include_str!("bridge_out.lua"),
            Function::BridgeWatch => include_str!("bridge_watch.lua"),
            Function::Expire => include_str!("expire.lua"),
            Function::Dead => include_str!("dead.lua"),
            Function::Requeue => include_str!("requeue.lua"),
            Function::Fix => include_str!("fix.lua"),
            Function::Pause => include_str!("pause.lua"),
            Function::Cron => include_str!("cron.lua"),
            Function::Batch => include_str!("batch.lua"),
            Function::BatchEnds => include_str!("batch_ends.lua"),
            Function::Counts => include_str!("counts.lua"),
            Function::Remove => include_str!("remove.lua"),
            Function::Policy => include_str!("policy.lua"),
            Function::Beat => include_str!("beat.lua"),
            Function::Duties => include_str!("duties.lua"),
            Function::CronNext => include_str!("cron_next.lua"),
            Function::Clean => include_str!("clean.lua"),
            Function::Drain => include_str!("drain.lua"),
            Function::List => include_str!("list.lua"),
            Function::Keys => include_str!("keys.lua"),
        }
    }

    /// An FCALL with these keys and nothing else, for conformance tests that must send what no
    /// builder would (a malformed batch, a key of another slot). Callers use the builders.
    pub fn unchecked<K: AsRef<str>>(self, keys: &[K]) -> redis::Cmd {
        let mut call = Call::new(self, keys.len());
        for k in keys {
            call.key("", k.as_ref());
        }
        call.into_cmd()
    }
}

/// The control list and `worker_id` of the worker a caller saw running a job, as `hero_stop`
/// and `hero_requeue` take them. With none seen, a key surely of the namespace's slot (the
/// config hash) stands in for the list, and the worker is ''.
fn seen_control<'a>(
    keys: &crate::keys::Keyspace,
    seen: Option<(&str, &'a str)>,
) -> (String, &'a str) {
    match seen {
        Some((ctl, worker)) => (ctl.to_string(), worker),
        None => (keys.config(), ""),
    }
}

/// `hero_version`: the version of the library on the server (a missing function means none).
pub fn version() -> Call {
    Call::new(Function::Version, 0)
}

/// An FCALL as a builder made it: send it as the [`redis::Cmd`] it dereferences to, or take
/// that with [`Call::into_cmd`] (a pipeline wants it owned). Inside, the keys come first (their
/// count is fixed up front, as FCALL wants it before them), then the arguments, each given with
/// the words its Lua header uses for it, which the unit tests compare with the header; outside
/// tests the words cost nothing.
pub struct Call {
    cmd: redis::Cmd,
    #[cfg(test)]
    slots: Vec<(&'static str, &'static str)>,
}

impl Call {
    pub(crate) fn new(f: Function, keys: usize) -> Call {
        // the read-only functions go by FCALL_RO, which a read-only ACL user may send
        let mut cmd = redis::cmd(if f.read_only() { "FCALL_RO" } else { "FCALL" });
        cmd.arg(f.name()).arg(keys);
        Call {
            cmd,
            #[cfg(test)]
            slots: Vec::new(),
        }
    }

    #[cfg_attr(not(test), allow(unused_variables))]
    pub(crate) fn key(&mut self, label: &'static str, key: impl redis::ToRedisArgs) -> &mut Self {
        #[cfg(test)]
        self.slots.push(("KEYS", label));
        self.cmd.arg(key);
        self
    }

    #[cfg_attr(not(test), allow(unused_variables))]
    pub(crate) fn arg(&mut self, label: &'static str, arg: impl redis::ToRedisArgs) -> &mut Self {
        #[cfg(test)]
        self.slots.push(("ARGV", label));
        self.cmd.arg(arg);
        self
    }

    /// Arguments the header describes in prose rather than by position (a job's field list).
    pub(crate) fn rest(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        #[cfg(test)]
        self.slots.push(("ARGV", ""));
        self.cmd.arg(arg);
        self
    }

    pub fn into_cmd(self) -> redis::Cmd {
        self.cmd
    }
}

impl std::ops::Deref for Call {
    type Target = redis::Cmd;

    fn deref(&self) -> &redis::Cmd {
        &self.cmd
    }
}

/// The library source of this version, as loaded with FUNCTION LOAD (also shipped as
/// `docs/hero-library.lua` for clients in other languages).
pub fn library_source() -> String {
    library_source_of(LIBRARY_VERSION)
}

/// The library with another version's names: the same code under `hero_v<version>`. Tests use
/// it to stand for another version running beside this one.
#[doc(hidden)]
pub fn library_source_of(version: &str) -> String {
    let mut src = format!("#!lua name=hero_v{version}\n");
    src.push_str(&format!("local VERSION = '{version}'\n"));
    src.push_str(PRELUDE);
    for f in Function::ALL {
        src.push('\n');
        src.push_str(f.source());
    }
    src.push('\n');
    for f in Function::ALL {
        if f.read_only() {
            src.push_str(&format!(
                "redis.register_function{{function_name='hero_v{version}_{0}', callback=hero_{0}, flags={{'no-writes'}}}}\n",
                f.short()
            ));
        } else if f.allow_oom() {
            src.push_str(&format!(
                "redis.register_function{{function_name='hero_v{version}_{0}', callback=hero_{0}, flags={{'allow-oom'}}}}\n",
                f.short()
            ));
        } else {
            src.push_str(&format!(
                "redis.register_function('hero_v{version}_{0}', hero_{0})\n",
                f.short()
            ));
        }
    }
    src
}

/// True when the error says the library (or one of its functions) is not on the server, as after
/// a restart of a Redis without persistence or a FUNCTION FLUSH.
pub fn is_missing(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    text.contains("Function not found") || text.contains("No such library")
}

/// Loads this version's library unless the server has it. Other versions' libraries are left
/// alone: their processes still call them.
pub async fn ensure_loaded<C: ConnectionLike + Send>(conn: &mut C) -> Result<()> {
    let current: redis::RedisResult<String> = version().query_async(conn).await;
    match current {
        Ok(v) if v == LIBRARY_VERSION => Ok(()),
        Ok(v) => Err(Error::protocol(format!(
            "{} answered version {v:?}: the library on the server is not the one its name says",
            Function::Version.name()
        ))),
        Err(e) if is_missing(&e) => load(conn).await,
        Err(e) => Err(e.into()),
    }
}

async fn load<C: ConnectionLike + Send>(conn: &mut C) -> Result<()> {
    // REPLACE: two processes of this version may load it at once; the second replaces the same
    // code with itself.
    let r: redis::RedisResult<String> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_source())
        .query_async(conn)
        .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::protocol(format!(
            "FUNCTION LOAD of the {LIBRARY_NAME} library failed: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests;
