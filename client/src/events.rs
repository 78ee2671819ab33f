//! Job events for producers: [`Client::events`] subscribes to the event log (`<ns>:meta:events`,
//! written by the server functions in the call that changes a job) with one blocking read per
//! subscriber and shard, and answers a [`Stream`](futures_core::Stream) of [`Watched`] items: each
//! event that passes the filter, with a finished job's output, and a [`Watched::Gap`] where the
//! subscriber fell behind the log's cap (`events_max`) and events were trimmed before it read
//! them. Here rather than in hero-admin's `Inspector`: subscribing is a producer's capability
//! (BullMQ's `QueueEvents`), with the Redis credential alone, and `wait` is built on the same log.
//!
//! How a gap is counted. Trimming (`XADD … MAXLEN ~`) only removes the oldest entries, so a
//! reader at cursor C has lost events exactly when the log's first entry F is past C with
//! entries between them. Redis counts every entry ever added (`XINFO STREAM` `entries-added`,
//! since 7.0), so the first kept entry is number `added - length + 1`; the reader counts the
//! entries it has read, and the difference is the count missed. The check costs an `XINFO` in a
//! `MULTI` with the read, so it is made only where a gap is possible: a read that comes back
//! full (COUNT entries). A read that comes back short was at the log's end, and could not have
//! been trimmed past (the log keeps at least `events_max` ≥ COUNT entries), so steady reading
//! costs one `XREAD BLOCK` per batch and nothing more.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::Value;
use tokio::sync::mpsc;

use crate::client::Client;
use hero_protocol::conn::{Blocking, Redis};
use hero_protocol::error::{Error, Result};
use hero_protocol::event_log::{events_max, read_log, stream_id, xread_entries, LogInfo};
pub use hero_protocol::event_log::{Event, EventFilter};
use hero_protocol::keys::Keyspace;
use hero_protocol::reply;

/// Entries read a call at most (fewer when the log's cap is smaller, so that a full read is the
/// only one that can span a gap).
const COUNT: u64 = 1000;

/// How long one blocking read waits before it looks whether the subscriber is still there.
const BLOCK: Duration = Duration::from_secs(1);

/// Items a subscriber may leave unread before its readers stop reading (and so may fall behind
/// the log's cap: then it is told by a gap).
const BUFFER: usize = 256;

/// Where a subscription starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Since {
    /// With what is logged from now on (BullMQ's default `$`).
    #[default]
    Now,
    /// From the oldest event the log still keeps (BullMQ's `lastEventId: "0"`).
    Oldest,
    /// After the event with this id (`<ms>-<seq>`), as a subscriber that kept the last id it saw
    /// resumes. In a sharded namespace, after that time on every shard.
    After(String),
}

impl Since {
    /// `"$"` or `""` now, `"0"` the oldest kept, else an event id.
    pub fn parse(s: &str) -> Result<Since> {
        match s {
            "" | "$" => Ok(Since::Now),
            "0" | "0-0" => Ok(Since::Oldest),
            id if stream_id(id).is_some() => Ok(Since::After(id.to_string())),
            other => Err(Error::InvalidInput(format!(
                "event id {other:?}: give an id as events carry it (<ms>-<seq>, e.g. 1764160000000-0), \"0\" for the oldest kept, or \"$\" for now"
            ))),
        }
    }
}

/// What a subscriber sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    /// One change of a job's state; `output` is a finished job's output (read when the event
    /// is read: `None` when the job was deleted by then).
    Event {
        event: Event,
        output: Option<String>,
    },
    /// Events were trimmed from the log before this subscriber read them: `missed` of them
    /// (`None` when the subscription resumed after an id older than the log's oldest entry,
    /// where the count before it is not known). `shard` is the shard whose log it was.
    Gap { missed: Option<u64>, shard: u16 },
}

impl Watched {
    fn at_ms(&self) -> u64 {
        match self {
            Watched::Event { event, .. } => event.at_ms(),
            Watched::Gap { .. } => 0,
        }
    }
}

