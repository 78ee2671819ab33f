//! Precedence across namespaces. A worker that serves several namespaces (several shards of a
//! cluster, one fetch loop each) shares one pool of slots between them, and a namespace takes a
//! slot only while every namespace before it is idle: waiting for an entry, or unreachable. So
//! the order instance → group → type holds inside a namespace, and the namespaces are tried in
//! the order they were given, as one client-side loop would. One namespace never waits.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub(crate) struct Turns {
    idle: Vec<AtomicBool>,
    changed: Notify,
}

impl Turns {
    pub(crate) fn new(namespaces: usize) -> Turns {
        Turns {
            idle: (0..namespaces).map(|_| AtomicBool::new(false)).collect(),
            changed: Notify::new(),
        }
    }

    /// Namespace `rank` is idle (its queues are dry, or its server is away) or busy again.
    pub(crate) fn set_idle(&self, rank: usize, idle: bool) {
        if let Some(flag) = self.idle.get(rank) {
            if flag.swap(idle, Ordering::AcqRel) != idle && idle {
                self.changed.notify_waiters();
            }
        }
    }

    /// Waits until every namespace before `rank` is idle; false when `stop` came first.
    pub(crate) async fn wait_turn(&self, rank: usize, stop: &CancellationToken) -> bool {
        if rank == 0 {
            // the first namespace, or the only one: nothing comes before it
            return true;
        }
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.idle[..rank.min(self.idle.len())]
                .iter()
                .all(|f| f.load(Ordering::Acquire))
            {
                return true;
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = notified => {}
            }
        }
    }
}
