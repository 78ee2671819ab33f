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
    BridgedIn,
    BridgedOut,
}

impl EventKind {
    /// Every kind, in the order a job usually meets them.
    pub const ALL: [EventKind; 13] = [
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
        EventKind::BridgedIn,
        EventKind::BridgedOut,
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
            EventKind::BridgedIn => "bridged_in",
            EventKind::BridgedOut => "bridged_out",
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
            EventKind::Started => "run",
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

    /// The kinds named as the first argument of a `log_event` / `log_shared` call in the Lua
    /// sources, or as the event of a call that passes it on (`'submitted'` and friends).
    fn logged_kinds() -> std::collections::BTreeSet<String> {
        let src = crate::function::library_source();
        let mut out = std::collections::BTreeSet::new();
        for call in ["log_event(", "log_shared(", "log_many("] {
            for (i, _) in src.match_indices(call) {
                let args = &src[i + call.len()..];
                let line = args.lines().next().unwrap_or_default();
                for part in line.split(',').take(3) {
                    let part = part.trim();
                    if let Some(name) = part.strip_prefix('\'').and_then(|p| p.strip_suffix('\'')) {
                        out.insert(name.to_string());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_kind_the_functions_log_is_a_kind_and_back() {
        let logged = logged_kinds();
        assert!(
            logged.len() >= 5,
            "the scan found the log calls: {logged:?}"
        );
        for name in &logged {
            assert!(
                name.parse::<EventKind>().is_ok(),
                "the functions log {name:?}, which EventKind does not know"
            );
        }
        for k in EventKind::ALL {
            assert_eq!(k.as_str().parse::<EventKind>().ok(), Some(k));
            assert!(
                crate::function::library_source().contains(&format!("'{}'", k.as_str())),
                "no function logs {k}"
            );
        }
        let err = "finish".parse::<EventKind>().unwrap_err().to_string();
        assert!(
            err.contains("\"finish\" is not an event") && err.contains("bridged_out"),
            "{err}"
        );
    }
}
