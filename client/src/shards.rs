//! A sharded namespace from the producer's side (`hero_protocol::shard` holds the map and the
//! hashing, `crate::layout` the members and the rules): the client's calls over the shards —
//! a submit placed and its generated id renamed, a bulk submit split per shard, the shard that
//! holds a job, one client per shard for those who walk them all.
//!
//! A client reads the shard map when it connects and again at most every
//! `shard::REFRESH`, in the background (a submit never waits for it). Without a map (K = 1)
//! every call goes to shard 0 as it always did: the only cost is that background read.
//!
//! Where a job goes, first rule that applies (docs/sharding.md):
//! 0. a queue the legacy bridge dual-pushes: shard 0, where legacy actors read;
//! 1. its route key's home;
//! 2. its batch's home;
//! 3. its prerequisites' shard (a flow's jobs follow its first job, whose shard its children
//!    name); prerequisites on two shards are refused;
//! 4. its uniqueness key's home;
//! 5. its limit key's home;
//! 6. a chosen id's home;
//! 7. otherwise the next active shard in turn (a generated id then names that shard).
//!
//! A key's home is asked, while the map remembers a K under which it was elsewhere, whether its
//! state is still at the old home (`ShardMap::older_homes`): one more lookup, only then.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use hero_protocol::error::{Error, Result};
use hero_protocol::keys::Keyspace;
use hero_protocol::name::JobId;
use hero_protocol::new_job::NewJob;
use hero_protocol::shard::{self, ShardMap};

use crate::answer::Submitted;
use crate::client::Client;
use crate::layout::{keyed, prefetch, rule, Rule};

type Layout = crate::layout::Layout<Client>;

