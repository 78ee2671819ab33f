//! The job record's fields, one table of them (`record_fields!` writes the enum the decoder
//! reads them by, their names in the hash and the lookup from a name), and `Slots`, the values
//! of one record by field with the decoding of each form and errors that name the key and the
//! field. The codec (`codec`) encodes and decodes a whole record with them.

use crate::clock;
use crate::error::DecodeError;

/// The one table of the record's fields: the enum the decoder reads them by (its discriminant
/// is the field's slot) and each one's name in the hash, written once each.
macro_rules! record_fields {
    ($($variant:ident => $name:literal,)*) => {
        /// Every field the decoder reads.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(super) enum F {
            $($variant,)*
        }

        impl F {
            /// How many fields the record has.
            pub(super) const COUNT: usize = [$($name,)*].len();

            /// Every field, in slot order.
            #[cfg(test)]
            pub(super) const ALL: [F; F::COUNT] = [$(F::$variant,)*];

            /// The field's name in the hash.
            pub(super) fn name(self) -> &'static str {
                match self {
                    $(F::$variant => $name,)*
                }
            }

            /// The field a name is, if it is one of the record's.
            pub(super) fn of(name: &str) -> Option<F> {
                match name {
                    $($name => Some(F::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

record_fields! {
    Id => "id",
    Status => "status",
    Script => "script",
    ScriptType => "script_type",
    Group => "group",
    Instance => "instance",
    Priority => "priority",
    Timeout => "timeout",
    Retries => "retries",
    Attempts => "attempts",
    RunAt => "run_at",
    Concurrent => "concurrent",
    Reply => "reply",
    CreatedAt => "created_at",
    UpdatedAt => "updated_at",
    StartedAt => "started_at",
    FinishedAt => "finished_at",
    EnvVars => "env_vars",
    Prerequisites => "prerequisites",
    Dependencies => "dependencies",
    Dependents => "dependents",
    Tags => "tags",
    CallerId => "caller_id",
    ContextId => "context_id",
    WorkerId => "worker_id",
    LogPath => "log_path",
    TraceParent => "traceparent",
    Unique => "unique",
    UniqueTtl => "unique_ttl",
    LimitKey => "limit_key",
    Output => "output",
    Value => "value",
    Error => "error",
    Lease => "lease",
    Entry => "entry",
    Payload => "payload",
    DepsLeft => "deps_left",
    Batch => "batch",
    Progress => "progress",
    Log => "log",
    Backoff => "backoff",
    Keep => "keep",
    KeepFailed => "keep_failed",
    Trace => "trace",
}

/// The functions' bookkeeping (docs/protocol.md §3): the legacy bridge's, and `dead`, the entry
/// id of the job's dead letter (protocol 30; `hero_admin::Inspector::dead_letter` reads it).
/// Part of the record, of no use to a handler.
pub(super) const IGNORED_FIELDS: [&str; 4] = ["bridge", "bridge_stop", "bridge_taken", "dead"];

/// The values of one record by field, each taken once, and the decoding of each form with an
/// error naming the key and the field. One slot per known field rather than a map of every
/// name: a worker decodes a record per job, and the map's allocations were a tenth of its CPU
/// in the worker benchmark.
pub(super) struct Slots<'k> {
    key: &'k str,
    pub(super) values: [Option<String>; F::COUNT],
}

impl<'k> Slots<'k> {
    pub(super) fn new(key: &'k str) -> Slots<'k> {
        Slots {
            key,
            values: std::array::from_fn(|_| None),
        }
    }

    pub(super) fn err(&self, f: F, reason: impl ToString) -> DecodeError {
        DecodeError {
            key: self.key.to_string(),
            field: f.name().to_string(),
            reason: reason.to_string(),
        }
    }

    pub(super) fn take(&mut self, f: F) -> Option<String> {
        self.values[f as usize].take()
    }

    /// The value, when present and not empty (an empty optional field reads as absent).
    pub(super) fn nonempty(&mut self, f: F) -> Option<String> {
        self.take(f).filter(|s| !s.is_empty())
    }

    pub(super) fn required(&mut self, f: F) -> Result<String, DecodeError> {
        self.take(f).ok_or_else(|| self.err(f, "is missing"))
    }

    /// A checked name (script type, group, instance).
    pub(super) fn parsed<T, E: ToString>(
        &mut self,
        f: F,
        parse: impl FnOnce(String) -> Result<T, E>,
    ) -> Result<Option<T>, DecodeError> {
        self.nonempty(f)
            .map(|s| parse(s).map_err(|e| self.err(f, e)))
            .transpose()
    }

    pub(super) fn number(&mut self, f: F) -> Result<Option<u64>, DecodeError> {
        match self.nonempty(f) {
            None => Ok(None),
            Some(s) => s
                .parse::<u64>()
                .map(Some)
                .map_err(|_| self.err(f, format!("is {s:?}; expected a whole number"))),
        }
    }

    pub(super) fn timestamp(&mut self, f: F) -> Result<Option<String>, DecodeError> {
        match self.nonempty(f) {
            None => Ok(None),
            Some(s) if clock::is_iso(&s) => Ok(Some(s)),
            Some(s) => Err(self.err(f, format!("is {s:?}; expected an ISO 8601 timestamp"))),
        }
    }

    pub(super) fn list(&mut self, f: F) -> Result<Vec<String>, DecodeError> {
        match self.nonempty(f) {
            None => Ok(Vec::new()),
            Some(s) => serde_json::from_str::<Vec<String>>(&s)
                .map_err(|e| self.err(f, format!("is not a JSON array of strings: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{F, IGNORED_FIELDS};

    /// hero-py and the Node package tell a newer version's fields from their own by a list of
    /// the fields they know: each must be this one's, or a field of this version would show as
    /// unknown there (and an unknown one as known).
    #[test]
    fn the_other_languages_know_the_same_fields() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let ours: std::collections::BTreeSet<&str> = F::ALL
            .iter()
            .map(|f| f.name())
            .chain(IGNORED_FIELDS)
            .collect();
        for (file, open, close) in [
            ("python/hero/job.py", "KNOWN_FIELDS = frozenset((", "))"),
            (
                "node/src/job.ts",
                "KNOWN_FIELDS: ReadonlySet<string> = new Set([",
                "]);",
            ),
        ] {
            let src = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            let list = src
                .split_once(open)
                .and_then(|(_, rest)| rest.split_once(close))
                .map(|(list, _)| list)
                .unwrap_or_else(|| panic!("{file} has no KNOWN_FIELDS list"));
            let theirs: std::collections::BTreeSet<&str> = list
                .split(',')
                .map(|s| s.trim().trim_matches('"'))
                .filter(|s| !s.is_empty())
                .collect();
            assert_eq!(theirs, ours, "{file}'s KNOWN_FIELDS");
        }
    }
}
