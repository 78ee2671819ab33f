//! The shards of a namespace as the producer's side holds them (`crate::shards` is what the
//! client does with them): the map read through shard 0 and one member (a client bound to a
//! shard) per tagged shard, read again in the background; and the rules that say where a job
//! goes, without asking Redis (`rule`), with the lookups of a key's old home (`keyed`, and
//! `prefetch` for a bulk submit). Generic over the member so that it knows nothing of `Client`.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use hero_protocol::conn::Redis;
use hero_protocol::error::Result;
use hero_protocol::keys::Keyspace;
use hero_protocol::name::JobId;
use hero_protocol::new_job::NewJob;
use hero_protocol::shard::{self, ShardMap};
use hero_protocol::ConnectOptions;

/// A client bound to one shard, as the layout keeps it.
pub(crate) trait Member: Clone + Send + Sync + 'static {
    fn keys(&self) -> &Keyspace;
    fn redis(&self) -> &Redis;
    /// A member of the shard `keys` names, on `redis`.
    fn bound_to(redis: Redis, keys: Keyspace) -> Self;
    /// This client as the member of its own shard (shard 0).
    fn bound(&self) -> Self;
}

/// What a namespace's clients share about its shards.
pub(crate) struct Shards<C> {
    opts: ConnectOptions,
    layout: RwLock<Arc<Layout<C>>>,
    read_at: Mutex<Instant>,
    refreshing: AtomicBool,
    /// The next shard an unkeyed job goes to. It starts at a random shard: a process that submits
    /// one job and ends (`hero submit`, a cron script, a serverless function) would otherwise
    /// put every job on shard 0.
    turn: AtomicUsize,
}

/// The map, and one client bound to each served shard.
pub(crate) struct Layout<C> {
    pub(crate) map: ShardMap,
    pub(crate) members: BTreeMap<u16, C>,
    /// Shard 0's work streams the legacy bridge dual-pushes (`Keyspace::bridge_registry`):
    /// their jobs stay on shard 0, where legacy actors read them.
    pub(crate) bridged: HashSet<String>,
}

impl<C: Member> Shards<C> {
    /// Reads the map through `base` (shard 0) and connects to every served shard.
    pub(crate) async fn open(opts: ConnectOptions, base: &C) -> Result<Shards<C>> {
        let layout = build(&opts, base, None).await?;
        Ok(Shards {
            opts,
            layout: RwLock::new(Arc::new(layout)),
            read_at: Mutex::new(Instant::now()),
            refreshing: AtomicBool::new(false),
            turn: AtomicUsize::new(random_start()),
        })
    }

