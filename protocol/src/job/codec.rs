//! The job record's codec: the fields a submit writes, and the strict decoder of a hash.
//!
//! Every field is a string in the hash so legacy actors and other languages read it as is. The
//! decoder is strict: a missing required field, a field it does not know, or a value it cannot
//! parse is a [`DecodeError`] naming the key and the field; nothing panics on foreign data.

use std::collections::BTreeMap;
use std::time::Duration;

use super::fields::{Slots, F, IGNORED_FIELDS};
use super::{Job, Status};
use crate::error::DecodeError;
use crate::name::{GroupName, InstanceName, JobId, Priority, ScriptType};

impl Job {
    /// The fields `hero_submit` writes for a new job. Fields at their default are left out to
    /// keep the hash small (a waiting tiny job costs Redis about a third less memory): the
    /// decoder reads an absent `id` as the key's, `updated_at` as the latest of `created_at`,
    /// `started_at` and `finished_at`, `priority` and `retries` as their defaults, an absent `timeout`
    /// as naming none (a job that names the default writes it), and
    /// optional fields as empty. The status is the function's to write.
    pub fn to_submit_fields(&self) -> Vec<(&'static str, String)> {
        let mut f: Vec<(&'static str, String)> = Vec::with_capacity(12);
        f.push((F::Script.name(), self.script.clone()));
        if let Some(t) = &self.script_type {
            f.push((F::ScriptType.name(), t.to_string()));
        }
        if let Some(g) = &self.group {
            f.push((F::Group.name(), g.to_string()));
        }
        if let Some(i) = &self.instance {
            f.push((F::Instance.name(), i.to_string()));
        }
        if self.priority != Priority::DEFAULT {
            f.push((F::Priority.name(), self.priority.to_string()));
        }
        if let Some(t) = self.timeout {
            f.push((F::Timeout.name(), t.as_secs().to_string()));
        }
        if self.retries != 0 {
            f.push((F::Retries.name(), self.retries.to_string()));
        }
        f.push((F::CreatedAt.name(), self.created_at.clone()));
        if self.updated_at != self.created_at {
            f.push((F::UpdatedAt.name(), self.updated_at.clone()));
        }
        let optional = [
            (F::CallerId.name(), &self.caller_id),
            (F::ContextId.name(), &self.context_id),
        ];
        for (name, value) in optional {
            if !value.is_empty() {
                f.push((name, value.clone()));
            }
        }
        if self.concurrent {
            f.push((F::Concurrent.name(), "true".into()));
        }
        if let Some(p) = &self.log_path {
            f.push((F::LogPath.name(), p.clone()));
        }
        if let Some(t) = &self.traceparent {
            f.push((F::TraceParent.name(), t.clone()));
        }
        if let Some(u) = &self.unique {
            f.push((F::Unique.name(), u.clone()));
        }
        if let Some(ttl) = self.unique_ttl {
            f.push((F::UniqueTtl.name(), ttl.as_millis().max(1).to_string()));
        }
        if let Some(k) = &self.limit_key {
            f.push((F::LimitKey.name(), k.clone()));
        }
        if let Some(b) = &self.batch {
            f.push((F::Batch.name(), b.clone()));
        }
        if let Some(b) = &self.backoff {
            f.push((F::Backoff.name(), json(b)));
        }
        for (name, keep) in [
            (F::Keep.name(), self.keep),
            (F::KeepFailed.name(), self.keep_failed),
        ] {
            if let Some(d) = keep {
                f.push((name, d.as_millis().to_string()));
            }
        }
        if !self.env_vars.is_empty() {
            f.push((F::EnvVars.name(), json(&self.env_vars)));
        }
        for (name, list) in [
            (F::Prerequisites.name(), &self.prerequisites),
            (F::Dependents.name(), &self.dependents),
            (F::Tags.name(), &self.tags),
        ] {
            if !list.is_empty() {
                f.push((name, json(list)));
            }
        }
        if self.reply {
            f.push((F::Reply.name(), "1".into()));
        }
        f
    }

    /// Decodes the reply of `HGETALL <key>`: `None` when the hash does not exist (or is empty);
    /// a reply of the wrong shape is `Error::Protocol`, a field that does not decode
    /// `Error::InvalidJob`.
    pub fn from_reply(key: &str, reply: redis::Value) -> crate::error::Result<Option<Job>> {
        let record = crate::reply::record(reply)?;
        if record.0.is_empty() && record.1.is_empty() {
            return Ok(None);
        }
        Ok(Some(Job::from_record(key, record)?))
    }

    /// Decodes a job hash as [`crate::reply::record`] read it: the text fields, and the
    /// binary fields' bytes as they are (MessagePack need not be UTF-8): the payload, the
    /// value the handler returned, and the values prerequisites returned (`value:<id>`).
    pub(crate) fn from_record(
        key: &str,
        (fields, binary): crate::reply::Record,
    ) -> Result<Job, DecodeError> {
        let mut job = Job::from_fields(key, fields)?;
        for (k, bytes) in binary {
            match k.as_str() {
                "payload" => job.payload = Some(bytes),
                "value" => job.value = Some(bytes),
                _ => {
                    let id = k.strip_prefix("value:").unwrap_or_default();
                    if let Some(r) = job.results.get_mut(id) {
                        r.value = Some(bytes);
                    }
                }
            }
        }
        Ok(job)
    }

    /// Decodes a job hash read from `key`. Fails on a missing `status` or `script`, an id that
    /// is not the key's, or a value of the wrong form. A field it does not know is kept in
    /// [`Job::unknown_fields`] (a newer version may have written it: SPEC §4.7). An absent `id`
    /// is the key's (a key's id is what follows its last `:`).
    pub fn from_fields<I, K, V>(key: &str, fields: I) -> Result<Job, DecodeError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        let mut r = Slots::new(key);
        let mut any = false;
        let mut unknown_fields = BTreeMap::new();
        let mut results = BTreeMap::new();
        for (k, v) in fields {
            any = true;
            let k = k.as_ref();
            match F::of(k) {
                Some(f) => r.values[f as usize] = Some(v.into()),
                // the bridge's bookkeeping
                None if IGNORED_FIELDS.contains(&k) => {}
                None if k.starts_with(super::RESULT_FIELD_PREFIX) => {
                    let v: String = v.into();
                    match super::ChildResult::parse(&v) {
                        Some(c) => {
                            results.insert(k[super::RESULT_FIELD_PREFIX.len()..].to_string(), c);
                        }
                        None => {
                            unknown_fields.insert(k.to_string(), v);
                        }
                    }
                }
                None => {
                    unknown_fields.insert(k.to_string(), v.into());
                }
            }
        }
        if !any {
            return Err(r.err(F::Id, "is missing: the hash is empty or does not exist"));
        }
        let key_id = key.rsplit(':').next().unwrap_or(key);
        let id = match r.take(F::Id) {
            None => JobId::new(key_id).map_err(|e| {
                r.err(
                    F::Id,
                    format!("is missing, and the key's own id is not valid: {e}"),
                )
            })?,
            Some(id_raw) => {
                let id = JobId::new(&id_raw).map_err(|e| r.err(F::Id, e))?;
                if id_raw != key_id {
                    return Err(r.err(
                        F::Id,
                        format!("is {id_raw:?}, which is not this key's job id"),
                    ));
                }
                id
            }
        };
        let status_raw = r.required(F::Status)?;
        let status = Status::parse(&status_raw).ok_or_else(|| {
            r.err(F::Status, format!("is {status_raw:?}; expected one of waiting, dispatched, started, finished, error"))
        })?;
        let script = r.required(F::Script)?;
        let script_type = r.parsed(F::ScriptType, ScriptType::new)?;
        let group = r.parsed(F::Group, GroupName::new)?;
        let instance = r.parsed(F::Instance, InstanceName::new)?;
        let priority = match r.nonempty(F::Priority) {
            None => Priority::DEFAULT,
            Some(s) => s
                .parse::<u8>()
                .ok()
                .and_then(|n| Priority::new(n).ok())
                .ok_or_else(|| r.err(F::Priority, format!("is {s:?}; expected 0 to 9")))?,
        };
        let timeout = r.number(F::Timeout)?.map(Duration::from_secs);
        let retries = r.number(F::Retries)?.unwrap_or(0) as u32;
        let written_attempts = r.number(F::Attempts)?;
        let run_at_ms = r.number(F::RunAt)?;
        let prerequisites_left = r.number(F::DepsLeft)?.unwrap_or(0) as u32;
        let unique_ttl = r.number(F::UniqueTtl)?.map(Duration::from_millis);
        let concurrent = match r.take(F::Concurrent).as_deref() {
            None | Some("" | "false" | "0") => false,
            Some("true" | "1") => true,
            Some(other) => {
                return Err(r.err(
                    F::Concurrent,
                    format!("is {other:?}; expected true or false"),
                ))
            }
        };
        let reply = matches!(r.take(F::Reply).as_deref(), Some("1"));
        let created_at = r.timestamp(F::CreatedAt)?.unwrap_or_default();
        let written_update = r.timestamp(F::UpdatedAt)?;
        let started_at = r.timestamp(F::StartedAt)?;
        let finished_at = r.timestamp(F::FinishedAt)?;
        // a first delivery writes no count (docs/protocol.md): a record that started, or ended
        // after it started, without one made one attempt; one handed back before it finished is
        // queued again with none counted
        let ran = matches!(status, Status::Started | Status::Finished | Status::Error);
        let attempts = match written_attempts {
            Some(n) => n as u32,
            None if ran && started_at.is_some() => 1,
            None => 0,
        };
        // A start or an end writes only its own timestamp, so the last update is the latest of
        // them all (ISO 8601 timestamps of one clock order as text).
        let updated_at = [&written_update, &started_at, &finished_at]
            .into_iter()
            .flatten()
            .fold(created_at.clone(), |latest, t| {
                if *t > latest {
                    t.clone()
                } else {
                    latest
                }
            });
        let env_vars = match r.nonempty(F::EnvVars) {
            None => BTreeMap::new(),
            Some(s) => serde_json::from_str::<BTreeMap<String, String>>(&s)
                .map_err(|e| r.err(F::EnvVars, format!("is not a JSON object of strings: {e}")))?,
        };
        let mut prerequisites = r.list(F::Prerequisites)?;
        // seed 001 documents `dependencies` as well: the same meaning as prerequisites
        for extra in r.list(F::Dependencies)? {
            if !prerequisites.contains(&extra) {
                prerequisites.push(extra);
            }
        }
        let dependents = r.list(F::Dependents)?;
        let tags = r.list(F::Tags)?;
        let caller_id = r.take(F::CallerId).unwrap_or_default();
        let context_id = r.take(F::ContextId).unwrap_or_default();
        let worker_id = r.take(F::WorkerId).unwrap_or_default();
        let log_path = r.nonempty(F::LogPath);
        let traceparent = r.nonempty(F::TraceParent);
        let unique = r.nonempty(F::Unique);
        let limit_key = r.nonempty(F::LimitKey);
        let output = r.nonempty(F::Output);
        let error = r.nonempty(F::Error);
        let trace = r.nonempty(F::Trace);
        let lease = r.nonempty(F::Lease);
        let entry = r.nonempty(F::Entry);
        let payload = r.take(F::Payload).map(String::into_bytes);
        let value = r.take(F::Value).map(String::into_bytes);
        let batch = r.nonempty(F::Batch);
        let progress = match r.nonempty(F::Progress) {
            None => None,
            Some(s) => Some(serde_json::from_str::<super::Progress>(&s).map_err(|e| {
                r.err(
                    F::Progress,
                    format!("is not a JSON object with a number `percent` and a `message`: {e}"),
                )
            })?),
        };
        let log = r.list(F::Log)?;
        let backoff = match r.nonempty(F::Backoff) {
            None => None,
            Some(s) => Some(
                serde_json::from_str::<crate::policy::Backoff>(&s).map_err(|e| {
                    r.err(
                        F::Backoff,
                        format!("is not a JSON back-off {{kind, base_ms, cap_ms, jitter}}: {e}"),
                    )
                })?,
            ),
        };
        let keep = r.number(F::Keep)?.map(Duration::from_millis);
        let keep_failed = r.number(F::KeepFailed)?.map(Duration::from_millis);
        Ok(Job {
            id,
            script,
            script_type,
            group,
            instance,
            priority,
            caller_id,
            context_id,
            worker_id,
            timeout,
            retries,
            concurrent,
            log_path,
            traceparent,
            unique,
            unique_ttl,
            limit_key,
            created_at,
            updated_at,
            started_at,
            finished_at,
            status,
            env_vars,
            prerequisites,
            dependents,
            tags,
            output,
            value,
            error,
            trace,
            attempts,
            lease,
            entry,
            run_at_ms,
            reply,
            payload,
            prerequisites_left,
            batch,
            progress,
            log,
            backoff,
            keep,
            keep_failed,
            results,
            unknown_fields,
        })
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    // serializing maps and vectors of strings cannot fail
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::Target;

    /// The job key of `id`, from the keys module like every key.
    fn key(id: &str) -> String {
        crate::keys::Keyspace::new(&crate::name::Namespace::new("hero").unwrap())
            .job(&JobId::new(id).unwrap())
    }

    fn job() -> Job {
        let target = Target::new(
            ScriptType::new("osis").unwrap(),
            Some(GroupName::new("io").unwrap()),
            None,
        );
        let mut j = Job::new(JobId::new("j1").unwrap(), &target, "40 + 2");
        j.tags = vec!["a".into()];
        j.env_vars.insert("K".into(), "V".into());
        j.retries = 2;
        j
    }

    /// The record `hero_submit` would store for `j`, read back.
    fn submitted_and_read_back(j: &Job) -> Job {
        let mut fields: Vec<(String, String)> = j
            .to_submit_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        fields.push(("status".into(), "dispatched".into()));
        Job::from_fields(&key(j.id.as_str()), fields).unwrap()
    }

    #[test]
    fn the_field_table_reads_each_name_back_to_its_field() {
        for f in F::ALL {
            assert_eq!(F::of(f.name()), Some(f));
        }
        assert_eq!(F::of("bridge"), None);
        let names: std::collections::HashSet<&str> = F::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(names.len(), F::COUNT, "no name twice");
    }

    #[test]
    fn a_job_naming_the_default_timeout_still_names_it() {
        let target = Target::new(ScriptType::new("osis").unwrap(), None, None);
        let mut j = Job::new(JobId::new("j1").unwrap(), &target, "noop");
        assert_eq!(j.timeout, None);
        j.timeout = Some(crate::DEFAULT_TIMEOUT);
        let fields = j.to_submit_fields();
        assert!(
            fields.iter().any(|(k, v)| *k == "timeout" && v == "300"),
            "{fields:?}"
        );
        let back = submitted_and_read_back(&j);
        assert_eq!(back.timeout, Some(crate::DEFAULT_TIMEOUT));
        assert_eq!(back.time_limit(), crate::DEFAULT_TIMEOUT);
    }

    #[test]
    fn submit_fields_decode_back_to_the_same_job() {
        let j = job();
        assert_eq!(submitted_and_read_back(&j), j);
    }

    #[test]
    fn a_tiny_job_writes_no_field_at_its_default_and_decodes_back_whole() {
        let target = Target::new(ScriptType::new("osis").unwrap(), None, None);
        let j = Job::new(JobId::new("j1").unwrap(), &target, "noop");
        let names: Vec<&str> = j.to_submit_fields().iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["script", "script_type", "created_at"]);
        let back = submitted_and_read_back(&j);
        assert_eq!(back, j);
        assert_eq!(back.updated_at, back.created_at);
    }

