//! The kinds of event the server functions write into the event log (its `e` field, SPEC §5):
//! one list that the CLI's and the HTTP API's filters check against, the dashboard colours by,
//! and a test holds equal to the kinds the Lua sources log. Reading the log is
//! `inspect::events`.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// One kind of change of a job's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    Submitted,
    Dispatched,
    Started,
    Finished,
    Error,
    Retried,
    Recovered,
    Dead,
    Stopped,
    /// Moved to another queue by an operator, or a dead letter queued again.
    Requeued,
    /// A dead letter deleted with its job.
    Purged,
    /// A queue paused by an operator (`j` the queue's name, not a job).
    Paused,
    /// A queue resumed (`j` the queue's name).
    Resumed,
    BridgedIn,
    BridgedOut,
    /// A running job's handler reported its progress (`r` the progress JSON).
    Progress,
    /// A running job's handler logged lines (`r` the lines, joined by newlines).
    Logged,
    /// A batch's callback job was submitted: every member ended (`j` the callback job, `r`
    /// the batch and which callback).
    BatchDone,
}

impl EventKind {
    /// Every kind, in the order a job usually meets them.
    pub const ALL: [EventKind; 18] = [
        EventKind::Submitted,
        EventKind::Dispatched,
        EventKind::Started,
        EventKind::Finished,
        EventKind::Error,
        EventKind::Retried,
        EventKind::Recovered,
        EventKind::Dead,
        EventKind::Stopped,
        EventKind::Requeued,
        EventKind::Purged,
        EventKind::Paused,
        EventKind::Resumed,
        EventKind::BridgedIn,
        EventKind::BridgedOut,
        EventKind::Progress,
        EventKind::Logged,
        EventKind::BatchDone,
    ];

    /// The name the functions write.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Submitted => "submitted",
            EventKind::Dispatched => "dispatched",
            EventKind::Started => "started",
            EventKind::Finished => "finished",
            EventKind::Error => "error",
            EventKind::Retried => "retried",
            EventKind::Recovered => "recovered",
            EventKind::Dead => "dead",
            EventKind::Stopped => "stopped",
            EventKind::Requeued => "requeued",
            EventKind::Purged => "purged",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
            EventKind::BridgedIn => "bridged_in",
            EventKind::BridgedOut => "bridged_out",
            EventKind::Progress => "progress",
            EventKind::Logged => "logged",
            EventKind::BatchDone => "batch_done",
        }
    }

    /// Every kind's name joined by `, `: what an error about a wrong one lists.
    pub fn names() -> String {
        Self::ALL
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How the change reads at a glance: `ok` (finished), `bad` (error, dead, stopped), `run`
    /// (started), `wait` (the rest); the dashboard's pill classes.
    pub fn tone(self) -> &'static str {
        match self {
            EventKind::Finished => "ok",
            EventKind::Error | EventKind::Dead | EventKind::Stopped | EventKind::Purged => "bad",
            EventKind::Started | EventKind::Progress | EventKind::Logged => "run",
            _ => "wait",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "{s:?} is not an event: use one of {}",
                    Self::names()
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::EventKind;

    /// The kinds each function's header says it logs: the backticked names of its `Events:`
    /// paragraph (the field letters and quoted reasons are not names of that form). A kind made
    /// at run time (`hero_pause` logs `action .. 'd'`) is found here, where a scan of the
    /// `log_event` calls missed it.
    fn documented_kinds() -> std::collections::BTreeSet<String> {
        let src = crate::function::library_source();
        let mut out = std::collections::BTreeSet::new();
        let mut inside = false;
        for line in src.lines() {
            let Some(text) = line.strip_prefix("--") else {
                inside = false;
                continue;
            };
            let text = text.trim();
            // the paragraph runs until a line that starts a new topic (`Returns:`, `Errors:`,
            // `Prerequisites (...`): continuation lines start in lower case
            if text.starts_with("Events:") {
                inside = true;
            } else if text.starts_with(|c: char| c.is_ascii_uppercase()) {
                inside = false;
            }
            if inside {
                for name in text.split('`').skip(1).step_by(2) {
                    if name.len() >= 4 && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                        out.insert(name.to_string());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_kind_the_functions_log_is_a_kind_and_back() {
        let logged = documented_kinds();
        assert!(
            logged.len() >= 10,
            "the scan found the Events paragraphs: {logged:?}"
        );
        for name in &logged {
            assert!(
                name.parse::<EventKind>().is_ok(),
                "a function logs {name:?}, which EventKind does not know"
            );
        }
        for k in EventKind::ALL {
            assert_eq!(k.as_str().parse::<EventKind>().ok(), Some(k));
            assert!(
                logged.contains(k.as_str()),
                "no function's header says it logs {k}"
            );
        }
        let err = "finish".parse::<EventKind>().unwrap_err().to_string();
        assert!(
            err.contains("\"finish\" is not an event") && err.contains("bridged_out"),
            "{err}"
        );
    }
}
