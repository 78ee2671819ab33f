//! The live event feed behind every open `/api/events/stream` (the dashboard's "Live events"):
//! one reader of the event log per broker process, fanned out to every open stream.
//!
//! A reader holds a blocking Redis connection for its life (XREAD BLOCK). One per stream let 16
//! open dashboards take every blocking connection the broker has, and the 17th got 503; one per
//! process costs the same for 1 stream or 1,000, and each stream filters what it is sent. The
//! reader starts with the first stream and ends within a read after the last one closes, so a
//! broker with no dashboard open reads nothing. On a busy system it is a live view, not a full
//! tail: at most [`READ_ENTRIES`] of the newest log entries every [`READ_EVERY`] (an open
//! dashboard streaming every event at 28,000 jobs/s took a third off the benchmark's end-to-end
//! rate); `hero events --follow` is the full tail.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hero_admin::inspect::{Event, EventFilter, EventFollower};
use hero_client::Client;
use tokio::sync::{broadcast, Mutex};
use tokio_util::sync::CancellationToken;

use std::convert::Infallible;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use hero_protocol::{ScriptType, Target};
use serde::Deserialize;

use super::{ApiError, App};

/// The newest log entries read at most per [`READ_EVERY`].
pub const READ_ENTRIES: usize = 100;
pub const READ_EVERY: Duration = Duration::from_millis(250);

/// Live streams open at once per process: a stream is never idle, so the connection cap cannot
/// close one to make room, and without a cap of their own a read-only token (or open reads)
/// could hold every connection with them.
pub const MAX_STREAMS: usize = 64;

/// Live streams one credential (a session, or a token shared by its holders) may hold at once:
/// no single client, a read-only token's holder included, takes the feed from the others.
pub const PER_CLIENT: usize = 8;

/// Streams kept for admin credentials: reads take at most `MAX_STREAMS - ADMIN_RESERVED`, so
/// the operator can always watch.
pub const ADMIN_RESERVED: usize = 16;

/// Events a slow stream may fall behind by before it skips to the newest.
const BACKLOG: usize = 4096;

/// A handle on the process's feed; cheap to clone.
#[derive(Clone)]
pub struct Feed {
    live: Arc<Mutex<Option<broadcast::Sender<Arc<Event>>>>>,
    client: Client,
    stop: CancellationToken,
    /// Streams open per credential.
    held: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

/// One stream's place in its credential's count, given back when the stream ends.
pub struct StreamSlot {
    who: String,
    held: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.who) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.who);
            }
        }
    }
}

fn busy(message: String) -> ApiError {
    ApiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, message)
}

impl Feed {
    pub fn new(client: Client, stop: CancellationToken) -> Feed {
        Feed {
            live: Arc::new(Mutex::new(None)),
            client,
            stop,
            held: Arc::default(),
        }
    }

    /// Every event from now on (a live view) for credential `who` (`admin`: it may use the
    /// streams kept for admins); the first subscriber starts the reader, whose starting point is
    /// fixed before this returns, so nothing after it is missed.
    pub async fn subscribe(
        &self,
        who: &str,
        admin: bool,
    ) -> Result<(broadcast::Receiver<Arc<Event>>, StreamSlot), ApiError> {
        let mut live = self.live.lock().await;
        let open = live.as_ref().map_or(0, broadcast::Sender::receiver_count);
        let most = if admin {
            MAX_STREAMS
        } else {
            MAX_STREAMS - ADMIN_RESERVED
        };
        if open >= most {
            return Err(busy(format!("{open} live event streams are open in this broker, the most it serves {}: close a dashboard tab, or follow the log with `hero events --follow`", if admin { "anyone" } else { "without the admin token" })));
        }
        {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let n = held.entry(who.to_string()).or_default();
            if *n >= PER_CLIENT {
                return Err(busy(format!("this session or token holds {PER_CLIENT} live event streams already, the most one may: close a dashboard tab")));
            }
            *n += 1;
        }
        let slot = StreamSlot {
            who: who.to_string(),
            held: self.held.clone(),
        };
        if let Some(tx) = live.as_ref() {
            return Ok((tx.subscribe(), slot));
        }
        let follower = hero_admin::Inspector::from(&self.client)
            .follow(EventFilter::default(), "$")
            .await?;
        let (tx, rx) = broadcast::channel(BACKLOG);
        *live = Some(tx.clone());
        tokio::spawn(read(
            self.client.clone(),
            follower,
            tx,
            self.live.clone(),
            self.stop.clone(),
        ));
        Ok((rx, slot))
    }

