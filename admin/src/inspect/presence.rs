//! Where the read side finds the live workers' presence without walking the keyspace per
//! request. A worker registers by name (`<ns>:meta:consumers`, every protocol; `<ns>:meta:fleet`
//! since 29), and its presence keys are named by its group, its instance and the types it serves
//! (`keys.presence`): so each question reads the registries and GETs those keys by name, O(workers
//! × queue types). A worker that skips the registration (the protocol allows it: it is then
//! recovered only after its leases expire) has only its presence keys, found by a SCAN; that SCAN
//! is bounded ([`SCAN_CALLS`] × COUNT [`SCAN_COUNT`] per refresh, continued from its cursor at the
//! next one), refreshed at most every [`SCAN_REFRESH`] and shared by every question the process
//! asks of one Redis server and namespace (a process-wide map keyed by both, so the many servers
//! of one test process never share an entry). Its keys are read again by name each time, so a
//! worker gone since the scan is not shown live.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::Inspector;
use hero_protocol::error::Result;
use hero_protocol::name::{ConsumerName, ScriptType};
use hero_protocol::{clock, reply};

/// SCAN calls one refresh makes at most. Each costs Redis ~0.8 ms at COUNT 1000 among 300,000
/// keys (measured): 50 are ~40 ms of Redis every [`SCAN_REFRESH`] at most, where a full scan
/// per request was ~230 ms a request.
pub const SCAN_CALLS: usize = 50;

/// The COUNT of each SCAN call: larger blocks Redis longer per call (~7 ms at 10,000).
pub const SCAN_COUNT: usize = 1000;

/// How old the scan's result may be before a question continues it.
pub const SCAN_REFRESH: Duration = Duration::from_secs(10);

/// The bounded scan for presence keys of one Redis server and namespace, shared by every reader
/// of them in the process ([`PresenceScan::shared`]).
#[derive(Debug, Default)]
pub struct PresenceScan {
    state: Mutex<ScanState>,
    /// A refresh is under way: the others answer with what is known meanwhile instead of
    /// scanning too.
    refreshing: AtomicBool,
}

#[derive(Debug, Default)]
struct ScanState {
    /// Where the next refresh continues ("0": a new pass).
    cursor: String,
    /// The keys the pass under way found so far.
    this_pass: BTreeSet<String>,
    /// The keys the last whole pass found: kept until the next pass is whole, so a key is known
    /// between two passes whichever part of the keyspace it sits in.
    last_pass: BTreeSet<String>,
    /// When the last refresh ended.
    at: Option<Instant>,
}

