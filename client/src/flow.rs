//! Flows: a job that waits on other jobs (its children), each of which may wait on its own,
//! submitted as one batch in one server call. The children come first in the batch and the
//! parent names them as prerequisites, so the graph is whole before any of it can run, and it
//! cannot hold a cycle (a job only ever waits on jobs submitted before it).

use std::collections::BTreeMap;

use crate::answer::Submitted;
use crate::client::Client;
use hero_protocol::error::{Error, Result};
use hero_protocol::job::ChildResult;
use hero_protocol::name::JobId;
use hero_protocol::new_job::NewJob;

impl Client {
    /// A parent's prerequisites (its children in a flow, or the jobs it was submitted `after`)
    /// and what each gave: id -> status and output or error (BullMQ's `getChildrenValues`).
    /// An ended child's result is read from the parent's own record, where its end wrote it, so
    /// it outlives the child's retention; a child not yet ended answers its status (read from
    /// its own record, as is one that ended before protocol 30).
    pub async fn children(&self, parent: &JobId) -> Result<BTreeMap<String, ChildResult>> {
        let job = self.get(parent).await?;
        let mut out = job.results;
        for id in job.prerequisites {
            if out.contains_key(&id) {
                continue;
            }
            let child = JobId::new(&id)?;
            match self.get(&child).await {
                Ok(c) => {
                    out.insert(
                        id,
                        ChildResult {
                            status: c.status,
                            output: c.output,
                            value: c.value,
                            error: c.error,
                        },
                    );
                }
                // gone before its end reached the parent (deleted by hand): nothing to tell
                Err(Error::JobNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// A job and the jobs it waits on.
#[derive(Clone, Debug)]
pub struct Flow {
    job: NewJob,
    children: Vec<Flow>,
}

impl Flow {
    pub fn new(job: NewJob) -> Flow {
        Flow {
            job,
            children: Vec::new(),
        }
    }

    /// A child: the job runs after it (and after every other child) finished.
    pub fn child(mut self, child: impl Into<Flow>) -> Flow {
        self.children.push(child.into());
        self
    }

    /// The batch: every job after the jobs it waits on, each parent naming its children as
    /// prerequisites (besides any it named itself).
    pub fn jobs(&self) -> Vec<NewJob> {
        let mut out = Vec::new();
        self.flatten(&mut out);
        out
    }

    fn flatten(&self, out: &mut Vec<NewJob>) {
        for c in &self.children {
            c.flatten(out);
        }
        let mut job = self.job.clone();
        for c in &self.children {
            job.add_prerequisite(c.job.id().as_str());
        }
        out.push(job);
    }
}

impl From<NewJob> for Flow {
    fn from(job: NewJob) -> Flow {
        Flow::new(job)
    }
}

impl Client {
    /// Submits a whole flow in one call; answers the root job's submit. Any job of it that the
    /// server refused fails the call (nothing of the batch is written then).
    pub async fn submit_flow(&self, flow: &Flow) -> Result<Submitted> {
        let jobs = flow.jobs();
        let mut answers = self.submit_many(&jobs).await?;
        let root = answers
            .pop()
            .ok_or_else(|| hero_protocol::reply::unexpected("hero_submit answered no job"))?;
        for a in answers {
            a?;
        }
        root
    }
}