    /// A started record of job `j1` with these fields besides.
    fn started_with(pairs: &[(&'static str, &'static str)]) -> Job {
        let mut fields = vec![("status", "started"), ("script", "1")];
        fields.extend_from_slice(pairs);
        Job::from_fields(&key("j1"), fields).unwrap()
    }

    #[test]
    fn updated_at_is_the_latest_timestamp_written() {
        let at = |pairs: &[(&'static str, &'static str)]| started_with(pairs).updated_at;
        let created = ("created_at", "2026-11-21T10:00:00.000Z");
        let requeued = ("updated_at", "2026-11-21T10:00:05.000Z");
        let started = ("started_at", "2026-11-21T10:00:07.000Z");
        let finished = ("finished_at", "2026-11-21T10:00:09.000Z");
        assert_eq!(at(&[created]), created.1);
        assert_eq!(at(&[created, requeued]), requeued.1);
        assert_eq!(at(&[created, requeued, started]), started.1);
        assert_eq!(at(&[created, started, finished]), finished.1);
        // a retry written after the last start keeps its own time
        let retried = ("updated_at", "2026-11-21T10:00:08.000Z");
        assert_eq!(at(&[created, started, retried]), retried.1);
    }

    #[test]
    fn a_started_record_without_a_count_is_on_its_first_attempt() {
        let attempts = |pairs: &[(&'static str, &'static str)]| started_with(pairs).attempts;
        let started = ("started_at", "2026-11-21T10:00:07.000Z");
        assert_eq!(attempts(&[]), 0, "never delivered");
        assert_eq!(attempts(&[started]), 1);
        assert_eq!(attempts(&[started, ("attempts", "3")]), 3);
        let handed_back = Job::from_fields(
            &key("j1"),
            [("status", "dispatched"), ("script", "1"), started],
        )
        .unwrap();
        assert_eq!(handed_back.attempts, 0, "a hand-back counts no attempt");
    }