impl Client {
    /// This namespace's layout, read again in the background when older than
    /// `shard::REFRESH`.
    pub(crate) fn layout(&self) -> Option<Arc<Layout>> {
        let shards = self.shards()?;
        if shards.begin_refresh() {
            let me = self.clone();
            // a runtime may be gone (a client outliving its test): then the map is kept
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    if let Some(s) = me.shards() {
                        if let Err(e) = s.reread(&me).await {
                            hero_protocol::outage::report("reading the shard map", &e);
                        }
                        s.end_refresh();
                    }
                });
            } else {
                shards.end_refresh();
            }
        }
        Some(shards.current())
    }

    /// Reads the shard map again now (after `hero shards set`, say), and answers it.
    pub async fn refresh_shards(&self) -> Result<ShardMap> {
        match self.shards() {
            Some(s) => Ok(s.reread(self).await?.map.clone()),
            None => Ok(ShardMap::single(self.keys().shard_tag())),
        }
    }

    /// The shard map as this client last read it (an unsharded namespace: shard 0 only).
    pub fn shard_map(&self) -> ShardMap {
        match self.layout() {
            Some(l) => l.map.clone(),
            None => ShardMap::single(self.keys().shard_tag()),
        }
    }

    /// One client per served shard (active, then draining), each bound to that shard: what a
    /// caller that walks the whole namespace (an audit, a listing, a broker pass) goes over.
    /// An unsharded namespace answers itself as shard 0.
    pub fn shard_clients(&self) -> Vec<(u16, Client)> {
        match self.layout() {
            Some(l) => {
                let served = l.map.served();
                l.members
                    .iter()
                    .filter(|(n, _)| served.contains(n))
                    .map(|(n, c)| (*n, c.clone()))
                    .collect()
            }
            None => vec![(0, self.clone())],
        }
    }

    /// [`Client::shard_clients`] and the retired shards (which may still hold ended jobs): what a
    /// broker trims and a reader looks through.
    pub fn all_shard_clients(&self) -> Vec<(u16, Client)> {
        match self.layout() {
            Some(l) => l.members.iter().map(|(n, c)| (*n, c.clone())).collect(),
            None => vec![(0, self.clone())],
        }
    }

    /// The client of the shard that holds job `id`: the shard its id names, else its home, else
    /// the homes it had under earlier K, else (a job routed by a key) any served shard that
    /// holds it; a job found nowhere answers its home, where reads then say it is not found.
    pub async fn for_job(&self, id: &JobId) -> Result<Client> {
        let Some(layout) = self.layout().filter(|l| l.map.is_sharded()) else {
            return Ok(self.clone());
        };
        let mut order: Vec<u16> = shard::shard_of_id(id.as_str()).into_iter().collect();
        order.push(layout.map.home(id.as_str()));
        order.extend(layout.map.older_homes(id.as_str()));
        order.extend(layout.members.keys().copied());
        let mut asked = Vec::new();
        for n in order {
            if asked.contains(&n) {
                continue;
            }
            asked.push(n);
            let Some(member) = layout.members.get(&n) else {
                continue;
            };
            let found: bool = member
                .redis()
                .query(redis::cmd("EXISTS").arg(member.keys().job(id)))
                .await?;
            if found {
                return Ok(member.clone());
            }
        }
        Ok(layout
            .members
            .get(&layout.map.home(id.as_str()))
            .unwrap_or(self)
            .clone())
    }

    /// The client of the shard a generated id names (`<uuid>.s<n>`), without a lookup: the
    /// first place a read tries; a chosen id of that form may live elsewhere, and a read that
    /// finds nothing there asks [`Client::for_job`].
    pub(crate) fn named_shard(&self, id: &JobId) -> Option<Client> {
        let layout = self.layout().filter(|l| l.map.is_sharded())?;
        let n = shard::shard_of_id(id.as_str())?;
        layout.members.get(&n).cloned()
    }

    /// The client of `key`'s home now (no lookup: a caller that knows the key's state was made
    /// under the current K, as a checker reading back the chosen ids it submitted).
    pub fn home_client(&self, key: &str) -> Client {
        match self.layout().filter(|l| l.map.is_sharded()) {
            Some(l) => l.members.get(&l.map.home(key)).unwrap_or(self).clone(),
            None => self.clone(),
        }
    }

    /// The client of the shard that is the home of `key` whose state lives at `state`'s key
    /// there (a batch: its hash): its home now, or an older home that still holds it.
    pub async fn for_key(&self, key: &str, state: impl Fn(&Keyspace) -> String) -> Result<Client> {
        let Some(layout) = self.layout().filter(|l| l.map.is_sharded()) else {
            return Ok(self.clone());
        };
        let n = keyed(&layout, key, state).await?;
        Ok(layout.members.get(&n).unwrap_or(self).clone())
    }

    /// Submits `jobs` over the shards: each goes where the rules of this module send it, one
    /// call per shard (under way at once), answers in order.
    pub(crate) async fn submit_sharded(
        &self,
        layout: &Layout,
        jobs: &[NewJob],
    ) -> Result<Vec<Result<Submitted>>> {
        let mut jobs = jobs.to_vec();
        let mut placed: Vec<std::result::Result<u16, Error>> = Vec::with_capacity(jobs.len());
        let mut here: HashMap<String, u16> = HashMap::new();
        // a flow (a job naming another of the same submit): its unkeyed jobs follow the first
        let ids: HashSet<&str> = jobs.iter().map(|j| j.id().as_str()).collect();
        let flow = jobs.iter().any(|j| {
            j.record()
                .prerequisites
                .iter()
                .any(|p| ids.contains(p.as_str()))
        });
        drop(ids);
        let mut first: Option<u16> = None;
        let known = prefetch(layout, &jobs).await?;
        for i in 0..jobs.len() {
            let follow = if flow { first } else { None };
            let at = self
                .place(layout, &jobs[i], &here, follow, Some(&known))
                .await;
            if first.is_none() {
                first = at.as_ref().ok().copied();
            }
            if let Ok(n) = at {
                if !jobs[i].id_chosen() && n > 0 {
                    let old = jobs[i].id().to_string();
                    jobs[i].set_generated_id(shard::sharded_id(n));
                    let new = jobs[i].id().to_string();
                    for later in &mut jobs[i + 1..] {
                        later.rename_prerequisite(&old, &new);
                    }
                }
                here.insert(jobs[i].id().to_string(), n);
            }
            placed.push(at);
        }
        let mut per_shard: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, at) in placed.iter().enumerate() {
            if let Ok(n) = at {
                per_shard.entry(*n).or_default().push(i);
            }
        }
        let calls = per_shard.iter().map(|(&n, idx)| {
            let member = layout.members.get(&n).cloned();
            let batch: Vec<NewJob> = idx.iter().map(|&i| jobs[i].clone()).collect();
            async move {
                match member {
                    Some(m) => crate::coalesce::submit_many(m.redis(), m.keys(), &batch).await,
                    None => Err(Error::InvalidInput(format!(
                        "shard {n} is not in the shard map any more; submit again"
                    ))),
                }
            }
        });
        let answers = futures_join(calls).await;
        let mut out: Vec<Option<Result<Submitted>>> =
            placed.into_iter().map(|p| p.err().map(Err)).collect();
        for ((_, idx), answer) in per_shard.iter().zip(answers) {
            match answer {
                Ok(list) => {
                    for (&i, a) in idx.iter().zip(list) {
                        out[i] = Some(a);
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    for &i in idx {
                        out[i] = Some(Err(Error::InvalidInput(text.clone())));
                    }
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(hero_protocol::reply::unexpected("no answer"))))
            .collect())
    }

    /// Where one job goes: the job (its generated id naming its shard) and that shard's client.
    pub(crate) async fn place_one(
        &self,
        layout: &Layout,
        job: &NewJob,
    ) -> Result<(NewJob, Client)> {
        let n = self.place(layout, job, &HashMap::new(), None, None).await?;
        let mut job = job.clone();
        if !job.id_chosen() && n > 0 {
            job.set_generated_id(shard::sharded_id(n));
        }
        let member = layout.members.get(&n).cloned().ok_or_else(|| {
            Error::InvalidInput(format!(
                "shard {n} is not in the shard map any more; submit again"
            ))
        })?;
        Ok((job, member))
    }

    /// The shard `job` goes to (the module's rules); `here` holds the shards of the jobs
    /// placed before it in the same submit, `follow` the shard of a flow's first job, `known`
    /// the keyed lookups a bulk submit made at once (`prefetch`; without it each is asked now).
    async fn place(
        &self,
        layout: &Layout,
        job: &NewJob,
        here: &HashMap<String, u16>,
        follow: Option<u16>,
        known: Option<&HashSet<(u16, String)>>,
    ) -> Result<u16> {
        match rule(layout, job)? {
            Rule::Shard(n) => Ok(n),
            Rule::Keyed(key, state) => match known {
                Some(found) => Ok(layout
                    .map
                    .older_homes(key)
                    .into_iter()
                    .find(|n| {
                        layout
                            .members
                            .get(n)
                            .is_some_and(|m| found.contains(&(*n, state.key(m.keys()))))
                    })
                    .unwrap_or_else(|| layout.map.home(key))),
                None => keyed(layout, key, |k| state.key(k)).await,
            },
            Rule::Prerequisites => self.prerequisites_shard(layout, job, here).await,
            Rule::Spread => {
                if let Some(n) = follow {
                    return Ok(n);
                }
                let turn = self.shards().map_or(0, |s| s.next_turn());
                Ok((turn % layout.map.k.max(1) as usize) as u16)
            }
        }
    }

    /// The shard of a job's prerequisites (the jobs of the same submit first); two shards are
    /// refused.
    async fn prerequisites_shard(
        &self,
        layout: &Layout,
        job: &NewJob,
        here: &HashMap<String, u16>,
    ) -> Result<u16> {
        let mut at: Option<(u16, &str)> = None;
        for p in &job.record().prerequisites {
            let n = match here.get(p) {
                Some(&n) => n,
                None => {
                    let id = JobId::new(p.as_str())?;
                    let holder = self.for_job(&id).await?;
                    layout
                        .members
                        .iter()
                        .find(|(_, c)| c.keys() == holder.keys())
                        .map_or(0, |(n, _)| *n)
                }
            };
            match at {
                Some((first, first_id)) if first != n => {
                    return Err(Error::InvalidInput(format!(
                        "job {} waits on {first_id} (shard {first}) and {p} (shard {n}): \
                         prerequisites must share a shard; submit them with one route key \
                         (.route(key)) or as one flow",
                        job.id()
                    )))
                }
                Some(_) => {}
                None => at = Some((n, p.as_str())),
            }
        }
        Ok(at.map_or(0, |(n, _)| n))
    }
}

/// Runs the futures at once and answers in their order (a small join_all: the crate has no
/// futures dependency).
async fn futures_join<F, T>(futs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(v) => out.push(v),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out
}

impl Client {
    /// Sets the namespace's number of shards (`hero shards set`): see `hero_protocol::shard::set`.
    pub async fn set_shards(&self, k: u16) -> Result<ShardMap> {
        if k > 1 {
            // a process that knows no shards would serve and submit to shard 0 only
            self.fleet().await?.require(
                &format!("hero shards set {k}"),
                &[hero_protocol::fleet::Feature::Shards],
            )?;
        }
        let map = shard::set(self.redis(), self.keys(), k, hero_protocol::clock::now_ms()).await?;
        self.refresh_shards().await?;
        Ok(map)
    }
}