/// A live subscription: a [`Stream`](futures_core::Stream) of [`Watched`] items, or
/// [`EventStream::next`]. Its readers (one a shard) stop when it is dropped.
pub struct EventStream {
    rx: mpsc::Receiver<Result<Watched>>,
    ready: VecDeque<Result<Watched>>,
}

impl EventStream {
    /// The next item; `None` only once every reader has ended (the client's runtime went).
    pub async fn next(&mut self) -> Option<Result<Watched>> {
        std::future::poll_fn(|cx| self.poll_item(cx)).await
    }

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Watched>>> {
        if let Some(item) = self.ready.pop_front() {
            return Poll::Ready(Some(item));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(first)) => {
                // what the shards' readers have delivered meanwhile, merged by time (stable: a
                // shard's own order holds within a millisecond)
                self.ready.push_back(first);
                while let Ok(more) = self.rx.try_recv() {
                    self.ready.push_back(more);
                }
                self.ready
                    .make_contiguous()
                    .sort_by_key(|i| i.as_ref().map_or(0, Watched::at_ms));
                Poll::Ready(self.ready.pop_front())
            }
            other => other,
        }
    }
}

impl futures_core::Stream for EventStream {
    type Item = Result<Watched>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_item(cx)
    }
}

impl Client {
    /// Subscribes to job events: those `filter` lets through (a job, a queue, a script type, an
    /// event kind), from `since`. One blocking read per shard serves the whole subscription
    /// (never a read per job); a finished job's output is read with its event (one pipelined
    /// read per batch). Refused with [`Error::EventLogOff`] when the log is off.
    pub async fn events(&self, filter: EventFilter, since: Since) -> Result<EventStream> {
        let (tx, rx) = mpsc::channel(BUFFER);
        for (shard, member) in self.shard_clients() {
            let reader = Reader::open(&member, shard, filter.clone(), &since).await?;
            tokio::spawn(reader.run(tx.clone()));
        }
        Ok(EventStream {
            rx,
            ready: VecDeque::new(),
        })
    }
}

/// One shard's reader of a subscription.
struct Reader {
    shard: u16,
    redis: Redis,
    keys: Keyspace,
    key: String,
    conn: Blocking,
    filter: EventFilter,
    cursor: String,
    /// How many entries the log had ever been given up to and including the cursor; `None`
    /// until known (a resume after an id).
    ordinal: Option<u64>,
    count: u64,
    /// The next read is checked for a gap (the last came back full, or it resumes).
    check: bool,
}

impl Reader {
    async fn open(
        member: &Client,
        shard: u16,
        filter: EventFilter,
        since: &Since,
    ) -> Result<Reader> {
        let (redis, keys) = (member.redis().clone(), member.keys().clone());
        let max = events_max(&redis, &keys).await?;
        if max == 0 {
            return Err(Error::EventLogOff {
                namespace: keys.prefix().to_string(),
            });
        }
        let key = keys.events();
        let mut conn = redis.dedicated(BLOCK).await?;
        let info = LogInfo::read(&mut conn, &key).await?;
        let (cursor, ordinal, check) = match since {
            Since::Now => (info.last.clone(), Some(info.added), false),
            Since::Oldest => ("0-0".to_string(), Some(info.added - info.length), true),
            Since::After(id) => (id.clone(), None, true),
        };
        Ok(Reader {
            shard,
            redis,
            keys,
            key,
            conn,
            filter,
            cursor,
            ordinal,
            count: COUNT.min(max).max(1),
            check,
        })
    }