    /// Whether a reader runs now (for tests and the log).
    pub async fn reading(&self) -> bool {
        self.live.lock().await.is_some()
    }
}

async fn read(
    client: Client,
    mut follower: EventFollower,
    tx: broadcast::Sender<Arc<Event>>,
    live: Arc<Mutex<Option<broadcast::Sender<Arc<Event>>>>>,
    stop: CancellationToken,
) {
    let mut failing = false;
    let mut last_read: Option<Instant> = None;
    loop {
        if let Some(left) = last_read.and_then(|t| READ_EVERY.checked_sub(t.elapsed())) {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(left) => {}
            }
        }
        let batch = tokio::select! {
            () = stop.cancelled() => break,
            b = follower.next_latest(READ_ENTRIES) => b,
        };
        last_read = Some(Instant::now());
        match batch {
            Ok(mut events) => {
                if failing {
                    tracing::info!("live event feed: reading the event log again");
                    failing = false;
                }
                // every stream's viewer sees the jobs' secrets hidden (redact.rs); a batch whose
                // jobs cannot be read now goes out with none (the reasons redacted blank)
                if super::redact::scrub_events(&client, &mut events)
                    .await
                    .is_err()
                {
                    for e in &mut events {
                        if e.reason.is_some() {
                            e.reason = Some(super::redact::REDACTED.to_string());
                        }
                    }
                }
                for e in events {
                    // no receiver between the check below and here: the event is simply dropped
                    let _ = tx.send(Arc::new(e));
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "live event feed: reading the event log failed; retrying every second (said once until it works)");
                    failing = true;
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
        let mut slot = live.lock().await;
        if tx.receiver_count() == 0 {
            *slot = None;
            return;
        }
    }
    *live.lock().await = None;
}

/// Server-Sent Events: one `event` message per job event from now on that passes the query's
/// filter, from the process's one reader of the log ([`super::feed`]), a keep-alive comment
/// every 15 s; the stream ends when the broker stops. A stream that falls behind skips to the
/// newest events: it is a live view (`hero events --follow` is the full tail).
pub(super) async fn event_stream(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let filter = q.filter()?;
    let (who, admin) = super::origin::credential(&headers);
    let (rx, slot) = app.feed.subscribe(&who, admin).await?;
    let keys = app.client.keys().clone();
    let stop = app.stop.clone();
    let stream = futures::stream::unfold(
        (rx, filter, keys, stop, slot),
        |(mut rx, filter, keys, stop, slot)| async move {
            loop {
                let got = tokio::select! {
                    () = stop.cancelled() => return None,
                    got = rx.recv() => got,
                };
                match got {
                    Ok(ev) if filter.matches(&keys, &ev) => {
                        let msg = SseEvent::default()
                            .event("event")
                            .data(ev.to_json().to_string());
                        return Some((Ok(msg), (rx, filter, keys, stop, slot)));
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The filter of `/api/events` and of a live stream.
#[derive(Deserialize, Default)]
pub struct EventsQuery {
    pub job: Option<String>,
    pub queue: Option<String>,
    #[serde(rename = "type")]
    pub script_type: Option<String>,
    pub event: Option<String>,
    pub limit: Option<usize>,
}

impl EventsQuery {
    pub fn filter(&self) -> Result<EventFilter, ApiError> {
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.trim().is_empty());
        Ok(EventFilter {
            job: nonempty(&self.job),
            queue: nonempty(&self.queue)
                .map(|q| Target::parse_queue(&q).map(|(t, _)| t))
                .transpose()?,
            script_type: nonempty(&self.script_type)
                .map(|t| ScriptType::new(&t))
                .transpose()?,
            event: nonempty(&self.event)
                .map(|e| e.parse::<hero_protocol::EventKind>())
                .transpose()?,
        })
    }
}