/// Clears the refreshing flag however the refresh ends (an error, a dropped request).
struct Refreshing<'a>(&'a AtomicBool);

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl PresenceScan {
    /// The scan of the server `inspector` reads now (its master's URL) and of its namespace.
    pub fn shared(inspector: &Inspector) -> Arc<PresenceScan> {
        static SCANS: OnceLock<Mutex<HashMap<String, Arc<PresenceScan>>>> = OnceLock::new();
        let key = format!(
            "{} {}",
            inspector.redis.node_url(),
            inspector.keys.presence_pattern()
        );
        let mut scans = SCANS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        scans.entry(key).or_default().clone()
    }

    /// The presence keys the scan knows, after continuing it when its result is older than
    /// [`SCAN_REFRESH`] and no other question is continuing it now.
    pub async fn keys(&self, inspector: &Inspector) -> Result<BTreeSet<String>> {
        let stale = self.lock().at.is_none_or(|at| at.elapsed() >= SCAN_REFRESH);
        if stale
            && self
                .refreshing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let _flag = Refreshing(&self.refreshing);
            self.refresh(inspector).await?;
        }
        let state = self.lock();
        Ok(state.last_pass.union(&state.this_pass).cloned().collect())
    }

    /// Forgets keys a read found gone (an expired presence), until a pass finds them again.
    pub fn forget(&self, gone: &[String]) {
        let mut state = self.lock();
        for k in gone {
            state.this_pass.remove(k);
            state.last_pass.remove(k);
        }
    }

    async fn refresh(&self, inspector: &Inspector) -> Result<()> {
        let mut cursor = {
            let state = self.lock();
            if state.cursor.is_empty() {
                "0".to_string()
            } else {
                state.cursor.clone()
            }
        };
        let pattern = inspector.keys.presence_pattern();
        let mut found = Vec::new();
        let mut whole = false;
        for _ in 0..SCAN_CALLS {
            let (next, keys) = inspector
                .scan_page(&cursor, &pattern, SCAN_COUNT, None)
                .await?;
            found.extend(keys);
            cursor = next;
            if cursor == "0" {
                whole = true;
                break;
            }
        }
        let mut state = self.lock();
        state.this_pass.extend(found);
        if whole {
            state.last_pass = std::mem::take(&mut state.this_pass);
        }
        state.cursor = cursor;
        state.at = Some(Instant::now());
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScanState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inspector {
    /// Every live worker's presence JSON by consumer name: the workers the registries name (their
    /// presence read by name under each queue type, or, when none is found there, what their
    /// fleet entry says), and the ones only the shared bounded scan found. `streams` are the
    /// namespace's work streams (their types are where presence may be).
    pub(super) async fn live_presence(
        &self,
        streams: &[String],
    ) -> Result<BTreeMap<String, serde_json::Value>> {
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(self.keys.fleet());
        pipe.cmd("ZRANGEBYSCORE")
            .arg(self.keys.consumers())
            .arg(clock::now_ms())
            .arg("+inf");
        let mut replies = self.redis.pipeline(&pipe).await?.into_iter();
        let fleet = reply::pairs(replies.next().unwrap_or(Ok(redis::Value::Nil))?)?;
        let registered = replies.next().unwrap_or(Ok(redis::Value::Nil))?;
        let now = clock::now_ms();
        // consumer -> its fleet entry (workers of 29 and later), or null (registered only)
        let mut named: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for (name, json) in fleet {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) else {
                continue;
            };
            if v["role"].as_str() == Some("worker") && v["expires_ms"].as_u64().unwrap_or(0) >= now
            {
                named.insert(name, v);
            }
        }
        for c in reply::array(&registered)? {
            named
                .entry(reply::text(c)?)
                .or_insert(serde_json::Value::Null);
        }
        let mut types: Vec<ScriptType> = streams
            .iter()
            .filter_map(|s| {
                let name = self.keys.queue_name(s);
                ScriptType::new(name.split(['/', ' ']).next()?).ok()
            })
            .collect();
        types.sort();
        types.dedup();
        let scan = PresenceScan::shared(self);
        let mut keys: BTreeSet<String> = scan.keys(self).await?;
        for c in named.keys() {
            let Ok(c) = ConsumerName::parse(c) else {
                continue;
            };
            for t in &types {
                keys.insert(self.keys.presence(t, &c.group, &c.instance));
            }
        }
        let keys: Vec<String> = keys.into_iter().collect();
        let mut presence: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("GET").arg(k);
            }
            let mut gone = Vec::new();
            for (k, r) in keys.iter().zip(self.redis.pipeline(&pipe).await?) {
                // a key of another type, or a presence that is not JSON, is no worker's
                let text = match r {
                    Ok(redis::Value::Nil) => {
                        gone.push(k.clone());
                        continue;
                    }
                    Ok(v) => reply::text(&v).ok(),
                    Err(_) => None,
                };
                let Some(json) =
                    text.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                else {
                    continue;
                };
                if let Some(c) = json.get("consumer").and_then(|c| c.as_str()) {
                    presence.entry(c.to_string()).or_insert(json);
                }
            }
            scan.forget(&gone);
        }
        // a registered worker whose presence is under no queue type yet (it serves a type no job
        // was queued to) is live all the same: shown with what its fleet entry says
        for (consumer, entry) in named {
            presence.entry(consumer.clone()).or_insert_with(|| {
                let mut v = serde_json::json!({ "consumer": consumer });
                for field in ["version", "protocol"] {
                    if let Some(x) = entry.get(field) {
                        v[field] = x.clone();
                    }
                }
                v
            });
        }
        Ok(presence)
    }
}