    async fn run(mut self, tx: mpsc::Sender<Result<Watched>>) {
        let mut failing = false;
        while !tx.is_closed() {
            match self.read().await {
                Ok(items) => {
                    failing = false;
                    for item in items {
                        if tx.send(Ok(item)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    // said once, then retried quietly until a read succeeds
                    if !failing && tx.send(Err(e)).await.is_err() {
                        return;
                    }
                    failing = true;
                    tokio::time::sleep(BLOCK).await;
                    if let Ok(c) = self.redis.dedicated(BLOCK).await {
                        self.conn = c;
                    }
                }
            }
        }
    }

    /// One read: the items it gives the subscriber (none when the block timed out).
    async fn read(&mut self) -> Result<Vec<Watched>> {
        if self.check {
            return self.checked().await;
        }
        let v = read_log(&mut self.conn, &self.key, &self.cursor, self.count, BLOCK).await?;
        let entries = xread_entries(&v)?;
        if entries.len() as u64 >= self.count {
            // a full read may span a gap: read the same again with the log's count beside it
            self.check = true;
            return self.checked().await;
        }
        let n = entries.len() as u64;
        let out = self.deliver(&entries, None).await?;
        self.ordinal = self.ordinal.map(|o| o + n);
        Ok(out)
    }

    /// A read in one MULTI with `XINFO STREAM`, which tells whether entries after the cursor
    /// were trimmed, and how many.
    async fn checked(&mut self) -> Result<Vec<Watched>> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("XINFO")
            .arg("STREAM")
            .arg(&self.key)
            .cmd("XREAD")
            .arg("COUNT")
            .arg(self.count)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(&self.cursor);
        let exists: bool = redis::cmd("EXISTS")
            .arg(&self.key)
            .query_async(&mut self.conn)
            .await?;
        if !exists {
            self.check = false;
            return Ok(Vec::new());
        }
        let (info, v): (Value, Value) = pipe.query_async(&mut self.conn).await?;
        let info = LogInfo::decode(&info)?;
        let entries = xread_entries(&v)?;
        let n = entries.len() as u64;
        let mut gap = None;
        if let (Some((first_id, _)), Some(kept)) = (entries.first(), info.first.as_deref()) {
            if first_id == kept && stream_id(&self.cursor) < stream_id(kept) {
                // the cursor is before the first kept entry, which is number added - length + 1
                let first_no = info.added - info.length + 1;
                match self.ordinal {
                    Some(o) if first_no > o + 1 => gap = Some(Some(first_no - o - 1)),
                    Some(_) => {}
                    None if info.added > info.length => gap = Some(None),
                    None => {}
                }
                self.ordinal = Some(first_no - 1);
            }
        }
        self.ordinal = self.ordinal.map(|o| o + n);
        if n < self.count {
            // at the log's end in this MULTI: the count is exact from here on
            self.ordinal = Some(info.added);
            self.check = false;
        }
        self.deliver(
            &entries,
            gap.map(|missed| Watched::Gap {
                missed,
                shard: self.shard,
            }),
        )
        .await
    }

    /// The entries' events that pass the filter (a finished job's output read beside it), after
    /// `first` (a gap); the cursor moves past the entries.
    async fn deliver(
        &mut self,
        entries: &[(String, &Value)],
        first: Option<Watched>,
    ) -> Result<Vec<Watched>> {
        let mut out: Vec<Watched> = first.into_iter().collect();
        let mut events = Vec::new();
        for (id, entry) in entries {
            self.cursor.clone_from(id);
            events.extend(
                Event::decode(entry)
                    .into_iter()
                    .filter(|e| self.filter.matches(&self.keys, e)),
            );
        }
        let mut pipe = redis::pipe();
        let prefix = self.keys.job_prefix();
        for e in events.iter().filter(|e| e.event == "finished") {
            pipe.cmd("HGET")
                .arg(format!("{prefix}{}", e.job_id))
                .arg("output");
        }
        let mut outputs = self.redis.pipeline(&pipe).await?.into_iter();
        for event in events {
            let output = if event.event == "finished" {
                match outputs.next() {
                    Some(Ok(Value::Nil)) | None => None,
                    Some(Ok(v)) => Some(reply::text(&v)?),
                    Some(Err(e)) => return Err(e),
                }
            } else {
                None
            };
            out.push(Watched::Event { event, output });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_now_oldest_and_ids_and_refuses_the_rest() {
        assert_eq!(Since::parse("$").unwrap(), Since::Now);
        assert_eq!(Since::parse("0").unwrap(), Since::Oldest);
        assert_eq!(
            Since::parse("1764160000000-3").unwrap(),
            Since::After("1764160000000-3".into())
        );
        assert!(Since::parse("yesterday").is_err());
        assert!(stream_id("5-1") < stream_id("5-2"));
        assert!(stream_id("10-0") > stream_id("9-99"));
    }
}
