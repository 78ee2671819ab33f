//! What every task of one worker shares: its names, streams, settings, running jobs, handler
//! and event hook. Built once by [`crate::WorkerBuilder::build`]; depends on no loop.

use std::sync::Arc;
use std::time::Duration;

use hero_protocol::{ConsumerName, Keyspace, Redis, ScriptType};

use crate::event::WorkerEvent;
use crate::inflight::InFlight;
use crate::outcome::Handler;

pub(crate) type EventHook = Arc<dyn Fn(&WorkerEvent) + Send + Sync>;

pub(crate) struct Shared {
    pub redis: Redis,
    pub keys: Keyspace,
    pub consumer: ConsumerName,
    /// `consumer` as the consumer groups know it, formatted once.
    pub consumer_name: String,
    pub types: Vec<ScriptType>,
    /// Work streams in precedence order; deliveries refer to them by index.
    pub streams: Vec<String>,
    /// The registered ones of `streams`, as the last fetch that asked saw them (see
    /// `fetch::Registered`); `None` until a fetch asks, and again once the registry moved.
    pub registered: std::sync::Mutex<Option<Registered>>,
    /// The last fetch filled every slot it asked for (a backlog) and the worker is not
    /// stopping: the completer then fetches, in the round trip that records a batch, as many
    /// jobs as the batch frees slots (see `complete::record`).
    pub backlog: std::sync::atomic::AtomicBool,
    /// Fetch with each batch of results under a backlog (`WorkerBuilder::group_commit`).
    pub group_commit: bool,
    pub concurrency: usize,
    pub lease: Duration,
    pub presence_ttl: Duration,
    pub inflight: InFlight,
    pub policy: crate::policy::PolicyCache,
    /// A live process of an older protocol would refuse `progress` and `log`: the handlers'
    /// reports are dropped, not sent (set by the heartbeat: `presence`).
    pub hold_reports: std::sync::atomic::AtomicBool,
    /// A live process of a protocol before 29 would refuse a record's `trace`: failures are
    /// recorded without their traces (set by the heartbeat: `presence`).
    pub hold_traces: std::sync::atomic::AtomicBool,
    /// The brokers' lease (`lease_ms` in the config hash, 0 before it is read): renewals come
    /// within the shortest of it, the worker's own and the queue policies' (read by the
    /// heartbeat: `presence`).
    pub brokers_lease_ms: std::sync::atomic::AtomicU64,
    pub handler: Arc<dyn Handler>,
    pub on_event: Option<EventHook>,
}

impl Shared {
    pub fn emit(&self, event: WorkerEvent) {
        if let Some(hook) = &self.on_event {
            hook(&event);
        }
    }
}

/// The registered streams of a worker's, as a fetch saw them: later fetches name only these,
/// while the registry's signal stream stays at `signal` (the function checks, and answers
/// stale once it moved). A worker names 30 streams per type, most of which never get a job:
/// naming only the registered ones keeps a fetch's cost with the streams that can hold work.
#[derive(Clone, Debug)]
pub(crate) struct Registered {
    pub signal: String,
    /// Indexes into [`Shared::streams`], in precedence order.
    pub streams: Vec<usize>,
}
