//! Redaction of a job's secrets wherever its text travels over HTTP: the values of its
//! `env_vars` (passwords, keys) read `***` in every answer that does not ask to reveal them
//! (the admin token's `?reveal=1` on one job), not only in `env_vars` itself: a handler's error
//! that quotes a value (`Error parsing integer number 'hunter2-very-secret'`), its trace, its
//! log lines, its output, its history, the events API and the live stream.
//!
//! The rule: a value is matched only when it is at least [`MIN_SECRET`] characters long, as it
//! stands, anywhere in a text; shorter values (`1`, `true`, `eu`) would mangle every text and
//! are shown (they are no secret a text could leak). The longest values are replaced first, so a
//! value holding another is hidden whole. The env values are read with the page they redact
//! (one pipelined HGET a job of the page), so nothing is added to a job's path.

use std::collections::{BTreeMap, HashMap};

use hero_admin::inspect::Event;
use hero_client::Client;
use serde_json::Value;

use super::ApiError;

/// What a redacted value reads as.
pub const REDACTED: &str = "***";

/// The shortest env value matched inside other text.
pub const MIN_SECRET: usize = 6;

/// One job's secrets: its env values of at least [`MIN_SECRET`] characters, each as written
/// and as JSON escapes it (a value with a quote or a backslash reads escaped in a JSON error or
/// output), longest first; or, for a job whose record is gone, unknown: its texts are hidden
/// whole, as nothing can tell its secrets from the rest any more.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    values: Vec<String>,
    unknown: bool,
}

impl Secrets {
    pub fn of(env: &BTreeMap<String, String>) -> Secrets {
        let mut values: Vec<String> = Vec::new();
        for v in env.values().filter(|v| v.chars().count() >= MIN_SECRET) {
            values.push(v.clone());
            let json = serde_json::to_string(v).unwrap_or_default();
            let escaped = json.trim_matches('"');
            if escaped != v {
                values.push(escaped.to_string());
            }
        }
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Secrets {
            values,
            unknown: false,
        }
    }

    /// The secrets of a job whose record is gone.
    fn unknown() -> Secrets {
        Secrets {
            values: Vec::new(),
            unknown: true,
        }
    }

    /// From a record's `env_vars` field (a JSON object of strings); none when it is absent or
    /// not one.
    fn of_field(raw: Option<&str>) -> Secrets {
        raw.and_then(|r| serde_json::from_str::<BTreeMap<String, String>>(r).ok())
            .map(|env| Secrets::of(&env))
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty() && !self.unknown
    }

    /// `text` with each secret replaced by `***` (all of it when the job's secrets are unknown).
    pub fn scrub(&self, text: &str) -> String {
        if self.unknown {
            return format!("{REDACTED} (the job's record is gone: its text is hidden whole)");
        }
        let mut out = text.to_string();
        for s in &self.values {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }

    /// Every string in `v` scrubbed (keys stay).
    pub fn scrub_json(&self, v: &mut Value) {
        if self.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                if self.unknown || self.values.iter().any(|x| s.contains(x.as_str())) {
                    *s = self.scrub(s);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.scrub_json(x)),
            Value::Object(o) => o.values_mut().for_each(|x| self.scrub_json(x)),
            _ => {}
        }
    }
}

/// The secrets of each of `ids` (read with one pipeline; a job gone has none).
pub async fn secrets_of(
    client: &Client,
    ids: impl IntoIterator<Item = String>,
) -> Result<HashMap<String, Secrets>, ApiError> {
    let mut ids: Vec<String> = ids.into_iter().collect();
    ids.sort();
    ids.dedup();
    let mut out = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("HMGET")
            .arg(client.keys().job_unchecked(id))
            .arg("status")
            .arg("env_vars");
    }
    let rows = client.redis().pipeline(&pipe).await?;
    for (id, row) in ids.into_iter().zip(rows) {
        let fields = row
            .ok()
            .and_then(|v| {
                hero_protocol::reply::array(&v)
                    .ok()
                    .map(<[redis::Value]>::to_vec)
            })
            .unwrap_or_default();
        let text = |i: usize| {
            fields
                .get(i)
                .and_then(|v| hero_protocol::reply::text(v).ok())
        };
        // no record (expired, removed): its secrets cannot be known, so its texts go whole
        let s = if text(0).is_none() {
            Secrets::unknown()
        } else {
            Secrets::of_field(text(1).as_deref())
        };
        if !s.is_empty() {
            out.insert(id, s);
        }
    }
    Ok(out)
}

/// Events with their jobs' secrets hidden in their reasons (only events with a reason are read
/// for).
pub async fn scrub_events(client: &Client, events: &mut [Event]) -> Result<(), ApiError> {
    let ids = events
        .iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.chars().count() >= MIN_SECRET)
        })
        .map(|e| e.job_id.clone());
    let secrets = secrets_of(client, ids).await?;
    if secrets.is_empty() {
        return Ok(());
    }
    for e in events.iter_mut() {
        if let (Some(s), Some(r)) = (secrets.get(&e.job_id), e.reason.as_mut()) {
            *r = s.scrub(r);
        }
    }
    Ok(())
}

/// Dead letters with their jobs' secrets hidden in their reasons.
pub async fn scrub_letters(
    client: &Client,
    letters: &mut [hero_admin::inspect::DeadLetter],
) -> Result<(), ApiError> {
    let ids = letters
        .iter()
        .filter(|d| d.reason.chars().count() >= MIN_SECRET)
        .map(|d| d.job_id.clone());
    let secrets = secrets_of(client, ids).await?;
    for d in letters.iter_mut() {
        if let Some(s) = secrets.get(&d.job_id) {
            d.reason = s.scrub(&d.reason);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_six_characters_or_more_are_hidden_anywhere_in_a_text() {
        let env = BTreeMap::from([
            ("DB_PASSWORD".to_string(), "hunter2-very-secret".to_string()),
            ("PART".to_string(), "hunter2".to_string()),
            ("DEBUG".to_string(), "1".to_string()),
        ]);
        let s = Secrets::of(&env);
        assert_eq!(
            s.scrub("Error parsing integer number 'hunter2-very-secret' at 1"),
            "Error parsing integer number '***' at 1"
        );
        assert_eq!(s.scrub("hunter2 alone"), "*** alone");
        let mut v =
            serde_json::json!({"error": "x hunter2-very-secret", "log": ["a hunter2"], "n": 1});
        s.scrub_json(&mut v);
        // as JSON escapes it, too
        let quoted = BTreeMap::from([("PW".to_string(), r#"pa"ss\word<99>"#.to_string())]);
        assert_eq!(
            Secrets::of(&quoted).scrub(r#"bad {"pw":"pa\"ss\\word<99>"}"#),
            r#"bad {"pw":"***"}"#
        );
        assert_eq!(
            v,
            serde_json::json!({"error": "x ***", "log": ["a ***"], "n": 1})
        );
    }
}
