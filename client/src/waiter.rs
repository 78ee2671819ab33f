//! The one waiting mechanism a client shares among all its `wait` calls: a task that follows the
//! shard's event log with one blocking read (`XREAD BLOCK` on one connection of its own) and
//! wakes the waits of the jobs whose events it reads, each of which then reads its job's record.
//! So `wait` returns within a read of a job's end for any job, whoever ran it (a worker of an
//! older version, a foreign one that passes no reply key), with no poll per job and no
//! connection per wait.
//!
//! Why nothing is missed: the task takes its cursor (the log's last id) before the first wait
//! registers, and reads the log in order; a wait registers and only then reads the record. An
//! end logged after the cursor is read later and wakes the wait; an end the task read before
//! the wait registered happened before the record was read, which then says so. Where events
//! may have been lost (a read that came back full may span a trim of the log, a broken
//! connection) every wait reads its record again. With the log off (`events_max 0`) the task
//! wakes every wait each [`POLL`] instead: that is the bound on a wait's delay there. The task
//! ends when nobody waits (a producer that waited once does not follow the log for ever) and the
//! next wait starts one again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use hero_protocol::conn::{Blocking, Redis};
use hero_protocol::error::Result;
use hero_protocol::event_log::{events_max, read_log, xread_entries, Event, LogInfo};
use hero_protocol::keys::Keyspace;

/// With the log off, how often every wait reads its record again.
pub const POLL: Duration = Duration::from_millis(250);

/// How long one blocking read waits.
const BLOCK: Duration = Duration::from_secs(1);

/// Entries a read at most.
const COUNT: u64 = 1000;

/// Idle reads between two looks at whether the log was turned off.
const LOOK_EVERY: u32 = 5;

/// The waits of one client (one shard), and whether its task still runs.
#[derive(Default)]
struct Shared {
    waits: Mutex<HashMap<String, Vec<Arc<Notify>>>>,
    alive: AtomicBool,
}

impl Shared {
    fn wake(&self, job: &str) {
        if let Ok(w) = self.waits.lock() {
            for n in w.get(job).into_iter().flatten() {
                n.notify_one();
            }
        }
    }

    fn wake_all(&self) {
        if let Ok(w) = self.waits.lock() {
            for n in w.values().flatten() {
                n.notify_one();
            }
        }
    }
}

/// A client's waiter; cloned by the client's clones.
#[derive(Clone, Default)]
pub(crate) struct Waiter {
    shared: Arc<tokio::sync::Mutex<Option<Arc<Shared>>>>,
}

/// One wait's registration: its wake-up, taken out of the waiter when dropped.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    job: String,
    pub(crate) notify: Arc<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut w) = self.shared.waits.lock() {
            if let Some(list) = w.get_mut(&self.job) {
                list.retain(|n| !Arc::ptr_eq(n, &self.notify));
                if list.is_empty() {
                    w.remove(&self.job);
                }
            }
        }
    }
}

impl Waiter {
    /// Registers a wait for `job`, starting the task first when none runs (the first wait, or
    /// the runtime that ran it has ended). Read the record only after this returns.
    pub(crate) async fn register(
        &self,
        redis: &Redis,
        keys: &Keyspace,
        job: &str,
    ) -> Result<Registration> {
        let notify = Arc::new(Notify::new());
        let mut slot = self.shared.lock().await;
        if let Some(shared) = slot.as_ref() {
            // under the waits' lock: the task ends only when it finds them empty, under it too
            if let Ok(mut w) = shared.waits.lock() {
                if shared.alive.load(Ordering::Acquire) {
                    w.entry(job.to_string()).or_default().push(notify.clone());
                    return Ok(Registration {
                        shared: shared.clone(),
                        job: job.to_string(),
                        notify,
                    });
                }
            }
        }
        // none runs (the first wait, nobody waited for a while, or its runtime ended): a new
        // task, with this wait in it before it starts
        let shared = start(redis, keys, job, notify.clone()).await?;
        *slot = Some(shared.clone());
        Ok(Registration {
            shared,
            job: job.to_string(),
            notify,
        })
    }
}