    #[test]
    fn status_wire_names_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("Finished"), None);
    }

    #[test]
    fn legacy_record_with_only_seed_fields_decodes() {
        let fields = [
            ("id", "L1"),
            ("caller_id", "c"),
            ("worker_id", "w1"),
            ("context_id", "ctx"),
            ("script", "print(1)"),
            ("timeout", "30"),
            ("retries", "0"),
            ("concurrent", "false"),
            ("created_at", "2025-07-29T01:15:23Z"),
            ("updated_at", "2025-07-29T01:15:23Z"),
            ("status", "dispatched"),
            ("dependencies", "[\"x\"]"),
        ];
        let j = Job::from_fields(&key("L1"), fields).unwrap();
        assert_eq!(j.script_type, None);
        assert_eq!(j.prerequisites, vec!["x".to_string()]);
    }

    fn decode_err(extra: (&str, &str)) -> DecodeError {
        let mut fields = vec![("id", "j1"), ("status", "dispatched"), ("script", "1")];
        fields.retain(|(k, _)| *k != extra.0);
        fields.push(extra);
        Job::from_fields(&key("j1"), fields).unwrap_err()
    }

    #[test]
    fn decode_names_key_and_field_when_a_value_is_malformed() {
        for (field, value) in [
            ("timeout", "banana"),
            ("status", "running"),
            ("env_vars", "{not json"),
            ("tags", "[1,2]"),
            ("priority", "12"),
            ("created_at", "yesterday"),
            ("script_type", "a:b"),
            ("id", "other"),
        ] {
            let e = decode_err((field, value));
            assert_eq!(e.field, field, "{e}");
            assert_eq!(e.key, key("j1"));
            assert!(e.to_string().contains(field), "{e}");
        }
    }

    /// A field this version does not know is a newer version's: kept as read, not an error
    /// (SPEC §4.7); a known field of the wrong form still is.
    #[test]
    fn an_unknown_field_is_kept_not_refused() {
        let fields = [
            ("id", "j1"),
            ("status", "started"),
            ("script", "1"),
            ("colour", "blue"),
            ("x_team", "ops"),
            ("bridge", ""),
        ];
        let j = Job::from_fields(&key("j1"), fields).unwrap();
        assert_eq!(
            j.unknown_fields.into_iter().collect::<Vec<_>>(),
            [
                ("colour".to_string(), "blue".to_string()),
                ("x_team".to_string(), "ops".to_string())
            ]
        );
        let e = Job::from_fields(
            &key("j1"),
            [
                ("id", "j1"),
                ("status", "started"),
                ("script", "1"),
                ("colour", "blue"),
                ("retries", "many"),
            ],
        )
        .unwrap_err();
        assert_eq!(e.field, "retries");
    }

    #[test]
    fn decode_fails_when_required_field_is_missing() {
        let e = Job::from_fields(&key("j1"), [("id", "j1"), ("status", "dispatched")]).unwrap_err();
        assert_eq!(e.field, "script");
        let e = Job::from_fields(&key("j1"), Vec::<(String, String)>::new()).unwrap_err();
        assert_eq!(e.field, "id");
    }
}