    pub(crate) fn current(&self) -> Arc<Layout<C>> {
        self.layout
            .read()
            .map(|l| l.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// True for the one caller that should start a background read now (none under way).
    pub(crate) fn begin_refresh(&self) -> bool {
        self.stale() && !self.refreshing.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn end_refresh(&self) {
        self.refreshing.store(false, Ordering::Release);
    }

    /// The next turn of the jobs placed in turn.
    pub(crate) fn next_turn(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn stale(&self) -> bool {
        self.read_at
            .lock()
            .map(|t| t.elapsed() >= shard::REFRESH)
            .unwrap_or(true)
    }

    pub(crate) async fn reread(&self, base: &C) -> Result<Arc<Layout<C>>> {
        let old = self.current();
        let layout = Arc::new(build(&self.opts, base, Some(&old)).await?);
        if let Ok(mut l) = self.layout.write() {
            *l = layout.clone();
        }
        if let Ok(mut t) = self.read_at.lock() {
            *t = Instant::now();
        }
        Ok(layout)
    }
}

/// The layout of the map read now, reusing the members of `old` that are still served.
async fn build<C: Member>(
    opts: &ConnectOptions,
    base: &C,
    old: Option<&Layout<C>>,
) -> Result<Layout<C>> {
    let map = shard::read(base.redis(), base.keys()).await?;
    let mut members = BTreeMap::new();
    members.insert(0, base.bound());
    for n in map.tagged().into_iter().filter(|&n| n > 0) {
        let Some(keys) = map.keyspace(base.keys(), n) else {
            continue;
        };
        if let Some(m) = old
            .and_then(|o| o.members.get(&n))
            .filter(|m| m.keys() == &keys)
        {
            members.insert(n, m.clone());
            continue;
        }
        let redis = opts.open_shard(base.redis(), &keys).await?;
        members.insert(n, C::bound_to(redis, keys));
    }
    let bridged = if map.is_sharded() {
        base.redis()
            .query(redis::cmd("HKEYS").arg(base.keys().bridge_registry()))
            .await?
    } else {
        HashSet::default()
    };
    Ok(Layout {
        map,
        members,
        bridged,
    })
}

/// Which rule of the module's places a job, without asking Redis.
pub(crate) enum Rule<'a> {
    Shard(u16),
    /// The home of a key whose state may still be at an older home.
    Keyed(&'a str, StateKey),
    Prerequisites,
    Spread,
}

/// The key whose existence says a keyed job's state is at a shard.
pub(crate) enum StateKey {
    Batch(hero_protocol::BatchName),
    Unique(String),
    Job(JobId),
}

impl StateKey {
    pub(crate) fn key(&self, keys: &Keyspace) -> String {
        match self {
            StateKey::Batch(b) => keys.batch(b),
            StateKey::Unique(u) => keys.unique(u),
            StateKey::Job(id) => keys.job(id),
        }
    }
}

pub(crate) fn rule<'a, C: Member>(layout: &Layout<C>, job: &'a NewJob) -> Result<Rule<'a>> {
    let map = &layout.map;
    let record = job.record();
    if !layout.bridged.is_empty() && layout.bridged.contains(&layout_base_stream(layout, job)) {
        return Ok(Rule::Shard(0));
    }
    if let Some(r) = job.route() {
        return Ok(Rule::Shard(map.home(r)));
    }
    if let Some(b) = &record.batch {
        let name = hero_protocol::BatchName::new(b.as_str())?;
        return Ok(Rule::Keyed(b, StateKey::Batch(name)));
    }
    if !record.prerequisites.is_empty() {
        return Ok(Rule::Prerequisites);
    }
    if let Some(u) = &record.unique {
        return Ok(Rule::Keyed(u, StateKey::Unique(u.clone())));
    }
    if let Some(l) = &record.limit_key {
        return Ok(Rule::Shard(map.home(l)));
    }
    if job.id_chosen() {
        return Ok(Rule::Keyed(
            job.id().as_str(),
            StateKey::Job(job.id().clone()),
        ));
    }
    Ok(Rule::Spread)
}

/// The work stream `job` goes to on shard 0.
fn layout_base_stream<C: Member>(layout: &Layout<C>, job: &NewJob) -> String {
    let base = layout.members.get(&0).map(|c| c.keys().clone());
    base.map(|k| k.work(job.target(), job.record().priority))
        .unwrap_or_default()
}

/// `key`'s home, or an older home whose shard still holds `state` (one EXISTS a home asked).
pub(crate) async fn keyed<C: Member>(
    layout: &Layout<C>,
    key: &str,
    state: impl Fn(&Keyspace) -> String,
) -> Result<u16> {
    for n in layout.map.older_homes(key) {
        if let Some(m) = layout.members.get(&n) {
            let found: bool = m
                .redis()
                .query(redis::cmd("EXISTS").arg(state(m.keys())))
                .await?;
            if found {
                return Ok(n);
            }
        }
    }
    Ok(layout.map.home(key))
}

/// The keyed lookups of a bulk submit, made at once: for each job whose rule is a key with
/// an older home, whether that home holds the key's state; one pipeline per shard asked.
pub(crate) async fn prefetch<C: Member>(
    layout: &Layout<C>,
    jobs: &[NewJob],
) -> Result<HashSet<(u16, String)>> {
    let mut asks: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for job in jobs {
        if let Ok(Rule::Keyed(key, state)) = rule(layout, job) {
            for n in layout.map.older_homes(key) {
                if let Some(m) = layout.members.get(&n) {
                    asks.entry(n).or_default().push(state.key(m.keys()));
                }
            }
        }
    }
    let mut found = HashSet::new();
    for (n, keys) in asks {
        let Some(m) = layout.members.get(&n) else {
            continue;
        };
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("EXISTS").arg(k);
        }
        for (k, r) in keys.into_iter().zip(m.redis().pipeline(&pipe).await?) {
            if redis::from_redis_value::<bool>(r?).unwrap_or(false) {
                found.insert((n, k));
            }
        }
    }
    Ok(found)
}

/// A random start for the turn, from the per-process random keys of the standard library's
/// hasher (no dependency for a number nobody needs to be unpredictable).
fn random_start() -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    // keep it far from usize::MAX so the turn's increments never wrap in a process's life
    (h.finish() >> 34) as usize
}