/// Takes the cursor, then spawns the task with its first wait.
async fn start(
    redis: &Redis,
    keys: &Keyspace,
    job: &str,
    first: Arc<Notify>,
) -> Result<Arc<Shared>> {
    let key = keys.events();
    let mut conn = redis.dedicated(BLOCK).await?;
    let on = events_max(redis, keys).await? > 0;
    let cursor = LogInfo::read(&mut conn, &key).await?.last;
    let shared = Arc::new(Shared {
        alive: AtomicBool::new(true),
        waits: Mutex::new(HashMap::from([(job.to_string(), vec![first])])),
    });
    let task = Task {
        shared: Arc::downgrade(&shared),
        redis: redis.clone(),
        keys: keys.clone(),
        key,
        conn,
        cursor,
        on,
    };
    tokio::spawn(task.run());
    Ok(shared)
}

struct Task {
    shared: Weak<Shared>,
    redis: Redis,
    keys: Keyspace,
    key: String,
    conn: Blocking,
    cursor: String,
    on: bool,
}

/// Marks the waiter dead when its task ends however it ends (a runtime shut down drops it).
struct AliveGuard(Weak<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        if let Some(s) = self.0.upgrade() {
            s.alive.store(false, Ordering::Release);
            s.wake_all();
        }
    }
}

impl Task {
    async fn run(mut self) {
        let _guard = AliveGuard(self.shared.clone());
        let mut idle = 0u32;
        loop {
            {
                let Some(s) = self.shared.upgrade() else {
                    return; // every clone of the client is gone
                };
                // nobody waits: end (under the waits' lock, where a wait registers), so that a
                // client that waited once does not read the log for ever; the next wait starts
                // a task again
                let idle = s.waits.lock().map(|w| w.is_empty()).unwrap_or(false);
                if idle {
                    // still under no lock here: re-checked under it, where a wait registers
                    let w = s.waits.lock();
                    if w.as_ref().is_ok_and(|w| w.is_empty()) {
                        s.alive.store(false, Ordering::Release);
                        return;
                    }
                }
            }
            if !self.on {
                tokio::time::sleep(POLL).await;
                let Some(s) = self.shared.upgrade() else {
                    return;
                };
                s.wake_all();
                idle += 1;
                if idle >= LOOK_EVERY {
                    idle = 0;
                    self.look().await;
                }
                continue;
            }
            match self.read().await {
                Ok(0) => {
                    idle += 1;
                    if idle >= LOOK_EVERY {
                        idle = 0;
                        self.look().await;
                    }
                }
                Ok(_) => idle = 0,
                Err(_) => {
                    tokio::time::sleep(BLOCK).await;
                    if let Ok(c) = self.redis.dedicated(BLOCK).await {
                        self.conn = c;
                    }
                    if let Some(s) = self.shared.upgrade() {
                        s.wake_all();
                    }
                }
            }
        }
    }

    /// Whether the log is on now; when it was turned on, the cursor is taken anew and every
    /// wait reads its record once (an end between the two is in the record).
    async fn look(&mut self) {
        let Ok(max) = events_max(&self.redis, &self.keys).await else {
            return;
        };
        let on = max > 0;
        if on && !self.on {
            if let Ok(info) = LogInfo::read(&mut self.conn, &self.key).await {
                self.cursor = info.last;
            } else {
                return;
            }
            if let Some(s) = self.shared.upgrade() {
                s.wake_all();
            }
        }
        self.on = on;
    }

    /// One blocking read: wakes the waits of the jobs it names; answers how many entries.
    async fn read(&mut self) -> Result<usize> {
        let v = read_log(&mut self.conn, &self.key, &self.cursor, COUNT, BLOCK).await?;
        let entries = xread_entries(&v)?;
        let Some(shared) = self.shared.upgrade() else {
            return Ok(0);
        };
        let waiting = shared.waits.lock().map(|w| !w.is_empty()).unwrap_or(true);
        for (id, entry) in &entries {
            self.cursor.clone_from(id);
            if waiting {
                for e in Event::decode(entry) {
                    if may_end(&e.event) {
                        shared.wake(&e.job_id);
                    }
                }
            }
        }
        if entries.len() as u64 >= COUNT {
            // a full read may span a trim of the log: every wait looks at its record
            shared.wake_all();
        }
        Ok(entries.len())
    }
}

/// Whether an event of this kind can be a job's end (the rest never wake a wait).
fn may_end(kind: &str) -> bool {
    !matches!(
        kind,
        "submitted"
            | "dispatched"
            | "started"
            | "progress"
            | "logged"
            | "paused"
            | "resumed"
            | "bridged_in"
            | "bridged_out"
    )
}
