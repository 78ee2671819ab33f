//! The `hero_fetch` call (`fetch.lua`): a worker claims jobs in precedence order.

use super::{Call, Function};
use crate::clock;
use crate::keys::{Keyspace, CONSUMER_GROUP};

/// Up to `count` jobs for `consumer` from `streams`, taken in the order given (see
/// [`Keyspace::precedence`]); decode the reply with [`crate::reply::FetchReply::decode`].
/// `xackdel` is [`crate::Capabilities::xackdel_flag`].
pub fn fetch(
    keys: &Keyspace,
    streams: &[String],
    consumer: &str,
    count: usize,
    xackdel: &str,
) -> Call {
    fetch_limited(keys, streams, consumer, count, xackdel, "", false)
}

/// What a fetch is told of the registry of streams (ARGV[9] of `fetch.lua`).
#[derive(Clone, Copy, Debug)]
pub enum RegistryCursor<'a> {
    /// `streams` are every stream the caller serves; nothing is answered of the registry.
    None,
    /// `streams` are every stream the caller serves; the answer says which are registered
    /// ([`crate::reply::RegistryView`]).
    Ask,
    /// `streams` are the registered ones of the caller's, as of this signal id (from an
    /// earlier answer): read without asking the registry while it has not moved.
    Since(&'a str),
}

/// [`fetch`] under concurrency limits: `limits` as the Lua header describes ARGV[7]
/// (`<stream index> <max> <limit key>` triples, 1-based indexes; '' for none). With
/// `records`, a fetch that comes up short also hands back the records of the jobs it leased
/// ([`crate::reply::Delivery::record`]), which saves the caller a round trip before it starts
/// them.
pub fn fetch_limited(
    keys: &Keyspace,
    streams: &[String],
    consumer: &str,
    count: usize,
    xackdel: &str,
    limits: &str,
    records: bool,
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
    records: bool,
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
        .arg("records", if records { "1" } else { "" });
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
