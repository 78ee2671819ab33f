//! The operator's controls of a queue as a whole: pause and resume (`hero_pause`), and the
//! per-queue policy (`policy`). A queue is named as operators type it,
//! `<type>[/<group>[/<instance>]]`, and a control covers every stream under the name at every
//! priority.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::function;
use crate::name::Target;

impl Client {
    /// Pauses a queue: within one fetch no worker takes a new job from it (running ones
    /// finish); submits still queue. Lasts until [`Client::resume`], across restarts of every
    /// process. Answers how many work streams it covered now.
    pub async fn pause(&self, queue: &str) -> Result<u64> {
        self.pause_call(queue, true).await
    }

    /// Resumes a paused queue and wakes the workers waiting on it at once. A stream a broader
    /// or narrower name still pauses stays paused.
    pub async fn resume(&self, queue: &str) -> Result<u64> {
        self.pause_call(queue, false).await
    }

    async fn pause_call(&self, queue: &str, pause: bool) -> Result<u64> {
        let name = queue_name(queue)?;
        self.redis()
            .query(&function::pause(self.keys(), &name, pause))
            .await
    }
}

/// The canonical name of a queue as pause and policy keep it: `<type>[/<group>[/<instance>]]`,
/// checked (a priority is not part of it: a control covers every level).
pub fn queue_name(queue: &str) -> Result<String> {
    let (target, prio) = Target::parse_queue(queue)?;
    if prio != crate::name::Priority::DEFAULT || queue.contains(" prio ") {
        return Err(Error::InvalidInput(format!(
            "queue {queue:?}: name it without a priority; pause and policy cover every level"
        )));
    }
    Ok(target.name())
}
