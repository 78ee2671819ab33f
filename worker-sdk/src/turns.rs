//! Precedence across namespaces. A worker that serves several namespaces (`WorkerBuilder::also`)
//! shares one pool of slots between them, and a namespace takes a slot only while every
//! namespace before it is idle: waiting for an entry, or unreachable. So the order instance →
//! group → type holds inside a namespace, and the namespaces are tried in the order they were
//! given, as one client-side loop would.
//!
//! The shards of one sharded namespace share its rank: each has a fetch loop (a seat) of that
//! rank, and they take slots as they find work, none waiting for another, so no shard starves.
//! The price is bounded priority inversion across shards: a priority-0 job that lands on one
//! shard while every slot runs priority-5 jobs of another waits for the first slot to free,
//! as it would behind any running job (docs/sharding.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub(crate) struct Turns {
    seats: Mutex<Vec<(usize, Arc<AtomicBool>)>>,
    changed: Notify,
}

/// One fetch loop's place: its namespace's rank and whether it is idle.
pub(crate) struct Seat {
    pub(crate) rank: usize,
    idle: Arc<AtomicBool>,
}

impl Turns {
    /// A seat for a fetch loop of the namespace of rank `rank` (0: the first).
    pub(crate) fn seat(&self, rank: usize) -> Seat {
        let idle = Arc::new(AtomicBool::new(false));
        if let Ok(mut seats) = self.seats.lock() {
            seats.push((rank, idle.clone()));
        }
        Seat { rank, idle }
    }

    /// The loop at `seat` is idle (its queues are dry, or its server is away) or busy again.
    pub(crate) fn set_idle(&self, seat: &Seat, idle: bool) {
        if seat.idle.swap(idle, Ordering::AcqRel) != idle && idle {
            self.changed.notify_waiters();
        }
    }

    /// Waits until every loop of an earlier namespace is idle; false when `stop` came first.
    pub(crate) async fn wait_turn(&self, seat: &Seat, stop: &CancellationToken) -> bool {
        if seat.rank == 0 {
            // the first namespace, or the only one: nothing comes before it
            return true;
        }
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let clear = self.seats.lock().map_or(true, |seats| {
                seats
                    .iter()
                    .filter(|(r, _)| *r < seat.rank)
                    .all(|(_, f)| f.load(Ordering::Acquire))
            });
            if clear {
                return true;
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = notified => {}
            }
        }
    }
}
