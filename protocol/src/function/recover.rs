//! The `hero_recover` call (`recover.lua`): put abandoned deliveries of one stream back.

use super::{Call, Function};
use crate::clock;
use crate::error::{Error, Result};
use crate::keys::{Keyspace, CONSUMER_GROUP};
use crate::reply::{array, int, text};
use redis::Value;

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

/// One call over `stream` from `cursor` ('0-0' to start), at most `count` entries; decode the
/// reply with [`crate::function::Recovered::decode`]. `xackdel` is
/// [`crate::Capabilities::xackdel_flag`]. The `recovery` module runs the cursor to its end.
pub fn recover(
    keys: &Keyspace,
    stream: &str,
    which: Recovery<'_>,
    count: usize,
    max_attempts: u32,
    cursor: &str,
    xackdel: &str,
) -> Call {
    let mut c = Call::new(Function::Recover, 6);
    c.key("work stream", stream)
        .key("dead-letter stream", keys.dead_letter())
        .key("config hash", keys.config())
        .key("retention stream", keys.retention())
        .key("event log", keys.events())
        .key("stats hash", keys.stats());
    c.arg("consumer group", CONSUMER_GROUP);
    let reclaimer = keys.reclaimer();
    let (mode, consumer, idle, handback) = match which {
        Recovery::Consumer(who) => ("consumer", who, 0, "0"),
        Recovery::HandBack(who) => ("consumer", who, 0, "1"),
        Recovery::Idle(ms) => ("idle", reclaimer.as_str(), ms, "0"),
    };
    c.arg("mode", mode)
        .arg("consumer", consumer)
        .arg("min idle ms", idle)
        .arg("count", count)
        .arg("job key prefix", keys.job_prefix())
        .arg("reply key prefix", keys.reply_prefix())
        .arg("max attempts", max_attempts)
        .arg("cursor", cursor)
        .arg("'1' to hand back", handback)
        .arg("now ISO 8601", clock::now_iso())
        .arg("'1' when XACKDEL", xackdel);
    c
}

// The reply: decoded here, beside the call that asks for it, and nowhere else.
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
