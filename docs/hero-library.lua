#!lua name=hero_v35
local VERSION = '35'
-- hero function library: the shared helpers every function may use, one file a topic
-- (`function/lib/*.lua`, concatenated in this order, then one file per function):
--   keys.lua          the keys the functions derive instead of taking them in KEYS
--   streams.lua       acknowledging and trimming work stream entries
--   settings.lua      the broker's settings in the config hash
--   events.lua        the event log (log_event, log_shared)
--   stats.lua         stats kept on write (tally, histogram, flush_stats) and Redis's clock
--   registry.lua      the queue registry, paused queues, registering a work stream
--   checks.lua        what a submitted record may hold (refuse)
--   finish.lua        ending a job: the reply to a waiting caller, retention
--   legacy.lua        entries' fields, the dual-push bridge to legacy lists
--   policy.lua        queue policies: back-off, limits, rates, key rates, priority aging
--   gate.lua          appending a job to a work stream, through a fair queue's gate
--   batches.lua       batches: members counted as they end, callbacks once
--   dependencies.lua  prerequisites and their dependents (release_if_any, the ended-jobs hook)
--   records.lua       a job's record as a fetch reads it and hands it back (read_job, as_leased)
--   submits.lua       a submit's uniqueness keys, tag indexes and prerequisites
--   fleet.lua         the fleet summary the duties' holder writes (fleet_lacks)
--   zones.lua, tz.lua, cron_engine.lua   the cron engine: zones' rules, offsets, next ticks
-- A helper that writes events or stats says which in its comment ("Writes events:", "Writes
-- stats:"), and so does the header of every function that calls it (the header check holds
-- both to the code).
--
-- Every key a function touches is passed in KEYS, except a job hash or reply list named by a
-- stream entry; those are built from a prefix in ARGV (built by the client's keys module) and
-- share the namespace's hash slot. Errors are raised as 'HERO_<CODE> message'.

-- The keys the functions derive rather than take in KEYS, each built here and only here, the
-- way the client's keys module builds it (`functions::keys` holds the two sides equal): the
-- namespace part `<ns>:` of a job key `<ns>:job:<id>` (of the job prefix, with id ''), and
-- the keys beside it.
local function ns_of(job_key, job_id)
  return string.sub(job_key, 1, #job_key - #job_id - 4)
end

local function tag_key(ns, tag)
  return ns .. 'tag:' .. tag
end

local function unique_key(ns, key)
  return ns .. 'unique:' .. key
end

-- The per-minute stats hash of the minute holding `now_iso` (its first 16 characters,
-- `2026-11-23T11:40`: `keys::minute_of`).
local function minute_key(stats_key, now_iso)
  return stats_key .. ':' .. string.sub(now_iso, 1, 16)
end

-- The registry's companions (`<registry>` is `<ns>:meta:queues`): its signal stream
-- (`Keyspace::queue_signal`), the paused streams (`paused_queues`) and names (`paused_names`).
local function queue_signal_key(registry)
  return registry .. ':new'
end

local function paused_key(registry)
  return registry .. ':paused'
end

local function paused_names_key(registry)
  return registry .. ':paused:names'
end

-- The reply lists' prefix `<ns>:q:reply:` (`Keyspace::reply`), for a job named by an entry or
-- a dependents hash rather than in KEYS.
local function reply_prefix_of(ns)
  return ns .. 'q:reply:'
end

-- The dual-push registry `<ns>:meta:bridge` (`Keyspace::bridge_registry`), beside the queue
-- registry `<ns>:meta:queues`: a call that queues a job it was not given in KEYS (a released
-- dependent) finds there whether its stream is dual-pushed.
local function bridge_registry_of(registry)
  return string.sub(registry, 1, #registry - 6) .. 'bridge'
end

-- The key `<ns>:meta:<name>` beside the config hash `<ns>:meta:config`: every `meta` key a
-- function derives goes through here (the named helpers below and in batches.lua and
-- dependencies.lua).
local function meta_key(config_key, name)
  return string.sub(config_key, 1, #config_key - 6) .. name
end

-- The queue policies hash `<ns>:meta:policy` (`Keyspace::policy`) and a queue's running set
-- `<ns>:meta:limit:<queue>` (`Keyspace::limit`), beside the config hash `<ns>:meta:config`.
local function policy_key_of(config_key)
  return meta_key(config_key, 'policy')
end

local function limit_key_of(config_key, queue)
  return meta_key(config_key, 'limit:' .. queue)
end

-- A queue's rate log `<ns>:meta:rate:<queue>` (`Keyspace::rate`): the jobs it started, by ms;
-- a limit key's within a queue is `<ns>:meta:rate:<queue>|<limit key>`.
local function rate_key_of(config_key, queue)
  return meta_key(config_key, 'rate:' .. queue)
end

-- The memory flag `<ns>:meta:memory` (`Keyspace::memory`): the maxmemory policy as INFO last
-- said it, kept a short while (see memory_policy).
local function memory_key_of(config_key)
  return meta_key(config_key, 'memory')
end

-- The delayed set `<ns>:meta:delayed` (`Keyspace::delayed`), beside the config hash.
local function delayed_key_of(config_key)
  return meta_key(config_key, 'delayed')
end

-- The namespace part `<ns>:` of the queue registry `<ns>:meta:queues`, for the keys a function
-- queueing a job it was not given in KEYS derives: its record `<ns>:job:<id>`
-- (`Keyspace::job`) and the stats hash `<ns>:meta:stats` (`Keyspace::stats`).
local function ns_of_registry(registry)
  return string.sub(registry, 1, #registry - 11)
end

-- A fair stream's gate (`Keyspace::fair_ring`, `Keyspace::fair_lane`): the ring of limit keys
-- with jobs waiting `<stream>:fair`, and a key's lane `<stream>:fair:<key>` ('' for no key).
local function fair_ring_of(stream)
  return stream .. ':fair'
end

local function fair_lane_of(stream, key)
  return stream .. ':fair:' .. key
end

-- Whether a consumer is the legacy bridge's (`keys::BRIDGE_CONSUMER_PREFIX`).
local function is_bridge_consumer(name)
  return string.sub(name, 1, 7) == 'bridge:'
end

-- A name as the clients check it (name.rs): 1-64 of A-Z a-z 0-9 _ -.
local function name_ok(s)
  return type(s) == 'string' and #s >= 1 and #s <= 64 and string.match(s, '^[%w_%-]+$') ~= nil
end

-- The work stream of a job a function queues from its record rather than from KEYS (a delayed
-- job promoted, a recurring job's tick): `f` holds its script_type, group, instance and priority
-- (Keyspace::work of Placement::read); nil when it names no valid script type.
local function work_stream_of(ns, f)
  if not name_ok(f[1]) then return nil end
  local key = ns .. 'q:work:type:' .. f[1]
  if name_ok(f[2]) then
    key = key .. ':group:' .. f[2]
    if name_ok(f[3]) then key = key .. ':inst:' .. f[3] end
  end
  local p = tonumber(f[4])
  if p and p >= 0 and p <= 9 and p == math.floor(p) and p ~= 5 then key = key .. ':prio:' .. p end
  return key
end

-- Work stream entries: acknowledged, deleted and trimmed so that a done entry never stays in
-- a work stream.

-- Calls f(from, to) over runs of ids short enough for Lua's stack (unpack of a long list fails).
local function in_runs(ids, f)
  for from = 1, #ids, 1000 do
    f(from, math.min(#ids, from + 999))
  end
end

-- Acknowledge and delete delivered entries of one stream: a done entry never stays in a work
-- stream.
local function ack_del_many(stream, group, ids, xackdel)
  in_runs(ids, function(from, to)
    if xackdel == '1' then
      redis.call('XACKDEL', stream, group, 'IDS', to - from + 1, unpack(ids, from, to))
    else
      redis.call('XACK', stream, group, unpack(ids, from, to))
      redis.call('XDEL', stream, unpack(ids, from, to))
    end
  end)
end

local function ack_del(stream, group, id, xackdel)
  ack_del_many(stream, group, { id }, xackdel)
end

-- The stream id right after `id` ('<ms>-<seq>').
local function next_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return string.format('%d-%d', tonumber(ms), tonumber(seq) + 1)
end

-- Whether stream id `a` ('<ms>-<seq>') is at or after `b`, by number.
local function stream_id_at_least(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, aseq, bms, bseq = tonumber(ams), tonumber(aseq), tonumber(bms), tonumber(bseq)
  if not (ams and bms) then return false end
  return ams > bms or (ams == bms and aseq >= bseq)
end

-- Acknowledge delivered entries of one stream. Returns how many of them were pending.
local function ack(stream, group, ids)
  local acked = 0
  in_runs(ids, function(from, to)
    acked = acked + redis.call('XACK', stream, group, unpack(ids, from, to))
  end)
  return acked
end

-- Trim a stream of the entries `ids` just acknowledged and of every other done entry. XDEL
-- would seek each id (a scan inside its node, ~2 us each); XTRIM MINID drops runs from the head.
-- Entries are delivered in id order, so every entry below the oldest pending one (or, with
-- nothing pending, up to the group's last delivered one) was delivered and acknowledged:
-- nothing waiting or running is trimmed. An entry of `ids` behind an older job still running
-- is deleted by id, so every path that acknowledges an entry also deletes it. A few
-- entries (up to TRIM_BY_ID, as at light load) are deleted by id alone: one call, where the
-- trim asks XPENDING and XINFO first. Where the server has XACKDEL (Redis 8.2) deleting by id
-- is cheap, and each entry goes at once instead.
local TRIM_BY_ID = 8
local function trim_done(stream, group, ids, xackdel)
  if #ids == 0 then return end
  if #ids <= TRIM_BY_ID then
    redis.call('XDEL', stream, unpack(ids))
    return
  end
  if xackdel == '1' then
    in_runs(ids, function(from, to)
      redis.call('XDEL', stream, unpack(ids, from, to))
    end)
    return
  end
  local pending = redis.call('XPENDING', stream, group)
  local bound
  if pending[1] > 0 then
    bound = pending[2]
  else
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local name, last
      for k = 1, #g, 2 do
        if g[k] == 'name' then name = g[k + 1] elseif g[k] == 'last-delivered-id' then last = g[k + 1] end
      end
      if name == group and last then bound = next_id(last) end
    end
  end
  if bound then
    redis.call('XTRIM', stream, 'MINID', bound)
    -- ids of the same length compare as text (the ms part has 13 digits until the year 2286,
    -- so the same length means the same length of sequence too). Of different lengths (a
    -- submit of 50 in one millisecond numbers them 0 to 49: a fifth of a batch), the same
    -- millisecond as the bound's (`bms`, with its dash) makes the longer sequence the later, and
    -- different 13-digit milliseconds compare as text too; only an id of another form is
    -- parsed (stream_id_at_least: two matches and four numbers, ~10 k instructions an id,
    -- where these tests cost two C calls at most). With nothing pending, the bound is past
    -- every delivered entry.
    local behind = nil
    if pending[1] > 0 then
      local nb = #bound
      local bms = string.find(bound, '-', 1, true) == 14 and string.sub(bound, 1, 14)
      for k = 1, #ids do
        local id = ids[k]
        local later
        if #id == nb then
          later = id >= bound
        elseif bms and string.find(id, bms, 1, true) == 1 then
          later = #id > nb
        elseif bms and string.byte(id, 14) == 45 then
          later = id > bound
        else
          later = stream_id_at_least(id, bound)
        end
        if later then
          behind = behind or {}
          behind[#behind + 1] = id
        end
      end
    end
    if behind then
      in_runs(behind, function(from, to) redis.call('XDEL', stream, unpack(behind, from, to)) end)
    end
  else
    in_runs(ids, function(from, to) redis.call('XDEL', stream, unpack(ids, from, to)) end)
  end
end

-- Acknowledge a batch of done entries of one stream, then trim it (see trim_done).
local function ack_trim(stream, group, ids, xackdel)
  if xackdel == '1' then
    ack_del_many(stream, group, ids, xackdel)
    return
  end
  ack(stream, group, ids)
  trim_done(stream, group, ids, xackdel)
end

-- The settings the broker publishes in the config hash, each read at most once per call.
-- `prefetch` (optional) names the fields the call reads for sure, read with one HMGET: at one
-- job a call every command counts (a `redis.call` costs Redis ~4 us before its own work).

-- The hot functions' prefetch lists, made once with the library (see settings).
local FIELDS = {
  submit = { 'events_max', 'bridged', 'accept_eviction' },
  submit_unique = { 'events_max', 'bridged', 'accept_eviction', 'retention_ms' },
  renew = { 'events_max' },
}

-- A prefetch list's field -> position in its HMGET answer is kept in the list (`at`), made
-- once for the lists made once with the library (FIELDS): keeping the answer as it came, no
-- table of fields built from it each call, saved Redis ~6 k instructions a call.
local function settings(config, prefetch)
  if not prefetch then return { key = config } end
  local at = prefetch.at
  if not at then
    at = {}
    for k, f in ipairs(prefetch) do at[f] = k end
    prefetch.at = at
  end
  return { key = config, got = redis.call('HMGET', config, unpack(prefetch)), at = at }
end

-- A field's text as the config hash holds it (nil when absent), prefetched or read now.
local function raw_setting(cfg, field)
  local at = cfg.at
  local k = at and at[field]
  if k then return cfg.got[k] or nil end
  return redis.call('HGET', cfg.key, field)
end

local function setting(cfg, field, default)
  local v = cfg[field]
  if v == nil then
    v = tonumber(raw_setting(cfg, field)) or default
    cfg[field] = v
  end
  return v
end

-- A numeric setting as the text a command argument takes, formatted once per call: Redis turns a
-- Lua number argument into text with printf, which is a visible cost when done once per job.
local function setting_arg(cfg, field, default)
  local args = cfg.args
  if not args then
    args = {}
    cfg.args = args
  end
  local v = args[field]
  if v == nil then
    v = string.format('%d', setting(cfg, field, default))
    args[field] = v
  end
  return v
end

-- A text setting ('' when the broker has not published it).
local function setting_text(cfg, field)
  local v = cfg[field]
  if v == nil then
    v = raw_setting(cfg, field) or ''
    cfg[field] = v
  end
  return v
end

-- How long the maxmemory policy read from INFO is trusted before a submit reads it again: the
-- submits of that window are all that can be accepted after the policy turns to an evicting
-- one. INFO, not CONFIG: managed Redis often disables CONFIG, and INFO memory costs ~3 us, so
-- reading it on every call would show on the hot path.
local MEMORY_CHECK_MS = 1000

-- The server's maxmemory policy: from the memory flag while it holds one, else (or with `fresh`)
-- from INFO, kept in the flag for MEMORY_CHECK_MS. A flag an evicting Redis evicted is read
-- again: it fails towards looking.
local function memory_policy(flag, fresh)
  if not fresh then
    local p = redis.call('GET', flag)
    if p then return p end
  end
  local p = string.match(redis.call('INFO', 'memory'), 'maxmemory_policy:([%w%-]+)') or 'unknown'
  redis.call('SET', flag, p, 'PX', MEMORY_CHECK_MS)
  return p
end

-- nil when jobs may be accepted under the server's maxmemory policy, else the refusal: any
-- policy but noeviction may evict a job's record, losing it without a trace, unless the
-- operator accepted that policy by name (`accept_eviction` in the config hash, written by
-- `hero broker --accept-eviction <policy>`). `cfg` has `accept_eviction` prefetched.
local function refuse_evicting(cfg)
  local p = memory_policy(memory_key_of(cfg.key))
  if p == 'noeviction' or setting_text(cfg, 'accept_eviction') == p then return nil end
  return redis.error_reply('HERO_EVICTING ' .. p)
end

-- The event log: every change of a job's state is logged by the call that makes it (so there is no
-- event without its change, and no change without its event), in a stream capped at about
-- `events_max` entries (a broker setting, 10000 by default; 0 turns the log off). An entry has
-- `e` the event, `j` the job id and, where they apply, `q` the work stream, `w` the worker
-- (consumer name, or a legacy worker id), `a` the attempt, `r` the reason or detail, `d` the time
-- (ms) a waiting job is due. The entry id is the time of the change.
-- Jobs of one call that share event, stream and worker, and have no reason or due time, share one
-- entry: `j` then holds their ids and `a` their attempts, each separated by single spaces. An
-- entry per job cost Redis ~20 k instructions a job per event (a third more for the worker path);
-- a shared one costs ~1 k.
-- The cap as the XADD's MAXLEN takes it, by the config's text (absent: ''), made once per text
-- and library load: read through setting_arg each call it cost Redis ~10 k instructions a call.
local EVENTS_MAX = {}
local function event_log(key, cfg)
  local raw = raw_setting(cfg, 'events_max') or ''
  local max = EVENTS_MAX[raw]
  if not max then
    max = setting_arg(cfg, 'events_max', 10000)
    EVENTS_MAX[raw] = max
  end
  if max == '0' then return false end
  return { key = key, max = max }
end

-- One entry of its own, written now. Returns its id (Redis's clock now: callers that need the
-- time read it there instead of calling TIME), nil when the log is off.
local function log_event(log, event, job_id, queue, worker, attempt, reason, due)
  if not log then return nil end
  local f = { 'XADD', log.key, 'MAXLEN', '~', log.max, '*', 'e', event, 'j', job_id }
  if queue and queue ~= '' then f[#f + 1] = 'q'; f[#f + 1] = queue end
  if worker and worker ~= '' then f[#f + 1] = 'w'; f[#f + 1] = worker end
  if attempt then f[#f + 1] = 'a'; f[#f + 1] = attempt end
  if reason and reason ~= '' then f[#f + 1] = 'r'; f[#f + 1] = reason end
  if due then f[#f + 1] = 'd'; f[#f + 1] = due end
  return redis.call(unpack(f))
end

-- The attempts of c first deliveries as a shared entry writes them ('1 1 ... 1'), made once per
-- count and library load.
local ONES = {}
local function ones_text(c)
  local t = ONES[c]
  if not t then
    t = string.rep('1 ', c - 1) .. '1'
    ONES[c] = t
  end
  return t
end

-- The shared entry of `ids` (a list of job ids of one stream and worker, with their `attempts`
-- when given: a list, or true when every one is a first delivery): one entry for all but those
-- whose id holds a space (a legacy id), which get one of their own. The hot functions collect
-- the lists inline as they go: calling a helper per job cost Redis ~5 k instructions a job.
-- Returns the id of the last entry written (see log_event).
local function log_shared(log, event, ids, queue, worker, attempts)
  if not log or #ids == 0 then return nil end
  -- one search of the ids run together instead of one an id (a C call a job): only when some
  -- id holds a space is each one looked at
  if not string.find(table.concat(ids), ' ', 1, true) then
    local a = nil
    if attempts == true then
      a = ones_text(#ids)
    elseif attempts then
      a = table.concat(attempts, ' ')
    end
    return log_event(log, event, table.concat(ids, ' '), queue, worker, a)
  end
  if attempts == true then
    attempts = {}
    for k = 1, #ids do attempts[k] = '1' end
  end
  for k = 1, #ids do
    if string.find(ids[k], ' ', 1, true) then
      local plain, plain_attempts = {}, {}
      for m = 1, #ids do
        if string.find(ids[m], ' ', 1, true) then
          log_event(log, event, ids[m], queue, worker, attempts and attempts[m])
        else
          plain[#plain + 1] = ids[m]
          if attempts then plain_attempts[#plain_attempts + 1] = attempts[m] end
        end
      end
      if attempts then attempts = plain_attempts end
      ids = plain
      if #ids == 0 then return nil end
      break
    end
  end
  local a = nil
  if attempts then a = table.concat(attempts, ' ') end
  return log_event(log, event, table.concat(ids, ' '), queue, worker, a)
end

-- Stats kept on write, so that reading them costs O(queues), never O(jobs). In the stats hash,
-- per work stream `<stream>`: counters `<stream>|finished`, `|failed` (ended error, whatever the
-- reason), `|retried`, `|recovered`, `|dead`, the gauge `|delayed` (jobs of the stream waiting in
-- the delayed set), and histograms `<stream>|wait|<b>` (dispatch to start) and `<stream>|run|<b>`
-- (start to end), where bucket b holds the times of [2^b - 1, 2^(b+1) - 1) ms, and their totals
-- `<stream>|wait|sum`, `<stream>|run|sum` (ms: a Prometheus histogram has a sum). The counters that
-- make rates are also counted per minute in `<stats hash>:<minute>`, the minute as the first 16
-- characters of the call's now ISO 8601 (`2026-11-23T11:40`: no clock read), which expires two
-- hours after its first write. A call gathers its increments and writes each field once.
local function stats(key, now_iso)
  -- the tables are made by the first tally of the call (a fetch that leases nothing tallies
  -- nothing): each table made costs Redis ~0.7 k instructions a call
  return { key = key, iso = now_iso }
end

local function tally(st, stream, name, n, per_minute)
  local f = stream .. '|' .. name
  local inc = st.inc
  if not inc then
    inc = {}
    st.inc, st.order = inc, {}
  end
  local v = inc[f]
  if v == nil then
    st.order[#st.order + 1] = f
    v = 0
  end
  inc[f] = v + n
  if per_minute and st.iso then
    local minute = st.minute
    if not minute then
      minute = {}
      st.minute, st.morder = minute, {}
    end
    v = minute[f]
    if v == nil then
      st.morder[#st.morder + 1] = f
      v = 0
    end
    minute[f] = v + n
  end
end

local LN2 = 0.6931471805599453 -- ln 2 (math is not reachable while the library loads)

-- The histogram `name` (wait or run) of `stream` in this call: the callers add a sample of t ms
-- inline as `h[b] = (h[b] or 0) + 1`, b = floor(log2(t + 1)) (bucket b holds [2^b - 1, 2^(b+1) - 1)),
-- and t to `h.sum`. Its fields' names, `<prefix><b>`, are kept once made (BUCKETS, per
-- histogram, each name made at its first write: see flush_stats): a number made text costs
-- Redis ~2.7 k instructions, a table lookup ~0.2 k. The library's state outlives its calls, so
-- the cache is let go once it names BUCKETS_MAX histograms (streams come and go).
local BUCKETS, BUCKETS_N, BUCKETS_MAX = {}, 0, 10000
local function histogram(st, stream, name)
  local prefix = stream .. '|' .. name .. '|'
  local names = BUCKETS[prefix]
  if not names then
    if BUCKETS_N >= BUCKETS_MAX then BUCKETS, BUCKETS_N = {}, 0 end
    names = { prefix = prefix, sum = prefix .. 'sum' }
    BUCKETS[prefix], BUCKETS_N = names, BUCKETS_N + 1
  end
  local h = { sum = 0, names = names }
  local hists = st.hists
  if not hists then
    hists = {}
    st.hists = hists
  end
  hists[#hists + 1] = h
  return h
end

-- Adds to histogram `h` the waits of the jobs at positions lo .. hi (steps of 3) of a fetch's
-- flat jobs list (an entry id at +1), the entries of one stream's reads in id order: when the
-- first and the last share their millisecond every job between does, and one sample counts
-- them all; else the run is halved (`lo_ms`, `hi_ms`: the ends' milliseconds, when known). A
-- fetch's entries mostly come from a few submit calls, each appended in one millisecond, so a
-- fetch of 25 reads a handful of ids, not 25 (a match a job cost Redis ~3 k instructions).
local function sample_waits(h, jobs, lo, hi, now_ms, lo_ms, hi_ms)
  lo_ms = lo_ms or string.match(jobs[lo + 1], '^%d+')
  if lo == hi then
    hi_ms = lo_ms
  else
    hi_ms = hi_ms or string.match(jobs[hi + 1], '^%d+')
  end
  if lo_ms == hi_ms then
    local run, b = (hi - lo) / 3 + 1, 0
    local waited = now_ms - (tonumber(lo_ms) or now_ms)
    if waited > 0 then b = math.floor(math.log(waited + 1) / LN2) else waited = 0 end
    h[b] = (h[b] or 0) + run
    h.sum = h.sum + waited * run
    return
  end
  local mid = lo + 3 * math.floor((hi - lo) / 6)
  sample_waits(h, jobs, lo, mid, now_ms, lo_ms, nil)
  sample_waits(h, jobs, mid + 3, hi, now_ms, nil, hi_ms)
end

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The last second iso_of wrote, its text up to the fraction, and the fractions written
-- (`.123Z` by ms): the library's state outlives a call, and the calls of one second (a fetch and
-- a completion each stamp their jobs) then pay a concatenation, not the calendar (~30 k
-- instructions a call, measured with benches/profile_functions.py).
local ISO = { secs = -1, head = '', frac = {} }

-- Time `ms` (ms since the epoch) as ISO 8601 UTC with milliseconds, as the clients write it.
local function iso_of(ms)
  local secs = math.floor(ms / 1000)
  local c = ISO
  if secs == c.secs then
    local r = ms - secs * 1000
    local f = c.frac[r]
    if not f then
      f = string.format('.%03dZ', r)
      c.frac[r] = f
    end
    return c.head .. f
  end
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  -- civil date of a day count (Howard Hinnant's algorithm)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if m > 12 then m = m - 12 end
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  c.secs = secs
  c.head = string.format('%04d-%02d-%02dT%02d:%02d:%02d', y, m, d, math.floor(rem / 3600),
    math.floor(rem % 3600 / 60), rem % 60)
  return iso_of(ms)
end

-- Redis's clock as ISO 8601 UTC with milliseconds, as the clients write it.
local function iso_now()
  return iso_of(server_ms())
end

-- The ms since the epoch an ISO 8601 UTC time of the clients' form names
-- ('2026-11-28T06:41:47.123Z', the fraction optional), or nil.
local function iso_ms(s)
  local y, mo, d, h, mi, se = string.match(s or '', '^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)')
  if not y then return nil end
  y, mo = tonumber(y), tonumber(mo)
  local frac = string.match(s, '^%.(%d+)', 20)
  local ms = frac and math.floor(tonumber(string.sub(frac .. '00', 1, 3))) or 0
  -- days from civil (Howard Hinnant's algorithm)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (mo + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + tonumber(d) - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000 + tonumber(se) * 1000 + ms
end

-- A due time `at` (ms) a caller computed on its own clock, whose time then was `caller_ms`,
-- moved to Redis's clock: the delay it meant kept, the caller's clock's error taken out. A
-- caller within SKEW_MS of Redis keeps its own value (no rounding of a well-kept clock).
local SKEW_MS = 1000
local function rebased(at, caller_ms, now)
  if not caller_ms then return at end
  local skew = now - caller_ms
  if skew > SKEW_MS or skew < -SKEW_MS then return at + skew end
  return at
end

-- Increments go out as text made with '%d' (a Lua number argument becomes text through printf's
-- '%.17g', ~3 k instructions more an increment), the small ones once per library load (COUNTS).
local COUNTS = {}
local function count_text(n)
  local t = COUNTS[n]
  if not t then
    t = string.format('%d', n)
    if n >= 0 and n < 4096 then COUNTS[n] = t end
  end
  return t
end

local function flush_stats(st)
  local order, inc, key = st.order, st.inc, st.key
  if order then
    for k = 1, #order do
      local f = order[k]
      redis.call('HINCRBY', key, f, count_text(inc[f]))
    end
  end
  local morder = st.morder
  if morder then
    local at = minute_key(key, st.iso)
    local fresh, minute = false, st.minute
    for k = 1, #morder do
      local f = morder[k]
      local n = minute[f]
      -- the field's first write this minute is the one whose total is its own increment: the
      -- key's TTL is set then, not on every call (a command a call at low rates)
      if redis.call('HINCRBY', at, f, count_text(n)) == n then fresh = true end
    end
    if fresh then redis.call('EXPIRE', at, '7200') end
  end
  local hists = st.hists
  if hists then
    for k = 1, #hists do
      local h = hists[k]
      local names = h.names
      for b, n in pairs(h) do
        if b ~= 'names' and n ~= 0 then
          local field = names[b]
          if not field then
            field = names.prefix .. string.format('%d', b)
            names[b] = field
          end
          redis.call('HINCRBY', key, field, count_text(n))
        end
      end
    end
  end
  st.inc, st.order, st.minute, st.morder, st.hists = nil, nil, nil, nil, nil
end

-- The queue registry: which work streams exist, which are paused, and appending a job.

-- The parts of a work stream key, `<prefix>:q:work:type:<t>[:group:<g>[:inst:<i>]][:prio:<p>]`,
-- as { prefix, type, group, instance, priority } (group, instance false when absent; priority
-- '5' when absent), or false when the key is not of this form. Parsed once per stream per call.
local function stream_parts(stream)
  local prefix, rest = string.match(stream, '^(.*):q:work:type:(.+)$')
  if not prefix then return false end
  local p = { prefix = prefix, group = false, instance = false, priority = '5' }
  local path, prio = string.match(rest, '^(.-):prio:(%d)$')
  if path then rest, p.priority = path, prio end
  local t, g = string.match(rest, '^([^:]+):group:(.+)$')
  if t then
    p.type = t
    local g2, i = string.match(g, '^([^:]+):inst:([^:]+)$')
    if g2 then p.group, p.instance = g2, i else p.group = g end
  else
    p.type = rest
  end
  return p
end

-- Paused queues (see hero_pause): `<registry>:paused:names` holds the names an operator paused,
-- `<type>`, `<type>/<group>` or `<type>/<group>/<instance>`, each covering every stream under
-- it at any priority; `<registry>:paused` holds the streams so covered, moved out of the
-- registry, so the fetch (which asks the registry) skips them at no cost of its own.
-- Whether the name `name` covers the stream of parts `p` (see stream_parts).
local function covers(name, p)
  if not p then return false end
  local t, rest = string.match(name, '^([^/]+)/?(.*)$')
  if t ~= p.type then return false end
  if rest == '' then return true end
  local g, i = string.match(rest, '^([^/]+)/?(.*)$')
  if g ~= p.group then return false end
  return i == '' or i == p.instance
end

-- Wakes the workers blocked on the registry's signal stream: `stream` joined the registry (new,
-- or resumed), or left it (paused). They watch only the streams that existed at their last
-- fetch, and a worker that names only the registered streams (hero_fetch's ARGV[9]) learns from
-- the signal's last id that its list is out of date: every change of the registry announces.
local function announce(registry, stream)
  redis.call('XADD', queue_signal_key(registry), 'MAXLEN', '~', '100', '*', 's', stream)
end

-- Whether a paused name covers `stream`. Asked only when a stream joins the registry (a new
-- stream, or one of a paused queue that a submit appended to), never on the hot path.
local function paused_by(registry, stream)
  if redis.call('SISMEMBER', paused_key(registry), stream) == 1 then return true end
  local names = redis.call('SMEMBERS', paused_names_key(registry))
  if #names == 0 then return false end
  local p = stream_parts(stream)
  for _, name in ipairs(names) do
    if covers(name, p) then return true end
  end
  return false
end

-- Make a work stream a queue on first use: the stream, its group and its registry entry (the
-- registry names every work stream: the fetch and recovery read it). `known` (optional) is a
-- per-call set of streams already seen, so a batch onto one stream asks once, not once per
-- job. A registered stream is taken to have its group: one that was deleted or lost its group
-- by hand gets it back at the next fetch (see hero_fetch), which spares every submit an EXISTS.
-- Appending a job is gate.lua's `append`.
local function register(stream, group, registry, known)
  if not (known and known[stream]) then
    if redis.call('SADD', registry, stream) == 1 then
      -- new, or a stream made by hand (or whose registration was lost): it becomes a queue
      -- here, with its group (which a stream made by hand may have already)
      if redis.call('EXISTS', stream) == 0 then
        redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
      else
        redis.pcall('XGROUP', 'CREATE', stream, group, '0')
      end
      -- a queue an operator paused stays out of the registry the fetch reads (see hero_pause);
      -- any other new stream is announced to the workers waiting without watching it
      if paused_by(registry, stream) then
        redis.call('SMOVE', registry, paused_key(registry), stream)
      else
        announce(registry, stream)
      end
    end
    if known then known[stream] = true end
  end
end

-- the id of the stream's last entry into cursors[i] (left as it is when the stream is empty or
-- not a stream)
local function cursor_of(cursors, i, stream)
  local last = redis.pcall('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  if type(last) == 'table' and last[1] then cursors[i] = last[1][1] end
end

-- The wake-up cursors of a fetch that came up short. A registered stream's cursor is its last
-- entry (the last read, when the read reached the end). An unregistered one is '0-0' (XREAD from
-- there blocks until its first entry) unless something made it by hand with entries in it, which
-- must not wake the worker at once, over and over: one EXISTS asks that of all of them (a worker
-- names 30 streams a type; an XREVRANGE each cost Redis 10 calls a job at 5,000 jobs/s). Only
-- streams that can deliver are watched: a registered one (from its last entry, '0-0' when empty)
-- and one made by hand with entries; the others get '' (not watched: an XREAD BLOCK over 30
-- streams cost Redis ~50 us a wake, most of it for streams that never get an entry). A stream
-- that appears later announces itself on the registry's signal stream (`<registry>:new`, see
-- append), whose cursor comes last.
local function wake_cursors(f)
  local cursors, keys, n, last_read, present = {}, f.keys, f.n, f.last_read, f.present
  local unregistered, made = {}, 0
  for i = 1, n do
    cursors[i] = ''
    if last_read[i] then
      cursors[i] = last_read[i]
    elseif present[i] == 1 then
      cursors[i] = '0-0'
      cursor_of(cursors, i, keys[i + 4])
    else
      unregistered[#unregistered + 1] = keys[i + 4]
    end
  end
  for from = 1, #unregistered, 1000 do
    made = made + redis.call('EXISTS', unpack(unregistered, from, math.min(#unregistered, from + 999)))
  end
  if made > 0 then
    for i = 1, n do
      if present[i] ~= 1 then cursor_of(cursors, i, keys[i + 4]) end
    end
  end
  if f.signal then
    cursors[n + 1] = f.signal
  else
    cursors[n + 1] = '0-0'
    cursor_of(cursors, n + 1, queue_signal_key(keys[1]))
  end
  return cursors
end

-- A registry that is gone while queues are not (an evicting Redis an operator accepted evicts
-- any key): the caller's streams that exist are registered again (announced, paused ones kept
-- out), or no worker would ever see their jobs. Asked only when none of the caller's streams
-- is registered (an idle worker's fetch: one EXISTS), never on the hot path.
local function reregister(f)
  local keys = f.keys
  for i = 1, #f.present do if f.present[i] == 1 then return end end
  if redis.call('EXISTS', keys[1]) == 1 or #keys < 5 then return end
  if redis.call('EXISTS', unpack(keys, 5, math.min(#keys, 1004))) == 0 then return end
  for i = 5, #keys do
    if redis.call('EXISTS', keys[i]) == 1 then
      register(keys[i], f.group, keys[1])
      f.present[i - 4] = redis.call('SISMEMBER', keys[1], keys[i])
    end
  end
end

-- What a submitted record may hold, and the form of each value: the checks a worker's decoder
-- makes (docs/protocol.md §3), made at submit so that a bad job from any language fails there,
-- loudly, before anything of its batch is written. A field named `x_...` or `x-...` is an
-- extension, stored and ignored. The system's own fields (status, attempts, lease, ...) are the
-- functions' to write.
local SUBMIT_FIELDS = {
  id = 'text', script = 'text', script_type = 'name', group = 'name', instance = 'name',
  priority = 'level', timeout = 'count', retries = 'count', concurrent = 'bool', reply = 'reply',
  created_at = 'time', updated_at = 'time', env_vars = 'object', prerequisites = 'list',
  dependencies = 'list', dependents = 'list', tags = 'list', caller_id = 'text',
  context_id = 'text', log_path = 'text', traceparent = 'trace', unique = 'text',
  unique_ttl = 'count', payload = 'text', limit_key = 'text', batch = 'name',
  backoff = 'backoff', keep = 'count', keep_failed = 'count',
}

-- The fields whose values refuse keeps, or checks against the job: one lookup a field, where
-- the chain of comparisons cost Redis ~1 k instructions a field it does not name (a payload).
local KEPT_FIELDS = {
  script = true, script_type = true, group = true, instance = true, priority = true, id = true,
  unique = true, unique_ttl = true, tags = true, batch = true, keep = true, keep_failed = true,
  prerequisites = true, dependencies = true,
}

-- Why the value `v` is not of form `kind` (nil when it is).
local function bad_value(kind, v)
  if kind == 'text' then return nil end
  if kind == 'name' then
    if #v < 1 or #v > 64 or not string.match(v, '^[%w_%-]+$') then
      return 'is not 1-64 characters of [A-Za-z0-9_-]'
    end
  elseif kind == 'level' then
    if not string.match(v, '^%d$') then return 'is not a priority level 0 to 9' end
  elseif kind == 'count' then
    if not string.match(v, '^%d+$') then return 'is not a whole number' end
  elseif kind == 'bool' then
    if v ~= 'true' and v ~= 'false' then return 'is not true or false' end
  elseif kind == 'reply' then
    if v ~= '1' and v ~= '' then return 'is not 1' end
  elseif kind == 'trace' then
    -- W3C trace context: version-trace id-parent id-flags, lowercase hex
    local h = '[0-9a-f]'
    if not string.match(v, '^' .. h .. h .. '%-' .. string.rep(h, 32) .. '%-' .. string.rep(h, 16) .. '%-' .. h .. h .. '$') then
      return 'is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)'
    end
  elseif kind == 'backoff' then
    -- a job's own back-off, as a queue policy writes one (`Backoff` in policy.rs)
    local ok, b = pcall(cjson.decode, v)
    if not ok or type(b) ~= 'table' then return 'is not a JSON object {kind, base_ms, cap_ms, jitter}' end
    if b.kind ~= 'fixed' and b.kind ~= 'exponential' then return 'has a kind that is not fixed or exponential' end
    for _, f in ipairs({ 'base_ms', 'cap_ms' }) do
      local n = b[f]
      if (f == 'base_ms' or n ~= nil) and (type(n) ~= 'number' or n < 0 or n ~= math.floor(n)) then
        return 'has a ' .. f .. ' that is not a whole number of ms'
      end
    end
    if b.jitter ~= nil and (type(b.jitter) ~= 'number' or b.jitter < 0 or b.jitter > 1) then
      return 'has a jitter that is not a number from 0 to 1'
    end
  elseif kind == 'time' then
    if not string.match(v, '^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d') then
      return 'is not an RFC 3339 timestamp'
    end
  elseif v ~= '' then
    local ok, t = pcall(cjson.decode, v)
    if not ok or type(t) ~= 'table' then return 'is not JSON ' .. kind end
    local n = 0
    for k, x in pairs(t) do
      n = n + 1
      if type(x) ~= 'string' then return 'holds a value that is not a string' end
      if kind == 'object' and type(k) ~= 'string' then return 'is not a JSON object' end
    end
    if kind == 'list' and n ~= #t then return 'is not a JSON array' end
  end
  return nil
end

-- A queue as a refusal names it: group and instance `none` where there is none.
local function queue_text(stype, grp, inst, prio)
  return 'type ' .. tostring(stype or 'none') .. ', group ' .. (grp or 'none') .. ', instance ' ..
    (inst or 'none') .. ', priority ' .. tostring(prio)
end

-- Why the record of one submitted job is refused (nil when it is fine), then its uniqueness
-- key and TTL, its tags, its prerequisites (JSON text), its batch when it has them, and whether
-- it has a retention of its own (`keep`, `keep_failed`: see keep_ttl). A record without
-- `script_type` is of its stream's type (hero_submit writes it):
-- `args` from `from` to `to` are its field/value pairs, `stream`
-- its work stream; `parsed` caches stream_parts per stream for the call, and in `parsed.good`
-- the values found good (the caller makes it, { good = {} }, for a call of several jobs: for one
-- job the tables would cost more than they save). Written out for the common case, a few fields of plain text: a table
-- or a string built per job here cost Redis several thousand instructions a job.
local function refuse(job_id, stream, args, from, to, parsed)
  local script, stype, grp, inst, prio = nil, nil, false, false, '5'
  local uniq, uttl, tags, prereqs, batch, kept = nil, nil, nil, nil, nil, false
  for k = from, to, 2 do
    local name, v = args[k], args[k + 1]
    local kind = SUBMIT_FIELDS[name]
    if not kind then
      local p = string.sub(name, 1, 2)
      if p ~= 'x_' and p ~= 'x-' then
        return 'field `' .. name .. '` is not a field a submit may write (an extension is named x_...)'
      end
    else
      if kind ~= 'text' then
        -- the jobs of a batch mostly carry the same values (a type, tags, a timestamp of the
        -- same millisecond): each value is checked once a call per form (`parsed.good`, form ->
        -- value -> true); a JSON value is decoded to be checked, a pattern matched
        local memo = parsed.good
        local good = memo and memo[kind]
        if memo and not good then
          good = {}
          memo[kind] = good
        end
        if not (good and good[v]) then
          local why = bad_value(kind, v)
          if why then return 'field `' .. name .. '` ' .. why end
          if good then good[v] = true end
        end
      end
      if KEPT_FIELDS[name] then
        if name == 'script' then script = v
        elseif name == 'script_type' then stype = v
        elseif name == 'group' then grp = v
        elseif name == 'instance' then inst = v
        elseif name == 'priority' then prio = v
        elseif name == 'id' and v ~= job_id then return 'field `id` is not the job id ' .. job_id
        elseif name == 'unique' then
          if #v < 1 or #v > 200 then return 'field `unique` is not 1-200 characters' end
          uniq = v
        elseif name == 'unique_ttl' then uttl = v
        elseif name == 'tags' and v ~= '' and v ~= '[]' then tags = v
        elseif name == 'batch' then batch = v
        elseif name == 'keep' or name == 'keep_failed' then kept = true
        elseif (name == 'prerequisites' or name == 'dependencies') and v ~= '' and v ~= '[]' then
          if prereqs then return 'fields `prerequisites` and `dependencies` are one list: give one' end
          prereqs = v
        end
      end
    end
  end
  if not script then return 'field `script` is missing' end
  if inst and not grp then
    return 'field `instance` needs a `group`: an instance is named within its group (queue <type>/<group>/<instance>)'
  end
  local p = parsed[stream]
  if p == nil then
    p = stream_parts(stream)
    parsed[stream] = p
  end
  if not p then
    return 'its stream ' .. stream .. ' is not a work stream (its record names ' ..
      queue_text(stype, grp, inst, prio) .. ')'
  end
  stype = stype or p.type
  if p.type ~= stype or p.group ~= grp or p.instance ~= inst or p.priority ~= prio then
    return 'its stream ' .. stream .. ' is the queue of ' ..
      queue_text(p.type, p.group, p.instance, p.priority) .. ', but its record names ' ..
      queue_text(stype, grp, inst, prio)
  end
  if uttl and not uniq then return 'field `unique_ttl` needs a `unique` key' end
  if uttl == '0' or (uttl and string.match(uttl, '^0+$')) then
    return 'field `unique_ttl` is not at least 1 (ms)'
  end
  return nil, uniq, uttl, tags, prereqs, batch, kept
end

-- Ending a job: the reply to a waiting caller, the retention entry, the terminal write.

-- Answer a waiting caller: the JSON reply on the canonical list and, in compatibility mode
-- (the broker published the legacy reply prefix), the bare text on the legacy list
-- `hero:reply:<id>` that seed-001 callers BLPOP.
-- A job moved in from a legacy list has reply 'legacy': only the legacy list is answered.
-- A reply key holding another type (foreign data) gets no answer, and fails nothing: callers
-- such as hero_complete have acknowledged entries before they answer.
local function push_reply(job_id, reply_key, cfg, status, output, err, canonical, legacy_too)
  local ttl = setting_arg(cfg, 'reply_ttl_ms', 3600000)
  local function answer(key, text)
    local pushed = redis.pcall('LPUSH', key, text)
    if type(pushed) ~= 'table' then redis.call('PEXPIRE', key, ttl) end
  end
  if canonical then
    answer(reply_key, cjson.encode({ status = status, output = output, error = err }))
  end
  local legacy = setting_text(cfg, 'legacy_reply_prefix')
  if legacy_too and legacy ~= '' then
    local text = output
    if status ~= 'finished' then text = err end
    answer(legacy .. job_id, text)
  end
end

-- The jobs one call ends, for the retention stream: a job gets no TTL of its own (a PEXPIRE per
-- job was 8 % of the worker path's cost to Redis); the call adds one entry naming all of them,
-- and the broker deletes them once the retention time has passed (hero_expire). Every job a call
-- ends shares its `finished_at`, `now_iso`, which the entry carries so that a job ended again
-- later (retried by hand) is not deleted early on the strength of the older entry.
local function retained(stream, now_iso)
  return { key = stream, t = now_iso, ids = {} }
end

-- One retention entry (hero_expire reads it): `t` the finished_at, `j` the ids joined by spaces.
local function add_retention_entry(stream, now_iso, joined_ids)
  redis.call('XADD', stream, '*', 't', now_iso, 'j', joined_ids)
end

local function flush_retained(done)
  if #done.ids > 0 then add_retention_entry(done.key, done.t, table.concat(done.ids, ' ')) end
end

-- Register a job that just ended (its finished_at = done.t) for retention.
local function retain(done, job_key, job_id, cfg)
  if string.find(job_id, ' ', 1, true) then
    -- a legacy job id with a space cannot go into the entry's list: it gets a TTL instead
    redis.call('PEXPIRE', job_key, setting_arg(cfg, 'retention_ms', 86400000))
  else
    done.ids[#done.ids + 1] = job_id
  end
end

-- The index of a dead letter to write into its job's record (`dead`, the entry id `letter`), or
-- nil while a reader older than protocol 29 is live (the brokers' `fleet_lacks` names `trace`,
-- the feature of 29 such a reader lacks): it refuses a record field it does not know, and a
-- reader finds an unindexed letter among the newest ones instead.
local function dead_index(cfg, letter)
  local lacks = raw_setting(cfg, 'fleet_lacks')
  if lacks and string.find(lacks, '"trace"', 1, true) then return nil end
  return letter
end

-- Write a terminal status at finished_at = now_iso, and answer a waiting caller. finished_at is
-- the record's updated_at from then on (a reader takes the latest of the timestamps). `done`
-- registers the job for retention (see retained); nil when the caller names its jobs in a
-- retention entry itself. Returns false, having written nothing, when the job key holds another
-- type (foreign data): a caller that did not read the record first must not fail the rest of its
-- call on it. `dead` (a dead-letter entry id, or nil) is written as the record's `dead` in the
-- same HSET: the index by which a reader finds the job's letter without scanning the stream.
local function finish(job_key, job_id, reply_key, cfg, status, text, wants_reply, now_iso, done, dead)
  local field = 'error'
  if status == 'finished' then field = 'output' end
  local w
  if dead then
    w = redis.pcall('HSET', job_key, 'status', status, field, text, 'finished_at', now_iso, 'dead', dead)
  else
    w = redis.pcall('HSET', job_key, 'status', status, field, text, 'finished_at', now_iso)
  end
  if type(w) == 'table' and w.err then return false end
  if done then retain(done, job_key, job_id, cfg) end
  if wants_reply == '1' or wants_reply == 'legacy' then
    local output, err = '', ''
    if field == 'output' then output = text else err = text end
    push_reply(job_id, reply_key, cfg, status, output, err, wants_reply == '1', true)
  end
  return true
end

-- A failed attempt's trace (a Python traceback, a Node stack, a Rust error chain), as the worker
-- gave it to hero_complete: kept in the record's `trace` field, cut at TRACE_MAX bytes whatever
-- the caller sent, so a runaway traceback cannot grow a record without bound. Each failure
-- hero_complete records replaces it (a failure given none removes it), so the field is always
-- the last recorded failure's; a success leaves it, as the reason the job was retried.
local TRACE_MAX = 16384

local function store_trace(job_key, trace)
  if trace and trace ~= '' then
    redis.pcall('HSET', job_key, 'trace', string.sub(trace, 1, TRACE_MAX))
  else
    redis.pcall('HDEL', job_key, 'trace')
  end
end

-- A job's own retention (docs/operations.md): `keep` (ms) once it finished, `keep_failed` once it
-- ended error, each at least KEEP_FLOOR_MS, so that a wait already waiting (which reads the record
-- when the end's event reaches it) still finds it: 0 means as soon as that is safe. Read only
-- while some job was ever submitted with one (the config hash's `kept`, set by hero_submit), so a
-- namespace that never used it pays nothing.
local KEEP_FLOOR_MS = 10000
local KEPT_FIELD = 'kept'

-- The TTL (ms) a job that just ended `status` gets: the larger of its own retention and `other`
-- (its queue policy's, or nil), as a queue policy's retries are a floor under a job's own; nil
-- when neither sets one (the broker's retention pass deletes it then).
local function keep_ttl(cfg, job_key, status, other)
  if setting(cfg, KEPT_FIELD, 0) > 0 then
    local field = 'keep_failed'
    if status == 'finished' then field = 'keep' end
    local own = tonumber(redis.pcall('HGET', job_key, field))
    if own then
      own = math.max(own, KEEP_FLOOR_MS)
      if other == nil or own > (tonumber(other) or 0) then return own end
    end
  end
  return other
end

-- Entries and the legacy side: what a work stream entry carries, and the dual-push bridge
-- that hands a job to a legacy list as well.

-- What a work stream entry carries (see append): the job id ('' when it has none), the
-- attempts made before this delivery (nil on a first one), whether it was dual-pushed, and
-- whether it is a wake-up (`w`: hero_pause's resume writes one to wake the workers blocked on
-- the stream; it names no job).
local function entry_fields(f)
  local job_id, attempts, dual, wake = '', nil, false, false
  for k = 1, #f, 2 do
    local name = f[k]
    if name == 'j' then job_id = f[k + 1]
    elseif name == 'a' then attempts = f[k + 1]
    elseif name == 'b' then dual = true
    elseif name == 'w' then wake = true end
  end
  return job_id, attempts, dual, wake
end

-- The dual-push mapping of `stream` (its JSON from the registry `bridges`, decoded), or false;
-- asked only while the broker published any (`bridged` in the config hash), and once per
-- stream per call (`memo`, a table the call keeps, remembers it in `memo.dual`).
local function dual_push_mapping(cfg, bridges, stream, memo)
  memo.dual = memo.dual or {}
  local m = memo.dual[stream]
  if m == nil then
    local raw = setting(cfg, 'bridged', 0) > 0 and redis.call('HGET', bridges, stream)
    m = raw and cjson.decode(raw) or false
    memo.dual[stream] = m
  end
  return m
end

-- Hands a dual-pushed job, queued as `entry`, to its mapping's legacy list as well: the record
-- names the list, its stop queue and the legacy worker, and the bridge tracks it until
-- `pickup_ms` from `now_ms` (docs/protocol.md §7).
local function hand_to_legacy(job_key, job_id, m, entry, now_ms)
  redis.call('HSET', job_key, 'id', job_id, 'entry', entry, 'bridge', m.list, 'bridge_stop', m.stop, 'worker_id', m.worker)
  redis.call('LPUSH', m.list, job_id)
  redis.call('ZADD', m.track, now_ms + m.pickup_ms, job_id)
end

-- Queue policies, read by the functions only while some queue has a policy they apply (the
-- config hash's counters `policed`, `limited`, `rated`, `aged`), so a namespace without
-- policies pays nothing: a stream's policy (stream_policy), the retry back-off (backoff_ms), and
-- what the fetch enforces: concurrency limits (limit_running), rates and key rates (rate_room,
-- key_room), and priority aging (aging_order), all read by queue_policies.

-- The queue policy of a work stream as the workers read it (`Policies::of`): its type's, with
-- its group's fields over it; nil without one. `memo` (a table the call keeps) caches it per
-- stream. Read only while some queue has a policy the functions apply (`policed` in the config
-- hash), so a namespace without policies pays nothing.
local function stream_policy(config_key, stream, memo)
  memo.policies = memo.policies or {}
  local p = memo.policies[stream]
  if p ~= nil then return p or nil end
  local t = string.match(stream, ':q:work:type:([^:]+)')
  local g = string.match(stream, ':group:([^:]+)')
  p = false
  if t then
    local key = policy_key_of(config_key)
    local function read(q)
      local raw = redis.call('HGET', key, q)
      local ok, d = pcall(cjson.decode, raw or 'null')
      if ok and type(d) == 'table' then return d end
      return nil
    end
    local merged = read(t)
    if g then
      local over = read(t .. '/' .. g)
      if over then
        merged = merged or {}
        for k, v in pairs(over) do merged[k] = v end
      end
    end
    p = merged or false
  end
  memo.policies[stream] = p
  return p or nil
end

-- The delay (ms) of the retry of failed attempt `attempt` (1 for the first) under back-off `b`
-- (`Backoff::delay`: fixed or doubling, capped, ± jitter), the jitter's draw from Redis's
-- clock (the functions have no other entropy).
local function backoff_ms(b, attempt)
  local base = tonumber(b.base_ms) or 1000
  if b.kind == 'exponential' then base = base * 2 ^ math.min(math.max(attempt - 1, 0), 40) end
  base = math.min(base, tonumber(b.cap_ms) or base)
  local j = math.min(math.max(tonumber(b.jitter) or 0, 0), 1)
  local t = redis.call('TIME')
  local r = (tonumber(t[2]) % 1000) / 1000
  return math.floor(math.max(base * (1 - j + 2 * j * r), 0))
end

-- The delay (ms) before the retry of failed attempt `attempt`: the longer of the job's own
-- back-off (`own`, the record's `backoff` JSON, or nil) and its queue policy's (the policy is a
-- floor, as its retries are); nil when neither sets one (the caller's time stands).
local function retry_delay(own, policy, attempt)
  local d = nil
  if own then
    local ok, b = pcall(cjson.decode, own)
    if ok and type(b) == 'table' then d = backoff_ms(b, attempt) end
  end
  if policy and type(policy.backoff) == 'table' then
    local p = backoff_ms(policy.backoff, attempt)
    if not d or p > d then d = p end
  end
  return d
end

-- The running count of limit `lim` ({key, max}), dropping the members no longer started when
-- it is full.
local function limit_running(lim, prefix)
  local n = redis.call('ZCARD', lim.key)
  if n >= lim.max then
    for _, id in ipairs(redis.call('ZRANGE', lim.key, 0, -1)) do
      local s = redis.pcall('HGET', prefix .. id, 'status')
      if s ~= 'started' then
        redis.call('ZREM', lim.key, id)
        n = n - 1
      end
    end
  end
  return n
end

-- The limits of `streams` (KEYS from 5 on) as the queue policies set them, for a fetch that
-- passed none (a worker of another language, or older than protocol 23): each stream's queue
-- is read from its key (`<ns>:q:work:type:<t>[:group:<g>...]`), and its group's policy, else its
-- type's, gives the limit. Only while some queue has one (`limited` in the config hash).
--
-- Rates, the same way: a queue whose policy sets `rate` ({max, per_ms}) starts at most `max` of
-- its jobs in any `per_ms` (a sliding window: the sorted set `<ns>:meta:rate:<queue>` of the
-- jobs started, by ms), whatever the worker; read while some queue has one (`rated`).
-- A queue's `key_rate` does the same per limit key (a job's `limit_key`): a job whose key has no
-- room is not started but parked in the delayed set until the window has room, its entry
-- acknowledged; the broker's promote queues it again then.
-- And the aging periods (ms, when `want_aging`: see aging_order).
-- Returns the limits (when `want_limits`), the rates, the key rates and the aging periods, by
-- stream index, or nil.
local function queue_policies(keys, want_limits, want_rates, want_aging)
  local limits, rates, keyrates, agings, by_queue, policies = nil, nil, nil, nil, {}, policy_key_of(keys[2])
  local function policy_of(queue)
    local p = by_queue[queue]
    if p == nil then
      local raw = redis.call('HGET', policies, queue)
      local ok, decoded = pcall(cjson.decode, raw or 'null')
      p = (ok and type(decoded) == 'table' and decoded) or false
      by_queue[queue] = p
    end
    return p
  end
  -- the policy that sets `field` for a stream: its group's, else its type's
  local function covering(t, g, field)
    if t and g then
      local p = policy_of(t .. '/' .. g)
      if p and p[field] then return t .. '/' .. g, p[field] end
    end
    if t then
      local p = policy_of(t)
      if p and p[field] then return t, p[field] end
    end
    return nil
  end
  local by_key = {}
  local function shared(key, make)
    local x = by_key[key]
    if not x then
      x = make()
      by_key[key] = x
    end
    return x
  end
  for i = 5, #keys do
    local t = string.match(keys[i], ':q:work:type:([^:]+)')
    local g = string.match(keys[i], ':group:([^:]+)')
    if want_limits then
      local queue, max = covering(t, g, 'concurrency')
      if queue and tonumber(max) then
        limits = limits or {}
        limits[i - 4] = shared(limit_key_of(keys[2], queue), function()
          return { key = limit_key_of(keys[2], queue), max = tonumber(max) }
        end)
      end
    end
    if want_rates then
      local queue, rate = covering(t, g, 'rate')
      if queue and type(rate) == 'table' and tonumber(rate.max) and tonumber(rate.per_ms) then
        rates = rates or {}
        rates[i - 4] = shared(rate_key_of(keys[2], queue), function()
          return { key = rate_key_of(keys[2], queue), max = tonumber(rate.max), per = tonumber(rate.per_ms) }
        end)
      end
      local kqueue, krate = covering(t, g, 'key_rate')
      if kqueue and type(krate) == 'table' and tonumber(krate.max) and tonumber(krate.per_ms) then
        keyrates = keyrates or {}
        keyrates[i - 4] = shared(rate_key_of(keys[2], kqueue) .. '|', function()
          return { prefix = rate_key_of(keys[2], kqueue) .. '|', max = tonumber(krate.max),
            per = tonumber(krate.per_ms), by_key = {} }
        end)
      end
    end
    if want_aging then
      local _, period = covering(t, g, 'aging_ms')
      if tonumber(period) and tonumber(period) > 0 then
        agings = agings or {}
        agings[i - 4] = tonumber(period)
      end
    end
  end
  return limits, rates, keyrates, agings
end

-- The age (ms) of the job a fair stream's gate serves next (its ring's head key's oldest), or
-- nil when the gate is empty (gate.lua): what priority aging reads for a fair stream, whose stream holds
-- only the jobs released.
local function gate_head_ms(stream)
  local key = redis.call('LINDEX', fair_ring_of(stream), 0)
  if not key then return nil end
  local item = redis.call('LINDEX', fair_lane_of(stream, key), 0)
  return item and tonumber(string.match(item, '^%S+ (%d+)'))
end

-- The order to walk the streams in when some have aged (nil: as given). A stream of level p > 0
-- with an aging period whose oldest undelivered entry (the one after its group's last
-- delivered) has waited k whole periods ranks as level max(0, p - k), ahead of the streams of
-- its tier really at that level; the rest keep their order. Costs two commands per registered
-- stream with a period, and only while some queue has one.
local function aging_order(keys, n, present, agings, group)
  local rank, moved, now = {}, false, nil
  for i = 1, n do
    local key = keys[i + 4]
    local tier = 3
    if string.find(key, ':inst:', 1, true) then tier = 1
    elseif string.find(key, ':group:', 1, true) then tier = 2 end
    local level = tonumber(string.match(key, ':prio:(%d)$')) or 5
    local at, aged = level, 1
    local period = agings[i]
    if period and present[i] == 1 and level > 0 then
      local last = nil
      local groups = redis.pcall('XINFO', 'GROUPS', key)
      if type(groups) == 'table' and not groups.err then
        for _, gi in ipairs(groups) do
          local name, delivered = nil, nil
          for k = 1, #gi, 2 do
            if gi[k] == 'name' then name = gi[k + 1]
            elseif gi[k] == 'last-delivered-id' then delivered = gi[k + 1] end
          end
          if name == group then last = delivered end
        end
      end
      if last then
        local head = redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', 1)
        -- a fair stream holds only what was released: its gate's next job ages it
        local born = head[1] and tonumber(string.match(head[1][1], '^(%d+)')) or gate_head_ms(key)
        if born then
          now = now or server_ms()
          local k = math.floor((now - born) / period)
          if k > 0 then
            at, aged, moved = math.max(0, level - k), 0, true
          end
        end
      end
    end
    rank[i] = { tier, at, aged, i }
  end
  if not moved then return nil end
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b)
    local x, y = rank[a], rank[b]
    for k = 1, 4 do
      if x[k] ~= y[k] then return x[k] < y[k] end
    end
    return false
  end)
  return order
end


-- How many more jobs rate `r` lets start now (its log trimmed to the window first).
local function rate_room(r, now)
  if not r.used then
    redis.call('ZREMRANGEBYSCORE', r.key, '-inf', now - r.per)
    r.used = redis.call('ZCARD', r.key)
  end
  return r.max - r.used
end

-- Whether limit key `lk` of key rate `kr` has room now; the rate log of each key is trimmed and
-- counted once per call.
local function key_room(kr, lk, now)
  local r = kr.by_key[lk]
  if not r then
    r = { key = kr.prefix .. lk, max = kr.max, per = kr.per }
    kr.by_key[lk] = r
  end
  return rate_room(r, now) > 0, r
end

-- How many entries a stream under limit `lim` and rate `rate` may be read for now: what the fetch still wants, within its
-- concurrency limit and its rate (0: held back, and f.limited says so).
local function room_of(f, lim, rate)
  local asked = f.want
  if lim then
    asked = math.min(asked, lim.max - lim.running)
    if asked <= 0 then
      f.limited = 1
      return 0
    end
  end
  if rate then
    f.now_ms = f.now_ms or server_ms()
    asked = math.min(asked, rate_room(rate, f.now_ms))
    if asked <= 0 then
      f.limited = 1
      return 0
    end
  end
  return asked
end

-- A job whose limit key has no room in this window: parked until the oldest start in it leaves,
-- as a delayed job (the broker's promote queues it again), not started.
-- Writes stats: `delayed`.
local function park(f, stream, id, job_id, before, keylog)
  ack_del(stream, f.group, id, f.xackdel)
  local job_key = f.prefix .. job_id
  local oldest = redis.call('ZRANGE', keylog.key, 0, 0, 'WITHSCORES')
  local run_at = (tonumber(oldest[2]) or f.now_ms) + keylog.per
  if before and tonumber(before) then
    redis.call('HSET', job_key, 'status', 'waiting', 'run_at', tostring(run_at), 'attempts', before)
  else
    redis.call('HSET', job_key, 'status', 'waiting', 'run_at', tostring(run_at))
  end
  redis.call('ZADD', delayed_key_of(f.keys[2]), run_at, job_id)
  tally(f.st, stream, 'delayed', 1)
  f.parked = true
end

-- A job a fetch just leased, counted against its queue's concurrency limit (`lim`), rate and
-- its limit key's rate (`keylog`).
local function count_start(f, lim, rate, keylog, job_id)
  if lim then
    f.now_ms = f.now_ms or server_ms()
    redis.call('ZADD', lim.key, f.now_ms, job_id)
    lim.running = lim.running + 1
  end
  if rate then
    redis.call('ZADD', rate.key, f.now_ms, job_id)
    redis.call('PEXPIRE', rate.key, rate.per)
    rate.used = rate.used + 1
  end
  if keylog then
    redis.call('ZADD', keylog.key, f.now_ms, job_id)
    redis.call('PEXPIRE', keylog.key, keylog.per)
    keylog.used = keylog.used + 1
  end
end

-- Appending a job to a work stream, and fair share within a queue (ARCHITECTURE.md "Fair share
-- within a queue"). A stream whose queue policy sets `fair` has a gate in front of it: a job
-- queued there waits in its limit key's lane `<stream>:fair:<key>` (FIFO; '' for a job without
-- a key; items `<job id> <ms queued>[ <attempts>]`), and the key waits in the stream's ring
-- `<stream>:fair` while its lane has jobs. The fetch releases jobs onto the stream in turns, as
-- many as it is about to claim (release), so the stream itself stays first in, first out and
-- everything that reads it (pending lists, recovery, trimming, the audit) is unchanged. A key
-- held by `hero pause <type> --key` (the set `<ns>:meta:held`, members `<queue>|<key>`) leaves
-- the ring until it is resumed; a key at its queue's `key_concurrency` keeps its place but is
-- passed over. Nothing here is read while no queue is fair (the config hash's `fair` counts
-- them).

-- The policy of `stream`'s queue when it is fair, else nil. `memo` is a per-call table (see
-- stream_policy), `config_key` the config hash, `fair_on` whether any queue is fair.
local function fair_policy(config_key, stream, memo, fair_on)
  if not fair_on then return nil end
  local p = stream_policy(config_key, stream, memo)
  if p and p.fair then return p end
  return nil
end

-- Whether any queue of the namespace is fair: one HGET, asked once per call (memo.fair_on).
local function any_fair(registry, memo)
  local on = memo and memo.fair_on
  if on == nil then
    on = (tonumber(redis.call('HGET', ns_of_registry(registry) .. 'meta:config', 'fair')) or 0) > 0
    if memo then memo.fair_on = on end
  end
  return on
end

-- The queue names that cover `stream` (`<type>`, `<type>/<group>`, `<type>/<group>/<inst>`),
-- most specific last: the names a held key may be held under.
local function names_of(stream)
  local p = stream_parts(stream)
  if not p then return {}, '' end
  local out = { p.type }
  if p.group then
    out[2] = p.type .. '/' .. p.group
    if p.instance then out[3] = out[2] .. '/' .. p.instance end
  end
  return out, p.prefix
end

-- Whether limit key `key` of `stream`'s queue is held (paused by key) under any name covering it.
local function held(stream, key)
  local names, ns = names_of(stream)
  if #names == 0 then return false end
  local ask = {}
  for k = 1, #names do ask[k] = names[k] .. '|' .. key end
  for _, m in ipairs(redis.call('SMISMEMBER', ns .. ':meta:held', unpack(ask))) do
    if m == 1 then return true end
  end
  return false
end

-- Puts `key` at the back of fair stream `stream`'s ring; the first key of an empty ring wakes
-- the workers with a wake-up entry (`w`, as a resumed queue's: the fetch acknowledges and
-- deletes it), for a worker sleeps on a fair stream only after a fetch found its gate empty. A
-- paused stream (out of the registry `registry`) gets none: resuming it wakes them.
local function ring_in(stream, key, registry)
  if redis.call('RPUSH', fair_ring_of(stream), key) == 1
    and redis.call('SISMEMBER', registry, stream) == 1 then
    redis.call('XADD', stream, '*', 'w', '1')
  end
end

-- Pushes the first `n` of `items` onto limit key `key`'s lane of fair stream `stream`; the key
-- joins the ring when the lane was empty, unless the key is held.
local function lane_push(registry, stream, key, items, n)
  if redis.call('RPUSH', fair_lane_of(stream, key), unpack(items, 1, n)) == n
    and not held(stream, key) then
    ring_in(stream, key, registry)
  end
end

-- Queues `job_id` (its record already written) in its limit key's lane of fair stream `stream`;
-- its key joins the ring when the lane was empty, unless the key is held. `memo` is the call's
-- table (append's `known`) or nil. A submit's `known` has `gated`: it gives the limit key
-- (`memo.lk`, else the record is asked), reads the clock once, and has its jobs gathered while
-- they follow one another into one lane (a batch of one customer's jobs costs one RPUSH, not
-- one a job), written with the `fair` gauges at its end (flush_gated).
-- Writes stats: `fair` (the stream's gauge of jobs in its gate).
local function gate(registry, stream, job_id, attempts, memo)
  local key = memo and memo.lk
  if not key then
    key = redis.call('HGET', ns_of_registry(registry) .. 'job:' .. job_id, 'limit_key') or ''
  end
  local tail = memo and memo.gate_tail
  if not tail then
    -- the clock as text once: a number joined to a string costs a sprintf each time
    tail = ' ' .. string.format('%d', server_ms())
    if memo then memo.gate_tail = tail end
  end
  local item = job_id .. tail
  if attempts then item = item .. ' ' .. attempts end
  local gated = memo and memo.gated
  if not gated then
    lane_push(registry, stream, key, { item }, 1)
    redis.call('HINCRBY', ns_of_registry(registry) .. 'meta:stats', stream .. '|fair', 1)
    return
  end
  gated[stream] = (gated[stream] or 0) + 1
  -- the run is one array kept for the call (a table a run costs more than the RPUSH it saves
  -- when a batch's keys alternate), its first `run_n` items the run's
  local n = memo.run_n
  if n and n < 1000 and memo.run_key == key and memo.run_stream == stream then
    n = n + 1
    memo.run[n] = item
    memo.run_n = n
    return
  end
  if n then lane_push(memo.run_registry, memo.run_stream, memo.run_key, memo.run, n) end
  local run = memo.run or {}
  run[1] = item
  memo.run, memo.run_n = run, 1
  memo.run_registry, memo.run_stream, memo.run_key = registry, stream, key
end

-- Writes the jobs a call's gate calls gathered (see gate) to their lane, and the `fair` gauges
-- they counted (`memo.gated`) to the stats hash `stats_key`: a call that gates with a `gated`
-- table calls it before it returns.
local function flush_gated(memo, stats_key)
  local n = memo.run_n
  if n then
    lane_push(memo.run_registry, memo.run_stream, memo.run_key, memo.run, n)
    memo.run_n = nil
  end
  for stream, c in pairs(memo.gated) do
    redis.call('HINCRBY', stats_key, stream .. '|fair', c)
  end
end

-- Append a job id to a work stream, registering the stream on first use (register). Returns
-- the new entry id, or nil when the stream is fair and the job went into its gate (the record
-- must be written first: the gate reads its limit key). `known` (optional) is the call's set
-- of streams already seen; a fair stream is marked 'fair' in it (not true), so a caller's
-- shortcut for streams it knows (`known[stream] == true`: XADD directly) skips it. The entry
-- tells the fetch what it would otherwise read from the record: `attempts` (optional) is the
-- count made so far, for a job queued again after a delivery (field `a`), and `dual` marks a
-- job also pushed to a legacy list (field `b`; a bridged queue is never fair).
local function append(stream, group, registry, job_id, known, attempts, dual)
  register(stream, group, registry, known)
  if not dual and any_fair(registry, known) then
    local memo = known or {}
    if fair_policy(ns_of_registry(registry) .. 'meta:config', stream, memo, true) then
      if known then known[stream] = 'fair' end
      gate(registry, stream, job_id, attempts, known)
      return nil
    end
  end
  if dual then
    if attempts then return redis.call('XADD', stream, '*', 'j', job_id, 'a', attempts, 'b', '1') end
    return redis.call('XADD', stream, '*', 'j', job_id, 'b', '1')
  end
  if attempts then return redis.call('XADD', stream, '*', 'j', job_id, 'a', attempts) end
  return redis.call('XADD', stream, '*', 'j', job_id)
end

-- The running set of limit key `key` under policy `p`'s `key_concurrency` for `stream`:
-- `<ns>:meta:limit:<queue>|<key>`, the queue being the name whose own policy sets it (the
-- group's, else the type's); nil without one.
local function key_cap_set(config_key, stream, p, key)
  if not tonumber(p.key_concurrency) then return nil end
  local q = p.kc_queue
  if not q then
    local names = names_of(stream)
    q = names[1] or ''
    if names[2] then
      local raw = redis.call('HGET', policy_key_of(config_key), names[2])
      local ok, d = pcall(cjson.decode, raw or 'null')
      if ok and type(d) == 'table' and d.key_concurrency then q = names[2] end
    end
    p.kc_queue = q
  end
  return limit_key_of(config_key, q) .. '|' .. key
end

-- Moves up to `d` jobs from fair stream `stream`'s gate onto the stream, in turns (round robin
-- over the ring's keys, a key's turn giving its weight of jobs: policy `p`'s `fair_weights`,
-- default 1), the turns of a pass counted at once rather than walked one by one: up to `d`
-- keys leave the ring's head, each is asked for as many jobs as its turns within `d` come to
-- (whole rounds, then the turns left over in ring order) with one LPOP of its lane, and the
-- keys go back so that the next turn is where round robin would be: a key given no turn back
-- at the head, the others to the tail, those after the last one given a left-over turn first.
-- A key whose lane ran dry leaves the ring; its share goes to the next pass (at most 4).
-- Under `key_concurrency` a key is asked for no more than the room it has (counted once per
-- key and call by limit_running, which drops the members no longer started: the jobs released
-- here start when this fetch claims them), and a key without room keeps its place. Costs an
-- LPOP and an LLEN a key and an XADD a job, whatever the number of keys waiting. Returns how
-- many it moved, and whether a key's concurrency held jobs back.
-- Writes stats: `fair` (down by the jobs moved).
local function release(st, config_key, prefix, stream, p, d)
  local ring, weights = fair_ring_of(stream), p.fair_weights
  local cap, rooms = tonumber(p.key_concurrency), {}
  local moved, capped = 0, false
  for _ = 1, 4 do
    local want = d - moved
    if want <= 0 then break end
    local keys = redis.call('LPOP', ring, want)
    if not keys then break end
    local w, total = {}, 0
    for i = 1, #keys do
      w[i] = type(weights) == 'table' and tonumber(weights[keys[i]]) or 1
      total = total + w[i]
    end
    local full = math.floor(want / total)
    local left, last = want - full * total, 0
    local head, later, first, before = {}, {}, {}, moved
    for i = 1, #keys do
      local key = keys[i]
      local n = full * w[i]
      if left > 0 then
        local extra = math.min(w[i], left)
        n, left, last = n + extra, left - extra, i
      end
      local lane, set = fair_lane_of(stream, key), nil
      if cap and n > 0 then
        set = key_cap_set(config_key, stream, p, key)
        if rooms[key] == nil then rooms[key] = cap - limit_running({ key = set, max = cap }, prefix) end
        if rooms[key] < n then
          n = math.max(rooms[key], 0)
          capped = true
        end
      end
      local keep = true
      if n > 0 then
        local items = redis.call('LPOP', lane, n)
        local got = items and #items or 0
        local ms = set and server_ms()
        for k = 1, got do
          -- `<id> <ms>[ <attempts>]`, cut with a plain find (a pattern costs more a job); the
          -- clock has 13 digits, so an item that ends there has no attempts
          local item = items[k]
          local s1 = string.find(item, ' ', 1, true)
          local id = s1 and string.sub(item, 1, s1 - 1)
          if id then
            local s2 = #item > s1 + 13 and string.find(item, ' ', s1 + 1, true)
            if s2 then
              redis.call('XADD', stream, '*', 'j', id, 'a', string.sub(item, s2 + 1))
            else
              redis.call('XADD', stream, '*', 'j', id)
            end
            -- released to be claimed by this fetch at once: it runs (a stale one leaves the set
            -- when the set is next full, see limit_running)
            if set then redis.call('ZADD', set, ms, id) end
          end
        end
        moved = moved + got
        if set then rooms[key] = rooms[key] - got end
        keep = got == n and redis.call('LLEN', lane) > 0
      elseif full == 0 and i > last then
        -- no turn came to it in this pass: it keeps its place at the head
        head[#head + 1] = key
        keep = false
      end
      if keep then
        if i <= last then first[#first + 1] = key else later[#later + 1] = key end
      end
    end
    for i = #head, 1, -1 do redis.call('LPUSH', ring, head[i]) end
    for i = 1, #first do later[#later + 1] = first[i] end
    if #later > 0 then redis.call('RPUSH', ring, unpack(later)) end
    if moved == before then break end
  end
  if moved > 0 then tally(st, stream, 'fair', -moved) end
  return moved, capped
end

-- Takes job `job_id`, queued with limit key `key`, out of fair stream `stream`'s gate (a
-- requeue moving it elsewhere): its lane is read whole (an operator's action, O(lane)), and a
-- lane left empty takes its key out of the ring. Returns whether it was there.
-- Writes stats: `fair` (down by one when it was).
local function ungate(st, stream, job_id, key)
  local lane = fair_lane_of(stream, key)
  local items = redis.call('LRANGE', lane, 0, -1)
  for k = 1, #items do
    if string.match(items[k], '^(%S+)') == job_id then
      redis.call('LREM', lane, 1, items[k])
      if redis.call('LLEN', lane) == 0 then redis.call('LREM', fair_ring_of(stream), 0, key) end
      tally(st, stream, 'fair', -1)
      return true
    end
  end
  return false
end

-- Fair share turned off for queue `name` (`hero_policy`): every stream it covers that is no
-- longer fair (its group's policy may still be) gets its gate's jobs appended in ring order, a
-- key's lane at a time (a paused key's too), and the queue's paused keys are forgotten.
-- O(jobs in the gates): an operator's action, once.
-- Writes stats: `fair` (each stream's gauge, down to 0).
local function unfair(config_key, name)
  local registry = meta_key(config_key, 'queues')
  local held_set = meta_key(config_key, 'held')
  local held_keys = {}
  for _, m in ipairs(redis.call('SMEMBERS', held_set)) do
    local q, key = string.match(m, '^([^|]*)|(.*)$')
    if q and (q == name or string.sub(q, 1, #name + 1) == name .. '/') then
      held_keys[#held_keys + 1] = key
      redis.call('SREM', held_set, m)
    end
  end
  local st = stats(meta_key(config_key, 'stats'))
  local memo = {}
  for _, s in ipairs(redis.call('SUNION', registry, registry .. ':paused')) do
    local sp = stream_parts(s)
    if sp and covers(name, sp) and not fair_policy(config_key, s, memo, true) then
      local keys = redis.call('LRANGE', fair_ring_of(s), 0, -1)
      for _, k in ipairs(held_keys) do keys[#keys + 1] = k end
      local moved = 0
      for _, key in ipairs(keys) do
        local lane = fair_lane_of(s, key)
        for _, item in ipairs(redis.call('LRANGE', lane, 0, -1)) do
          local id, a = string.match(item, '^(%S+) %d+ ?(%S*)$')
          if id then
            if a ~= '' then redis.call('XADD', s, '*', 'j', id, 'a', a) else redis.call('XADD', s, '*', 'j', id) end
            moved = moved + 1
          end
        end
        redis.call('DEL', lane)
      end
      redis.call('DEL', fair_ring_of(s))
      if moved > 0 then tally(st, s, 'fair', -moved) end
    end
  end
  flush_stats(st)
end

-- hero function library, shared helpers continued: batches (a set of jobs that calls back once
-- every member ended), used by hero_submit, hero_batch, and every call that ends or revives a
-- job (through release_if_any, hero_dead, hero_requeue).

-- A batch is the hash `<ns>:batch:<name>` (`Keyspace::batch`): `total`, `pending`, `finished`,
-- `failed` (members so far, and how many of them have not ended, finished, ended error),
-- `created_at`, then once closed `closed` ('1') and the callback specs `on_complete` /
-- `on_success`, and once done `done_at` and the callback job ids `complete_id` / `success_id`.
-- A member's record names it (`batch`). The submit that creates a member counts it; the call
-- that ends a member counts its end, and the call in which a closed batch has no member pending
-- submits its callbacks, in the same call: each batch calls back exactly once, however many
-- brokers and workers run. A member ended and queued again (a dead letter retried, a requeue)
-- is pending again while its batch is not done.
-- A callback spec is JSON the client built with its keys module: `id`, `key` (its job hash),
-- `stream`, `registry`, `group`, `fields` (field, value, ... of its record): nothing is derived
-- here. Its job gets env vars BATCH (its name), BATCH_TOTAL, BATCH_FINISHED and
-- BATCH_FAILED beside its own.
-- The count of batches not done is the config hash's `batches`: while it is 0 no call that ends
-- jobs asks their records for a batch.
local BATCHES_FIELD = 'batches'

local function batch_key(ns, name)
  return ns .. 'batch:' .. name
end

-- The index of batches `<ns>:meta:batches` (`Keyspace::batches`), a zset name -> created ms,
-- beside the config hash.
local function batches_key_of(config_key)
  return meta_key(config_key, 'batches')
end

local function open_batches(cfg)
  return setting(cfg, BATCHES_FIELD, 0) > 0
end

-- Whether batch `bkey` is done (its callbacks submitted): no member may join it then.
local function batch_done(bkey)
  return redis.call('HEXISTS', bkey, 'done_at') == 1
end

-- Counts a new member into batch `name` (created with its first member); `ended` when it
-- ended error in the call that created it (a failed prerequisite).
local function join_batch(config_key, bkey, name, ended, now_iso)
  if redis.call('HSETNX', bkey, 'created_at', now_iso) == 1 then
    redis.call('ZADD', batches_key_of(config_key), server_ms(), name)
    redis.call('HINCRBY', config_key, BATCHES_FIELD, 1)
  end
  redis.call('HINCRBY', bkey, 'total', 1)
  if ended then
    redis.call('HINCRBY', bkey, 'failed', 1)
  else
    redis.call('HINCRBY', bkey, 'pending', 1)
  end
end

-- Submits one callback job of batch `name` (counts `b`) from its spec; returns its id, or nil
-- for a spec that does not decode (written by hand).
-- Writes events: `batch_done`.
local function submit_callback(ctx, spec_json, name, b, which)
  local ok, spec = pcall(cjson.decode, spec_json)
  if not ok or type(spec) ~= 'table' or type(spec.fields) ~= 'table' or not spec.key then return nil end
  local env = {}
  local fields = { 'status', 'dispatched' }
  local f = spec.fields
  for k = 1, #f, 2 do
    if f[k] == 'env_vars' then
      local ok2, e = pcall(cjson.decode, f[k + 1])
      if ok2 and type(e) == 'table' then env = e end
    else
      fields[#fields + 1] = f[k]
      fields[#fields + 1] = f[k + 1]
    end
  end
  env.BATCH = name
  env.BATCH_TOTAL = tostring(b.total)
  env.BATCH_FINISHED = tostring(b.finished)
  env.BATCH_FAILED = tostring(b.failed)
  fields[#fields + 1] = 'env_vars'
  fields[#fields + 1] = cjson.encode(env)
  fields[#fields + 1] = 'created_at'
  fields[#fields + 1] = ctx.now_iso
  redis.call('HSET', spec.key, unpack(fields))
  append(spec.stream, spec.group, spec.registry, spec.id)
  log_event(ctx.log, 'batch_done', spec.id, spec.stream, nil, nil,
    'batch ' .. name .. ' ' .. which .. ': ' .. b.finished .. ' finished, ' .. b.failed .. ' failed')
  return spec.id
end

-- Submits the callbacks of batch `name` when it is closed and no member is pending: on_complete
-- always, on_success only when no member failed. The batch is done then, and expires after the
-- retention time. Returns true when it called back here.
-- Writes events: `batch_done`.
local function settle_batch(ctx, bkey, name)
  local r = redis.call('HMGET', bkey, 'closed', 'pending', 'finished', 'failed', 'total',
    'on_complete', 'on_success', 'done_at')
  if r[1] ~= '1' or (tonumber(r[2]) or 0) > 0 or r[8] then return false end
  local b = { finished = tonumber(r[3]) or 0, failed = tonumber(r[4]) or 0, total = tonumber(r[5]) or 0 }
  local done = { 'done_at', ctx.now_iso }
  if r[6] then
    local id = submit_callback(ctx, r[6], name, b, 'on_complete')
    if id then done[#done + 1] = 'complete_id'; done[#done + 1] = id end
  end
  if r[7] and b.failed == 0 then
    local id = submit_callback(ctx, r[7], name, b, 'on_success')
    if id then done[#done + 1] = 'success_id'; done[#done + 1] = id end
  end
  redis.call('HSET', bkey, unpack(done))
  redis.call('HINCRBY', ctx.cfg.key, BATCHES_FIELD, -1)
  redis.call('PEXPIRE', bkey, setting_arg(ctx.cfg, 'retention_ms', 86400000))
  return true
end

-- Counts the ends of the jobs in `ended` ({job key, job id, ok}) into their batches, then
-- settles each batch touched. Called only while some batch is not done; one HGET per job.
-- Writes events: `batch_done`.
local function count_batch_ends(ctx, ended)
  local touched, order = {}, {}
  for k = 1, #ended do
    local jk, jid, ok = ended[k][1], ended[k][2], ended[k][3]
    local name = redis.pcall('HGET', jk, 'batch')
    if type(name) == 'string' and name ~= '' then
      local bkey = batch_key(ns_of(jk, jid), name)
      -- one read: the batch exists (it has a total) and is not done
      local b = redis.call('HMGET', bkey, 'total', 'done_at')
      if b[1] and not b[2] then
        redis.call('HINCRBY', bkey, 'pending', -1)
        if ok then
          redis.call('HINCRBY', bkey, 'finished', 1)
        else
          redis.call('HINCRBY', bkey, 'failed', 1)
        end
        if not touched[bkey] then
          touched[bkey] = true
          order[#order + 1] = { bkey, name }
        end
      end
    end
  end
  for _, t in ipairs(order) do settle_batch(ctx, t[1], t[2]) end
end

-- A member that had ended (`was`: 'finished' or 'error') is queued again: pending again in its
-- batch while the batch is not done.
local function revive_member(cfg, job_key, job_id, was)
  if not open_batches(cfg) then return end
  local name = redis.pcall('HGET', job_key, 'batch')
  if type(name) ~= 'string' or name == '' then return end
  local bkey = batch_key(ns_of(job_key, job_id), name)
  local b = redis.call('HMGET', bkey, 'total', 'done_at')
  if not b[1] or b[2] then return end
  if was == 'finished' then
    redis.call('HINCRBY', bkey, 'finished', -1)
  else
    redis.call('HINCRBY', bkey, 'failed', -1)
  end
  redis.call('HINCRBY', bkey, 'pending', 1)
end

-- hero function library, shared helpers continued: dependencies (prerequisites and their
-- dependents), used by hero_submit, hero_complete, hero_stop and hero_recover; the end of a
-- batch's member is counted through the same hook (release_if_any, see batches.lua).

-- Dependencies. A job submitted with prerequisites that have not all finished waits (status
-- waiting, `deps_left` the number still unfinished) and is named in the dependents hash of
-- each of them, `<ns>:deps:<prerequisite id>` (dependent id -> its work stream). The call that
-- ends a prerequisite releases its dependents in the same call (release_dependents): finished,
-- each one's count goes down and the one that reaches 0 is queued; ended error, each one ends
-- error `dependency failed: <id>`, and so do theirs, transitively. A call that ends jobs asks
-- whether any of them has dependents with one EXISTS over their hashes, so a job without any
-- costs its call nothing per job. Prerequisites must exist when their dependent is submitted,
-- and a record's list never changes, so no cycle can form.
local function deps_key(job_key, job_id)
  return ns_of(job_key, job_id) .. 'deps:' .. job_id
end

-- The count of jobs that have a dependents hash is the config hash's field `deps` (read with
-- the settings, so the hot completion asks nothing more of it), and a call that ends jobs looks
-- for dependents only while it is above 0. It may only run high (a dependents hash deleted by
-- hand), which costs the look, never a release.
local DEPS_FIELD = 'deps'

-- The set of the prerequisites that have a dependents hash, `<ns>:meta:waiting_on`
-- (`Keyspace::waiting_on`), beside the config hash: kept with the count above, on the
-- dependency paths only, so listing the jobs waiting on prerequisites reads it rather than
-- scanning every key.
local function waiting_on_key(config_key)
  return meta_key(config_key, 'waiting_on')
end

-- A prerequisite's result in its dependent's record, `result:<id>` = `<status>:<output or
-- error>` (finished or error), so a parent reads its children's results from its own record
-- (docs/protocol.md §3): however short the children's retention, the parent holds what they
-- gave it for as long as it is kept itself. A prerequisite that returned a value (its record's
-- `value`, MessagePack) leaves it as `value:<id>` too (since protocol 33).
local function keep_result(dependent_key, id, status, text, value)
  if value then
    redis.pcall('HSET', dependent_key, 'result:' .. id, status .. ':' .. text, 'value:' .. id, value)
  else
    redis.pcall('HSET', dependent_key, 'result:' .. id, status .. ':' .. text)
  end
end

local function waiting_dependents(cfg)
  return setting(cfg, DEPS_FIELD, 0) > 0
end

-- Releases the dependents of each job of `ended` ({job key, job id, ok}: ok true when it
-- finished, false when it ended error). `ctx`: cfg, log, st (stats), done (retained), now_iso,
-- and, to queue a released job, registry and group. A dependent failed here releases its own
-- dependents (failing them), breadth first, so a chain of any length ends in this one call.
-- Writes events: `dispatched` (a dependent released), `error` (a dependent failed).
-- Writes stats: `failed`.
local function release_dependents(ctx, ended)
  local k = 1
  while k <= #ended do
    local jk, jid, ok = ended[k][1], ended[k][2], ended[k][3]
    k = k + 1
    local dk = deps_key(jk, jid)
    local deps = redis.pcall('HGETALL', dk)
    if not deps.err and #deps > 0 then
      redis.call('DEL', dk)
      redis.call('HINCRBY', ctx.cfg.key, DEPS_FIELD, -1)
      redis.call('SREM', waiting_on_key(ctx.cfg.key), jid)
      local prefix = string.sub(jk, 1, #jk - #jid)
      local reply_prefix = reply_prefix_of(ns_of(jk, jid))
      local status, text, value = 'error', nil, nil
      if ok then status = 'finished' end
      local r = redis.pcall('HMGET', jk, ok and 'output' or 'error', 'value')
      if r.err then r = {} end
      text = r[1] or ''
      if ok then value = r[2] end
      for m = 1, #deps, 2 do
        local d, stream = deps[m], deps[m + 1]
        local dkey = prefix .. d
        local f = redis.pcall('HMGET', dkey, 'status', 'reply')
        if not f.err and f[1] == 'waiting' then
          keep_result(dkey, jid, status, text, value)
          if ok then
            if redis.call('HINCRBY', dkey, 'deps_left', -1) <= 0 then
              -- queued as a submit would queue it: also handed to the legacy list of a
              -- dual-push mapping of its stream (see hero_submit)
              local m = dual_push_mapping(ctx.cfg, bridge_registry_of(ctx.registry), stream, ctx)
              local entry = append(stream, ctx.group, ctx.registry, d, nil, nil, m and true)
              redis.call('HSET', dkey, 'status', 'dispatched', 'updated_at', ctx.now_iso)
              redis.call('HDEL', dkey, 'deps_left')
              if m then hand_to_legacy(dkey, d, m, entry, server_ms()) end
              log_event(ctx.log, 'dispatched', d, stream, nil, nil, 'prerequisites finished')
            end
          else
            local reason = 'dependency failed: ' .. jid
            redis.call('HDEL', dkey, 'deps_left')
            finish(dkey, d, reply_prefix .. d, ctx.cfg, 'error', reason, f[2], ctx.now_iso, ctx.done)
            log_event(ctx.log, 'error', d, stream, nil, nil, reason)
            tally(ctx.st, stream, 'failed', 1, true)
            ended[#ended + 1] = { dkey, d, false }
          end
        end
      end
    end
  end
end

-- Releases the dependents of the jobs a call ended, when any has some, and counts the ends
-- into their batches, when any batch is open: `jk`, `ji` their keys and ids, `ok` per job true
-- when it finished. One EXISTS asks for all their dependents (parallel lists, not a table per
-- job: a hot call ends many). A dependent failed in the release is counted into its batch too.
-- Writes events: `dispatched`, `error` (dependents released or failed), `batch_done`.
-- Writes stats: `failed`.
local function release_if_any(ctx, jk, ji, ok)
  if #jk == 0 then return end
  local ended = nil
  if waiting_dependents(ctx.cfg) then
    local ks = {}
    for k = 1, #jk do ks[k] = deps_key(jk[k], ji[k]) end
    local n = 0
    in_runs(ks, function(from, to) n = n + redis.call('EXISTS', unpack(ks, from, to)) end)
    if n > 0 then
      ended = {}
      for k = 1, #jk do ended[k] = { jk[k], ji[k], ok[k] } end
      release_dependents(ctx, ended)
    end
  end
  if open_batches(ctx.cfg) then
    if not ended then
      ended = {}
      for k = 1, #jk do ended[k] = { jk[k], ji[k], ok[k] } end
    end
    count_batch_ends(ctx, ended)
  end
end

-- Whether a call that ends jobs must collect them for release_if_any: some job has dependents,
-- or some batch is open.
local function collect_ended(cfg)
  return waiting_dependents(cfg) or open_batches(cfg)
end

-- A job's record as a fetch reads it and hands it back: the one read of an entry's job
-- (read_job), and a record read whole patched as the lease left it (as_leased).

-- The status (and what else the checks need) of the job an entry names, in one read: the
-- legacy list of a dual-pushed job (the entry says which), the limit key under a key rate, or,
-- when a short fetch hands records back, the record whole (not its status now and the record
-- after the write). Nothing can raise before the lease's single write, so a corrupt record
-- never leaves a half-applied fetch. Returns status, bridge, err, rec.
local function read_job(job_key, dual, whole_now, keyrate)
  if dual then
    local r = redis.pcall('HMGET', job_key, 'status', 'bridge')
    return r[1], r[2], r.err, nil
  elseif whole_now then
    local rec = redis.pcall('HGETALL', job_key)
    if rec.err then return nil, nil, rec.err, rec end
    local status = nil
    if keyrate then keyrate.lk = nil end
    for k = 1, #rec, 2 do
      if rec[k] == 'status' then status = rec[k + 1] end
      if keyrate and rec[k] == 'limit_key' then keyrate.lk = rec[k + 1] end
    end
    return status, nil, nil, rec
  end
  local r = redis.pcall('HMGET', job_key, 'status', 'limit_key')
  keyrate.lk = r[2]
  return r[1], nil, r.err, nil
end

-- The record of a job leased with a whole read (`rec`, HGETALL's pairs) as the lease's HSET left
-- it, for a fetch to hand back: the lease's fields replaced where the record has them, appended in
-- the HSET's order where it has not. Compared by name in one pass: a table of the fields a job
-- (and a list literal to walk) cost more than the compares.
local function as_leased(rec, id, consumer, now_iso, counted)
  local attempts = counted and tostring(counted + 1) or nil
  local status, lease, worker, started, tries = false, false, false, false, not attempts
  for k = 1, #rec, 2 do
    local name = rec[k]
    if name == 'status' then
      rec[k + 1], status = 'started', true
    elseif name == 'lease' then
      rec[k + 1], lease = id, true
    elseif name == 'worker_id' then
      rec[k + 1], worker = consumer, true
    elseif name == 'started_at' then
      rec[k + 1], started = now_iso, true
    elseif name == 'attempts' and attempts then
      rec[k + 1], tries = attempts, true
    end
  end
  if not status then
    rec[#rec + 1] = 'status'
    rec[#rec + 1] = 'started'
  end
  if not lease then
    rec[#rec + 1] = 'lease'
    rec[#rec + 1] = id
  end
  if not worker then
    rec[#rec + 1] = 'worker_id'
    rec[#rec + 1] = consumer
  end
  if not started then
    rec[#rec + 1] = 'started_at'
    rec[#rec + 1] = now_iso
  end
  if not tries then
    rec[#rec + 1] = 'attempts'
    rec[#rec + 1] = attempts
  end
  return rec
end

-- What a submit does beside writing a record and queueing it: a job's uniqueness key, its
-- place in its prerequisites' `dependents`, the tag indexes, and the state of its
-- prerequisites (hero_submit, submit.lua).

-- The uniqueness key of a job (`<ns>:unique:<key>`, beside `<ns>:job:<id>`): when it names
-- another job that is still waiting, dispatched or started, that job's id and status (the
-- submit is a duplicate: nothing is written); else the key is taken for `job_id`, for its TTL
-- (the job's `unique_ttl` ms, or the broker's retention time, read once a call through `cfg`),
-- and nil. A holder that ended or is gone releases the key to the next submit: nothing on the
-- job path has to clear it. The common case, a key no one holds, is one SET NX GET (Redis 7.0
-- takes NX with GET): taken, and nil back; only a key someone holds is looked at further.
-- `ns` is the namespace's key prefix (`<ns>:`) and `prefix` its job keys' (`<ns>:job:`), each
-- made once a call.
local function claim_unique(cfg, ns, prefix, job_id, u)
  local ukey = unique_key(ns, u[1])
  local ttl = u[2] or setting_arg(cfg, 'retention_ms', 86400000)
  local holder = redis.call('SET', ukey, job_id, 'NX', 'GET', 'PX', ttl)
  if not holder then return nil end
  if holder ~= job_id then
    local status = redis.call('HGET', prefix .. holder, 'status')
    if status == 'waiting' or status == 'dispatched' or status == 'started' then
      return holder, status
    end
  end
  redis.call('SET', ukey, job_id, 'PX', ttl)
  return nil
end

-- Names a new job in the `dependents` field of each of its prerequisites (protocol.md §3), a
-- JSON array grown in place as text (a string copy, not a parse, per submit); a field that is
-- not an array (edited by hand) is left as it is, a key of another type skipped (pcall).
local function note_dependent(prefix, deps, job_id)
  local quoted = cjson.encode(job_id)
  for _, d in ipairs(deps) do
    local k = prefix .. d
    local cur = redis.pcall('HGET', k, 'dependents')
    if cur == false or cur == '[]' then
      redis.call('HSET', k, 'dependents', '[' .. quoted .. ']')
    elseif type(cur) == 'string' and string.sub(cur, 1, 1) == '[' and string.sub(cur, -1) == ']' then
      redis.call('HSET', k, 'dependents', string.sub(cur, 1, -2) .. ',' .. quoted .. ']')
    end
  end
end

-- Adds a new job to the index of each of its tags (`<ns>:tag:<tag>`, a set), so listing by tag
-- reads the index, not every job. A batch pays one SADD a tag (flush_tags writes `index.ids`, tag
-- key -> ids, in `index.order`), and each distinct JSON text of its tags is decoded and its keys
-- made once (`index.decoded`): a job costs one append a tag (~3 k instructions fewer for two).
-- `ns` is the namespace's key prefix (`<ns>:`), made once a call.
local function index_tags(index, ns, job_id, tags)
  local e = index.decoded[tags]
  if not e or e.ns ~= ns then
    e = { ns = ns, lists = {} }
    for _, t in ipairs(cjson.decode(tags)) do
      local k = tag_key(ns, t)
      local ids = index.ids[k]
      if not ids then
        ids, index.order[#index.order + 1] = {}, k
        index.ids[k] = ids
      end
      e.lists[#e.lists + 1] = ids
    end
    index.decoded[tags] = e
  end
  local lists = e.lists
  for k = 1, #lists do lists[k][#lists[k] + 1] = job_id end
end

local function flush_tags(index)
  for _, k in ipairs(index.order) do
    local ids = index.ids[k]
    for from = 1, #ids, 1000 do
      redis.call('SADD', k, unpack(ids, from, math.min(#ids, from + 999)))
    end
  end
end

-- The state of a new job's prerequisites `list` (job ids, `prefix` their key prefix): how many
-- have not finished yet, the first that ended error (nil when none did), and the results of
-- those that ended ({id, status, text, value}), which keep_result writes into the new job's record.
local function prerequisites_state(prefix, list)
  local left, failed, ended = 0, nil, {}
  for _, p in ipairs(list) do
    local r = redis.pcall('HMGET', prefix .. p, 'status', 'output', 'error', 'value')
    local s = not r.err and r[1]
    if s == 'error' then
      failed = failed or p
      ended[#ended + 1] = { p, s, r[3] or '' }
    elseif s == 'finished' then
      ended[#ended + 1] = { p, s, r[2] or '', r[4] }
    else
      left = left + 1
    end
  end
  return left, failed, ended
end

-- The fleet summary: per feature some live process does not serve, those processes described
-- (`fleet_lacks` in the config hash), which hero-py and Node refuse a submit by rather than read
-- the fleet themselves. Written by hero_duties' holder every 10 s, so whatever language the
-- holder is in, and with no broker, it is kept; `hero_protocol::fleet::Fleet::summary` is the
-- same reading in Rust (tests/tests/duties.rs holds the two equal).

local fleet_view = {}

-- Key, what, first protocol that serves it: `Feature` in fleet.rs, in its order.
fleet_view.FEATURES = {
  { 'unique', 'a uniqueness key', 21 },
  { 'tags', 'tags', 22 },
  { 'limit_key', 'a limit key', 26 },
  { 'batch', 'a batch', 27 },
  { 'progress', 'progress and log lines', 27 },
  { 'shards', 'a sharded namespace', 28 },
  { 'job_policy', 'a job\'s own back-off or retention', 30 },
  { 'trace', 'a failed attempt\'s trace', 29 },
  { 'fair', 'fair share within a queue (--fair)', 30 },
}

-- The protocol a presence's `version` names, for processes that wrote no `protocol`
-- (`fleet::protocol_of_version`).
function fleet_view.protocol_of_version(v)
  v = string.match(v or '', '^%s*(.-)%s*$')
  local py = string.match(v, '^hero%-py %d+%.(%d+)')
  if py then return tonumber(py) end
  local npm = string.match(v, '^hero%-broker %(npm%) 0%.(%d+)')
  if npm then return tonumber(npm) end
  if v == '0.1.0' then return 27 end
  if v == '0.2.0' or v == '0.3.0' then return 28 end
  return nil
end

-- A member as `Member::describe` writes it: `worker g:i:s (hero-py 0.26.0, protocol 26)`.
function fleet_view.describe(m)
  local version = ''
  if m.version ~= '' then version = m.version .. ', ' end
  local protocol = 'protocol unknown'
  if m.protocol then protocol = 'protocol ' .. string.format('%d', m.protocol) end
  return m.role .. ' ' .. m.name .. ' (' .. version .. protocol .. ')'
end

-- A live consumer with no fleet entry (a worker released before protocol 29), from its
-- presence under one of the registered types (`fleet::older_worker`).
function fleet_view.older(consumer, ns, types)
  local m = { name = consumer, role = 'worker', version = '', shards = false }
  local g, i = string.match(consumer, '^([^:]+):([^:]+):[^:]+$')
  if not (name_ok(g) and name_ok(i)) then return m end
  for _, t in ipairs(types) do
    local raw = redis.call('GET', ns .. 'meta:actor:inst:' .. t .. ':' .. g .. ':' .. i)
    local ok, v = pcall(cjson.decode, raw or '')
    if ok and type(v) == 'table' and v.consumer == consumer then
      m.version = type(v.version) == 'string' and v.version or ''
      m.protocol = tonumber(v.protocol) or fleet_view.protocol_of_version(m.version)
      local p = fleet_view.protocol_of_version(m.version)
      if string.match(m.version, '^hero%-py ') or string.match(m.version, '^hero%-broker %(npm%)') then
        m.shards = p ~= nil and p >= 28
      else
        m.shards = m.version == '0.3.0'
      end
      return m
    end
  end
  return m
end

-- The live members: the fleet hash's unexpired entries, then the live consumers it does not
-- name (`Fleet::answer`).
function fleet_view.members(d)
  local out, known = {}, {}
  local raw = redis.call('HGETALL', d.ns .. 'meta:fleet')
  for k = 1, #raw, 2 do
    local ok, v = pcall(cjson.decode, raw[k + 1])
    if ok and type(v) == 'table' and (tonumber(v.expires_ms) or 0) >= d.now_ms then
      known[raw[k]] = true
      out[#out + 1] = { name = raw[k], role = v.role == 'broker' and 'broker' or 'worker',
        protocol = tonumber(v.protocol), version = type(v.version) == 'string' and v.version or '',
        shards = v.shards == true }
    end
  end
  local types = nil
  for _, c in ipairs(redis.call('ZRANGEBYSCORE', d.keys[3], d.now_ms, '+inf')) do
    if not known[c] then
      if not types then
        types = {}
        local seen = {}
        local prefix = d.ns .. 'q:work:type:'
        for _, s in ipairs(redis.call('SMEMBERS', d.keys[4])) do
          local t = string.sub(s, 1, #prefix) == prefix and string.match(string.sub(s, #prefix + 1), '^([^:]+)')
          if name_ok(t) and not seen[t] then seen[t] = true types[#types + 1] = t end
        end
        table.sort(types)
      end
      out[#out + 1] = fleet_view.older(c, d.ns, types)
    end
  end
  return out
end

-- Writes `fleet_lacks` (or removes it when every live process serves every feature).
function fleet_view.publish(d)
  local members = fleet_view.members(d)
  -- Fleet::answer sorts by role (workers first), then name
  table.sort(members, function(a, b)
    if a.role ~= b.role then return a.role == 'worker' end
    return a.name < b.name
  end)
  local summary, any = {}, false
  for _, f in ipairs(fleet_view.FEATURES) do
    local lacking = {}
    for _, m in ipairs(members) do
      local serves
      if f[1] == 'shards' then serves = m.shards else serves = (not m.protocol) or m.protocol >= f[3] end
      if not serves then lacking[#lacking + 1] = fleet_view.describe(m) end
    end
    if #lacking > 0 then
      summary[f[1]] = { what = f[2], since = f[3], processes = lacking }
      any = true
    end
  end
  if any then
    redis.call('HSET', d.keys[5], 'fleet_lacks', cjson.encode(summary))
  else
    redis.call('HDEL', d.keys[5], 'fleet_lacks')
  end
end

-- Time zones, GENERATED by scripts/gen-zones from the tz database 2025b (/usr/share/zoneinfo):
-- do not edit, run the script. Every IANA zone name (backward links included) to the POSIX
-- TZ rule its TZif file ends with: the zone's rule for now and the future, which is all a
-- recurring job's ticks need. Africa/Casablanca and Africa/El_Aaiun are the exception: their
-- Ramadan changes are transitions listed ahead of the footer, which this rule misses.
-- Read by lib/tz.lua through lib/cron_engine.lua.
local ZONES = {
  ['Africa/Abidjan'] = 'GMT0', ['Africa/Accra'] = 'GMT0', ['Africa/Addis_Ababa'] = 'EAT-3',
  ['Africa/Algiers'] = 'CET-1', ['Africa/Asmara'] = 'EAT-3', ['Africa/Asmera'] = 'EAT-3',
  ['Africa/Bamako'] = 'GMT0', ['Africa/Bangui'] = 'WAT-1', ['Africa/Banjul'] = 'GMT0',
  ['Africa/Bissau'] = 'GMT0', ['Africa/Blantyre'] = 'CAT-2', ['Africa/Brazzaville'] = 'WAT-1',
  ['Africa/Bujumbura'] = 'CAT-2', ['Africa/Cairo'] = 'EET-2EEST,M4.5.5/0,M10.5.4/24',
  ['Africa/Casablanca'] = '<+01>-1', ['Africa/Ceuta'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Africa/Conakry'] = 'GMT0', ['Africa/Dakar'] = 'GMT0', ['Africa/Dar_es_Salaam'] = 'EAT-3',
  ['Africa/Djibouti'] = 'EAT-3', ['Africa/Douala'] = 'WAT-1', ['Africa/El_Aaiun'] = '<+01>-1',
  ['Africa/Freetown'] = 'GMT0', ['Africa/Gaborone'] = 'CAT-2', ['Africa/Harare'] = 'CAT-2',
  ['Africa/Johannesburg'] = 'SAST-2', ['Africa/Juba'] = 'CAT-2', ['Africa/Kampala'] = 'EAT-3',
  ['Africa/Khartoum'] = 'CAT-2', ['Africa/Kigali'] = 'CAT-2', ['Africa/Kinshasa'] = 'WAT-1',
  ['Africa/Lagos'] = 'WAT-1', ['Africa/Libreville'] = 'WAT-1', ['Africa/Lome'] = 'GMT0',
  ['Africa/Luanda'] = 'WAT-1', ['Africa/Lubumbashi'] = 'CAT-2', ['Africa/Lusaka'] = 'CAT-2',
  ['Africa/Malabo'] = 'WAT-1', ['Africa/Maputo'] = 'CAT-2', ['Africa/Maseru'] = 'SAST-2',
  ['Africa/Mbabane'] = 'SAST-2', ['Africa/Mogadishu'] = 'EAT-3', ['Africa/Monrovia'] = 'GMT0',
  ['Africa/Nairobi'] = 'EAT-3', ['Africa/Ndjamena'] = 'WAT-1', ['Africa/Niamey'] = 'WAT-1',
  ['Africa/Nouakchott'] = 'GMT0', ['Africa/Ouagadougou'] = 'GMT0', ['Africa/Porto-Novo'] = 'WAT-1',
  ['Africa/Sao_Tome'] = 'GMT0', ['Africa/Timbuktu'] = 'GMT0', ['Africa/Tripoli'] = 'EET-2',
  ['Africa/Tunis'] = 'CET-1', ['Africa/Windhoek'] = 'CAT-2',
  ['America/Adak'] = 'HST10HDT,M3.2.0,M11.1.0', ['America/Anchorage'] = 'AKST9AKDT,M3.2.0,M11.1.0',
  ['America/Anguilla'] = 'AST4', ['America/Antigua'] = 'AST4', ['America/Araguaina'] = '<-03>3',
  ['America/Argentina/Buenos_Aires'] = '<-03>3', ['America/Argentina/Catamarca'] = '<-03>3',
  ['America/Argentina/ComodRivadavia'] = '<-03>3', ['America/Argentina/Cordoba'] = '<-03>3',
  ['America/Argentina/Jujuy'] = '<-03>3', ['America/Argentina/La_Rioja'] = '<-03>3',
  ['America/Argentina/Mendoza'] = '<-03>3', ['America/Argentina/Rio_Gallegos'] = '<-03>3',
  ['America/Argentina/Salta'] = '<-03>3', ['America/Argentina/San_Juan'] = '<-03>3',
  ['America/Argentina/San_Luis'] = '<-03>3', ['America/Argentina/Tucuman'] = '<-03>3',
  ['America/Argentina/Ushuaia'] = '<-03>3', ['America/Aruba'] = 'AST4',
  ['America/Asuncion'] = '<-03>3', ['America/Atikokan'] = 'EST5',
  ['America/Atka'] = 'HST10HDT,M3.2.0,M11.1.0', ['America/Bahia'] = '<-03>3',
  ['America/Bahia_Banderas'] = 'CST6', ['America/Barbados'] = 'AST4', ['America/Belem'] = '<-03>3',
  ['America/Belize'] = 'CST6', ['America/Blanc-Sablon'] = 'AST4', ['America/Boa_Vista'] = '<-04>4',
  ['America/Bogota'] = '<-05>5', ['America/Boise'] = 'MST7MDT,M3.2.0,M11.1.0',
  ['America/Buenos_Aires'] = '<-03>3', ['America/Cambridge_Bay'] = 'MST7MDT,M3.2.0,M11.1.0',
  ['America/Campo_Grande'] = '<-04>4', ['America/Cancun'] = 'EST5', ['America/Caracas'] = '<-04>4',
  ['America/Catamarca'] = '<-03>3', ['America/Cayenne'] = '<-03>3', ['America/Cayman'] = 'EST5',
  ['America/Chicago'] = 'CST6CDT,M3.2.0,M11.1.0', ['America/Chihuahua'] = 'CST6',
  ['America/Ciudad_Juarez'] = 'MST7MDT,M3.2.0,M11.1.0', ['America/Coral_Harbour'] = 'EST5',
  ['America/Cordoba'] = '<-03>3', ['America/Costa_Rica'] = 'CST6', ['America/Coyhaique'] = '<-03>3',
  ['America/Creston'] = 'MST7', ['America/Cuiaba'] = '<-04>4', ['America/Curacao'] = 'AST4',
  ['America/Danmarkshavn'] = 'GMT0', ['America/Dawson'] = 'MST7', ['America/Dawson_Creek'] = 'MST7',
  ['America/Denver'] = 'MST7MDT,M3.2.0,M11.1.0', ['America/Detroit'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Dominica'] = 'AST4', ['America/Edmonton'] = 'MST7MDT,M3.2.0,M11.1.0',
  ['America/Eirunepe'] = '<-05>5', ['America/El_Salvador'] = 'CST6',
  ['America/Ensenada'] = 'PST8PDT,M3.2.0,M11.1.0', ['America/Fort_Nelson'] = 'MST7',
  ['America/Fort_Wayne'] = 'EST5EDT,M3.2.0,M11.1.0', ['America/Fortaleza'] = '<-03>3',
  ['America/Glace_Bay'] = 'AST4ADT,M3.2.0,M11.1.0',
  ['America/Godthab'] = '<-02>2<-01>,M3.5.0/-1,M10.5.0/0',
  ['America/Goose_Bay'] = 'AST4ADT,M3.2.0,M11.1.0',
  ['America/Grand_Turk'] = 'EST5EDT,M3.2.0,M11.1.0', ['America/Grenada'] = 'AST4',
  ['America/Guadeloupe'] = 'AST4', ['America/Guatemala'] = 'CST6', ['America/Guayaquil'] = '<-05>5',
  ['America/Guyana'] = '<-04>4', ['America/Halifax'] = 'AST4ADT,M3.2.0,M11.1.0',
  ['America/Havana'] = 'CST5CDT,M3.2.0/0,M11.1.0/1', ['America/Hermosillo'] = 'MST7',
  ['America/Indiana/Indianapolis'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Indiana/Knox'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/Indiana/Marengo'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Indiana/Petersburg'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Indiana/Tell_City'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/Indiana/Vevay'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Indiana/Vincennes'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Indiana/Winamac'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Indianapolis'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Inuvik'] = 'MST7MDT,M3.2.0,M11.1.0', ['America/Iqaluit'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Jamaica'] = 'EST5', ['America/Jujuy'] = '<-03>3',
  ['America/Juneau'] = 'AKST9AKDT,M3.2.0,M11.1.0',
  ['America/Kentucky/Louisville'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Kentucky/Monticello'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Knox_IN'] = 'CST6CDT,M3.2.0,M11.1.0', ['America/Kralendijk'] = 'AST4',
  ['America/La_Paz'] = '<-04>4', ['America/Lima'] = '<-05>5',
  ['America/Los_Angeles'] = 'PST8PDT,M3.2.0,M11.1.0',
  ['America/Louisville'] = 'EST5EDT,M3.2.0,M11.1.0', ['America/Lower_Princes'] = 'AST4',
  ['America/Maceio'] = '<-03>3', ['America/Managua'] = 'CST6', ['America/Manaus'] = '<-04>4',
  ['America/Marigot'] = 'AST4', ['America/Martinique'] = 'AST4',
  ['America/Matamoros'] = 'CST6CDT,M3.2.0,M11.1.0', ['America/Mazatlan'] = 'MST7',
  ['America/Mendoza'] = '<-03>3', ['America/Menominee'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/Merida'] = 'CST6', ['America/Metlakatla'] = 'AKST9AKDT,M3.2.0,M11.1.0',
  ['America/Mexico_City'] = 'CST6', ['America/Miquelon'] = '<-03>3<-02>,M3.2.0,M11.1.0',
  ['America/Moncton'] = 'AST4ADT,M3.2.0,M11.1.0', ['America/Monterrey'] = 'CST6',
  ['America/Montevideo'] = '<-03>3', ['America/Montreal'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Montserrat'] = 'AST4', ['America/Nassau'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/New_York'] = 'EST5EDT,M3.2.0,M11.1.0', ['America/Nipigon'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Nome'] = 'AKST9AKDT,M3.2.0,M11.1.0', ['America/Noronha'] = '<-02>2',
  ['America/North_Dakota/Beulah'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/North_Dakota/Center'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/North_Dakota/New_Salem'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/Nuuk'] = '<-02>2<-01>,M3.5.0/-1,M10.5.0/0',
  ['America/Ojinaga'] = 'CST6CDT,M3.2.0,M11.1.0', ['America/Panama'] = 'EST5',
  ['America/Pangnirtung'] = 'EST5EDT,M3.2.0,M11.1.0', ['America/Paramaribo'] = '<-03>3',
  ['America/Phoenix'] = 'MST7', ['America/Port-au-Prince'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Port_of_Spain'] = 'AST4', ['America/Porto_Acre'] = '<-05>5',
  ['America/Porto_Velho'] = '<-04>4', ['America/Puerto_Rico'] = 'AST4',
  ['America/Punta_Arenas'] = '<-03>3', ['America/Rainy_River'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/Rankin_Inlet'] = 'CST6CDT,M3.2.0,M11.1.0', ['America/Recife'] = '<-03>3',
  ['America/Regina'] = 'CST6', ['America/Resolute'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['America/Rio_Branco'] = '<-05>5', ['America/Rosario'] = '<-03>3',
  ['America/Santa_Isabel'] = 'PST8PDT,M3.2.0,M11.1.0', ['America/Santarem'] = '<-03>3',
  ['America/Santiago'] = '<-04>4<-03>,M9.1.6/24,M4.1.6/24', ['America/Santo_Domingo'] = 'AST4',
  ['America/Sao_Paulo'] = '<-03>3', ['America/Scoresbysund'] = '<-02>2<-01>,M3.5.0/-1,M10.5.0/0',
  ['America/Shiprock'] = 'MST7MDT,M3.2.0,M11.1.0', ['America/Sitka'] = 'AKST9AKDT,M3.2.0,M11.1.0',
  ['America/St_Barthelemy'] = 'AST4', ['America/St_Johns'] = 'NST3:30NDT,M3.2.0,M11.1.0',
  ['America/St_Kitts'] = 'AST4', ['America/St_Lucia'] = 'AST4', ['America/St_Thomas'] = 'AST4',
  ['America/St_Vincent'] = 'AST4', ['America/Swift_Current'] = 'CST6',
  ['America/Tegucigalpa'] = 'CST6', ['America/Thule'] = 'AST4ADT,M3.2.0,M11.1.0',
  ['America/Thunder_Bay'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Tijuana'] = 'PST8PDT,M3.2.0,M11.1.0', ['America/Toronto'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['America/Tortola'] = 'AST4', ['America/Vancouver'] = 'PST8PDT,M3.2.0,M11.1.0',
  ['America/Virgin'] = 'AST4', ['America/Whitehorse'] = 'MST7',
  ['America/Winnipeg'] = 'CST6CDT,M3.2.0,M11.1.0', ['America/Yakutat'] = 'AKST9AKDT,M3.2.0,M11.1.0',
  ['America/Yellowknife'] = 'MST7MDT,M3.2.0,M11.1.0', ['Antarctica/Casey'] = '<+08>-8',
  ['Antarctica/Davis'] = '<+07>-7', ['Antarctica/DumontDUrville'] = '<+10>-10',
  ['Antarctica/Macquarie'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3', ['Antarctica/Mawson'] = '<+05>-5',
  ['Antarctica/McMurdo'] = 'NZST-12NZDT,M9.5.0,M4.1.0/3', ['Antarctica/Palmer'] = '<-03>3',
  ['Antarctica/Rothera'] = '<-03>3', ['Antarctica/South_Pole'] = 'NZST-12NZDT,M9.5.0,M4.1.0/3',
  ['Antarctica/Syowa'] = '<+03>-3', ['Antarctica/Troll'] = '<+00>0<+02>-2,M3.5.0/1,M10.5.0/3',
  ['Antarctica/Vostok'] = '<+05>-5', ['Arctic/Longyearbyen'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Asia/Aden'] = '<+03>-3', ['Asia/Almaty'] = '<+05>-5', ['Asia/Amman'] = '<+03>-3',
  ['Asia/Anadyr'] = '<+12>-12', ['Asia/Aqtau'] = '<+05>-5', ['Asia/Aqtobe'] = '<+05>-5',
  ['Asia/Ashgabat'] = '<+05>-5', ['Asia/Ashkhabad'] = '<+05>-5', ['Asia/Atyrau'] = '<+05>-5',
  ['Asia/Baghdad'] = '<+03>-3', ['Asia/Bahrain'] = '<+03>-3', ['Asia/Baku'] = '<+04>-4',
  ['Asia/Bangkok'] = '<+07>-7', ['Asia/Barnaul'] = '<+07>-7',
  ['Asia/Beirut'] = 'EET-2EEST,M3.5.0/0,M10.5.0/0', ['Asia/Bishkek'] = '<+06>-6',
  ['Asia/Brunei'] = '<+08>-8', ['Asia/Calcutta'] = 'IST-5:30', ['Asia/Chita'] = '<+09>-9',
  ['Asia/Choibalsan'] = '<+08>-8', ['Asia/Chongqing'] = 'CST-8', ['Asia/Chungking'] = 'CST-8',
  ['Asia/Colombo'] = '<+0530>-5:30', ['Asia/Dacca'] = '<+06>-6', ['Asia/Damascus'] = '<+03>-3',
  ['Asia/Dhaka'] = '<+06>-6', ['Asia/Dili'] = '<+09>-9', ['Asia/Dubai'] = '<+04>-4',
  ['Asia/Dushanbe'] = '<+05>-5', ['Asia/Famagusta'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Asia/Gaza'] = 'EET-2EEST,M3.4.4/50,M10.4.4/50', ['Asia/Harbin'] = 'CST-8',
  ['Asia/Hebron'] = 'EET-2EEST,M3.4.4/50,M10.4.4/50', ['Asia/Ho_Chi_Minh'] = '<+07>-7',
  ['Asia/Hong_Kong'] = 'HKT-8', ['Asia/Hovd'] = '<+07>-7', ['Asia/Irkutsk'] = '<+08>-8',
  ['Asia/Istanbul'] = '<+03>-3', ['Asia/Jakarta'] = 'WIB-7', ['Asia/Jayapura'] = 'WIT-9',
  ['Asia/Jerusalem'] = 'IST-2IDT,M3.4.4/26,M10.5.0', ['Asia/Kabul'] = '<+0430>-4:30',
  ['Asia/Kamchatka'] = '<+12>-12', ['Asia/Karachi'] = 'PKT-5', ['Asia/Kashgar'] = '<+06>-6',
  ['Asia/Kathmandu'] = '<+0545>-5:45', ['Asia/Katmandu'] = '<+0545>-5:45',
  ['Asia/Khandyga'] = '<+09>-9', ['Asia/Kolkata'] = 'IST-5:30', ['Asia/Krasnoyarsk'] = '<+07>-7',
  ['Asia/Kuala_Lumpur'] = '<+08>-8', ['Asia/Kuching'] = '<+08>-8', ['Asia/Kuwait'] = '<+03>-3',
  ['Asia/Macao'] = 'CST-8', ['Asia/Macau'] = 'CST-8', ['Asia/Magadan'] = '<+11>-11',
  ['Asia/Makassar'] = 'WITA-8', ['Asia/Manila'] = 'PST-8', ['Asia/Muscat'] = '<+04>-4',
  ['Asia/Nicosia'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4', ['Asia/Novokuznetsk'] = '<+07>-7',
  ['Asia/Novosibirsk'] = '<+07>-7', ['Asia/Omsk'] = '<+06>-6', ['Asia/Oral'] = '<+05>-5',
  ['Asia/Phnom_Penh'] = '<+07>-7', ['Asia/Pontianak'] = 'WIB-7', ['Asia/Pyongyang'] = 'KST-9',
  ['Asia/Qatar'] = '<+03>-3', ['Asia/Qostanay'] = '<+05>-5', ['Asia/Qyzylorda'] = '<+05>-5',
  ['Asia/Rangoon'] = '<+0630>-6:30', ['Asia/Riyadh'] = '<+03>-3', ['Asia/Saigon'] = '<+07>-7',
  ['Asia/Sakhalin'] = '<+11>-11', ['Asia/Samarkand'] = '<+05>-5', ['Asia/Seoul'] = 'KST-9',
  ['Asia/Shanghai'] = 'CST-8', ['Asia/Singapore'] = '<+08>-8', ['Asia/Srednekolymsk'] = '<+11>-11',
  ['Asia/Taipei'] = 'CST-8', ['Asia/Tashkent'] = '<+05>-5', ['Asia/Tbilisi'] = '<+04>-4',
  ['Asia/Tehran'] = '<+0330>-3:30', ['Asia/Tel_Aviv'] = 'IST-2IDT,M3.4.4/26,M10.5.0',
  ['Asia/Thimbu'] = '<+06>-6', ['Asia/Thimphu'] = '<+06>-6', ['Asia/Tokyo'] = 'JST-9',
  ['Asia/Tomsk'] = '<+07>-7', ['Asia/Ujung_Pandang'] = 'WITA-8', ['Asia/Ulaanbaatar'] = '<+08>-8',
  ['Asia/Ulan_Bator'] = '<+08>-8', ['Asia/Urumqi'] = '<+06>-6', ['Asia/Ust-Nera'] = '<+10>-10',
  ['Asia/Vientiane'] = '<+07>-7', ['Asia/Vladivostok'] = '<+10>-10', ['Asia/Yakutsk'] = '<+09>-9',
  ['Asia/Yangon'] = '<+0630>-6:30', ['Asia/Yekaterinburg'] = '<+05>-5',
  ['Asia/Yerevan'] = '<+04>-4', ['Atlantic/Azores'] = '<-01>1<+00>,M3.5.0/0,M10.5.0/1',
  ['Atlantic/Bermuda'] = 'AST4ADT,M3.2.0,M11.1.0',
  ['Atlantic/Canary'] = 'WET0WEST,M3.5.0/1,M10.5.0', ['Atlantic/Cape_Verde'] = '<-01>1',
  ['Atlantic/Faeroe'] = 'WET0WEST,M3.5.0/1,M10.5.0',
  ['Atlantic/Faroe'] = 'WET0WEST,M3.5.0/1,M10.5.0',
  ['Atlantic/Jan_Mayen'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Atlantic/Madeira'] = 'WET0WEST,M3.5.0/1,M10.5.0', ['Atlantic/Reykjavik'] = 'GMT0',
  ['Atlantic/South_Georgia'] = '<-02>2', ['Atlantic/St_Helena'] = 'GMT0',
  ['Atlantic/Stanley'] = '<-03>3', ['Australia/ACT'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3',
  ['Australia/Adelaide'] = 'ACST-9:30ACDT,M10.1.0,M4.1.0/3', ['Australia/Brisbane'] = 'AEST-10',
  ['Australia/Broken_Hill'] = 'ACST-9:30ACDT,M10.1.0,M4.1.0/3',
  ['Australia/Canberra'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3',
  ['Australia/Currie'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3', ['Australia/Darwin'] = 'ACST-9:30',
  ['Australia/Eucla'] = '<+0845>-8:45', ['Australia/Hobart'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3',
  ['Australia/LHI'] = '<+1030>-10:30<+11>-11,M10.1.0,M4.1.0', ['Australia/Lindeman'] = 'AEST-10',
  ['Australia/Lord_Howe'] = '<+1030>-10:30<+11>-11,M10.1.0,M4.1.0',
  ['Australia/Melbourne'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3',
  ['Australia/NSW'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3', ['Australia/North'] = 'ACST-9:30',
  ['Australia/Perth'] = 'AWST-8', ['Australia/Queensland'] = 'AEST-10',
  ['Australia/South'] = 'ACST-9:30ACDT,M10.1.0,M4.1.0/3',
  ['Australia/Sydney'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3',
  ['Australia/Tasmania'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3',
  ['Australia/Victoria'] = 'AEST-10AEDT,M10.1.0,M4.1.0/3', ['Australia/West'] = 'AWST-8',
  ['Australia/Yancowinna'] = 'ACST-9:30ACDT,M10.1.0,M4.1.0/3', ['Brazil/Acre'] = '<-05>5',
  ['Brazil/DeNoronha'] = '<-02>2', ['Brazil/East'] = '<-03>3', ['Brazil/West'] = '<-04>4',
  ['CET'] = 'CET-1CEST,M3.5.0,M10.5.0/3', ['CST6CDT'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['Canada/Atlantic'] = 'AST4ADT,M3.2.0,M11.1.0', ['Canada/Central'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['Canada/Eastern'] = 'EST5EDT,M3.2.0,M11.1.0', ['Canada/Mountain'] = 'MST7MDT,M3.2.0,M11.1.0',
  ['Canada/Newfoundland'] = 'NST3:30NDT,M3.2.0,M11.1.0',
  ['Canada/Pacific'] = 'PST8PDT,M3.2.0,M11.1.0', ['Canada/Saskatchewan'] = 'CST6',
  ['Canada/Yukon'] = 'MST7', ['Chile/Continental'] = '<-04>4<-03>,M9.1.6/24,M4.1.6/24',
  ['Chile/EasterIsland'] = '<-06>6<-05>,M9.1.6/22,M4.1.6/22',
  ['Cuba'] = 'CST5CDT,M3.2.0/0,M11.1.0/1', ['EET'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['EST'] = 'EST5', ['EST5EDT'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['Egypt'] = 'EET-2EEST,M4.5.5/0,M10.5.4/24', ['Eire'] = 'IST-1GMT0,M10.5.0,M3.5.0/1',
  ['Etc/GMT'] = 'GMT0', ['Etc/GMT+0'] = 'GMT0', ['Etc/GMT+1'] = '<-01>1',
  ['Etc/GMT+10'] = '<-10>10', ['Etc/GMT+11'] = '<-11>11', ['Etc/GMT+12'] = '<-12>12',
  ['Etc/GMT+2'] = '<-02>2', ['Etc/GMT+3'] = '<-03>3', ['Etc/GMT+4'] = '<-04>4',
  ['Etc/GMT+5'] = '<-05>5', ['Etc/GMT+6'] = '<-06>6', ['Etc/GMT+7'] = '<-07>7',
  ['Etc/GMT+8'] = '<-08>8', ['Etc/GMT+9'] = '<-09>9', ['Etc/GMT-0'] = 'GMT0',
  ['Etc/GMT-1'] = '<+01>-1', ['Etc/GMT-10'] = '<+10>-10', ['Etc/GMT-11'] = '<+11>-11',
  ['Etc/GMT-12'] = '<+12>-12', ['Etc/GMT-13'] = '<+13>-13', ['Etc/GMT-14'] = '<+14>-14',
  ['Etc/GMT-2'] = '<+02>-2', ['Etc/GMT-3'] = '<+03>-3', ['Etc/GMT-4'] = '<+04>-4',
  ['Etc/GMT-5'] = '<+05>-5', ['Etc/GMT-6'] = '<+06>-6', ['Etc/GMT-7'] = '<+07>-7',
  ['Etc/GMT-8'] = '<+08>-8', ['Etc/GMT-9'] = '<+09>-9', ['Etc/GMT0'] = 'GMT0',
  ['Etc/Greenwich'] = 'GMT0', ['Etc/UCT'] = 'UTC0', ['Etc/UTC'] = 'UTC0',
  ['Etc/Universal'] = 'UTC0', ['Etc/Zulu'] = 'UTC0',
  ['Europe/Amsterdam'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Andorra'] = 'CET-1CEST,M3.5.0,M10.5.0/3', ['Europe/Astrakhan'] = '<+04>-4',
  ['Europe/Athens'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Belfast'] = 'GMT0BST,M3.5.0/1,M10.5.0',
  ['Europe/Belgrade'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Berlin'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Bratislava'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Brussels'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Bucharest'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Budapest'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Busingen'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Chisinau'] = 'EET-2EEST,M3.5.0,M10.5.0/3',
  ['Europe/Copenhagen'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Dublin'] = 'IST-1GMT0,M10.5.0,M3.5.0/1',
  ['Europe/Gibraltar'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Guernsey'] = 'GMT0BST,M3.5.0/1,M10.5.0',
  ['Europe/Helsinki'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Isle_of_Man'] = 'GMT0BST,M3.5.0/1,M10.5.0', ['Europe/Istanbul'] = '<+03>-3',
  ['Europe/Jersey'] = 'GMT0BST,M3.5.0/1,M10.5.0', ['Europe/Kaliningrad'] = 'EET-2',
  ['Europe/Kiev'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4', ['Europe/Kirov'] = 'MSK-3',
  ['Europe/Kyiv'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4', ['Europe/Lisbon'] = 'WET0WEST,M3.5.0/1,M10.5.0',
  ['Europe/Ljubljana'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/London'] = 'GMT0BST,M3.5.0/1,M10.5.0',
  ['Europe/Luxembourg'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Madrid'] = 'CET-1CEST,M3.5.0,M10.5.0/3', ['Europe/Malta'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Mariehamn'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4', ['Europe/Minsk'] = '<+03>-3',
  ['Europe/Monaco'] = 'CET-1CEST,M3.5.0,M10.5.0/3', ['Europe/Moscow'] = 'MSK-3',
  ['Europe/Nicosia'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Oslo'] = 'CET-1CEST,M3.5.0,M10.5.0/3', ['Europe/Paris'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Podgorica'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Prague'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Riga'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4', ['Europe/Rome'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Samara'] = '<+04>-4', ['Europe/San_Marino'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Sarajevo'] = 'CET-1CEST,M3.5.0,M10.5.0/3', ['Europe/Saratov'] = '<+04>-4',
  ['Europe/Simferopol'] = 'MSK-3', ['Europe/Skopje'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Sofia'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Stockholm'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Tallinn'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Tirane'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Tiraspol'] = 'EET-2EEST,M3.5.0,M10.5.0/3', ['Europe/Ulyanovsk'] = '<+04>-4',
  ['Europe/Uzhgorod'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Vaduz'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Vatican'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Vienna'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Vilnius'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4', ['Europe/Volgograd'] = 'MSK-3',
  ['Europe/Warsaw'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Zagreb'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Europe/Zaporozhye'] = 'EET-2EEST,M3.5.0/3,M10.5.0/4',
  ['Europe/Zurich'] = 'CET-1CEST,M3.5.0,M10.5.0/3', ['GB'] = 'GMT0BST,M3.5.0/1,M10.5.0',
  ['GB-Eire'] = 'GMT0BST,M3.5.0/1,M10.5.0', ['GMT'] = 'GMT0', ['GMT+0'] = 'GMT0',
  ['GMT-0'] = 'GMT0', ['GMT0'] = 'GMT0', ['Greenwich'] = 'GMT0', ['HST'] = 'HST10',
  ['Hongkong'] = 'HKT-8', ['Iceland'] = 'GMT0', ['Indian/Antananarivo'] = 'EAT-3',
  ['Indian/Chagos'] = '<+06>-6', ['Indian/Christmas'] = '<+07>-7',
  ['Indian/Cocos'] = '<+0630>-6:30', ['Indian/Comoro'] = 'EAT-3', ['Indian/Kerguelen'] = '<+05>-5',
  ['Indian/Mahe'] = '<+04>-4', ['Indian/Maldives'] = '<+05>-5', ['Indian/Mauritius'] = '<+04>-4',
  ['Indian/Mayotte'] = 'EAT-3', ['Indian/Reunion'] = '<+04>-4', ['Iran'] = '<+0330>-3:30',
  ['Israel'] = 'IST-2IDT,M3.4.4/26,M10.5.0', ['Jamaica'] = 'EST5', ['Japan'] = 'JST-9',
  ['Kwajalein'] = '<+12>-12', ['Libya'] = 'EET-2', ['MET'] = 'MET-1MEST,M3.5.0,M10.5.0/3',
  ['MST'] = 'MST7', ['MST7MDT'] = 'MST7MDT,M3.2.0,M11.1.0',
  ['Mexico/BajaNorte'] = 'PST8PDT,M3.2.0,M11.1.0', ['Mexico/BajaSur'] = 'MST7',
  ['Mexico/General'] = 'CST6', ['NZ'] = 'NZST-12NZDT,M9.5.0,M4.1.0/3',
  ['NZ-CHAT'] = '<+1245>-12:45<+1345>,M9.5.0/2:45,M4.1.0/3:45',
  ['Navajo'] = 'MST7MDT,M3.2.0,M11.1.0', ['PRC'] = 'CST-8', ['PST8PDT'] = 'PST8PDT,M3.2.0,M11.1.0',
  ['Pacific/Apia'] = '<+13>-13', ['Pacific/Auckland'] = 'NZST-12NZDT,M9.5.0,M4.1.0/3',
  ['Pacific/Bougainville'] = '<+11>-11',
  ['Pacific/Chatham'] = '<+1245>-12:45<+1345>,M9.5.0/2:45,M4.1.0/3:45',
  ['Pacific/Chuuk'] = '<+10>-10', ['Pacific/Easter'] = '<-06>6<-05>,M9.1.6/22,M4.1.6/22',
  ['Pacific/Efate'] = '<+11>-11', ['Pacific/Enderbury'] = '<+13>-13',
  ['Pacific/Fakaofo'] = '<+13>-13', ['Pacific/Fiji'] = '<+12>-12',
  ['Pacific/Funafuti'] = '<+12>-12', ['Pacific/Galapagos'] = '<-06>6',
  ['Pacific/Gambier'] = '<-09>9', ['Pacific/Guadalcanal'] = '<+11>-11',
  ['Pacific/Guam'] = 'ChST-10', ['Pacific/Honolulu'] = 'HST10', ['Pacific/Johnston'] = 'HST10',
  ['Pacific/Kanton'] = '<+13>-13', ['Pacific/Kiritimati'] = '<+14>-14',
  ['Pacific/Kosrae'] = '<+11>-11', ['Pacific/Kwajalein'] = '<+12>-12',
  ['Pacific/Majuro'] = '<+12>-12', ['Pacific/Marquesas'] = '<-0930>9:30',
  ['Pacific/Midway'] = 'SST11', ['Pacific/Nauru'] = '<+12>-12', ['Pacific/Niue'] = '<-11>11',
  ['Pacific/Norfolk'] = '<+11>-11<+12>,M10.1.0,M4.1.0/3', ['Pacific/Noumea'] = '<+11>-11',
  ['Pacific/Pago_Pago'] = 'SST11', ['Pacific/Palau'] = '<+09>-9', ['Pacific/Pitcairn'] = '<-08>8',
  ['Pacific/Pohnpei'] = '<+11>-11', ['Pacific/Ponape'] = '<+11>-11',
  ['Pacific/Port_Moresby'] = '<+10>-10', ['Pacific/Rarotonga'] = '<-10>10',
  ['Pacific/Saipan'] = 'ChST-10', ['Pacific/Samoa'] = 'SST11', ['Pacific/Tahiti'] = '<-10>10',
  ['Pacific/Tarawa'] = '<+12>-12', ['Pacific/Tongatapu'] = '<+13>-13',
  ['Pacific/Truk'] = '<+10>-10', ['Pacific/Wake'] = '<+12>-12', ['Pacific/Wallis'] = '<+12>-12',
  ['Pacific/Yap'] = '<+10>-10', ['Poland'] = 'CET-1CEST,M3.5.0,M10.5.0/3',
  ['Portugal'] = 'WET0WEST,M3.5.0/1,M10.5.0', ['ROC'] = 'CST-8', ['ROK'] = 'KST-9',
  ['Singapore'] = '<+08>-8', ['Turkey'] = '<+03>-3', ['UCT'] = 'UTC0',
  ['US/Alaska'] = 'AKST9AKDT,M3.2.0,M11.1.0', ['US/Aleutian'] = 'HST10HDT,M3.2.0,M11.1.0',
  ['US/Arizona'] = 'MST7', ['US/Central'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['US/East-Indiana'] = 'EST5EDT,M3.2.0,M11.1.0', ['US/Eastern'] = 'EST5EDT,M3.2.0,M11.1.0',
  ['US/Hawaii'] = 'HST10', ['US/Indiana-Starke'] = 'CST6CDT,M3.2.0,M11.1.0',
  ['US/Michigan'] = 'EST5EDT,M3.2.0,M11.1.0', ['US/Mountain'] = 'MST7MDT,M3.2.0,M11.1.0',
  ['US/Pacific'] = 'PST8PDT,M3.2.0,M11.1.0', ['US/Samoa'] = 'SST11', ['UTC'] = 'UTC0',
  ['Universal'] = 'UTC0', ['W-SU'] = 'MSK-3', ['WET'] = 'WET0WEST,M3.5.0/1,M10.5.0',
  ['Zulu'] = 'UTC0',
}

-- Time zones for the cron engine: the proleptic Gregorian calendar (days since the epoch and
-- back, month lengths, weekdays), a POSIX TZ rule (lib/zones.lua holds one per IANA name, as
-- tzfile(5) footers write them: `CET-1CEST,M3.5.0,M10.5.0/3`, `<+0545>-5:45`, `<-03>3`, Jn
-- and n dates, `/time` from -167 to 167 hours) read into offsets, the offset in force at any
-- instant with the transitions either side of it, and a local wall-clock time resolved to the
-- instants that show it (none in a spring-forward gap, two in a fall-back overlap).
-- Offsets here are seconds east of UTC (POSIX writes them west); instants and wall-clock times
-- are whole seconds since the epoch, a wall-clock time counted as if its zone were UTC.
local tz_rules = {}

-- Hinnant's days_from_civil: exact for any year, with no os.time to lean on inside Redis.
function tz_rules.days(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

function tz_rules.civil(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

function tz_rules.leap(y)
  return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)
end

function tz_rules.month_len(y, m)
  if m == 2 then return tz_rules.leap(y) and 29 or 28 end
  return 30 + (m + math.floor(m / 8)) % 2
end

-- 0 is Sunday, as cron counts; the epoch was a Thursday.
function tz_rules.weekday(z)
  return (z + 4) % 7
end

-- `[+-]hh[:mm[:ss]]` at `pos` of `s`: its seconds and the position after it, or nil.
function tz_rules.hms(s, pos, max_h)
  local sign, h, at = string.match(s, '^([+-]?)(%d+)()', pos)
  if not h or #h > 3 or tonumber(h) > max_h then return nil end
  local secs = tonumber(h) * 3600
  for unit = 60, 1, -59 do
    local part, after = string.match(s, '^:(%d%d?)()', at)
    if not part then break end
    if tonumber(part) > 59 then return nil end
    secs, at = secs + tonumber(part) * unit, after
  end
  return sign == '-' and -secs or secs, at
end

-- A zone abbreviation (`CET`, `<+0545>`): the position after it, or nil.
function tz_rules.abbr(s, pos)
  if string.sub(s, pos, pos) == '<' then
    local close = string.find(s, '>', pos, true)
    return close and close > pos + 1 and close + 1 or nil
  end
  local word = string.match(s, '^%a+', pos)
  return word and #word >= 3 and pos + #word or nil
end

-- A DST start or end (`M3.5.0/3`, `J60`, `59/-1`): the date rule and the position after it.
function tz_rules.date_rule(s, pos)
  local r = {}
  local m, w, d, at = string.match(s, '^M(%d+)%.(%d)%.(%d)()', pos)
  if m then
    r.m, r.w, r.d = tonumber(m), tonumber(w), tonumber(d)
    if r.m < 1 or r.m > 12 or r.w < 1 or r.w > 5 or r.d > 6 then return nil end
  else
    local j, n
    j, n, at = string.match(s, '^(J?)(%d+)()', pos)
    if not n then return nil end
    r.n, r.julian = tonumber(n), j == 'J'
    if r.n > 365 or (r.julian and r.n < 1) then return nil end
  end
  r.time = 7200
  if string.sub(s, at, at) == '/' then
    r.time, at = tz_rules.hms(s, at + 1, 167)
    if not r.time then return nil end
  end
  return r, at
end

-- A POSIX TZ rule read into { std =, dst = (nil without daylight time), on =, off = } or nil.
-- A daylight name without dates takes the US rule, as glibc does without posixrules.
function tz_rules.parse(spec)
  local at = tz_rules.abbr(spec, 1)
  if not at then return nil end
  local west
  west, at = tz_rules.hms(spec, at, 24)
  if not west then return nil end
  local rule = { std = -west, years = {} }
  if at > #spec then return rule end
  at = tz_rules.abbr(spec, at)
  if not at then return nil end
  rule.dst = rule.std + 3600
  if at <= #spec and string.sub(spec, at, at) ~= ',' then
    west, at = tz_rules.hms(spec, at, 24)
    if not west then return nil end
    rule.dst = -west
  end
  if at > #spec then spec, at = spec .. ',M3.2.0,M11.1.0', at end
  if string.sub(spec, at, at) ~= ',' then return nil end
  rule.on, at = tz_rules.date_rule(spec, at + 1)
  if not rule.on or string.sub(spec, at, at) ~= ',' then return nil end
  rule.off, at = tz_rules.date_rule(spec, at + 1)
  if not rule.off or at <= #spec then return nil end
  return rule
end

-- The day (since the epoch) a date rule names in year y.
function tz_rules.rule_day(r, y)
  if r.m then
    local first = tz_rules.days(y, r.m, 1)
    local day = first + (r.d - tz_rules.weekday(first)) % 7 + 7 * (r.w - 1)
    if day >= first + tz_rules.month_len(y, r.m) then day = day - 7 end
    return day
  end
  local jan1 = tz_rules.days(y, 1, 1)
  if not r.julian then return jan1 + r.n end
  -- Jn never counts February 29
  return jan1 + r.n - 1 + ((r.n >= 60 and tz_rules.leap(y)) and 1 or 0)
end

-- The instants daylight time starts and ends in year y: the start is written in standard
-- time, the end in daylight time. Kept per rule, which lives for one call.
function tz_rules.year(rule, y)
  local t = rule.years[y]
  if not t then
    t = { tz_rules.rule_day(rule.on, y) * 86400 + rule.on.time - rule.std,
      tz_rules.rule_day(rule.off, y) * 86400 + rule.off.time - rule.dst }
    rule.years[y] = t
  end
  return t[1], t[2]
end

-- At instant t: the offset in force, the last transition at or before t with the offset
-- before it, and the first transition after t with the offset after it (infinite without
-- daylight time). The three years around t hold both, whatever hour a rule names.
function tz_rules.around(rule, t)
  local std, dst = rule.std, rule.dst
  if not dst then return std, -math.huge, std, math.huge, std end
  local y = tz_rules.civil(math.floor((t + std) / 86400))
  local tp, o, tn, on = -math.huge, std, math.huge, std
  for yy = y - 1, y + 1 do
    local on_at, off_at = tz_rules.year(rule, yy)
    if on_at <= t and on_at > tp then tp, o = on_at, dst end
    if off_at <= t and off_at > tp then tp, o = off_at, std end
    if on_at > t and on_at < tn then tn, on = on_at, dst end
    if off_at > t and off_at < tn then tn, on = off_at, std end
  end
  return o, tp, o == dst and std or dst, tn, on
end

function tz_rules.offset_at(rule, t)
  return (tz_rules.around(rule, t))
end

-- The instants whose wall clock shows local time c, in order: one, two in a fall-back overlap,
-- or none in a spring-forward gap (then also the transition instant that opened the gap).
function tz_rules.instants(rule, c)
  local std, dst = rule.std, rule.dst or rule.std
  local out = {}
  if tz_rules.offset_at(rule, c - std) == std then out[1] = c - std end
  if dst ~= std and tz_rules.offset_at(rule, c - dst) == dst then out[#out + 1] = c - dst end
  if out[2] and out[2] < out[1] then out[1], out[2] = out[2], out[1] end
  if out[1] then return out end
  local _, _, _, opened = tz_rules.around(rule, c - math.max(std, dst))
  return out, opened
end

-- The cron engine: the one place a recurring job's ticks are computed (hero_duties fires by
-- it, hero_cron_next shows and checks schedules with it), so every language gets the same
-- ticks. `every <duration>` is read as humantime reads it (ticks at whole multiples of it
-- since the epoch, 1s at least); a cron expression as croner 3.0.1's Cron::from_str: 5 fields,
-- 6 with seconds first, 7 with a year last; JAN and MON; `*` `?` lists ranges steps; `L` `nW`
-- in the day of month, `5L` `5#3` in the day of week, where a leading `+` ANDs it with the day
-- of month (else either matches, unless one is `*`); @yearly @annually @monthly @weekly @daily
-- @hourly. Beyond croner: `LW` (the last weekday) and `7L` (the last Sunday), which croner
-- refuses or never fires. The expression is read in its zone's wall-clock time. A fixed-time
-- schedule (second, minute and hour one value each, no `*` or step) fires once where its time
-- falls in a spring-forward gap, at the transition (the gap's end), and where it occurs twice,
-- at the first; any other schedule skips a gap's times and fires at both instants of a
-- repeated time, in instant order. Ticks are whole seconds, each search bounded (3000 steps of
-- a day, a month or a year, up to croner's year 5000) so a call stays cheap inside Redis.
local cron_engine = {
  memo = {}, kept = 0,
  ESC = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t', ['\0'] = '\\0' },
  FIELDS = { 'second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week', 'year' },
  BOUNDS = { { 0, 59 }, { 0, 59 }, { 0, 23 }, { 1, 31 }, { 1, 12 }, { 0, 7 }, { 1, 5000 } },
  -- croner's characters beyond `*/0-9,-` per field (`?` is already `*` there when checked)
  EXTRA = { [4] = 'LW?', [6] = '#L?' },
  NICKNAMES = { ['@YEARLY'] = '0 0 1 1 *', ['@ANNUALLY'] = '0 0 1 1 *', ['@MONTHLY'] = '0 0 1 * *',
    ['@WEEKLY'] = '0 0 * * 0', ['@DAILY'] = '0 0 * * *', ['@HOURLY'] = '0 * * * *' },
  -- replaced anywhere, in this order, as croner does (MON in the month field is January)
  NAMES = { '%-SUN', '-7', 'SUN', '0', 'MON', '1', 'TUE', '2', 'WED', '3', 'THU', '4', 'FRI', '5',
    'SAT', '6', 'JAN', '1', 'FEB', '2', 'MAR', '3', 'APR', '4', 'MAY', '5', 'JUN', '6', 'JUL', '7',
    'AUG', '8', 'SEP', '9', 'OCT', '10', 'NOV', '11', 'DEC', '12' },
  -- seconds a unit, or (negative) nanoseconds for the units below a second
  UNITS = { nanos = -1, nsec = -1, ns = -1, usec = -1e3, us = -1e3, ['\194\181s'] = -1e3,
    millis = -1e6, msec = -1e6, ms = -1e6, seconds = 1, second = 1, secs = 1, sec = 1, s = 1,
    minutes = 60, minute = 60, min = 60, mins = 60, m = 60, hours = 3600, hour = 3600,
    hr = 3600, hrs = 3600, h = 3600, days = 86400, day = 86400, d = 86400, weeks = 604800,
    week = 604800, wk = 604800, wks = 604800, w = 604800, months = 2630016, month = 2630016,
    M = 2630016, years = 31557600, year = 31557600, yr = 31557600, yrs = 31557600, y = 31557600 },
}

-- A string as Rust's {:?} writes it, so messages read as the Rust side's did.
function cron_engine.quote(s)
  return '"' .. string.gsub(s, '[%c"\\]', function(c)
    return cron_engine.ESC[c] or string.format('\\u{%x}', string.byte(c))
  end) .. '"'
end

-- A schedule in a zone: { step = ms } for `every`, else { cron = the parsed expression, rule =
-- the zone's rule }. Parsed expressions (~40 us to make) are kept by their text, none changed
-- once made, so hero_duties' pass over every spec parses each once: at most 256 (~4 KB each),
-- all dropped when full.
function cron_engine.parse(schedule, tz)
  local rule = type(tz) == 'string' and ZONES[tz] and tz_rules.parse(ZONES[tz])
  if not rule then
    return nil, 'time zone ' .. cron_engine.quote(tostring(tz))
      .. ' is not an IANA zone name (e.g. UTC, Europe/Amsterdam)'
  end
  local text = string.match(schedule, '^%s*every (.-)%s*$')
  if text and text ~= '' then
    local ms, why = cron_engine.duration(string.match(text, '^%s*(.*)$'))
    if not ms then
      return nil, 'schedule ' .. cron_engine.quote(schedule) .. ': ' .. cron_engine.quote(text)
        .. ' is not a duration (' .. why .. ')'
    end
    if ms >= 1000 then return { step = ms } end
    return nil, 'schedule ' .. cron_engine.quote(schedule) .. ': the shortest interval is 1s'
  end
  local s, why = cron_engine.memo[schedule], nil
  if not s then
    s, why = cron_engine.cron(schedule)
    if not s then
      return nil, 'schedule ' .. cron_engine.quote(schedule) .. ' is not a cron expression ('
        .. why .. ') nor `every <duration>`'
    end
    if cron_engine.kept >= 256 then cron_engine.memo, cron_engine.kept = {}, 0 end
    cron_engine.memo[schedule], cron_engine.kept = s, cron_engine.kept + 1
  end
  return { cron = s, rule = rule }
end

-- humantime::parse_duration in ms: numbers each with a unit (`1h 30m`, `1h30m`), blanks
-- allowed inside a number (`1 0s` is 10s), a fraction that must come out whole (in
-- nanoseconds up to minutes, in seconds above).
function cron_engine.duration(s)
  if s == '0' then return 0 end
  local at, secs, nanos = 1, 0, 0
  while true do
    local int, p, dot, raw, unit, after =
      string.match(s, '^%s*(%d[%d%s]*)()(%.?)([%d%s]*)([%a\194\181]*)()', at)
    if not int then
      if at > 1 and string.find(s, '^%s*$', at) then break end
      if string.find(s, '^%s*$', at) then return nil, 'value was empty' end
      return nil, 'expected number at ' .. (at > 1 and at or 0)
    end
    local c, frac = string.sub(s, after, after), string.gsub(raw, '%s', '')
    if dot == '.' and frac == '' then
      return nil, 'invalid character at ' .. (#raw == 0 and p - 1 or p + #raw)
    elseif c ~= '' and not string.find(c, '[%d%s]') then
      return nil, 'invalid character at ' .. (after - 1)
    end
    -- a number past u64 is refused before its unit is looked at, as humantime reads digits first
    local n, f = tonumber((string.gsub(int, '%s', ''))), cron_engine.UNITS[unit] or 0
    if f == 0 and n < 2 ^ 64 then
      if unit == '' then
        return nil, 'time unit needed, for example ' .. string.format('%.0f', n) .. 'sec or '
          .. string.format('%.0f', n) .. 'ms'
      end
      return nil, 'unknown time unit ' .. cron_engine.quote(unit) .. ', supported units: ns, '
        .. 'us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)'
    end
    if f < 0 then nanos = nanos - n * f else secs = secs + n * f end
    local num, den = tonumber(frac), 10 ^ #frac
    local scale = f < 0 and -f or (f <= 60 and f * 1e9 or f)
    local whole = not num or (f ~= -1 and #frac <= 19 and (num * scale) % den == 0)
    if num and whole and f <= 60 then nanos = nanos + num * scale / den
    elseif num and whole then secs = secs + num * scale / den end
    if not whole or n >= 2 ^ 64 or secs + nanos / 1e9 > 2 ^ 53 / 1000 then
      return nil, 'number is too large or cannot be represented without a lack of precision '
        .. '(values below 1ns are not supported)'
    end
    at = after
  end
  return secs * 1000 + math.floor(nanos / 1e6)
end

-- Croner's Cron::from_str, giving a schedule table or nil and why.
function cron_engine.cron(schedule)
  local p = string.match(string.upper(schedule), '^%s*(.-)%s*$')
  if p == '' then return nil, 'it is empty' end
  if string.find(p, '@', 1, true) then p = cron_engine.NICKNAMES[p] or p end
  for k = 1, #cron_engine.NAMES, 2 do
    p = string.gsub(p, cron_engine.NAMES[k], cron_engine.NAMES[k + 1])
  end
  local parts, raw = {}, {}
  for w in string.gmatch(p, '%S+') do parts[#parts + 1] = w end
  for w in string.gmatch(schedule, '%S+') do raw[#raw + 1] = w end
  local given = #parts
  if given < 5 or given > 7 then
    return nil, 'it has ' .. given .. (given == 1 and ' field' or ' fields') .. ': give 5 '
      .. '(minute hour day-of-month month day-of-week), 6 with a second first, or 7 with a year last'
  end
  if given == 5 then table.insert(parts, 1, '0') end
  if #parts == 6 then parts[7] = '*' end
  if #raw ~= given then raw = parts elseif given == 5 then table.insert(raw, 1, '0') end
  parts[4], parts[6] = string.gsub(parts[4], '%?', '*'), string.gsub(parts[6], '%?', '*')
  local both = string.sub(parts[6], 1, 1) == '+'
  if both then parts[6] = string.sub(parts[6], 2) end
  for k = 1, 7 do
    local bad = string.match(parts[k], '[^%*/%d,%-' .. (cron_engine.EXTRA[k] or '') .. ']')
    if bad then
      return nil, 'the ' .. cron_engine.FIELDS[k] .. ' field ' .. cron_engine.quote(raw[k])
        .. ' may not hold ' .. cron_engine.quote(bad)
    end
  end
  local s = { star_dom = parts[4] == '*', star_dow = parts[6] == '*', both = both, fixed = true }
  local comps = {}
  for k = 1, 7 do
    local c = { min = cron_engine.BOUNDS[k][1], max = cron_engine.BOUNDS[k][2], step = 1,
      all = {}, nth = {}, last = {}, w = {}, nth_ok = k == 6 }
    local why = (k < 7 or parts[7] ~= '*') and cron_engine.field(c, parts[k])
    if why then
      return nil, 'the ' .. cron_engine.FIELDS[k] .. ' field ' .. cron_engine.quote(raw[k])
        .. ': ' .. why
    end
    comps[k] = c
  end
  for k = 1, 3 do
    local c, count = comps[k], 0
    for _ in pairs(c.all) do count = count + 1 end
    s.fixed = s.fixed and c.step == 1 and not c.wild and count == 1
    s[k] = cron_engine.nexts(c.all, 0, c.max)
  end
  local dow = comps[6]
  -- 7 is Sunday too (croner moves its plain and nth flags, and forgets 7L)
  dow.all[0], dow.last[0] = dow.all[0] or dow.all[7], dow.last[0] or dow.last[7]
  for k in pairs(dow.nth[7] or {}) do dow.nth[0] = dow.nth[0] or {}; dow.nth[0][k] = true end
  s.dom, s.dom_last, s.wdays, s.lw = comps[4].all, comps[4].last_on, comps[4].w, comps[4].lw
  s.dow, s.nth, s.dlast = dow.all, dow.nth, dow.last
  s.months = comps[5].all
  s.nmonth = cron_engine.nexts(s.months, 1, 12)
  if parts[7] ~= '*' then s.years = comps[7].all end
  s.dom_plain = s.star_dow and not s.dom_last and not next(s.wdays) and not s.lw
  if s.dom_plain then s.ndom = cron_engine.nexts(s.dom, 1, 31) end
  s.never = cron_engine.never(s)
  return s
end

-- The next value of a set from each value on, so a search steps straight to it.
function cron_engine.nexts(set, lo, hi)
  local t = {}
  for v = hi, lo, -1 do t[v] = set[v] and v or t[v + 1] end
  return t
end

-- Croner's CronComponent::parse on one field: nil, or why the field is refused. Sets
-- c.all[v] for plain values, c.nth[v][k] for `v#k`, c.last[v] for `vL`, c.w[n] for `nW`,
-- c.last_on for `L`, c.lw for `LW`; c.step and c.wild as croner keeps them.
function cron_engine.field(c, text)
  local function u16(t)
    return string.match(t, '^%d+$') and tonumber(t) <= 65535 and tonumber(t) or nil
  end
  -- the flag a part sets: `...L` last, `...#k` the kth, else plain; and the part before `#`
  local function flag(part)
    local bare = string.match(part, '^[^#]*')
    if string.sub(part, -1) == 'L' then return 'last', nil, bare end
    local hash = string.find(part, '#', 1, true)
    if not hash then return 'all', nil, bare end
    local k = tonumber(string.match(part, '^#(%d+)$', hash) or '')
    if not k or k > 255 then return nil, 'the nth weekday after # is not a number' end
    if k < 1 or k > 5 then return nil, '#' .. k .. ': the nth weekday is 1-5' end
    return 'nth', k, bare
  end
  local function set(v, how, k)
    if v < c.min or v > c.max then return v .. ' is out of range ' .. c.min .. '-' .. c.max end
    if how == 'nth' and not c.nth_ok then return '# is taken in the day-of-week field only' end
    if how == 'all' then c.all[v] = true
    elseif how == 'last' then c.last[v] = true
    else c.nth[v] = c.nth[v] or {}; c.nth[v][k] = true end
  end
  if text == '*' then c.wild = true; for v = c.min, c.max do c.all[v] = true end return end
  for part in string.gmatch(text, '[^,]+') do
    local why, written = nil, part
    if string.find(part, '/', 1, true) then
      local how, k, bare = flag(part)
      if not how then return k end
      local range, step = string.match(bare, '^([^/]*)/([^/]*)$')
      step = step and u16(step)
      if not step then return cron_engine.quote(part) .. ' is not <range>/<step>' end
      c.step = step
      if step == 0 then return 'a step of 0' end
      local lo, hi
      if range == '*' then
        c.wild, lo, hi = true, c.min, c.max
      elseif string.find(range, '-', 1, true) then
        local a, b = string.match(range, '^([^-]*)-([^-]*)$')
        lo, hi = a and u16(a), b and u16(b)
      else
        lo, hi = u16(range), c.max
      end
      if not lo or not hi then return cron_engine.quote(part) .. ' is not <range>/<step>' end
      if lo < c.min or hi > c.max or lo > hi then
        return cron_engine.quote(range) .. ' is out of range ' .. c.min .. '-' .. c.max
      end
      local v = lo
      while v <= hi and not why do
        why = set(v, how, k)
        v = v + step
        if v > 65535 then return 'the step runs past 65535' end
      end
    elseif string.find(part, '-', 1, true) then
      local how, k, bare = flag(part)
      if not how then return k end
      local a, b = string.match(bare, '^([^-]*)-([^-]*)$')
      local lo, hi = a and u16(a), b and u16(b)
      if not lo or not hi then return cron_engine.quote(part) .. ' is not a range <from>-<to>' end
      if lo > hi or lo < c.min or hi > c.max then
        return cron_engine.quote(part) .. ' is backwards or out of range ' .. c.min .. '-' .. c.max
      end
      for v = lo, hi do why = why or set(v, how, k) end
    elseif part == 'LW' then
      c.lw = true
    elseif string.find(part, 'W', 1, true) then
      -- croner reads the day before the W and ignores what follows it
      local day = u16(string.match(part, '^[^W]*'))
      if not day then return cron_engine.quote(part) .. ': W needs a day before it (15W)' end
      if day < c.min or day > c.max then return 'the day of ' .. part .. ' is out of range 1-31' end
      c.w[day] = true
    elseif part == 'L' then
      c.last_on = true
    else
      if string.sub(part, -1) == 'L' and not string.find(part, '#', 1, true) then
        part = string.gsub(part, 'L', '#L')
      end
      if not c.nth_ok and string.find(part, '[#L]') then
        return cron_engine.quote(written) .. ': nL and n#k are taken in the day-of-week field only'
      end
      local how, k, bare = flag(part)
      if not how then return k end
      local v = u16(bare)
      if not v then return cron_engine.quote(written) .. ' is not a number' end
      why = set(v, how, k)
    end
    if why then return why end
  end
end

-- Whether a schedule can never fire, found without searching (an empty field, the 30th of
-- February), so such a schedule costs nothing.
function cron_engine.never(s)
  if not s[1][0] or not s[2][0] or not s[3][0] or not s.nmonth[1] then return true end
  if s.years and not next(s.years) then return true end
  local dom = next(s.dom) or s.dom_last or next(s.wdays) or s.lw
  local dow = next(s.dow) or next(s.nth) or next(s.dlast)
  if (s.star_dom and not dow) or (s.star_dow and not dom) or not (dom or dow)
    or (s.both and not (dom and dow)) then return true end
  if s.dom_plain then
    local longest = 0
    for m = 1, 12 do
      if s.months[m] then longest = math.max(longest, tz_rules.month_len(2000, m)) end
    end
    return not s.ndom[1] or s.ndom[1] > longest
  end
  return false
end

-- Croner's day_match: day y-m-d (weekday wd, mlen days in its month) against the day fields.
function cron_engine.day_match(s, y, m, d, mlen, wd)
  local dm = s.dom[d] or (s.dom_last and d == mlen)
  if not dm and s.lw then
    local last = (wd + mlen - d) % 7
    dm = d == (last == 6 and mlen - 1 or last == 0 and mlen - 2 or mlen)
  end
  if not dm then
    for n in pairs(s.wdays) do
      if n <= mlen then
        local wn = (wd + n - d) % 7
        local target = wn == 6 and (n > 1 and n - 1 or n + 2)
          or wn == 0 and (n < mlen and n + 1 or n - 2) or n
        if target == d then dm = true break end
      end
    end
  end
  local nth = s.nth[wd]
  local dw = s.dow[wd] or (nth and nth[math.ceil(d / 7)]) or (s.dlast[wd] and d + 7 > mlen)
  if (dm and s.star_dow) or (dw and s.star_dom) then return true end
  if s.star_dom or s.star_dow then return false end
  if s.both then return dm and dw and true or false end
  return (dm or dw) and true or false
end

-- The first wall-clock time at or after `from` the expression matches, or nil past the
-- search's bound. Steps skip a year, a month or a day at a time; a day is searched by the
-- second, minute and hour sets' next-value tables.
function cron_engine.local_next(s, from)
  local z, sod = math.floor(from / 86400), from % 86400
  local y, m, d = tz_rules.civil(z)
  local h, mi, se = math.floor(sod / 3600), math.floor(sod % 3600 / 60), sod % 60
  local hs, ms, ss = s[3], s[2], s[1]
  for _ = 1, 3000 do
    if y > 5000 or y < 1 then return nil end
    if s.years and not s.years[y] then
      repeat y = y + 1 until y > 5000 or s.years[y]
      m, d, h, mi, se = 1, 1, 0, 0, 0
    elseif not s.months[m] or d > tz_rules.month_len(y, m) then
      local nm = s.nmonth[m + 1]
      if nm then m = nm else y, m = y + 1, s.nmonth[1] end
      d, h, mi, se = 1, 0, 0, 0
    else
      local mlen = tz_rules.month_len(y, m)
      if cron_engine.day_match(s, y, m, d, mlen, tz_rules.weekday(tz_rules.days(y, m, d))) then
        while h <= 23 do
          local H = hs[h]
          if not H then break end
          if H ~= h then h, mi, se = H, 0, 0 end
          local M = ms[mi]
          if M and M ~= mi then mi, se = M, 0 end
          local S = M and ss[se]
          if S then return tz_rules.days(y, m, d) * 86400 + h * 3600 + mi * 60 + S end
          if M and mi < 59 then mi, se = mi + 1, 0 else h, mi, se = h + 1, 0, 0 end
        end
        d = d + 1
      elseif s.dom_plain then
        d = s.ndom[d] or 32
      else
        d = d + 1
      end
      h, mi, se = 0, 0, 0
    end
  end
  return nil
end

-- The first tick strictly after instant `ms` (ms since the epoch), or nil. Time is walked a
-- stretch of one offset (between two transitions) at a time, whose ticks are its wall-clock
-- matches less its offset: so ticks come in instant order where wall-clock times repeat. A
-- fixed time in a gap fires at the transition; one repeated after a fall-back fires once.
function cron_engine.next_after(sched, ms)
  if sched.step then return (math.floor(ms / sched.step) + 1) * sched.step end
  local s, rule, u = sched.cron, sched.rule, math.floor(ms / 1000) + 1
  if s.never then return nil end
  local lo, hi = math.min(rule.std, rule.dst or rule.std), math.max(rule.std, rule.dst or rule.std)
  -- no match in wall-clock [seen_from, seen) and one at seen: saves searching again
  local seen_from, seen
  for _ = 1, 64 do
    local o, tp, op, tn = tz_rules.around(rule, u)
    if s.fixed and u == tp and o > op then
      local c = cron_engine.local_next(s, tp + op)
      if c and c < tp + o then return tp * 1000 end
      seen_from, seen = tp + op, c
    end
    local from = u + o
    if s.fixed and o < op and tp + op > from then from = tp + op end
    local c = seen
    if not (seen and from >= seen_from and from <= seen) then
      c = cron_engine.local_next(s, from)
      seen_from, seen = from, c
    end
    if not c then return nil end
    if c < tn + o then return (c - o) * 1000 end
    -- later stretches show no wall-clock time before tn + lo, so none before c can come
    if from <= tn + lo and c - hi > tn then u = c - hi else u = tn end
  end
  return nil
end

-- hero_version: the version of this library, so a client can tell a stale one from its own.
-- KEYS: none.  ARGV: none.
-- Returns: the version string.
local function hero_version(keys, args)
  return VERSION
end

-- hero_submit: store new jobs and queue them, or park them in the delayed set, a whole batch a
-- call (a producer's bulk submit costs one function call, not one per job).
-- KEYS[1] delayed zset  KEYS[2] queue registry set  KEYS[3] bridge registry hash (work stream ->
--   JSON of a dual-push mapping: {list, stop, track, worker, pickup_ms})
-- KEYS[4] config hash  KEYS[5] event log  KEYS[6] stats hash
-- KEYS[7..] the batch's work streams, each once (since protocol 35: a job's key is derived from
--   the prefix and its id, its stream named by its code)
-- A job queued now gets status 'dispatched'; its record does not name its stream entry (the
-- entry names the job), except on a stream the bridge registry names: such a job is also pushed
-- (LPUSH) to that legacy list, with `entry` = its entry id, `bridge` = the list, `bridge_stop` =
-- the legacy stop queue and `worker_id` = the legacy worker id, and tracked in the mapping's
-- zset; whichever side takes it first runs it, and the bridge deletes the entry the other side
-- never read.
-- ARGV[1] consumer group  ARGV[2] job key prefix (`<ns>:job:`)
-- ARGV[3] the caller's clock now, ms: a run-at is moved to Redis's clock by it (see rebased)
--   then per job: its id, its code `<s>.<n>` or `<s>.<n>@<run-at ms>` (s: its stream, 1 for
--   KEYS[7]; n: how many values follow; the run-at on the caller's clock, none or not in the
--   future: now), and those n values: field, value pairs of the job record (without status /
--   entry). Most jobs of a batch share one code, read once a call: a plain job is four
--   strings (since protocol 35; before, eleven). The record gets `created_at`, Redis's clock
--   now, and `script_type`, its stream's type, unless it names them (a named `created_at` is
--   kept, a named type checked against the stream)
-- Stats: the stream's `delayed` gauge for a job parked in the delayed set; a fair queue's `fair`
-- gauge up for each job its gate took (see gate).
-- Events: `submitted` per new job (q its stream; d its run-at when it waits in the delayed set);
-- `error` (r the reason) for a new job whose prerequisite already failed; `batch_done` (j the
-- callback job, r the batch) when a batch it joins is done in this call.
-- Batches: a job naming a `batch` is counted into it (`<ns>:batch:<name>`, made with its first
-- member, named in `<ns>:meta:batches`); a done batch takes none: HERO_INVALID_JOB (batches.lua).
-- Prerequisites (`prerequisites` or `dependencies`, a JSON array of job ids): each must exist or
-- come earlier in the batch, else HERO_INVALID_JOB. A job whose prerequisites all finished is
-- queued as any other; one with some unfinished waits for them (status waiting, see
-- release_dependents); one with a prerequisite that ended error ends error at once (`dependency
-- failed: <id>`); none may be delayed too. Each prerequisite's record names the new job in its
-- `dependents` field (a JSON array, in submit order).
-- Returns: kind, status per job, in order, one flat list (a table a job costs more than its
-- write): 'created', status for a new job ('dispatched' or 'waiting');
-- 'exists', status when the id is taken (nothing is written for it: submitting an existing id
-- is idempotent); 'duplicate:<id>', that job's status when the record's `unique` key is held by
-- job <id>, still queued or running (nothing is written: see claim_unique).
-- Errors: HERO_EVICTING <policy> when Redis's maxmemory policy may evict keys (INFO, at most once
-- a second: refuse_evicting) and the config's `accept_eviction` does not name it. HERO_BAD_ARG
-- when a code is not one (a stream not given, values not in pairs) or ARGV ends inside a job;
-- HERO_INVALID_JOB when a record is one a worker would refuse (refuse: an unknown field, a value
-- of the wrong form, a stream other than the record names). Then nothing of the batch is written.
-- A job's code (see ARGV) read: { s = its stream's index in KEYS, n = values that follow, at =
-- its run-at text or nil }, or nil when it is not one.
local function read_code(keys, code)
  local s, n, at = string.match(code, '^(%d+)%.(%d+)@?(%d*)$')
  s, n = tonumber(s), tonumber(n)
  if not s or s < 1 or 6 + s > #keys or n % 2 ~= 0 then return nil end
  return { s = 6 + s, n = n, at = at ~= '' and at ~= '0' and at or nil }
end

local function hero_submit(keys, args)
  local delayed, registry, bridges, group, prefix = keys[1], keys[2], keys[3], args[1], args[2]
  -- check the whole batch before the first write
  -- at: a job's first argument; cs: its code read (codes: a code's text -> read, once a call);
  -- jk: its key
  local at, cs, jk, codes = {}, {}, {}, {}
  -- stream -> its parts (see stream_parts); good: see refuse, made from the second job on
  local parsed = {}
  local unique = nil -- per job with a uniqueness key: { key, ttl ms or nil }
  local tagged = nil -- per job with tags: their JSON array (checked by refuse)
  local deps = nil -- per job with prerequisites: their ids, each once
  local batch = nil -- job id -> true for the jobs before this one, made when one has prerequisites
  local members = nil -- per job that names a batch: { batch key, batch name }
  local kept, pos, n = false, 4, 0 -- kept: some job has a retention of its own (keep_ttl)
  while pos <= #args do
    local code = args[pos + 1]
    local c = code and (codes[code] or read_code(keys, code))
    if not c or pos + 1 + c.n > #args then
      return redis.error_reply('HERO_BAD_ARG job ' .. tostring(args[pos]) .. ': code ' .. tostring(code) ..
        ' is not <stream>.<values>[@<run-at ms>] of a stream given, with the values in field/value pairs')
    end
    codes[code] = c
    if n == 1 then parsed.good = {} end
    n = n + 1
    local job_id = args[pos]
    local job_key = prefix .. job_id
    local why, uniq, uttl, tags, prereqs, bname, own_keep = refuse(job_id, keys[c.s], args, pos + 2, pos + 1 + c.n, parsed)
    if why then
      return redis.error_reply('HERO_INVALID_JOB job ' .. tostring(job_id) .. ': ' .. why)
    end
    if own_keep then kept = true end
    if bname then
      local bkey = batch_key(ns_of(job_key, job_id), bname)
      if batch_done(bkey) then
        return redis.error_reply('HERO_INVALID_JOB job ' .. job_id .. ': batch ' .. bname ..
          ' is done (its callbacks were submitted): a new member needs a new batch')
      end
      members = members or {}
      members[n] = { bkey, bname }
    end
    if prereqs then
      -- each must exist already, or come earlier in this batch (a flow: children first): a
      -- job can only wait on jobs older than itself, so no cycle can form
      local list, seen = {}, {}
      if not batch then
        batch = {}
        for k = 1, n - 1 do batch[args[at[k]]] = true end
      end
      if c.at then
        return redis.error_reply('HERO_INVALID_JOB job ' .. job_id .. ': a job with prerequisites cannot also be delayed')
      end
      for _, p in ipairs(cjson.decode(prereqs)) do
        if not seen[p] then
          seen[p] = true
          list[#list + 1] = p
          if not batch[p] and redis.call('EXISTS', prefix .. p) == 0 then
            return redis.error_reply('HERO_INVALID_JOB job ' .. job_id .. ': prerequisite ' .. p ..
              ' does not exist (submit it first, or earlier in the same batch)')
          end
        end
      end
      deps = deps or {}
      deps[n] = list
    end
    if batch then batch[job_id] = true end
    if uniq then
      unique = unique or {}
      unique[n] = { uniq, uttl }
    end
    if tags then
      tagged = tagged or {}
      tagged[n] = tags
    end
    at[n], cs[n], jk[n] = pos, c, job_key
    pos = pos + 2 + c.n
  end
  local answers = {}
  -- `bridged`: how many dual-push mappings the bridge registry holds (the broker publishes it
  -- with the registry); while none, a submit asks the registry nothing
  local cfg = settings(keys[4], unique and FIELDS.submit_unique or FIELDS.submit)
  local evicting = refuse_evicting(cfg)
  if evicting then return evicting end
  -- tag key -> ids of this call (see index_tags); only a batch with tagged jobs makes it
  local tag_index = tagged and { ids = {}, order = {}, decoded = {} }
  -- the namespace's key prefix, for uniqueness and tag keys: made once, not once a job
  local ns = (unique or tagged) and ns_of(prefix, '')
  local log = event_log(keys[5], cfg)
  local st = nil -- stats, when a job of the batch is delayed
  local submitted, order = {}, {} -- per stream, the ids queued now (the event log's entries)
  local dual = {} -- per stream: its dual-push mapping, or false; read once per call
  -- streams seen to exist in this call; `gated` counts the jobs a fair queue's gate took (see
  -- gate), written once at the end
  local known = { gated = {} }
  local bridged = setting(cfg, 'bridged', 0) > 0 -- see dual_push_mapping
  -- Redis's clock, read once a call (a record's `created_at`, a run-at's rebase): the first job
  -- queued tells it by its entry's id (`ms`), else TIME does
  local now_ms, now_iso, caller_ms = nil, nil, tonumber(args[3])
  local function stamp(ms)
    now_ms = now_ms or ms or server_ms()
    now_iso = now_iso or iso_of(now_ms)
    return now_iso
  end
  -- Whether any job of the batch exists already, with one EXISTS over all their keys: a new
  -- job's id is new, and asking each record for its status cost a call a job (a third of the
  -- submit's calls at 5,000 jobs/s). Only when some key exists is each one asked; a job written
  -- earlier in this call is asked too (an id given twice in one batch).
  local taken = 0
  do
    for from = 1, n, 1000 do
      taken = taken + redis.call('EXISTS', unpack(jk, from, math.min(n, from + 999)))
    end
  end
  local written = {} -- job keys written in this call
  for i = 1, n do
    local job_key, c, p = jk[i], cs[i], at[i]
    local stream, job_id, run_at_text = keys[c.s], args[p], c.at
    -- the values' span, and the record's defaults: its stream's type, Redis's clock (a value
    -- the job names comes later in the HSET, and the last of a field given twice counts)
    local from, to, stype = p + 2, p + 1 + c.n, parsed[stream].type
    local existing = nil
    if taken > 0 or written[job_key] then existing = redis.call('HGET', job_key, 'status') end
    written[job_key] = true
    local holder, held = nil, nil
    if not existing and unique and unique[i] then
      holder, held = claim_unique(cfg, ns, prefix, job_id, unique[i])
    end
    local blocked, failed_dep, results = 0, nil, nil
    if not existing and not holder and deps and deps[i] then
      blocked, failed_dep, results = prerequisites_state(prefix, deps[i])
    end
    -- the run-at on Redis's clock (rebased by the caller's); one not in the future is no delay
    local due, run_at = nil, nil
    if run_at_text and not existing and not holder then
      run_at = tonumber(run_at_text)
      stamp()
      due = rebased(run_at, caller_ms, now_ms)
      if due <= now_ms then due = nil end
    end
    if existing then
      answers[2 * i - 1], answers[2 * i] = 'exists', existing
    elseif holder then
      answers[2 * i - 1], answers[2 * i] = 'duplicate:' .. holder, held
    elseif failed_dep then
      -- a prerequisite ended error already: so does this job, at once, with the reason
      local reason = 'dependency failed: ' .. failed_dep
      local iso = stamp()
      redis.call('HSET', job_key, 'status', 'error', 'error', reason, 'finished_at', iso, 'script_type', stype,
        'created_at', iso, unpack(args, from, to))
      redis.call('PEXPIRE', job_key, setting_arg(cfg, 'retention_ms', 86400000))
      log_event(log, 'error', job_id, stream, nil, nil, reason)
      answers[2 * i - 1], answers[2 * i] = 'created', 'error'
    elseif blocked > 0 then
      -- waits for its prerequisites: each names it in its dependents hash, and the call that
      -- ends the last one queues it (see release_dependents)
      redis.call('HSET', job_key, 'status', 'waiting', 'deps_left', blocked, 'script_type', stype,
        'created_at', stamp(), unpack(args, from, to))
      for _, d in ipairs(deps[i]) do
        local s = redis.call('HGET', prefix .. d, 'status')
        if s ~= 'finished' then
          local dk = deps_key(prefix .. d, d)
          if redis.call('EXISTS', dk) == 0 then
            redis.call('HINCRBY', keys[4], DEPS_FIELD, 1)
            redis.call('SADD', waiting_on_key(keys[4]), d)
          end
          redis.call('HSET', dk, job_id, stream)
        end
      end
      log_event(log, 'submitted', job_id, stream, nil, nil, 'waiting on ' .. blocked .. ' prerequisites')
      answers[2 * i - 1], answers[2 * i] = 'created', 'waiting'
      if tagged and tagged[i] then index_tags(tag_index, ns, job_id, tagged[i]) end
    elseif due then
      if due ~= run_at then run_at, run_at_text = due, string.format('%d', due) end
      redis.call('HSET', job_key, 'status', 'waiting', 'run_at', run_at_text, 'script_type', stype,
        'created_at', now_iso, unpack(args, from, to))
      redis.call('ZADD', delayed, run_at, job_id)
      st = st or stats(keys[6])
      tally(st, stream, 'delayed', 1)
      log_event(log, 'submitted', job_id, stream, nil, nil, nil, run_at_text)
      answers[2 * i - 1], answers[2 * i] = 'created', 'waiting'
      if tagged and tagged[i] then index_tags(tag_index, ns, job_id, tagged[i]) end
    else
      -- the common case written out: no dual-push mapping, the stream registered earlier in
      -- this call (two Lua calls a job cost ~1.6 k instructions); the record is written after
      -- the entry (a fair queue's gate is given the limit key, and the call is atomic), so the
      -- first entry's id dates the call
      local m = bridged and dual_push_mapping(cfg, bridges, stream, dual)
      local entry
      local seen = not m and known[stream]
      if seen == true then
        entry = redis.call('XADD', stream, '*', 'j', job_id)
      else
        -- a fair stream's gate files the job by its limit key: given here, not read back
        -- (from the end: the Rust client writes it among the last fields, and as in HSET the
        -- last of a field given twice counts)
        local lk = ''
        for q = to - 1, from, -2 do
          if args[q] == 'limit_key' then
            lk = args[q + 1]
            break
          end
        end
        known.lk = lk
        if seen == 'fair' then
          -- a stream this call found fair (append marked it): straight into its gate
          gate(registry, stream, job_id, nil, known)
        else
          entry = append(stream, group, registry, job_id, known, nil, m and true)
        end
        if not now_iso then stamp(entry and tonumber(string.match(entry, '^%d+'))) end
      end
      redis.call('HSET', job_key, 'status', 'dispatched', 'script_type', stype, 'created_at', now_iso or stamp(),
        unpack(args, from, to))
      if m then
        hand_to_legacy(job_key, job_id, m, entry, now_ms)
      end
      if log then
        local ids = submitted[stream]
        if not ids then
          ids = {}
          submitted[stream] = ids
          order[#order + 1] = stream
        end
        ids[#ids + 1] = job_id
      end
      answers[2 * i - 1], answers[2 * i] = 'created', 'dispatched'
      if tagged and tagged[i] then index_tags(tag_index, ns, job_id, tagged[i]) end
    end
    -- the prerequisites that ended before it, their results in its record (a later end writes
    -- its own there: release_dependents)
    if results then
      for _, r in ipairs(results) do keep_result(job_key, r[1], r[2], r[3], r[4]) end
    end
  end
  if kept then redis.call('HSETNX', keys[4], KEPT_FIELD, '1') end
  if members then
    -- each new member counts in its batch; one that ended at once (a failed prerequisite)
    -- counts as failed, and may be what its closed batch waited for
    local ctx = nil
    for i = 1, n do
      local m = members[i]
      if m and answers[2 * i - 1] == 'created' then
        join_batch(keys[4], m[1], m[2], answers[2 * i] == 'error', stamp())
        if answers[2 * i] == 'error' then
          ctx = ctx or { cfg = settings(keys[4]), log = log, now_iso = now_iso }
          settle_batch(ctx, m[1], m[2])
        end
      end
    end
  end
  if deps then
    for i = 1, n do
      if deps[i] and answers[2 * i - 1] == 'created' then
        note_dependent(prefix, deps[i], args[at[i]])
      end
    end
  end
  if tag_index then flush_tags(tag_index) end
  for _, stream in ipairs(order) do log_shared(log, 'submitted', submitted[stream], stream) end
  if st then flush_stats(st) end
  if next(known.gated) then flush_gated(known, keys[6]) end
  return answers
end

-- hero_fetch: claim up to COUNT jobs for one consumer, taking streams strictly in the order given
-- (the caller orders them instance -> group -> type, priority 0 first). Per entry it reads the
-- job's status only; the entry itself says how many attempts came before and whether the job was
-- dual-pushed (see append).
-- KEYS[1] queue registry set  KEYS[2] config hash  KEYS[3] event log  KEYS[4] stats hash
-- KEYS[5..n+4] work streams in precedence order
-- ARGV[1] consumer group  ARGV[2] consumer name  ARGV[3] count  ARGV[4] job key prefix
-- ARGV[5] now ISO 8601 (unused since protocol 31: `started_at` is Redis's clock)
-- ARGV[6] '1' when the server has XACKDEL
-- ARGV[7] concurrency limits: '' for none, else `<stream index> <max> <limit key>` triples
--   joined by spaces, for the streams of queues whose policy limits how many of their jobs run
--   at once across all workers (a worker that passes '' while some queue has a limit, the config
--   hash's `limited` above 0, gets the limits the policies set: see limits_from_policies). A
--   limit key (a sorted set, job id -> ms leased) is shared by
--   every stream the limit covers; the fetch takes from such a stream no more than the limit
--   leaves, adds what it leases, and when the set is full drops the members no longer started
--   (ended, stopped or recovered since) before it counts: O(limit), only at the limit.
-- ARGV[8] records: '1' asks a fetch that comes up short to hand back the records of the jobs
--   it leased (see records below); '2' asks every fetch to (since protocol 29: a client whose
--   per-command cost is high, as Node's, saves a command a job; Redis spends about what the
--   separate reads cost it); absent or '' for none.
-- ARGV[9] registry cursor: absent or '' to name every stream the caller serves, as above. '*'
--   does the same and also answers which of them are registered (see registered below), so
--   that the caller can name only those from then on: with the id of the registry's signal
--   stream `<registry>:new` that the answer carried, KEYS[5..] are the registered streams only,
--   and while that id is still the signal's last (no stream registered, paused or resumed
--   since) they are read without asking the registry; once it moved, the fetch claims nothing
--   and answers registered = 'stale' with the new id: the caller names every stream again
--   ('*'). A worker naming 300 streams of which one holds work so passes one key, not 300 (each
--   FCALL key costs Redis ~3 k instructions, the registry question and the wake-up cursors of
--   the others more).
-- Priority aging: while some queue's policy sets `aging_ms` (the config hash's `aged` above 0),
--   a stream of such a queue whose oldest undelivered entry has waited k periods is walked as
--   if k levels higher (not above 0) within its tier (instance, group, type): before the first
--   stream of its tier at that level, so a steady flow of higher-priority work starves no level
--   (see aging_order).
-- Stats: a `wait` sample per job leased (its entry's age: from dispatch to now, by Redis's clock);
-- the stream's `delayed` gauge up for a job parked by its limit key's rate (see park); a fair
-- queue's `fair` gauge down by the jobs released from its gate (see release); `lost` per entry
-- dropped because its job's record is gone (since protocol 31).
-- Events: `started` per job leased (q, w the consumer, a the attempt).
-- Returns: {jobs, dropped, cursors, limited}, and with ARGV[8] '1' or ARGV[9] given a fifth,
--   records, and with ARGV[9] given a sixth and seventh, signal and registered
--   jobs: flat list of stream index (1..n: 1 is KEYS[5], the first stream), entry id, job id, three items
--         per job now leased to the consumer (flat because every Lua table costs Redis more
--         than the three values): the fetch wrote status started, lease = entry id,
--         worker_id = consumer, started_at (the record's updated_at from then on) and, from
--         the second delivery on, attempts = the count the entry carries + 1 (the first writes
--         none: a started record without attempts is on its first). Unless records (below)
--         hold it, the caller reads the record itself (one HGETALL per job, pipelined), and
--         runs the job only while that record still says started with this lease: a stop or
--         recovery in between took it away. Handing a record back from here costs Redis about
--         twice as much as the plain read, so only a short fetch does, when asked;
--   dropped: list of {stream index, entry id, job id, reason} for entries acknowledged and
--         deleted unclaimed: reason 'missing' (no job hash, or one without a status),
--         'foreign' (the job key holds another type), 'stale' (the job is no longer dispatched:
--         stopped, or already taken through another entry) or 'legacy' (a dual-pushed job a
--         legacy actor took from its list first);
--   cursors: empty when COUNT jobs were claimed, else per stream the id of its last entry
--         ('0-0' when empty), or '' for a stream not worth watching (not registered, no
--         entries), then one more: the cursor of the registry's signal stream `<registry>:new`,
--         which gets an entry whenever a stream is registered. XREAD BLOCK from these ids (the
--         watched streams and the signal) wakes on any later entry, and on a new stream;
--   limited: 1 when a concurrency limit held jobs back (no new entry will wake the caller
--         when a slot frees: it looks again soon), else 0;
--   records: empty when the fetch claimed COUNT jobs (unless ARGV[8] is '2'); else per job leased, in the order of
--         jobs, its record as HGETALL gives it (read after the lease was written, so it carries
--         it). A short fetch is a worker keeping up with its queues, where the job's start
--         waits on the read: handing the records back here saves that round trip (at 5,000
--         jobs/s a third of the worker's path from wake-up to start); a full fetch is a
--         backlog, where the plain reads cost Redis less and the start waits on no one. A
--         job read from a stream that came up short is read whole instead of its status
--         alone, and its record handed back as written: one call a job fewer where it counts;
--   signal: the id of the registry's signal stream's last entry ('0-0' when it has none);
--   registered: with ARGV[9] '*', the indexes (1..n) of the registered streams given; with an
--         id, empty, or 'stale' when the registry moved since that id (nothing was claimed).
-- Which streams exist is asked of the registry with one SMISMEMBER: append registers a stream in
-- the call that creates it (recovery walks the same set), and one question for every stream
-- costs Redis less than an EXISTS per stream (a worker names 30 streams per type, most of them
-- never used). A registered stream that was deleted, or lost its group, by hand gets its group
-- back here, from the stream's start: what a submit appended since is delivered.
-- A job is queued through one entry at a time, except when it was stopped while queued and then
-- queued again: the stop leaves the old entry behind (the record does not name its entry), and
-- whichever of the two is read first runs the job; the other is dropped as stale.
-- Errors: none of its own.
-- One fetch's state, by name. What the caller asked: group, consumer, want (how many more jobs
-- it takes), prefix (of job keys), now_iso, xackdel, whole (hand a short fetch's records back),
-- always (hand every fetch's records back),
-- since (the registry cursor). What the policies say: limits (stream index -> {key, max,
-- running}, shared per key), rates, keyrates, agings. What the call gathers for its reply: jobs
-- (stream index, entry id, job id: three items a job), recs (per job leased, when whole),
-- dropped, last_read (per stream read to its end: its last entry), limited, signal, present (per
-- stream: 1 when registered).
-- The table is made once and filled anew by each call (every field set here, those a call may
-- not set to nil): a table of this size made per call cost Redis ~20 k instructions a call in
-- garbage collection (a fetch of one job costs ~250 k).
local FETCH = {}
FIELDS.fetch = { 'events_max', 'limited', 'rated', 'aged', 'fair' }
-- The empty list a reply carries when nothing was dropped (only read, never written).
local NONE = {}
local function fetch_state(keys, args)
  local f = FETCH
  f.keys, f.n, f.group, f.consumer, f.want = keys, #keys - 4, args[1], args[2], tonumber(args[3])
  -- started_at is Redis's clock (what a time limit is measured from), read at the first lease
  -- of the call (since protocol 31: the caller's ARGV[5] is no longer used)
  f.prefix, f.now_iso, f.xackdel = args[4], nil, args[6]
  f.always = args[8] == '2'
  f.whole = f.always or args[8] == '1'
  f.since, f.limited, f.parked, f.now_ms, f.st = args[9] or '', 0, false, nil, stats(keys[4])
  f.jobs, f.dropped, f.recs, f.last_read = {}, nil, nil, {}
  f.regrouped, f.present, f.limits, f.lost = nil, {}, nil, nil
  f.rates, f.keyrates, f.agings = nil, nil, nil
  if args[7] and args[7] ~= '' then
    local limits, by_key = {}, {}
    for i, max, key in string.gmatch(args[7], '(%d+) (%d+) (%S+)') do
      local lim = by_key[key]
      if not lim then
        lim = { key = key, max = tonumber(max) }
        by_key[key] = lim
      end
      limits[tonumber(i)] = lim
    end
    f.limits = limits
  end
  f.cfg = settings(keys[2], FIELDS.fetch)
  f.policies, f.released = nil, false
  f.log = event_log(keys[3], f.cfg)
  local want_limits = not f.limits and setting(f.cfg, 'limited', 0) > 0
  local want_rates = setting(f.cfg, 'rated', 0) > 0
  local want_aging = setting(f.cfg, 'aged', 0) > 0
  if want_limits or want_aging or want_rates then
    local l
    l, f.rates, f.keyrates, f.agings = queue_policies(keys, want_limits, want_rates, want_aging)
    f.limits = f.limits or l
  end
  return f
end

-- Which streams given are registered (f.present), and the registry's signal when the caller
-- keeps a registry cursor; false when that cursor is stale (the fetch then claims nothing). In
-- runs of 1000 as in_runs makes them (unpack of a very long list overflows Lua's stack), written
-- out: in_runs' closure and copying the answers cost 0.8 k instructions per job here.
local function read_registry(f)
  local keys, since, signal = f.keys, f.since, nil
  if since ~= '' then
    signal = '0-0'
    local last = redis.call('XREVRANGE', queue_signal_key(keys[1]), '+', '-', 'COUNT', 1)
    if last[1] then signal = last[1][1] end
  end
  f.signal = signal
  if since ~= '' and since ~= '*' then
    if since ~= signal then return false end
    local present = f.present
    for i = 1, f.n do present[i] = 1 end
  else
    for from = 5, #keys, 1000 do
      local r = redis.call('SMISMEMBER', keys[1], unpack(keys, from, math.min(#keys, from + 999)))
      if from == 5 then f.present = r else for k = 1, #r do f.present[from - 5 + k] = r[k] end end
    end
    reregister(f)
  end
  return true
end

-- An entry acknowledged and deleted unclaimed, for the reply's dropped list.
local function drop(f, i, stream, id, job_id, why)
  ack_del(stream, f.group, id, f.xackdel)
  local dropped = f.dropped
  if not dropped then
    dropped = {}
    f.dropped = dropped
  end
  dropped[#dropped + 1] = { i, id, job_id, why }
  -- an entry whose record is gone is a job lost (an evicting Redis, a record deleted by hand):
  -- counted, so `hero audit` names it after the entry itself is gone
  if why == 'missing' then
    tally(f.st, stream, 'lost', 1)
    f.lost = true
  end
end

-- Stream i's new entries, up to `asked`; nil when it has none (or is not a stream). A registered
-- stream deleted, or its group destroyed, by hand gets its group back from the stream's start (a
-- submit since may have re-made the stream without one), and the read is made again.
local function read_new(f, i, stream, asked)
  local group, consumer = f.group, f.consumer
  local res = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', asked, 'STREAMS', stream, '>')
  if type(res) == 'table' and res.err and string.find(res.err, 'NOGROUP', 1, true)
    and not (f.regrouped and f.regrouped[i]) then
    f.regrouped = f.regrouped or {}
    f.regrouped[i] = true
    redis.pcall('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
    res = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', asked, 'STREAMS', stream, '>')
  end
  if type(res) ~= 'table' or res.err or #res[1][2] == 0 then return nil end
  return res[1][2]
end

-- Claims from registered stream i until the fetch has all it wants, the stream runs dry, or a
-- limit or rate holds the rest back. Each entry's job is leased to the consumer when it is
-- still dispatched (and its limit key has room), else dropped or parked. The entries are taken
-- in this loop, with the call's state in locals: a Lua call or a table field per job costs
-- Redis ~0.8 k instructions a job, a tenth of what the fetch spends on a job.
local function claim_from(f, i, ids)
  local stream, group, consumer, prefix = f.keys[i + 4], f.group, f.consumer, f.prefix
  local now_iso, xackdel, jobs = f.now_iso, f.xackdel, f.jobs
  local c, att = 0, nil -- jobs leased from this stream, and their attempts once one is a retry
  local lim = f.limits and f.limits[i]
  if lim and not lim.running then lim.running = limit_running(lim, prefix) end
  local rate, keyrate = f.rates and f.rates[i], f.keyrates and f.keyrates[i]
  local fair = fair_policy(f.keys[2], stream, f, setting(f.cfg, 'fair', 0) > 0)
  while f.want > 0 do
    local asked = (lim or rate) and room_of(f, lim, rate) or f.want
    if asked <= 0 then break end
    local read = read_new(f, i, stream, asked)
    if fair and (not read or #read < asked) then
      -- a fair queue's stream holds only what was released: release what this read lacks
      local got = read and #read or 0
      local moved, capped = release(f.st, f.keys[2], prefix, stream, fair, asked - got)
      if capped then f.limited = 1 end
      if moved > 0 then
        f.released = true
        local more = read_new(f, i, stream, asked - got)
        if more and read then
          for k = 1, #more do read[#read + 1] = more[k] end
        elseif more then
          read = more
        end
      end
    end
    if not read then break end
    local short = #read < asked
    if short then
      -- every new entry was read: the last is the stream's last, the wake-up cursor (no
      -- XREVRANGE for it), and another read would come back empty
      f.last_read[i] = read[#read][1]
    end
    local whole_now, want = f.whole and (short or f.always), f.want
    for k = 1, #read do -- not ipairs: its iterator is a C call an entry
      local e = read[k]
      local id, fields = e[1], e[2]
      -- an entry of a first delivery names the job only: read here, not through entry_fields
      local job_id, before, dual, wake
      if #fields == 2 and fields[1] == 'j' then job_id = fields[2] else job_id, before, dual, wake = entry_fields(fields) end
      local job_key = prefix .. job_id
      local status, bridge, err, rec
      if not (wake or dual or whole_now or keyrate) then
        -- the common case, written out
        local r = redis.pcall('HGET', job_key, 'status')
        -- `type` is a C call: only what is not the common answer is looked at
        if r == 'dispatched' then status = r elseif type(r) == 'table' then err = r.err else status = r end
      elseif not wake then
        status, bridge, err, rec = read_job(job_key, dual, whole_now, keyrate)
      end
      local keylog, room = nil, true
      if status == 'dispatched' and not err and keyrate and keyrate.lk and not dual then
        f.now_ms = f.now_ms or server_ms()
        room, keylog = key_room(keyrate, keyrate.lk, f.now_ms)
      end
      if wake then
        -- a resumed queue's wake-up (see hero_pause): it woke us, and names no job
        ack_del(stream, group, id, xackdel)
      elseif err then
        -- the key holds something other than a hash: foreign data, never a job of ours, and it
        -- must not stop this fetch for every entry behind it
        drop(f, i, stream, id, job_id, 'foreign')
      elseif not status then
        drop(f, i, stream, id, job_id, 'missing')
      elseif status ~= 'dispatched' then
        drop(f, i, stream, id, job_id, 'stale')
      elseif not room then
        park(f, stream, id, job_id, before, keylog)
      elseif bridge and bridge ~= '' and redis.call('LREM', bridge, 1, job_id) == 0 then
        -- dual-pushed, and a legacy actor popped it from its list first: it is theirs
        drop(f, i, stream, id, job_id, 'legacy')
      else
        -- one HSET with its arguments spelled out: building a table to unpack costs more than
        -- the command
        local counted = before and tonumber(before)
        if not now_iso then
          f.now_ms = f.now_ms or server_ms()
          now_iso = iso_of(f.now_ms)
          f.now_iso = now_iso
        end
        if counted then
          redis.call('HSET', job_key, 'status', 'started', 'lease', id, 'worker_id', consumer,
            'started_at', now_iso, 'attempts', tostring(counted + 1))
        else
          redis.call('HSET', job_key, 'status', 'started', 'lease', id, 'worker_id', consumer,
            'started_at', now_iso)
        end
        if bridge and bridge ~= '' then
          -- taken back from the legacy list above: no longer the legacy side's
          redis.call('HSET', job_key, 'bridge', '')
        end
        local n = #jobs
        jobs[n + 1], jobs[n + 2], jobs[n + 3] = i, id, job_id
        c = c + 1
        ids[c] = job_id
        if counted then
          if not att then
            att = {}
            for k = 1, c - 1 do att[k] = '1' end
          end
          att[c] = tostring(counted + 1)
        elseif att then
          att[c] = '1'
        end
        if rec then
          f.recs = f.recs or {}
          f.recs[n / 3 + 1] = as_leased(rec, id, consumer, now_iso, counted)
        end
        want = want - 1
        if lim or rate or keylog then count_start(f, lim, rate, keylog, job_id) end
      end
    end
    f.want = want
    if f.last_read[i] then break end
  end
  return c, att
end

-- The jobs leased: a `wait` sample each, its entry's age by Redis's clock (see sample_waits),
-- the jobs of a stream being contiguous in jobs. (Their `started` events were logged per stream
-- as it was claimed: see hero_fetch.)
-- Writes stats: `wait`.
local function record_started(f)
  local jobs, keys, st = f.jobs, f.keys, f.st
  local now_ms, n, lo = f.now_ms or server_ms(), #jobs, 1
  f.now_ms = now_ms
  while lo <= n do
    local at, hi = jobs[lo], lo
    while hi + 3 <= n and jobs[hi + 3] == at do hi = hi + 3 end
    sample_waits(histogram(st, keys[at + 4], 'wait'), jobs, lo, hi, now_ms)
    lo = hi + 3
  end
end

-- The reply, positional on the wire (see Returns): four parts, a fifth (records) when asked for
-- records or given a registry cursor, and a sixth and seventh with a registry cursor.
local function fetch_reply(f, cursors, registered)
  local jobs, dropped, limited, signal = f.jobs, f.dropped or NONE, f.limited, f.signal
  if not f.whole and not signal then return { jobs, dropped, cursors, limited } end
  local records = {}
  if f.whole and (f.want > 0 or f.always) then
    local recs, prefix = f.recs or NONE, f.prefix
    for k = 3, #jobs, 3 do
      records[#records + 1] = recs[#records + 1] or redis.call('HGETALL', prefix .. jobs[k])
    end
  end
  if not signal then return { jobs, dropped, cursors, limited, records } end
  if not registered then
    registered = {}
    if f.since == '*' then
      local present = f.present
      for i = 1, f.n do
        if present[i] == 1 then registered[#registered + 1] = i end
      end
    end
  end
  return { jobs, dropped, cursors, limited, records, signal, registered }
end

local function hero_fetch(keys, args)
  local f = fetch_state(keys, args)
  if not read_registry(f) then
    return fetch_reply(f, {}, 'stale')
  end
  local present, want = f.present, f.want
  local order = f.agings and aging_order(keys, f.n, present, f.agings, f.group)
  for oi = 1, f.n do
    if want <= 0 then break end
    local i = order and order[oi] or oi
    if present[i] == 1 then
      -- the stream's `started` event: one shared entry for the jobs it leased (the jobs of a
      -- first delivery, most, are logged with attempts '1' each: see log_shared)
      local ids = {}
      local c, att = claim_from(f, i, ids)
      if c > 0 then log_shared(f.log, 'started', ids, keys[i + 4], f.consumer, att or true) end
      want = f.want
    end
  end
  if #f.jobs > 0 then record_started(f) end
  if #f.jobs > 0 or f.parked or f.released or f.lost then flush_stats(f.st) end
  return fetch_reply(f, f.want > 0 and wake_cursors(f) or {}, nil)
end

-- hero_complete: record the end of one or more deliveries, each fenced by its lease. A worker
-- records a whole batch of outcomes in one call: the settings are read once, and each stream's
-- entries are acknowledged with one command and trimmed with another (see trim_done).
-- KEYS[1] delayed zset  KEYS[2] config hash  KEYS[3] retention stream  KEYS[4] event log
-- KEYS[5] stats hash  KEYS[6] queue registry set
-- KEYS[7..] the batch's work streams, each once (since protocol 34: a job's own keys are
--   derived from the prefixes, its stream from its place in the batch)
-- ARGV[1] consumer group  ARGV[2] now ISO 8601  ARGV[3] '1' when the server has XACKDEL
-- ARGV[4] the batch's job ids joined by single spaces, for the retention entry
--   (ARGV[2] is the caller's clock, read only to rebase its retry times: the ends are stamped
--   with Redis's TIME since protocol 33)
-- ARGV[5] consumer name (for the event log)
-- ARGV[6] retention per job: `<i> <ms>` pairs joined by spaces ('' when no job has one), the
--   TTL (PEXPIRE) a job of index i (from 0) gets in this call when it ends here: its queue
--   policy keeps ended jobs shorter than the broker's retention
-- ARGV[7] job key prefix (`<ns>:job:`: a job's reply list is derived from it too)
-- ARGV[8] how many jobs of the batch each stream of KEYS[7..] holds, in that order, joined by
--   single spaces: the jobs come grouped by stream, the first count's jobs on KEYS[7], ...
--   then per job i = 0, 1, ...: ARGV[9+4i] lease (the delivery's entry id)  ARGV[10+4i] job id
--   ARGV[11+4i] code: the outcome's letter (d done, f fail, r retry, a abort, g again), then
--   how long the attempt ran in ms as the worker measured it (none: unknown), as `d12`
--   ARGV[12+4i] output or error text
-- then, optionally, pairs (i the job's index from 0, in the order above): `<i>` and the trace
--   of that job's failed attempt (store_trace in finish.lua; since protocol 30); `v<i>` and the
--   MessagePack value job i's handler returned, stored as the record's `value` beside the
--   `output` text when it ends finished (since protocol 33); `t<i>` and job i's retry-at ms, on
--   the caller's clock, moved to Redis's by ARGV[2] when the two differ by over a second (none:
--   due at once); `w<i>` and job i's `reply` field as read with the record (none: no one waits);
--   so a batch of successes no one waits on passes four strings a job and nothing more
--   outcome: done (text = output), fail (text = error; retried at retry-at while
--   attempts <= retries), retry (retried at retry-at while the budget lasts, else error text),
--   abort (error text, never retried), again (retried at retry-at whatever the record's
--   budget: the worker applied its queue policy's larger budget)
-- The fence: a delivery's entry stays pending in the group exactly as long as its lease holds,
-- because whatever takes a started job away (recovery, stop, dead-lettering) acknowledges its
-- entry in the same call. So one XACK per stream acknowledges the batch and proves every lease
-- in it at once; only when it acknowledged fewer entries than it was given are the records
-- read, to tell the deliveries that still hold their job from the ones that lost it.
-- Policies: while some queue has one the functions apply (`policed` in the config hash), a
-- failure's budget is the larger of the record's `retries` and its queue policy's, its retry
-- time the policy's back-off when it sets one, and a job this call ends expires after the
-- policy's `retention_ms`: every worker, of any language, gets them.
-- Retention: the batch is named in one entry of the retention stream as the caller joined it
-- (ARGV[4] as given; joining it here costs Redis ~2 k instructions a job). A job of the batch this call
-- does not end is named too, and harmlessly: hero_expire deletes only a job whose record
-- carries the entry's finished_at, and only this call wrote that one. A job id holds no space
-- (the worker completes valid ids only); checking the list here would cost Redis more than the
-- PEXPIRE it replaces (string.gsub over it: ~4 k instructions a job), so an id with a space from
-- a foreign caller is split, and that job is simply never deleted.
-- Stats: per stream, `finished`, `failed` and `retried` (each per minute too), the `delayed`
-- gauge for a retry, and a `run` sample per job recorded.
-- Dependents and batches: the jobs waiting on those this call ends are released in it, and the
-- ends are counted into their batches, whose callbacks are submitted when the last member ends
-- (release_if_any in dependencies.lua); while no job anywhere has dependents and no batch is
-- open (the config hash's `deps` and `batches`, read with the settings), the call asks nothing
-- more.
-- Events: per job this call ends or parks, `finished`, `error` (r the error) or `retried` (r the
-- error, d the retry time); q its stream, w the consumer. Through the ended-jobs hook
-- (release_if_any): `dispatched` or `error` per dependent released or failed, `batch_done` per
-- batch this call completes.
-- Returns: one answer per job, in order: 'completed' (this delivery's outcome is recorded as
-- final), 'retrying' (parked in the delayed set), 'already_completed' (the job already ended,
-- e.g. stopped), 'lease_lost' (another delivery owns the job now, or the job is gone); the
-- entry of a lost lease whose job is dispatched (queued again under that entry, as a Redis
-- restarted from an older snapshot leaves it) is not deleted (since protocol 31).
-- Errors: HERO_BAD_ARG for an unknown outcome or KEYS and ARGV that do not describe the same
-- jobs; then nothing is written.
FIELDS.complete = { 'events_max', DEPS_FIELD, 'policed', BATCHES_FIELD, KEPT_FIELD }
-- a code's first byte: the outcome it names
local OUTCOMES = { [100] = 'done', [102] = 'fail', [114] = 'retry', [97] = 'abort', [103] = 'again' }
local function hero_complete(keys, args)
  local delayed, cfg = keys[1], settings(keys[2], FIELDS.complete)
  -- the queue policies the completion applies itself (retries, back-off, retention), for a
  -- worker of any language: read only while some queue has one
  local policed = setting(cfg, 'policed', 0) > 0
  -- some job was submitted with its own retention (keep_ttl in finish.lua)
  local kept = setting(cfg, KEPT_FIELD, 0) > 0
  local ended -- the status the job in hand ended with
  local memo = {}
  local caller_ms = nil -- the caller's clock as ms, parsed from ARGV[2] for the first retry
  -- an end is stamped on Redis's clock, as a start is (hero_fetch): a dependent's started_at is
  -- never before its prerequisite's finished_at, whatever the worker's estimate of the offset
  local server_now = server_ms()
  local group, now_iso, xackdel, ids = args[1], iso_of(server_now), args[3], args[4]
  local log = event_log(keys[4], cfg)
  local consumer, job_prefix = args[5], args[7]
  local st = stats(keys[5], now_iso)
  -- the jobs of each stream: most batches name one stream, one number
  local n = tonumber(args[8])
  local counts = { n }
  if not n or n % 1 ~= 0 then
    counts, n = {}, 0
    for c in string.gmatch(args[8] or '', '%d+') do
      counts[#counts + 1] = tonumber(c)
      n = n + tonumber(c)
    end
  end
  local extra = #args - 8 - 4 * n
  if #counts ~= #keys - 6 or extra < 0 or extra % 2 ~= 0 then
    return redis.error_reply('HERO_BAD_ARG complete takes 6 keys and a stream each, 8 arguments (the 8th counting each stream\'s jobs) and 4 a job, then (index, trace), (v<index>, value), (t<index>, retry-at) or (w<index>, reply) pairs')
  end
  -- the pairs, by job index: parsed only when the batch has one
  local traces, values, retry_ats, replies = nil, nil, nil, nil
  if extra > 0 then
    traces, values, retry_ats, replies = {}, {}, {}, {}
    for k = 9 + 4 * n, #args, 2 do
      local at = args[k]
      local b = string.byte(at, 1)
      if b == 118 then -- 'v'
        values[tonumber(string.sub(at, 2))] = args[k + 1]
      elseif b == 116 then -- 't'
        retry_ats[tonumber(string.sub(at, 2))] = args[k + 1]
      elseif b == 119 then -- 'w'
        replies[tonumber(string.sub(at, 2))] = args[k + 1]
      else
        traces[tonumber(at)] = args[k + 1]
      end
    end
  end
  -- check every outcome before the first write (a run of one code is checked once)
  local code = nil
  for c = 11, 10 + 4 * n, 4 do
    if args[c] ~= code then
      code = args[c]
      if not OUTCOMES[string.byte(code, 1) or 0] then
        return redis.error_reply('HERO_BAD_ARG unknown outcome code ' .. code)
      end
    end
  end
  -- the queue policies' retention, by job index: parsed only when a job of the batch has one
  local keep = nil
  if args[6] ~= '' then
    keep = {}
    for i, ms in string.gmatch(args[6], '(%d+) (%d+)') do keep[tonumber(i)] = ms end
  end
  local answers = {}
  -- the jobs this call ends (key, id, finished), collected only while some job has dependents
  -- or some batch is open (read with the settings: a plain batch pays nothing per job)
  local ek = nil
  if collect_ended(cfg) then ek = {} end
  local ei, eo = {}, {}
  -- the code in hand, its outcome and run-time sample (text, number, bucket): most of a batch of
  -- short jobs shares one code, parsed once
  local outcome, ran, ran_bucket = nil, nil, 0
  code = nil
  local first = 0 -- the index of the stream's first job
  for s = 1, #counts do
    local stream, count = keys[6 + s], counts[s]
    local entries = {}
    for k = 1, count do entries[k] = args[5 + 4 * (first + k)] end
    local finished = {} -- for the event log's shared entry of this stream
    local failed, retries, runs = 0, 0, nil
    local all_held = count == 0 or ack(stream, group, entries) == count
    local spared = nil -- by position in entries: entries this call must not delete
    for k = 1, count do
      local i = first + k - 1
      local a = 4 * i
      local job_id, text = args[10 + a], args[12 + a]
      local job_key = job_prefix .. job_id
      if args[11 + a] ~= code then
        code = args[11 + a]
        outcome = OUTCOMES[string.byte(code, 1)]
        ran = nil
        if #code > 1 then ran = tonumber(string.sub(code, 2)) end
        if ran and ran > 0 then ran_bucket = math.floor(math.log(ran + 1) / LN2) else ran_bucket = 0 end
      end
      local reply = replies and replies[i]
      local answer
      if not all_held then
        -- pcall: a job key replaced by another type is gone for this delivery, and must not fail
        -- the whole batch of other workers' jobs with it
        local f = redis.pcall('HMGET', job_key, 'status', 'lease')
        if f.err or not f[1] or f[2] ~= entries[k] then
          answer = 'lease_lost'
          -- a job queued again under this very entry (a Redis restarted from an older snapshot
          -- restored it before its delivery): the entry is its place in the queue, kept
          if not f.err and f[1] == 'dispatched' then
            spared = spared or {}
            spared[k] = true
          end
        elseif f[1] ~= 'started' then
          answer = 'already_completed'
        end
      end
      if not answer then
        -- The entries were acknowledged already: from here on nothing may raise, or the jobs
        -- after this one would stay started with no pending entry for recovery to find. A job
        -- key holding another type is foreign data, lost for this delivery (pcall, finish).
        local retried = false
        local policy_retry_at = nil
        ended = 'finished'
        if outcome == 'fail' or outcome == 'retry' or outcome == 'again' then
          -- only a failure needs the budget: a success is recorded without reading the record
          local f = redis.pcall('HMGET', job_key, 'attempts', 'retries', 'backoff')
          if f.err then
            answer = 'lease_lost'
          else
            local budget = tonumber(f[2]) or 0
            local policy = policed and stream_policy(keys[2], stream, memo)
            if policy and tonumber(policy.retries) and tonumber(policy.retries) > budget then
              budget = tonumber(policy.retries)
            end
            retried = outcome == 'again' or (tonumber(f[1]) or 1) <= budget
            if retried and outcome == 'fail' then
              -- the job's own back-off and its policy's, the longer delay, whatever the worker
              -- computed (retry_delay in policy.lua)
              local delay = retry_delay(f[3], policy, tonumber(f[1]) or 1)
              if delay then policy_retry_at = tostring(server_ms() + delay) end
            end
            -- a first delivery left no count (see hero_fetch): the next one must count from it
            if retried and not f[1] then redis.call('HSET', job_key, 'attempts', '1') end
          end
        end
        if retried then
          local retry_at = policy_retry_at
          if not retry_at then
            -- the worker's retry time, on its clock, moved to Redis's (rebased)
            retry_at = retry_ats and retry_ats[i] or '0'
            caller_ms = caller_ms or iso_ms(args[2]) or false
            local at = tonumber(retry_at)
            if at and caller_ms then
              local due = rebased(at, caller_ms, server_now)
              if due ~= at then retry_at = string.format('%d', due) end
            end
          end
          redis.call('HSET', job_key, 'status', 'waiting', 'error', text, 'run_at', retry_at, 'updated_at', now_iso)
          redis.call('HDEL', job_key, 'lease', 'entry')
          store_trace(job_key, traces and traces[i])
          redis.call('ZADD', delayed, retry_at, job_id)
          answer = 'retrying'
          retries = retries + 1
          log_event(log, 'retried', job_id, stream, consumer, nil, text, retry_at)
        elseif not answer and outcome == 'done' and not reply then
          -- a success no one waits on, the common case, is written here: through finish it costs
          -- Redis 1.3 k more instructions a job (a Lua call of eight arguments)
          local value, w = values and values[i], nil
          if value then
            w = redis.pcall('HSET', job_key, 'status', 'finished', 'output', text, 'value', value, 'finished_at', now_iso)
          else
            w = redis.pcall('HSET', job_key, 'status', 'finished', 'output', text, 'finished_at', now_iso)
          end
          -- a started record gains `output` and `finished_at`: 2, the common answer, is not
          -- given to `type` (a C call, ~0.9 k instructions a job)
          if w ~= 2 and type(w) == 'table' and w.err then
            answer = 'lease_lost'
          else
            answer = 'completed'
            finished[#finished + 1] = job_id
            if ek then
              local e = #ek + 1
              ek[e], ei[e], eo[e] = job_key, job_id, true
            end
          end
        elseif not answer then
          local status = 'error'
          if outcome == 'done' then status = 'finished' end
          ended = status
          -- the reply list only where someone waits (finish reads it only then)
          local reply_key = stream
          if reply then reply_key = reply_prefix_of(string.sub(job_prefix, 1, #job_prefix - 4)) .. job_id end
          if finish(job_key, job_id, reply_key, cfg, status, text, reply or '', now_iso) then
            answer = 'completed'
            if ek then
              local e = #ek + 1
              ek[e], ei[e], eo[e] = job_key, job_id, status == 'finished'
            end
            if status == 'finished' then
              if values and values[i] then redis.call('HSET', job_key, 'value', values[i]) end
              finished[#finished + 1] = job_id
            else
              failed = failed + 1
              store_trace(job_key, traces and traces[i])
              log_event(log, 'error', job_id, stream, consumer, nil, text)
            end
          else
            answer = 'lease_lost'
          end
        end
      end
      answers[i + 1] = answer
      if answer == 'completed' and (keep or policed or kept) then
        local ttl = keep and keep[i]
        if policed then
          local policy = stream_policy(keys[2], stream, memo)
          if policy and tonumber(policy.retention_ms) then ttl = policy.retention_ms end
        end
        if kept then ttl = keep_ttl(cfg, job_key, ended, ttl) end
        if ttl then redis.call('PEXPIRE', job_key, ttl) end
      end
      -- sampled inline: a Lua call per job costs more than the sample
      if ran and (answer == 'completed' or answer == 'retrying') then
        runs = runs or histogram(st, stream, 'run')
        if ran > 0 then runs.sum = runs.sum + ran end
        runs[ran_bucket] = (runs[ran_bucket] or 0) + 1
      end
    end
    if count > 0 then
      -- not the entry of a job queued under it (spared above): deleting it would strand the job
      local owned = entries
      if spared then
        owned = {}
        for k = 1, count do
          if not spared[k] then owned[#owned + 1] = entries[k] end
        end
      end
      trim_done(stream, group, owned, xackdel)
    end
    log_shared(log, 'finished', finished, stream, consumer)
    if #finished > 0 then tally(st, stream, 'finished', #finished, true) end
    if failed > 0 then tally(st, stream, 'failed', failed, true) end
    if retries > 0 then
      tally(st, stream, 'retried', retries, true)
      tally(st, stream, 'delayed', retries)
    end
    first = first + count
  end
  if ek then
    local done = retained(keys[3], now_iso)
    release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso, registry = keys[6],
      group = group }, ek, ei, eo)
    flush_retained(done)
  end
  flush_stats(st)
  if n > 0 then add_retention_entry(keys[3], now_iso, ids) end
  return answers
end

-- hero_renew: keep a running delivery from being recovered, fenced by its lease, and record what
-- its handler reported since the last call (progress, log lines), so a report rides on the
-- renewal a long job makes anyway and a handler that reports nothing costs nothing more.
-- KEYS[1] job hash  KEYS[2] work stream  KEYS[3] event log (only with a report)
-- KEYS[4] config hash (only with a report)
-- ARGV[1] lease (entry id)  ARGV[2] consumer group  ARGV[3] consumer name
-- ARGV[4] job id (only with a report, for the event log)
-- ARGV[5] progress: '' for none, else a JSON object {"percent": 0-100, "message": "..."}
-- ARGV[6..] log lines, oldest first: appended to the record's `log` (a JSON array of strings),
--   which keeps its last LOG_LINES
-- Events: with a report, `progress` (r the progress JSON) and `logged` (r the lines joined by
--   newlines); w the consumer.
-- Returns: 'ok' (idle time reset, the report recorded), 'stopped' (the job ended while running,
-- e.g. stopped: the handler should be interrupted), 'lost' (another delivery owns the job, or it
-- is gone); a report is recorded only with 'ok'.
-- Errors: HERO_BAD_ARG for a progress that is not a JSON object with a number percent.
local LOG_LINES = 100

local function hero_renew(keys, args)
  local job_key, stream = keys[1], keys[2]
  local lease, group, consumer = args[1], args[2], args[3]
  local progress = args[5]
  if progress and progress ~= '' then
    local ok, p = pcall(cjson.decode, progress)
    if not ok or type(p) ~= 'table' or type(p.percent) ~= 'number' then
      return redis.error_reply('HERO_BAD_ARG progress is not a JSON object with a number percent')
    end
  end
  local f = redis.call('HMGET', job_key, 'status', 'lease')
  if not f[1] or f[2] ~= lease then return 'lost' end
  if f[1] ~= 'started' then return 'stopped' end
  local claimed = redis.call('XCLAIM', stream, group, consumer, 0, lease, 'JUSTID')
  if #claimed == 0 then return 'lost' end
  if #args < 4 then return 'ok' end
  local log = event_log(keys[3], settings(keys[4], FIELDS.renew))
  local job_id = args[4]
  if progress and progress ~= '' then
    redis.call('HSET', job_key, 'progress', progress)
    log_event(log, 'progress', job_id, stream, consumer, nil, progress)
  end
  if #args > 5 then
    local lines = {}
    local kept = redis.call('HGET', job_key, 'log')
    if kept then
      local ok, old = pcall(cjson.decode, kept)
      if ok and type(old) == 'table' then lines = old end
    end
    local new = {}
    for k = 6, #args do
      lines[#lines + 1] = args[k]
      new[#new + 1] = args[k]
    end
    if #lines > LOG_LINES then
      local tail = {}
      for k = #lines - LOG_LINES + 1, #lines do tail[#tail + 1] = lines[k] end
      lines = tail
    end
    redis.call('HSET', job_key, 'log', cjson.encode(lines))
    log_event(log, 'logged', job_id, stream, consumer, nil, table.concat(new, '\n'))
  end
  return 'ok'
end

-- hero_stop: stop a job wherever it is.
-- KEYS[1] job hash  KEYS[2] its work stream  KEYS[3] delayed zset  KEYS[4] reply list
-- KEYS[5] config hash  KEYS[6] control list of the worker the caller saw running it ('' allowed
-- when it saw none)  KEYS[7] retention stream  KEYS[8] event log  KEYS[9] stats hash
-- ARGV[1] consumer group  ARGV[2] worker_id the caller saw ('' for none)  ARGV[3] now ISO 8601
-- ARGV[4] '1' when XACKDEL  ARGV[5] job id
-- ARGV[6] why: 'stopped' (an operator's stop) or 'timeout' (the broker's time limit: only a
--   running job is taken, as a failed attempt: retried within its budget (the record's
--   `retries`, or its queue policy's when larger) on the longer of its own back-off and its
--   policy's (retry_delay), else 1 s doubling,
--   else ended with the error `timeout`; a job found anywhere else is 'changed')
-- A job the bridge handed to a legacy actor (`bridge` = the legacy list) is taken out of that
-- list when it is still there ('cancelled'); else its legacy worker is told the seed-001 way,
-- LPUSH of the job id to `bridge_stop` (`hero:stop_queue:<worker_id>`) ('interrupted').
-- A queued job's stream entry is deleted: the one the record names (a dual-pushed job), else
-- found among the first 1,000 undelivered (drop_queued_entry); one further back stays until a
-- worker reads it, finds the job stopped and drops it.
-- Stats: the stream's `failed` (per minute too), and its `delayed` gauge down for a waiting job;
-- for a timeout retried, `retried` (per minute too) and the `delayed` gauge up.
-- Events: `stopped` (q, w the worker when it was running, r 'cancelled', 'interrupted' or
-- 'timeout'); a job past its time limit with retries left is `retried` (r 'timeout', d the retry
-- time) instead. Through the ended-jobs hook (release_if_any): `dispatched` or `error` per
-- dependent, `batch_done` per batch completed.
-- A job submitted with its own retention once failed (`keep_failed`) expires after it (keep_ttl).
-- Dependents of the stopped job end error, `dependency failed: <id>` (see release_dependents).
-- Returns: 'cancelled' (it was queued or delayed and will never start), 'interrupted' (it was
-- running: it ends error/stopped now and its worker is told), 'timeout' (why 'timeout': it ends
-- error/timeout now and its worker is told), 'already_completed', or 'changed' (it started on
-- another worker since the caller looked, or is not running for a time limit: look again).
-- Errors: HERO_JOB_NOT_FOUND when there is no such job.
-- A queued job's entry, looked for among the first 1,000 undelivered entries of its stream and
-- deleted: a stream then holds no entry of a job that will never run, so the counts see it once
-- (failed, not waiting too) and removing its record later is not taken for a lost job. One
-- further back is dropped by the fetch that reaches it, as before (since protocol 32).
local function drop_queued_entry(stream, group, job_id)
  local from = '-'
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if type(groups) ~= 'table' or groups.err then return end
  for _, g in ipairs(groups) do
    local name, last = nil, nil
    for k = 1, #g, 2 do
      if g[k] == 'name' then name = g[k + 1] elseif g[k] == 'last-delivered-id' then last = g[k + 1] end
    end
    if name == group and last and last ~= '0-0' then from = '(' .. last end
  end
  for _, e in ipairs(redis.call('XRANGE', stream, from, '+', 'COUNT', 1000)) do
    if entry_fields(e[2]) == job_id then
      redis.call('XDEL', stream, e[1])
      return
    end
  end
end

local function hero_stop(keys, args)
  local job_key, stream, delayed, reply_key, cfg, ctl = keys[1], keys[2], keys[3], keys[4], settings(keys[5]), keys[6]
  local group, seen_worker, now_iso, xackdel, job_id = args[1], args[2], args[3], args[4], args[5]
  local why = args[6]
  if why ~= 'stopped' and why ~= 'timeout' then
    return redis.error_reply('HERO_BAD_ARG why is ' .. tostring(why) .. ', not stopped or timeout')
  end
  local f = redis.call('HMGET', job_key, 'status', 'entry', 'lease', 'worker_id', 'reply', 'bridge', 'bridge_stop')
  local was_delayed = false -- a waiting job in the delayed set (else it waits on prerequisites)
  local done = retained(keys[7], now_iso)
  local log = event_log(keys[8], cfg)
  -- the one job this call can end; `how` is what the caller is answered
  local function stopped(how)
    finish(job_key, job_id, reply_key, cfg, 'error', why, f[5], now_iso, done)
    -- a job's own retention once failed holds for a stop too (BullMQ's removeOnFail)
    local ttl = keep_ttl(cfg, job_key, 'error', nil)
    if ttl then redis.call('PEXPIRE', job_key, ttl) end
    local worker = nil
    if how == 'interrupted' then worker = f[4] end
    local queue = stream
    if stream == job_key then queue = nil end
    if why == 'timeout' then how = 'timeout' end
    log_event(log, 'stopped', job_id, queue, worker, nil, how)
    local st = stats(keys[9], now_iso)
    if queue then
      tally(st, queue, 'failed', 1, true)
      if f[1] == 'waiting' and was_delayed then tally(st, queue, 'delayed', -1) end
    end
    -- its dependents cannot run now: they end error too
    release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso }, { job_key }, { job_id }, { false })
    flush_retained(done)
    flush_stats(st)
    return how
  end
  local status = f[1]
  if not status then
    return redis.error_reply('HERO_JOB_NOT_FOUND no job hash at ' .. job_key)
  end
  if status == 'finished' or status == 'error' then return 'already_completed' end
  -- the time limit ends a running job only, the one delivery the caller saw
  if why == 'timeout' and (status ~= 'started' or (f[4] or '') ~= seen_worker or ctl == '') then
    return 'changed'
  end
  if (f[6] or '') ~= '' and (status == 'dispatched' or status == 'started') then
    local answer = 'cancelled'
    if redis.call('LREM', f[6], 0, job_id) == 0 then
      answer = 'interrupted'
      if (f[7] or '') ~= '' then redis.call('LPUSH', f[7], job_id) end
    end
    -- the entry the legacy side holds: the bridge's delivery (lease), or a dual-pushed job's
    -- unread entry
    local held = f[3]
    if (held or '') == '' then held = f[2] end
    if (held or '') ~= '' then ack_del(stream, group, held, xackdel) end
    return stopped(answer)
  end
  if status == 'waiting' then
    was_delayed = redis.call('ZREM', delayed, job_id) == 1
    redis.call('HDEL', job_key, 'deps_left')
  elseif status == 'dispatched' then
    if f[2] then ack_del(stream, group, f[2], xackdel) else drop_queued_entry(stream, group, job_id) end
  elseif status == 'started' then
    if (f[4] or '') ~= seen_worker or ctl == '' then return 'changed' end
    ack_del(stream, group, f[3], xackdel)
    redis.call('LPUSH', ctl, job_id)
    redis.call('PEXPIRE', ctl, 3600000)
    if why == 'timeout' then
      -- a timeout is a failed attempt: retried within the budget (the record's retries or its
      -- queue policy's, on the policy's back-off or 1 s doubling), ended when it is spent
      local a = redis.call('HMGET', job_key, 'attempts', 'retries', 'backoff')
      local attempts = tonumber(a[1]) or 1
      local budget = tonumber(a[2]) or 0
      local policy = setting(cfg, 'policed', 0) > 0 and stream_policy(keys[5], stream, {})
      if policy and tonumber(policy.retries) and tonumber(policy.retries) > budget then
        budget = tonumber(policy.retries)
      end
      if attempts <= budget then
        local delay = retry_delay(a[3], policy, attempts)
          or backoff_ms({ kind = 'exponential', base_ms = 1000, cap_ms = 3600000, jitter = 0.2 }, attempts)
        local retry_at = server_ms() + delay
        redis.call('HSET', job_key, 'status', 'waiting', 'error', 'timeout', 'run_at', tostring(retry_at),
          'attempts', tostring(attempts), 'updated_at', now_iso)
        redis.call('HDEL', job_key, 'lease', 'entry')
        redis.call('ZADD', delayed, retry_at, job_id)
        log_event(log, 'retried', job_id, stream, f[4], nil, 'timeout', retry_at)
        local st = stats(keys[9], now_iso)
        tally(st, stream, 'retried', 1, true)
        tally(st, stream, 'delayed', 1)
        flush_stats(st)
        return 'timeout'
      end
      stopped('interrupted')
      return 'timeout'
    end
    return stopped('interrupted')
  end
  return stopped('cancelled')
end

-- hero_recover: put abandoned deliveries of one work stream back into it (same stream, same
-- targeting, a new entry), or dead-letter them past the attempt budget.
-- KEYS[1] work stream  KEYS[2] dead-letter stream  KEYS[3] config hash  KEYS[4] retention stream
-- KEYS[5] event log  KEYS[6] stats hash
-- ARGV[1] consumer group  ARGV[2] mode: 'consumer' (the pending entries of consumer ARGV[3],
--         which is dead or handing its jobs back) or 'idle' (entries idle for ARGV[4] ms, listed
--         with XPENDING IDLE from cursor ARGV[9] and claimed as consumer ARGV[3]; entries held by
--         the legacy bridge, consumers named 'bridge:...', are skipped: the bridge's watch
--         decides when a legacy actor abandoned a job)
-- ARGV[3] consumer  ARGV[4] min idle ms  ARGV[5] count  ARGV[6] job key prefix
-- ARGV[7] reply key prefix  ARGV[8] max attempts  ARGV[9] cursor ('0-0' to start)
-- ARGV[10] '1' to hand back (the delivery does not count as an attempt)  ARGV[11] now ISO 8601
-- ARGV[12] '1' when XACKDEL
-- Stats: the stream's `recovered`, or `dead` and `failed` (per minute too), per job.
-- Events: per job, `recovered` (q, w the consumer it was taken from, a the attempts made, r
-- 'presence', 'idle' or 'handback') or `dead` (q, w, r the reason). Through the ended-jobs hook
-- (release_if_any): `dispatched` or `error` per dependent, `batch_done` per batch completed.
-- Dependents of a dead-lettered job end error, `dependency failed: <id>`. A dead-lettered job's
-- record names its letter: `dead` = the entry id (protocol 30), written with its end (not
-- while a reader older than 29 is live: see dead_index).
-- Returns: {requeued, dead, dropped, next cursor ('0-0' when done)}. In 'consumer' mode the
-- consumer is deleted from the group once it owns nothing.
-- Errors: HERO_BAD_ARG for an unknown mode.
local function hero_recover(keys, args)
  local stream, dead, cfg = keys[1], keys[2], settings(keys[3])
  local group, mode, consumer, min_idle, count = args[1], args[2], args[3], args[4], tonumber(args[5])
  local prefix, reply_prefix, max_attempts, cursor = args[6], args[7], tonumber(args[8]), args[9]
  local handback, now_iso, xackdel = args[10], args[11], args[12]
  local done = retained(keys[4], now_iso)
  local log = event_log(keys[5], cfg)
  local how = 'presence'
  if mode == 'idle' then how = 'idle' elseif handback == '1' then how = 'handback' end
  local owners = {} -- entry id -> the consumer that held it
  local memo = {} -- the stream's queue policy, read once
  local st = stats(keys[6], now_iso)
  if redis.call('EXISTS', stream) == 0 then return { 0, 0, 0, '0-0' } end
  local ids, next_cursor = {}, '0-0'
  if mode == 'consumer' then
    for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', count, consumer)) do
      ids[#ids + 1] = p[1]
      owners[p[1]] = consumer
    end
    if #ids == count then next_cursor = ids[#ids] end
  elseif mode == 'idle' then
    local from = '-'
    if cursor ~= '0-0' then from = cursor end
    local listed = redis.call('XPENDING', stream, group, 'IDLE', min_idle, from, '+', count)
    for _, p in ipairs(listed) do
      if not is_bridge_consumer(p[2]) then
        local claimed = redis.call('XCLAIM', stream, group, consumer, min_idle, p[1], 'JUSTID')
        if claimed[1] then
          ids[#ids + 1] = p[1]
          owners[p[1]] = p[2]
        end
      end
    end
    if #listed == count then next_cursor = next_id(listed[#listed][1]) end
  else
    return redis.error_reply('HERO_BAD_ARG unknown mode ' .. tostring(mode))
  end
  local requeued, dead_n, dropped = 0, 0, 0
  local ek, ei, eo = {}, {}, {} -- the jobs dead-lettered, whose dependents fail with them
  for _, id in ipairs(ids) do
    local entry = redis.call('XRANGE', stream, id, id)
    local job_id
    if entry[1] then job_id = entry_fields(entry[1][2]) end
    if job_id == '' then job_id = nil end
    local job_key = prefix .. (job_id or '')
    -- pcall: a job key holding another type is foreign data; its entry is dropped like one
    -- naming no job, instead of failing the recovery of every entry after it
    local j = job_id and redis.pcall('HMGET', job_key, 'status', 'lease', 'attempts', 'retries', 'reply')
    ack_del(stream, group, id, xackdel)
    if j and not j.err and j[1] == 'started' and j[2] == id then
      -- a started record without a count is on its first delivery (see hero_fetch)
      local attempts = tonumber(j[3]) or 1
      if handback == '1' and tonumber(j[3]) then
        -- computed here, not with HINCRBY: nothing may raise once the entry is acknowledged
        attempts = attempts - 1
        redis.call('HSET', job_key, 'attempts', attempts)
      elseif handback ~= '1' and not j[3] then
        -- the abandoned first delivery counts: the next fetch adds one to this
        redis.call('HSET', job_key, 'attempts', '1')
      end
      -- the budget is the record's retries or its queue policy's, whichever is larger
      local retries = tonumber(j[4]) or 0
      if setting(cfg, 'policed', 0) > 0 then
        local policy = stream_policy(keys[3], stream, memo)
        if policy and tonumber(policy.retries) and tonumber(policy.retries) > retries then
          retries = tonumber(policy.retries)
        end
      end
      local limit = math.max(max_attempts, retries + 1)
      if handback ~= '1' and attempts >= limit then
        local reason = 'abandoned after ' .. attempts .. ' attempts'
        local letter = redis.call('XADD', dead, '*', 'j', job_id, 'reason', reason, 'queue', stream)
        finish(job_key, job_id, reply_prefix .. job_id, cfg, 'error', reason, j[5], now_iso, done, dead_index(cfg, letter))
        log_event(log, 'dead', job_id, stream, owners[id], tostring(attempts), reason)
        dead_n = dead_n + 1
        ek[#ek + 1], ei[#ei + 1], eo[#eo + 1] = job_key, job_id, false
      else
        -- the entry carries the count for the next fetch; a first delivery handed back has none
        if handback == '1' and not tonumber(j[3]) then
          redis.call('XADD', stream, '*', 'j', job_id)
        else
          redis.call('XADD', stream, '*', 'j', job_id, 'a', tostring(attempts))
        end
        redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
        redis.call('HDEL', job_key, 'lease', 'worker_id', 'entry')
        log_event(log, 'recovered', job_id, stream, owners[id], tostring(attempts), how)
        requeued = requeued + 1
      end
    else
      dropped = dropped + 1
    end
  end
  if mode == 'consumer' and next_cursor == '0-0' then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer)
  elseif mode == 'idle' then
    -- the claimer held what it claimed only inside this call
    redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer)
  end
  release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso }, ek, ei, eo)
  flush_retained(done)
  if requeued > 0 and handback ~= '1' then tally(st, stream, 'recovered', requeued, true) end
  if dead_n > 0 then
    tally(st, stream, 'dead', dead_n, true)
    tally(st, stream, 'failed', dead_n, true)
  end
  flush_stats(st)
  return { requeued, dead_n, dropped, next_cursor }
end

-- hero_promote: move one due job from the delayed set into its work stream; or, when the broker
-- found no queue to move it to (its record names no valid script type), end it `error` instead.
-- KEYS[1] delayed zset  KEYS[2] job hash  KEYS[3] work stream (the job hash with ARGV[4])
-- KEYS[4] queue registry set  KEYS[5] config hash  KEYS[6] event log  KEYS[7] stats hash
-- KEYS[8] reply list  KEYS[9] retention stream
-- ARGV[1] job id  ARGV[2] consumer group  ARGV[3] now ISO 8601
-- ARGV[4] why it cannot be queued ('' or absent to promote it): the job ends `error` with it
-- Stats: the stream's `delayed` gauge down by one when promoted (or when the job was no longer
-- waiting: it left the delayed set all the same); a job ended for ARGV[4] counts as `failed`
-- (per minute too) under the stream '' (it names none).
-- Events: `dispatched` (q) when promoted; `error` (r the reason) when ended for ARGV[4]. Through
-- the ended-jobs hook (release_if_any): `dispatched` or `error` per dependent, `batch_done` per
-- batch completed.
-- Returns: 'promoted', 'failed' (ended for ARGV[4]), 'gone' (another broker promoted it, or it
-- was stopped), 'skipped' (the job is no longer waiting or its hash is gone; the stale member
-- was removed).
-- Errors: none of its own.
local function hero_promote(keys, args)
  local delayed, job_key, stream, registry = keys[1], keys[2], keys[3], keys[4]
  local job_id, group, now_iso = args[1], args[2], args[3]
  if redis.call('ZREM', delayed, job_id) == 0 then return 'gone' end
  local why = args[4] or ''
  if why ~= '' then
    -- nothing to queue it to: it ends error, with its event, its count and its dependents
    local f = redis.pcall('HMGET', job_key, 'status', 'reply')
    if type(f) ~= 'table' or f.err or f[1] ~= 'waiting' then return 'skipped' end
    local cfg = settings(keys[5])
    local done, log, st = retained(keys[9], now_iso), event_log(keys[6], cfg), stats(keys[7], now_iso)
    finish(job_key, job_id, keys[8], cfg, 'error', why, f[2], now_iso, done)
    log_event(log, 'error', job_id, nil, nil, nil, why)
    tally(st, '', 'failed', 1, true)
    release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso }, { job_key }, { job_id }, { false })
    flush_retained(done)
    flush_stats(st)
    return 'failed'
  end
  local f = redis.call('HMGET', job_key, 'status', 'attempts')
  local st = stats(keys[7])
  tally(st, stream, 'delayed', -1)
  flush_stats(st)
  if f[1] ~= 'waiting' then return 'skipped' end
  append(stream, group, registry, job_id, nil, f[2] or nil)
  redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
  redis.call('HDEL', job_key, 'run_at')
  log_event(event_log(keys[6], settings(keys[5])), 'dispatched', job_id, stream)
  return 'promoted'
end

-- hero_bridge_in: move ids that legacy producers pushed to a legacy list into the canonical work
-- stream of the mapping, oldest first. Each id leaves the list and enters the stream in the same
-- call, so a crash of the broker between calls leaves it in exactly one of the two.
-- KEYS[1] legacy list  KEYS[2] work stream  KEYS[3] queue registry set  KEYS[4] dead-letter stream
-- KEYS[5] config hash  KEYS[6] event log
-- ARGV[1] consumer group  ARGV[2] most ids to move  ARGV[3] job key prefix  ARGV[4] script type
-- ARGV[5] group ('' for none)  ARGV[6] instance ('' for none)  ARGV[7] now ISO 8601
-- Per id: the job hash (seed-001 fields are enough) gets status 'dispatched', the
-- mapping's script_type / group / instance, reply 'legacy' (a seed-001 caller may BLPOP
-- hero:reply:<id>: in compatibility mode it gets the bare result there, and nothing is pushed
-- to the canonical reply list no one waits on) and updated_at; leftovers of an earlier run (lease, output, error,
-- finished_at) are removed, so a legacy requeue of a crashed job runs it again. The worker that
-- takes it checks the rest of the record: a malformed one ends `error` with the reason.
-- An id with no job hash, or one of a job a worker of ours runs (started, with a lease), goes
-- to the dead-letter stream with the reason instead (its record, if any, is not written: there
-- is none, or it is a running job's that a worker reads, so it gets no `dead` index; readers
-- find such a letter by their bounded look at the newest letters). A job still queued in a
-- stream gets a second entry: whichever is read first runs it, the other is dropped as stale.
-- Events: `bridged_in` (q the stream, r the legacy list) per id moved, `dead` (r the reason)
-- per id dead-lettered.
-- Returns: {moved, dead, blocked}: blocked is 1 when the oldest id is a job the bridge handed
-- to this list's legacy actors (it stays where it is, for them).
-- Errors: none of its own.
local function hero_bridge_in(keys, args)
  local list, stream, registry, dead = keys[1], keys[2], keys[3], keys[4]
  local group, max, prefix = args[1], tonumber(args[2]), args[3]
  local stype, tgroup, tinst, now_iso = args[4], args[5], args[6], args[7]
  local moved, dead_n, blocked = 0, 0, 0
  local log = event_log(keys[6], settings(keys[5]))
  for _ = 1, max do
    local job_id = redis.call('RPOP', list)
    if not job_id then break end
    local job_key = prefix .. job_id
    local f = redis.call('HMGET', job_key, 'status', 'lease', 'bridge', 'attempts')
    if (f[3] or '') ~= '' then
      redis.call('RPUSH', list, job_id)
      blocked = 1
      break
    end
    local reason
    if redis.call('EXISTS', job_key) == 0 then
      reason = 'no job hash at ' .. job_key
    elseif f[1] == 'started' and (f[2] or '') ~= '' then
      reason = 'pushed to ' .. list .. ' while a worker runs it'
    end
    if reason then
      redis.call('XADD', dead, '*', 'j', job_id, 'reason', reason, 'queue', list)
      log_event(log, 'dead', job_id, nil, nil, nil, reason)
      dead_n = dead_n + 1
    else
      append(stream, group, registry, job_id, nil, f[4] or nil)
      local w = { 'status', 'dispatched', 'script_type', stype, 'reply', 'legacy', 'updated_at', now_iso }
      if tgroup ~= '' then w[#w + 1] = 'group'; w[#w + 1] = tgroup end
      if tinst ~= '' then w[#w + 1] = 'instance'; w[#w + 1] = tinst end
      redis.call('HDEL', job_key, 'lease', 'entry', 'output', 'value', 'error', 'finished_at', 'started_at')
      redis.call('HSET', job_key, unpack(w))
      log_event(log, 'bridged_in', job_id, stream, nil, nil, list)
      moved = moved + 1
    end
  end
  return { moved, dead_n, blocked }
end

-- hero_bridge_out: hand jobs of a canonical work stream to the legacy actors of a legacy list.
-- The bridge reads them as its own consumer (named 'bridge:...'), so each stays pending in the
-- stream until the job hash says finished or error (see hero_bridge_watch).
-- KEYS[1] work stream  KEYS[2] legacy list  KEYS[3] the mapping's tracking zset
-- KEYS[4] config hash  KEYS[5] event log
-- ARGV[1] consumer group  ARGV[2] bridge consumer  ARGV[3] most jobs  ARGV[4] job key prefix
-- ARGV[5] now ISO 8601  ARGV[6] pickup deadline ms (now + pickup time)  ARGV[7] legacy worker id
-- ARGV[8] legacy stop queue  ARGV[9] '1' when XACKDEL
-- Per job: status 'dispatched' (what seed-001 actors expect to find), lease = entry,
-- attempts + 1, worker_id = the legacy worker id, bridge = the list, bridge_stop = the stop
-- queue, bridge_taken = ''; LPUSH of the id to the list; tracked until the pickup deadline.
-- Entries naming no job hash, or a job that is no longer dispatched, are dropped.
-- Events: `bridged_out` (q, w the legacy worker id, a the attempt, r the legacy list) per job.
-- Returns: {handed out, dropped}
-- Errors: none of its own.
local function hero_bridge_out(keys, args)
  local stream, list, track = keys[1], keys[2], keys[3]
  local group, consumer, want, prefix = args[1], args[2], tonumber(args[3]), args[4]
  local now_iso, deadline, worker, stop_queue, xackdel = args[5], args[6], args[7], args[8], args[9]
  if redis.call('EXISTS', stream) == 0 then return { 0, 0 } end
  local res = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want, 'STREAMS', stream, '>')
  if not res then return { 0, 0 } end
  local handed, dropped = 0, 0
  local log = event_log(keys[5], settings(keys[4]))
  for _, e in ipairs(res[1][2]) do
    local id = e[1]
    local job_id = entry_fields(e[2])
    local job_key = prefix .. job_id
    local f = redis.call('HMGET', job_key, 'status', 'attempts')
    if f[1] ~= 'dispatched' then
      ack_del(stream, group, id, xackdel)
      dropped = dropped + 1
    else
      local attempts = tonumber(f[2])
      -- `id` too: a submit leaves it out, and seed-001 actors read it from the record
      local w = { 'id', job_id, 'status', 'dispatched', 'lease', id, 'worker_id', worker, 'bridge', list,
        'bridge_stop', stop_queue, 'bridge_taken', '', 'updated_at', now_iso }
      local attempt = nil
      if attempts or not f[2] then
        attempt = tostring((attempts or 0) + 1)
        w[#w + 1] = 'attempts'; w[#w + 1] = attempt
      end
      redis.call('HSET', job_key, unpack(w))
      redis.call('LPUSH', list, job_id)
      redis.call('ZADD', track, deadline, job_id)
      log_event(log, 'bridged_out', job_id, stream, worker, attempt, list)
      handed = handed + 1
    end
  end
  return { handed, dropped }
end

-- hero_bridge_watch: follow the jobs a legacy list's actors hold (handed out by
-- hero_bridge_out, or dual-pushed by hero_submit) until their job hash says they ended, and
-- take back the ones a legacy actor never picked up or abandoned.
-- KEYS[1] tracking zset (job id -> next deadline ms)  KEYS[2] legacy list  KEYS[3] work stream
-- KEYS[4] queue registry set  KEYS[5] config hash  KEYS[6] dead-letter stream
-- KEYS[7] retention stream  KEYS[8] event log  KEYS[9] stats hash
-- ARGV[1] consumer group  ARGV[2] job key prefix  ARGV[3] reply key prefix  ARGV[4] now ISO 8601
-- ARGV[5] now ms  ARGV[6] pickup time ms  ARGV[7] max attempts  ARGV[8] '1' for a dual-push
-- mapping  ARGV[9] '1' when XACKDEL  ARGV[10] most jobs to look at  ARGV[11] rank to start at
-- Per tracked job, by what its hash says:
--   gone, or `bridge` empty (a new worker took it, or it was taken back): no longer tracked;
--   finished / error (a legacy actor recorded it, or it was stopped): the bridge's stream entry
--     is acknowledged (or the unread dual-push entry deleted); if no function ended it,
--     finished_at, the retention clock and the canonical JSON reply are added (the legacy actor
--     answered hero:reply:<id> itself);
--   dispatched, past the pickup deadline, still in the list: taken out of the list; a dual-push
--     job stays in its stream for new workers, an outbound one is queued again (new entry) or,
--     past the attempt budget, ends error 'no legacy actor took it from <list> within <t> s';
--   started, or dispatched but no longer in the list (popped, not yet marked): taken; the
--     deadline becomes now + the job's timeout (started_at set; a dual-push job counts an
--     attempt here);
--   taken and past that deadline: the legacy actor is gone: queued again (new entry; dual-push
--     mappings push it to the list again) or, past the attempt budget, dead-lettered and ended
--     error 'abandoned after <n> attempts: legacy actor of <list> did not finish within <t> s'.
--   A dead-lettered job's record names its letter: `dead` = the entry id (protocol 30; not while
--     a reader older than 29 is live: see dead_index).
-- Stats: the stream's `finished`, `failed`, `recovered` and `dead` as jobs end or come back;
-- `fair` when a job taken back goes into a fair queue's gate.
-- Events: `started` (r the legacy list, a the attempt of a dual-pushed job) when a legacy actor
-- took a job; `finished` or `error` (r the error) when it ended one no function had ended;
-- `recovered` (q, a, r why) when a job is taken back; `dead` (q, r the reason) past the budget;
-- through the ended-jobs hook (release_if_any), `dispatched` or `error` per dependent and
-- `batch_done` per batch completed.
-- Dependents of a job a legacy actor ended (or that was dead-lettered here) are released with it.
-- Returns: {ended, requeued, failed, next rank (0 when the whole set was seen)}
-- Errors: none of its own.
local function hero_bridge_watch(keys, args)
  local track, list, stream, registry, cfg, dead = keys[1], keys[2], keys[3], keys[4], settings(keys[5]), keys[6]
  local group, prefix, reply_prefix, now_iso = args[1], args[2], args[3], args[4]
  local now_ms, pickup_ms, max_attempts = tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  local dual, xackdel, count, from = args[8] == '1', args[9], tonumber(args[10]), tonumber(args[11])
  local done = retained(keys[7], now_iso)
  local log = event_log(keys[8], cfg)
  local st = stats(keys[9], now_iso)
  local tracked = redis.call('ZRANGE', track, from, from + count - 1, 'WITHSCORES')
  local ended, requeued, failed, removed = 0, 0, 0, 0
  local ek, ei, eo = {}, {}, {} -- the jobs ended here, whose dependents are released with them

  -- the stream entry the legacy side held: acknowledged if the bridge read it (its delivery is
  -- the lease), else the unread entry of a dual-pushed job (the record names it) is deleted
  local function release(lease, entry)
    if lease and lease ~= '' then
      ack_trim(stream, group, { lease }, xackdel)
    elseif entry and entry ~= '' then
      redis.call('XDEL', stream, entry)
    end
  end

  local function untrack(job_id)
    redis.call('ZREM', track, job_id)
    removed = removed + 1
  end

  -- back into the stream, or error past the budget
  local function take_back(job_id, job_key, f, attempts, reason)
    release(f[3], f[4])
    local limit = math.max(max_attempts, (tonumber(f[6]) or 0) + 1)
    if attempts >= limit then
      local letter = redis.call('XADD', dead, '*', 'j', job_id, 'reason', reason, 'queue', list)
      local index = dead_index(cfg, letter)
      if index then
        redis.call('HSET', job_key, 'bridge', '', 'bridge_taken', '', 'dead', index)
      else
        redis.call('HSET', job_key, 'bridge', '', 'bridge_taken', '')
      end
      finish(job_key, job_id, reply_prefix .. job_id, cfg, 'error', reason, f[7], now_iso, done)
      log_event(log, 'dead', job_id, stream, nil, tostring(attempts), reason)
      ek[#ek + 1], ei[#ei + 1], eo[#eo + 1] = job_key, job_id, false
      tally(st, stream, 'dead', 1, true)
      tally(st, stream, 'failed', 1, true)
      untrack(job_id)
      failed = failed + 1
      return
    end
    local new = append(stream, group, registry, job_id, nil, tostring(attempts), dual)
    redis.call('HSET', job_key, 'status', 'dispatched', 'lease', '', 'bridge_taken', '',
      'updated_at', now_iso)
    if dual then
      redis.call('HSET', job_key, 'entry', new)
      redis.call('LPUSH', list, job_id)
      redis.call('ZADD', track, now_ms + pickup_ms, job_id)
    else
      redis.call('HSET', job_key, 'bridge', '')
      redis.call('HDEL', job_key, 'entry')
      untrack(job_id)
    end
    log_event(log, 'recovered', job_id, stream, nil, tostring(attempts), reason)
    tally(st, stream, 'recovered', 1, true)
    requeued = requeued + 1
  end

  for k = 1, #tracked, 2 do
    local job_id, due = tracked[k], tonumber(tracked[k + 1]) <= now_ms
    local job_key = prefix .. job_id
    -- 1 status 2 bridge 3 lease 4 entry 5 attempts 6 retries 7 reply 8 timeout 9 finished_at
    -- 10 bridge_taken 11 output 12 error
    local f = redis.call('HMGET', job_key, 'status', 'bridge', 'lease', 'entry', 'attempts', 'retries',
      'reply', 'timeout', 'finished_at', 'bridge_taken', 'output', 'error')
    local status = f[1]
    local timeout_s = tonumber(f[8]) or 300
    if not status or (f[2] or '') ~= list then
      untrack(job_id)
    elseif status == 'finished' or status == 'error' then
      release(f[3], f[4])
      redis.call('HSET', job_key, 'bridge', '', 'bridge_taken', '')
      if not f[9] then
        redis.call('HSET', job_key, 'finished_at', now_iso, 'updated_at', now_iso)
        retain(done, job_key, job_id, cfg)
        ek[#ek + 1], ei[#ei + 1], eo[#eo + 1] = job_key, job_id, status == 'finished'
        if f[7] == '1' then
          push_reply(job_id, reply_prefix .. job_id, cfg, status, f[11] or '', f[12] or '', true, false)
        end
        if status == 'finished' then
          log_event(log, 'finished', job_id, stream, nil, nil, list)
          tally(st, stream, 'finished', 1, true)
        else
          log_event(log, 'error', job_id, stream, nil, nil, f[12] or '')
          tally(st, stream, 'failed', 1, true)
        end
      end
      untrack(job_id)
      ended = ended + 1
    elseif f[10] ~= '1' then
      local taken = status == 'started'
      if not taken and due then
        if redis.call('LREM', list, 1, job_id) == 1 then
          if dual then
            redis.call('HSET', job_key, 'bridge', '')
            untrack(job_id)
          else
            take_back(job_id, job_key, f, tonumber(f[5]) or 1,
              'no legacy actor took it from ' .. list .. ' within ' .. (pickup_ms / 1000) .. ' s')
          end
        else
          taken = true
        end
      end
      if taken then
        local w = { 'bridge_taken', '1', 'started_at', now_iso }
        local attempt = f[5]
        if dual then
          attempt = tostring((tonumber(f[5]) or 0) + 1)
          w[#w + 1] = 'attempts'; w[#w + 1] = attempt
        end
        redis.call('HSET', job_key, unpack(w))
        log_event(log, 'started', job_id, stream, nil, attempt, list)
        redis.call('ZADD', track, now_ms + timeout_s * 1000, job_id)
      end
    elseif due then
      take_back(job_id, job_key, f, tonumber(f[5]) or 1,
        'abandoned after ' .. (tonumber(f[5]) or 1) .. ' attempts: legacy actor of ' .. list ..
        ' did not finish within ' .. timeout_s .. ' s')
    end
  end
  release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso, registry = registry,
    group = group }, ek, ei, eo)
  flush_retained(done)
  flush_stats(st)
  local next_rank = 0
  if #tracked == 2 * count then next_rank = from + count - removed end
  return { ended, requeued, failed, next_rank }
end

-- hero_expire: delete the ended jobs whose retention time has passed, oldest first, as the
-- retention stream names them (one entry per call that ended jobs: see retained in the prelude).
-- KEYS[1] retention stream
-- ARGV[1] job key prefix  ARGV[2] retention ms  ARGV[3] most entries to take in this call
-- ARGV[4] the dead letters' retention ms (optional, since protocol 31): a dead-lettered job (its
--   record names its letter, `dead`) is kept while its letter is, so a letter can always be
--   retried: its record gets a TTL to the letter's end instead of being deleted now
-- An entry is due once it is older than the retention time by Redis's clock (its id). Each job
-- it names is deleted when its record still says finished or error with the finished_at the
-- entry carries; any other is left alone: it ran again since (whatever ended it again added a
-- newer entry), or it is gone already; a job with a retention of its own (`keep`, `keep_failed`)
-- and a TTL from it is left to that TTL. An entry that is not of this form (foreign data) names
-- no job. A deleted job leaves the index of each of its tags (`<ns>:tag:<tag>`). The entries
-- taken are deleted, and the stream with them once it is empty.
-- Returns: {entries taken, jobs deleted, 1 when more entries are due, else 0}
-- Errors: none of its own.
local function hero_expire(keys, args)
  local stream, prefix = keys[1], args[1]
  local ns = ns_of(prefix, '')
  local retention_ms, count = tonumber(args[2]), tonumber(args[3])
  local now_ms = server_ms()
  local dead_keep = tonumber(args[4] or '')
  if dead_keep and dead_keep <= retention_ms then dead_keep = nil end
  local cutoff = now_ms - retention_ms
  if cutoff < 0 then return { 0, 0, 0 } end
  -- pcall: a retention key holding another type (foreign data) holds no job of ours
  local entries = redis.pcall('XRANGE', stream, '-', string.format('%d', cutoff), 'COUNT', count)
  if entries.err or #entries == 0 then return { 0, 0, 0 } end
  local deleted = 0
  for _, e in ipairs(entries) do
    local t, ids
    local f = e[2]
    for k = 1, #f, 2 do
      if f[k] == 't' then t = f[k + 1] elseif f[k] == 'j' then ids = f[k + 1] end
    end
    if t and ids then
      for job_id in string.gmatch(ids, '[^ ]+') do
        local job_key = prefix .. job_id
        -- pcall: a job key holding another type is not a job of ours
        local r = redis.pcall('HMGET', job_key, 'status', 'finished_at', 'tags', 'keep', 'keep_failed', 'dead')
        local own = nil -- a retention of its own (keep_ttl): its TTL deletes it, however long
        if not r.err then
          if r[1] == 'finished' then own = r[4] else own = r[5] end
        end
        local letter_ms = dead_keep and not r.err and r[6] and tonumber(string.match(r[6], '^(%d+)-'))
        local keep_for = letter_ms and letter_ms + dead_keep - now_ms
        if own and redis.call('PTTL', job_key) > 0 then
          -- kept for its own retention (a job ended where it was not applied has no TTL: the
          -- broker's retention deletes it as any other)
        elseif keep_for and keep_for > 0 and r[1] == 'error' and r[2] == t then
          -- its dead letter outlives the retention time: the record goes with the letter
          redis.call('PEXPIRE', job_key, string.format('%d', keep_for))
        elseif not r.err and (r[1] == 'finished' or r[1] == 'error') and r[2] == t then
          redis.call('DEL', job_key)
          deleted = deleted + 1
          if r[3] and r[3] ~= '' and r[3] ~= '[]' then
            -- out of its tags' indexes with it (a record's tags were checked at submit; one
            -- written by hand that does not decode leaves its index entries to the lister)
            local ok, tags = pcall(cjson.decode, r[3])
            if ok and type(tags) == 'table' then
              for _, tag in ipairs(tags) do
                if type(tag) == 'string' then redis.call('SREM', tag_key(ns, tag), job_id) end
              end
            end
          end
        end
      end
    end
  end
  -- entries are taken from the head, so everything up to the last one taken goes
  redis.call('XTRIM', stream, 'MINID', next_id(entries[#entries][1]))
  if redis.call('XLEN', stream) == 0 then redis.call('DEL', stream) end
  local more = 0
  if #entries == count then more = 1 end
  return { #entries, deleted, more }
end

-- hero_dead: retry or purge dead letters. A retry takes the job out of the dead-letter stream and
-- queues it again with a fresh attempt budget in the same call, so it is never in both or in
-- neither; a purge deletes the entries and the jobs they name.
-- KEYS[1] dead-letter stream  KEYS[2] queue registry set  KEYS[3] config hash  KEYS[4] event log
-- KEYS[5] stats hash
--   then per dead letter i = 0, 1, ...: KEYS[6+2i] job hash  KEYS[7+2i] its work stream
-- ARGV[1] consumer group  ARGV[2] now ISO 8601  ARGV[3] action: 'retry' or 'purge'
--   then per dead letter i: ARGV[4+2i] dead-letter entry id  ARGV[5+2i] job id
-- Per dead letter, by what its entry and record say:
--   the entry is gone, or names another job: 'missing' (nothing written);
--   retry, a record that ended error: the entry is deleted; the record loses its run (attempts,
--     lease, worker_id, entry, output, error, started_at, finished_at) and its letter's index
--     (`dead`, protocol 30) and is dispatched to its work stream as a new entry, pending again
--     in its batch while the batch is not done:
--     'requeued';
--   retry, a record that is not error (it ran again since, or was changed by hand): 'not_dead'
--     (nothing written);
--   retry, no record: the entry is deleted: 'gone';
--   purge: the entry is deleted, and the record with it while it still says error: 'purged'.
-- Stats: the stream's `dead` and `failed` counts stay (they count what happened); nothing else.
-- Events: `requeued` (q, r 'dead letter') per retried job; `purged` (r 'dead letter') per purge.
-- Returns: one answer per dead letter, in order.
-- Errors: HERO_BAD_ARG for an unknown action or KEYS and ARGV that do not describe the same
-- dead letters; then nothing is written.
local function hero_dead(keys, args)
  local dead, registry, cfg = keys[1], keys[2], settings(keys[3])
  local group, now_iso, action = args[1], args[2], args[3]
  local n = (#keys - 5) / 2
  if n ~= math.floor(n) or #args ~= 3 + 2 * n then
    return redis.error_reply('HERO_BAD_ARG dead takes 5 keys and 3 arguments, then 2 keys and 2 arguments per dead letter')
  end
  if action ~= 'retry' and action ~= 'purge' then
    return redis.error_reply('HERO_BAD_ARG unknown action ' .. tostring(action))
  end
  local log = event_log(keys[4], cfg)
  local answers = {}
  for i = 0, n - 1 do
    local job_key, stream = keys[6 + 2 * i], keys[7 + 2 * i]
    local entry_id, job_id = args[4 + 2 * i], args[5 + 2 * i]
    local entry = redis.call('XRANGE', dead, entry_id, entry_id)
    local named = entry[1] and entry_fields(entry[1][2])
    local answer
    if named ~= job_id then
      answer = 'missing'
    else
      local r = redis.pcall('HGET', job_key, 'status')
      local status = type(r) == 'string' and r or nil
      if action == 'purge' then
        redis.call('XDEL', dead, entry_id)
        if status == 'error' then redis.call('DEL', job_key) end
        log_event(log, 'purged', job_id, nil, nil, nil, 'dead letter')
        answer = 'purged'
      elseif type(r) == 'table' or status == nil then
        redis.call('XDEL', dead, entry_id)
        answer = 'gone'
      elseif status ~= 'error' then
        answer = 'not_dead'
      else
        redis.call('XDEL', dead, entry_id)
        revive_member(cfg, job_key, job_id, 'error')
        redis.call('HDEL', job_key, 'attempts', 'lease', 'worker_id', 'entry', 'output', 'value', 'error',
          'started_at', 'finished_at', 'run_at', 'bridge', 'bridge_stop', 'bridge_taken', 'dead')
        redis.call('PERSIST', job_key)
        append(stream, group, registry, job_id)
        redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
        log_event(log, 'requeued', job_id, stream, nil, nil, 'dead letter')
        answer = 'requeued'
      end
    end
    answers[i + 1] = answer
  end
  return answers
end

-- hero_requeue: move one job to a queue (the same one or another), wherever it is now, so that
-- it is never in two queues or in none.
-- KEYS[1] job hash  KEYS[2] its current work stream  KEYS[3] the work stream to move it to
-- KEYS[4] delayed zset  KEYS[5] queue registry set  KEYS[6] config hash  KEYS[7] event log
-- KEYS[8] stats hash  KEYS[9] control list of the worker the caller saw running it (any key of
-- the namespace when it saw none)
-- ARGV[1] consumer group  ARGV[2] now ISO 8601  ARGV[3] '1' when XACKDEL  ARGV[4] job id
-- ARGV[5] worker_id the caller saw ('' for none)  ARGV[6] cursor: the entry id to look for the
-- queued job's entry from ('0-0' to start)  ARGV[7] script type  ARGV[8] group ('' for none)
-- ARGV[9] instance ('' for none)  ARGV[10] priority level ('' for the default)
-- By what the record says:
--   waiting (delayed or retry back-off): it leaves the delayed set and is queued now;
--   dispatched: taken out of the current stream's gate when its queue is fair and it waits
--     there (gate.lua), else its entry in the current stream is found (a queued record does not name it: the
--     stream is read from the cursor, 1000 entries per call at most) and deleted, then it is
--     queued anew; no entry found to the end: it is queued all the same (it was in no stream);
--   started: its delivery is acknowledged and deleted (the lease is revoked: the worker's
--     completion answers lease_lost and its renewal lost), its worker is told through its control
--     list, and it is queued anew, attempts kept;
--   finished or error: queued anew with a fresh attempt budget (attempts, output, error,
--     started_at, finished_at cleared; and `dead`, the index of its dead letter, which stays in
--     the dead-letter stream: the job is no longer dead); pending again in its batch while the
--     batch is not done.
-- The record takes the new target (script_type, group, instance, priority), status dispatched.
-- Stats: the current stream's `delayed` gauge down for a waiting job, its `fair` gauge down
-- for a job taken out of its gate.
-- Events: `requeued` (q the new stream, r where it was taken from).
-- Returns: {answer, cursor}: 'requeued'; 'searching' with the cursor to call again from (the
-- entry was not among the entries read); 'changed' (it started on another worker since the
-- caller looked: look again); 'missing' (no such job).
-- Errors: none of its own.
local function hero_requeue(keys, args)
  local job_key, old, new, delayed, registry = keys[1], keys[2], keys[3], keys[4], keys[5]
  local cfg, ctl = settings(keys[6]), keys[9]
  local group, now_iso, xackdel, job_id, seen_worker, cursor = args[1], args[2], args[3], args[4], args[5], args[6]
  local f = redis.pcall('HMGET', job_key, 'status', 'lease', 'worker_id', 'entry')
  if type(f) ~= 'table' or f.err or not f[1] then return { 'missing', '' } end
  local status, from = f[1], 'queued'
  if status == 'waiting' then
    redis.call('ZREM', delayed, job_id)
    local st = stats(keys[8])
    tally(st, old, 'delayed', -1)
    flush_stats(st)
    from = 'delayed'
  elseif status == 'dispatched' then
    local entry = f[4]
    -- a fair queue's job may wait in its gate rather than the stream (gate.lua)
    local lane_key = redis.call('HGET', job_key, 'limit_key') or ''
    if redis.call('EXISTS', fair_lane_of(old, lane_key)) == 1 then
      local st = stats(keys[8])
      if ungate(st, old, job_id, lane_key) then
        flush_stats(st)
        entry = 'gated'
      end
    end
    if entry == 'gated' then
      entry = nil
    elseif not entry or entry == '' then
      -- the record does not name its entry: read the stream for it, a page per call
      local start = '-'
      if cursor ~= '0-0' then start = '(' .. cursor end
      local page = redis.pcall('XRANGE', old, start, '+', 'COUNT', 1000)
      if type(page) == 'table' and not page.err then
        for _, e in ipairs(page) do
          if entry_fields(e[2]) == job_id then entry = e[1] break end
        end
        if not entry and #page == 1000 then return { 'searching', page[#page][1] } end
      end
    end
    if entry and entry ~= '' then redis.call('XDEL', old, entry) end
  elseif status == 'started' then
    if (f[3] or '') ~= seen_worker then return { 'changed', '' } end
    if (f[2] or '') ~= '' then ack_del(old, group, f[2], xackdel) end
    -- the revoked delivery counts: a first one left no count (see hero_fetch)
    if not redis.call('HGET', job_key, 'attempts') then redis.call('HSET', job_key, 'attempts', '1') end
    if seen_worker ~= '' and ctl ~= keys[6] then
      redis.call('LPUSH', ctl, job_id)
      redis.call('PEXPIRE', ctl, 3600000)
    end
    from = 'revoked from ' .. seen_worker
  else
    -- an ended member of a batch that is not done is pending in it again
    revive_member(cfg, job_key, job_id, status)
    redis.call('HDEL', job_key, 'attempts', 'output', 'value', 'error', 'started_at', 'finished_at', 'dead')
    -- the TTL its end gave it (its own retention or its queue's) is for an ended job
    redis.call('PERSIST', job_key)
    from = status
  end
  redis.call('HDEL', job_key, 'lease', 'worker_id', 'entry', 'run_at', 'bridge', 'bridge_stop', 'bridge_taken')
  local w = { 'status', 'dispatched', 'updated_at', now_iso, 'script_type', args[7] }
  if args[8] ~= '' then w[#w + 1] = 'group'; w[#w + 1] = args[8] end
  if args[9] ~= '' then w[#w + 1] = 'instance'; w[#w + 1] = args[9] end
  if args[10] ~= '' then w[#w + 1] = 'priority'; w[#w + 1] = args[10] end
  redis.call('HSET', job_key, unpack(w))
  local drop = {}
  if args[8] == '' then drop[#drop + 1] = 'group' end
  if args[9] == '' then drop[#drop + 1] = 'instance' end
  if args[10] == '' then drop[#drop + 1] = 'priority' end
  if #drop > 0 then redis.call('HDEL', job_key, unpack(drop)) end
  -- the entry carries the attempts so far for the next fetch to add to (see append)
  local attempts = redis.call('HGET', job_key, 'attempts')
  append(new, group, registry, job_id, nil, attempts)
  log_event(event_log(keys[7], cfg), 'requeued', job_id, new, nil, nil, from)
  return { 'requeued', '' }
end

-- hero_fix: repair one inconsistency `hero audit` found, re-checked here so that a repair of
-- something that changed since the audit read it is a no-op.
-- KEYS[1] the work stream (or any key of the namespace where none applies)  KEYS[2] job hash
-- (or any key)  KEYS[3] delayed zset  KEYS[4] queue registry set  KEYS[5] config hash
-- KEYS[6] event log  KEYS[7] the key to repair (a reply list, for 'reply_ttl'; else any key)
-- ARGV[1] consumer group  ARGV[2] what: 'stale_entry', 'lost_job', 'unleased_job',
-- 'stale_delay', 'reply_ttl' or 'idle_consumer'  ARGV[3] the entry id ('stale_entry',
-- 'unleased_job': the job's lease), the job id ('lost_job', 'stale_delay'), or the consumer
-- ('idle_consumer')  ARGV[4] job id where there is one ('' else)  ARGV[5] now ISO 8601
-- ARGV[6] '1' when XACKDEL
-- What each repairs, when it still holds:
--   stale_entry: a pending entry that is no job's delivery (no `j`, no record, a key of another
--     type, or a record that is not started with this entry as its lease): acknowledged and
--     deleted;
--   lost_job: a record `dispatched` with no entry in its stream: queued again (a new entry);
--   unleased_job: a record `started` whose lease is not pending in its stream (nothing would ever
--     recover it): queued again, its attempt counted;
--   stale_delay: a member of the delayed set whose record is not `waiting`: removed;
--   reply_ttl: a reply list without a TTL: given the reply TTL;
--   idle_consumer: a consumer that holds nothing: deleted from the group.
-- Events: `requeued` (q, r 'audit') for lost_job and unleased_job.
-- Returns: 'fixed', or 'unchanged' when the inconsistency no longer holds.
-- Errors: HERO_BAD_ARG for an unknown what.
local function hero_fix(keys, args)
  local stream, job_key, delayed, registry = keys[1], keys[2], keys[3], keys[4]
  local cfg, target = settings(keys[5]), keys[7]
  local group, what, ref, job_id, now_iso, xackdel = args[1], args[2], args[3], args[4], args[5], args[6]
  local function record(...)
    local r = redis.pcall('HMGET', job_key, ...)
    if type(r) ~= 'table' or r.err then return nil end
    return r
  end
  if what == 'stale_entry' then
    local e = redis.call('XRANGE', stream, ref, ref)
    if not e[1] then return 'unchanged' end
    local named = entry_fields(e[1][2])
    if named ~= '' and named == job_id then
      local f = record('status', 'lease')
      if f and f[1] == 'started' and f[2] == ref then return 'unchanged' end
    end
    ack_del(stream, group, ref, xackdel)
    return 'fixed'
  elseif what == 'lost_job' or what == 'unleased_job' then
    local f = record('status', 'lease', 'attempts')
    if not f then return 'unchanged' end
    if what == 'lost_job' then
      if f[1] ~= 'dispatched' then return 'unchanged' end
    else
      if f[1] ~= 'started' or (f[2] or '') == '' then return 'unchanged' end
      local p = redis.call('XPENDING', stream, group, f[2], f[2], 1)
      if p[1] then return 'unchanged' end
      local attempts = tonumber(f[3]) or 1
      redis.call('HSET', job_key, 'attempts', tostring(attempts))
      f[3] = tostring(attempts)
    end
    redis.call('HDEL', job_key, 'lease', 'worker_id', 'entry')
    redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
    append(stream, group, registry, job_id, nil, f[3])
    log_event(event_log(keys[6], cfg), 'requeued', job_id, stream, nil, nil, 'audit')
    return 'fixed'
  elseif what == 'stale_delay' then
    local f = record('status')
    if f and f[1] == 'waiting' then return 'unchanged' end
    if redis.call('ZREM', delayed, ref) == 0 then return 'unchanged' end
    return 'fixed'
  elseif what == 'reply_ttl' then
    if redis.call('PTTL', target) ~= -1 then return 'unchanged' end
    redis.call('PEXPIRE', target, setting_arg(cfg, 'reply_ttl_ms', 3600000))
    return 'fixed'
  elseif what == 'idle_consumer' then
    local p = redis.call('XPENDING', stream, group, '-', '+', 1, ref)
    if p[1] then return 'unchanged' end
    redis.call('XGROUP', 'DELCONSUMER', stream, group, ref)
    return 'fixed'
  end
  return redis.error_reply('HERO_BAD_ARG unknown repair ' .. tostring(what))
end

-- hero_pause: pause or resume a queue. A paused queue's work streams leave the registry the
-- fetch reads for `<registry>:paused`, so no worker takes a new job from them (the ones running
-- finish) while submits, promotions and recoveries still append to them; resuming moves them
-- back and appends a wake-up entry (`w`) to each stream that holds entries, which wakes the
-- workers blocked on it at once (the fetch acknowledges and deletes it). A stream that joins
-- the registry later under a paused name is moved at once (see append in the prelude).
-- KEYS[1] queue registry set  KEYS[2] paused streams set  KEYS[3] paused names set
-- KEYS[4] config hash  KEYS[5] event log
-- ARGV[1] 'pause' or 'resume'  ARGV[2] queue name: `<type>`, `<type>/<group>` or
--   `<type>/<group>/<instance>`, covering every stream under it at any priority
-- ARGV[3] limit key (optional, since protocol 30): pause or resume that key of a fair queue
--   only. A paused key is held (`<ns>:meta:held`, members `<name>|<key>`): its jobs stay in their lanes
--   of the fair streams the name covers (gate.lua), out of the ring, while the other keys flow;
--   resuming puts it back at the ring's tail of each such stream where it has jobs.
-- A stream stays paused while any paused name covers it: resuming `osis` leaves `osis/io`
-- paused when it was paused by name.
-- Events: `paused` or `resumed` (j the queue name, r how many streams moved, or `key <key>`).
-- Returns: how many streams moved (for a key, how many streams it was held or resumed in).
-- Errors: HERO_BAD_ARG for an action other than pause or resume, and for a key of a queue that
-- is not fair (neither its type's policy nor its group's sets fair).
local function hero_pause(keys, args)
  local registry, paused, names = keys[1], keys[2], keys[3]
  local action, name, key = args[1], args[2], args[3]
  local moved = 0
  if key and (action == 'pause' or action == 'resume') then
    -- only a fair queue's gate holds one key's jobs back: its type's policy or its group's
    local pkey, fair = policy_key_of(keys[4]), false
    local t, g = string.match(name, '^([^/]+)/?([^/]*)')
    for _, q in ipairs({ t or name, (g and g ~= '') and (t .. '/' .. g) or nil }) do
      local ok, d = pcall(cjson.decode, redis.call('HGET', pkey, q) or 'null')
      if ok and type(d) == 'table' and d.fair then fair = true end
    end
    if not fair then
      return redis.error_reply('HERO_BAD_ARG queue ' .. name .. ' is not fair: only a fair queue\'s gate holds one key\'s jobs back (hero queue set ' .. tostring(t) .. ' --fair), or pause the whole queue')
    end
    local held_set = meta_key(keys[4], 'held')
    if action == 'pause' then redis.call('SADD', held_set, name .. '|' .. key)
    else redis.call('SREM', held_set, name .. '|' .. key) end
    for _, s in ipairs(redis.call('SUNION', registry, paused)) do
      if covers(name, stream_parts(s)) and redis.call('EXISTS', fair_lane_of(s, key)) == 1 then
        local ring = fair_ring_of(s)
        if action == 'pause' then
          redis.call('LREM', ring, 0, key)
          moved = moved + 1
        elseif not held(s, key) and not redis.call('LPOS', ring, key) then
          ring_in(s, key, registry)
          moved = moved + 1
        end
      end
    end
    log_event(event_log(keys[5], settings(keys[4])), action .. 'd', name, nil, nil, nil, 'key ' .. key)
    return moved
  end
  if action == 'pause' then
    redis.call('SADD', names, name)
    for _, s in ipairs(redis.call('SMEMBERS', registry)) do
      if covers(name, stream_parts(s)) then
        redis.call('SMOVE', registry, paused, s)
        moved = moved + 1
      end
    end
    -- the registry changed: a worker naming only the registered streams must drop these
    if moved > 0 then announce(registry, name) end
  elseif action == 'resume' then
    redis.call('SREM', names, name)
    local still = redis.call('SMEMBERS', names)
    for _, s in ipairs(redis.call('SMEMBERS', paused)) do
      local p = stream_parts(s)
      if covers(name, p) then
        local held = false
        for _, other in ipairs(still) do
          if covers(other, p) then held = true end
        end
        if not held then
          redis.call('SMOVE', paused, registry, s)
          -- a fair stream's jobs may all wait in its gate (gate.lua)
          if redis.call('XLEN', s) > 0 or redis.call('EXISTS', fair_ring_of(s)) == 1 then
            redis.call('XADD', s, '*', 'w', '1')
          end
          announce(registry, s)
          moved = moved + 1
        end
      end
    end
  else
    return redis.error_reply('HERO_BAD_ARG pause takes pause or resume, not ' .. tostring(action))
  end
  log_event(event_log(keys[5], settings(keys[4])), action .. 'd', name, nil, nil, nil, tostring(moved))
  return moved
end

-- hero_cron: add, replace or remove a recurring job, checked by the one cron engine
-- (lib/cron_engine.lua) so that a spec any language stores is one hero_duties can fire; and
-- (the `cron` table) the firing itself, which hero_duties' holder runs: each due tick claimed
-- and its job submitted in the same call, so each tick fires once however many processes run.
-- KEYS[1] cron spec hash  KEYS[2] cron next-tick hash
-- ARGV[1] name  ARGV[2] the spec as JSON (`CronJob` in cron.rs: name, schedule, tz, missed,
--   paused, job: the template of each tick's job), '' to remove the recurring job
-- A stored spec whose schedule or zone changed starts again from its next tick; the hash's
-- `|due` field (the earliest next tick, read by hero_duties) is cleared so the new spec is
-- looked at on the next pass.
-- Returns: {'stored', the next tick (ms)}, {'removed', 1 or 0}.
-- Errors: HERO_INVALID_CRON <what is wrong> for a name, schedule, zone, policy or job template
-- the engine or a worker would refuse (then nothing is written).

-- What the recurring jobs do, one table so the library stays within Lua's count of locals.
local cron = {}

cron.B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'

-- Standard base64 (the template's payload, as every language writes it) to bytes; nil when
-- the text is not base64.
function cron.unbase64(s)
  if type(s) ~= 'string' or #s % 4 ~= 0 or not string.match(s, '^[%w%+/]*=?=?$') then return nil end
  local out, val, bits = {}, 0, 0
  for i = 1, #s do
    local c = string.sub(s, i, i)
    if c == '=' then break end
    val = val * 64 + (string.find(cron.B64, c, 1, true) - 1)
    bits = bits + 6
    if bits >= 8 then
      bits = bits - 8
      local byte = math.floor(val / 2 ^ bits)
      out[#out + 1] = string.char(byte)
      val = val - byte * 2 ^ bits
    end
  end
  return table.concat(out)
end

-- A whole number a spec gives (cjson decodes every number as a double), as text; nil for
-- anything else.
function cron.count(v)
  if type(v) == 'number' and v >= 0 and v == math.floor(v) then return string.format('%d', v) end
  return nil
end

-- The field list hero_submit takes for the job of a tick of recurring job `name`, from its
-- template (`JobTemplate` in cron.rs): the fields the Rust builder writes, the tag
-- `cron:<name>` after the template's own; nil and why when the template is not one.
function cron.fields(name, t)
  if type(t) ~= 'table' then return nil, 'the spec has no job template' end
  if type(t.script) ~= 'string' or type(t.script_type) ~= 'string' then
    return nil, 'the job template needs a script and a script_type'
  end
  local f = { 'script', t.script, 'script_type', t.script_type }
  local function put(field, v) f[#f + 1] = field f[#f + 1] = v end
  if type(t.group) == 'string' then put('group', t.group) end
  if type(t.instance) == 'string' then put('instance', t.instance) end
  if t.priority ~= nil and t.priority ~= cjson.null and t.priority ~= 5 then
    put('priority', cron.count(t.priority) or tostring(t.priority))
  end
  for _, m in ipairs({ { 'timeout_secs', 'timeout' }, { 'keep_ms', 'keep' },
    { 'keep_failed_ms', 'keep_failed' } }) do
    local v = t[m[1]]
    if v ~= nil and v ~= cjson.null then put(m[2], cron.count(v) or tostring(v)) end
  end
  if t.retries ~= nil and t.retries ~= cjson.null and t.retries ~= 0 then
    put('retries', cron.count(t.retries) or tostring(t.retries))
  end
  local tags = {}
  if type(t.tags) == 'table' then
    for _, tag in ipairs(t.tags) do tags[#tags + 1] = tag end
  end
  tags[#tags + 1] = 'cron:' .. name
  put('tags', cjson.encode(tags))
  if type(t.backoff) == 'table' then put('backoff', cjson.encode(t.backoff)) end
  if t.payload ~= nil and t.payload ~= cjson.null then
    local bytes = cron.unbase64(t.payload)
    if not bytes then return nil, 'the job template\'s payload is not base64' end
    put('payload', bytes)
  end
  return f
end

-- The id of the job of a tick: the recurring job and the tick, so a tick's job is the same
-- whoever fires it (and a second submit of it is a no-op).
function cron.job_id(name, tick)
  return 'cron-' .. name .. '-' .. string.format('%d', tick)
end

-- A spec of namespace `ns` (`<ns>:`) decoded and checked: its table, its parsed schedule and
-- its tick's field list, or nil and why.
function cron.check(ns, name, json)
  if not name_ok(name) then
    return nil, 'recurring job name ' .. cjson.encode(tostring(name)) .. ' is not 1-64 characters of [A-Za-z0-9_-]'
  end
  local ok, spec = pcall(cjson.decode, json)
  if not ok or type(spec) ~= 'table' then return nil, 'the spec of ' .. name .. ' is not a JSON object' end
  if type(spec.schedule) ~= 'string' then return nil, 'the spec of ' .. name .. ' has no schedule' end
  local tz = spec.tz
  if tz == nil or tz == cjson.null then tz = 'UTC' end
  if type(tz) ~= 'string' then return nil, 'the spec of ' .. name .. ' has a zone that is not a name' end
  local m = spec.missed
  if m ~= nil and m ~= cjson.null and m ~= 'skip' and m ~= 'catch-up' then
    return nil, 'missed-tick policy ' .. cjson.encode(tostring(m)) .. ': give catch-up or skip'
  end
  local sched, why = cron_engine.parse(spec.schedule, tz)
  if not sched then return nil, why end
  local f, bad = cron.fields(name, spec.job)
  if not f then return nil, bad end
  return spec, sched, f
end

-- The work stream of a template's job.
function cron.stream(ns, t)
  return work_stream_of(ns, { t.script_type, t.group, t.instance, cron.count(t.priority) or '5' })
end

-- Whether Redis is past its maxmemory: hero_duties may write then (allow-oom, so a full Redis
-- drains), but a tick adds a job, which a full Redis refuses to every producer; the tick is
-- then missed, as when no process ran.
function cron.full()
  local info = redis.call('INFO', 'memory')
  local max = tonumber(string.match(info, 'maxmemory:(%d+)')) or 0
  local used = tonumber(string.match(info, 'used_memory:(%d+)')) or 0
  return max > 0 and used >= max
end

-- The recurring jobs' pass of hero_duties' holder (`d` its state): when the earliest next tick
-- (`|due`) has come, every spec is looked at. One seen for the first time gets its first tick;
-- a due tick fires (its job submitted through hero_submit) when it is at most 1 s late or
-- the spec's policy is catch-up, else it is skipped; either way the spec moves on to its first
-- tick after now. A spec that no longer checks (written by hand) or is paused is left as it is.
-- Returns how many ticks fired and how many were skipped.
function cron.pass(d)
  local specs_key, next_key = meta_key(d.keys[5], 'cron'), meta_key(d.keys[5], 'cron:next')
  local due = tonumber(redis.call('HGET', next_key, '|due'))
  if due and due > d.now_ms then return 0, 0 end
  local full = nil
  local fired, skipped, earliest = 0, 0, d.now_ms + 60000
  local raw = redis.call('HGETALL', specs_key)
  -- no recurring job: nothing to note (the next spec stored clears `|due` anyway)
  if #raw == 0 then return 0, 0 end
  for i = 1, #raw, 2 do
    local name = raw[i]
    local spec, sched, fields = cron.check(d.ns, name, raw[i + 1])
    if spec and spec.paused ~= true then
      local nxt = tonumber(redis.call('HGET', next_key, name))
      if nxt and nxt <= d.now_ms then
        if d.budget <= 0 then return fired, skipped end
        if full == nil then full = cron.full() end
        if not full and (spec.missed == 'catch-up' or d.now_ms - nxt <= 1000) then
          local id = cron.job_id(name, nxt)
          local stream = cron.stream(d.ns, spec.job)
          local args = { d.group, d.prefix, '', id, '1.' .. #fields }
          for k = 1, #fields do args[#args + 1] = fields[k] end
          local r = hero_submit({ d.keys[2], d.keys[4], bridge_registry_of(d.keys[4]), d.keys[5], d.keys[6],
            d.keys[7], stream }, args)
          d.budget = d.budget - 1
          if not r.err then
            fired = fired + 1
            redis.call('HINCRBY', next_key, name .. '|fires', 1)
            redis.call('HSET', next_key, name .. '|last', string.format('%d', nxt))
          end
        else
          skipped = skipped + 1
        end
        nxt = nil
      end
      if not nxt then
        nxt = cron_engine.next_after(sched, d.now_ms)
        if nxt then redis.call('HSET', next_key, name, string.format('%d', nxt)) end
      end
      if nxt and nxt < earliest then earliest = nxt end
    end
  end
  redis.call('HSET', next_key, '|due', string.format('%d', earliest))
  return fired, skipped
end

local function hero_cron(keys, args)
  local specs_key, next_key, name, json = keys[1], keys[2], args[1], args[2]
  if json == '' then
    local n = redis.call('HDEL', specs_key, name)
    redis.call('HDEL', next_key, name, name .. '|fires', name .. '|last')
    return { 'removed', n }
  end
  local spec, sched = cron.check(string.sub(specs_key, 1, #specs_key - 9), name, json)
  if not spec then return redis.error_reply('HERO_INVALID_CRON ' .. sched) end
  local old = redis.call('HGET', specs_key, name)
  local ok, prev = pcall(cjson.decode, old or '')
  if not (ok and type(prev) == 'table' and prev.schedule == spec.schedule and prev.tz == spec.tz) then
    redis.call('HDEL', next_key, name)
  end
  redis.call('HSET', specs_key, name, json)
  redis.call('HDEL', next_key, '|due')
  local now = server_ms()
  return { 'stored', cron_engine.next_after(sched, now) or -1 }
end

-- hero_batch: close a batch, naming the callback jobs to submit once every member ended. A batch
-- closed with no member pending (every one ended already, or none was added) calls back in this
-- very call; else the call that ends its last pending member does (see batches.lua). Members
-- may still be added while it is not done, and closing again replaces the callbacks.
-- KEYS[1] batch hash  KEYS[2] config hash  KEYS[3] batch index (zset)  KEYS[4] event log
-- ARGV[1] batch name  ARGV[2] now ISO 8601
-- ARGV[3] on_complete: the callback spec to submit once every member ended ('' for none)
-- ARGV[4] on_success: the callback spec to submit once every member ended and none failed
--   ('' for none); a spec is JSON: id, key, stream, registry, group, fields (see batches.lua)
-- Events: `batch_done` per callback job submitted (j its id, q its stream, r the batch and
--   its counts).
-- Returns: {state, total, pending, finished, failed, complete_id, success_id}: state 'open'
-- (members are pending), 'done' (called back in this call) or 'already_done' (it had called
-- back before: nothing written); an id is '' where no such callback was submitted.
-- Errors: HERO_BAD_ARG when neither callback is given.
local function hero_batch(keys, args)
  local bkey, config, index, name, now_iso = keys[1], keys[2], keys[3], args[1], args[2]
  local on_complete, on_success = args[3], args[4]
  if on_complete == '' and on_success == '' then
    return redis.error_reply('HERO_BAD_ARG a batch closes with an on_complete or an on_success callback')
  end
  local cfg = settings(config)
  local state = 'open'
  if batch_done(bkey) then
    state = 'already_done'
  else
    if redis.call('HSETNX', bkey, 'created_at', now_iso) == 1 then
      redis.call('ZADD', index, server_ms(), name)
      redis.call('HINCRBY', config, BATCHES_FIELD, 1)
    end
    local w = { 'closed', '1' }
    if on_complete ~= '' then w[#w + 1] = 'on_complete'; w[#w + 1] = on_complete end
    if on_success ~= '' then w[#w + 1] = 'on_success'; w[#w + 1] = on_success end
    redis.call('HSET', bkey, unpack(w))
    if on_complete == '' then redis.call('HDEL', bkey, 'on_complete') end
    if on_success == '' then redis.call('HDEL', bkey, 'on_success') end
    local ctx = { cfg = cfg, log = event_log(keys[4], cfg), now_iso = now_iso }
    if settle_batch(ctx, bkey, name) then state = 'done' end
  end
  local r = redis.call('HMGET', bkey, 'total', 'pending', 'finished', 'failed', 'complete_id', 'success_id')
  return { state, tonumber(r[1]) or 0, tonumber(r[2]) or 0, tonumber(r[3]) or 0, tonumber(r[4]) or 0,
    r[5] or '', r[6] or '' }
end

-- hero_batch_ends: count into their batches the ends that a library of protocol 26 or older
-- recorded without counting them (it knows no batches), as the broker finds them in the event
-- log: `finished` and `error` events written for a worker the fleet says speaks such a
-- protocol. Each end is counted once: the call moves the brokers' cursor over the event log in
-- the same step, and only from the cursor it expects (a second broker's call over the same
-- events answers 'moved' and counts nothing).
-- KEYS[1] config hash  KEYS[2] event log
-- KEYS[3..] job hash, one per job
-- ARGV[1] now ISO 8601  ARGV[2] the cursor expected ('' before the first call)
-- ARGV[3] the cursor after these events
--   then per job, in the order of KEYS: its id, and '1' when its event was `finished`, '0' for
--   `error`
-- A job is counted only while its record still says what its event said (not queued again
-- since), into a batch its record names that is not done.
-- Events: `batch_done` per callback job submitted (j its id, q its stream, r the batch and
--   its counts).
-- Returns: how many of the jobs still ended as their events said, or 'moved' when the cursor
-- was not the one expected (nothing counted).
-- Errors: none of its own.
local BATCH_ENDS_CURSOR = 'batch_ends_cursor'
local function hero_batch_ends(keys, args)
  local config, now_iso, expected, after = keys[1], args[1], args[2], args[3]
  local cur = redis.call('HGET', config, BATCH_ENDS_CURSOR) or ''
  if cur ~= expected then return 'moved' end
  redis.call('HSET', config, BATCH_ENDS_CURSOR, after)
  local cfg = settings(config)
  local ended = {}
  for i = 3, #keys do
    local k = 2 * (i - 3)
    local job_id, ok = args[4 + k], args[5 + k] == '1'
    local status = redis.pcall('HGET', keys[i], 'status')
    if (ok and status == 'finished') or (not ok and status == 'error') then
      ended[#ended + 1] = { keys[i], job_id, ok }
    end
  end
  if #ended > 0 and open_batches(cfg) then
    count_batch_ends({ cfg = cfg, log = event_log(keys[2], cfg), now_iso = now_iso }, ended)
  end
  return #ended
end

-- hero_counts: the job counts of one queue (`<type>[/<group>[/<instance>]]`), per work stream
-- under it, read in one call so that every language's `Queue` answers the same numbers as
-- `hero queues` (hero_admin's Inspector reads the same gauges and counters).
-- KEYS[1] queue registry set  KEYS[2] paused streams set  KEYS[3] stats hash
-- ARGV[1] consumer group  ARGV[2] queue name ('*': every queue, as hero_duties' depth sample)
-- Per stream the name covers (registered, paused, or known to the stats only: one whose jobs
-- all wait in the delayed set yet; any priority): the sizes now, `waiting`
-- (entries not yet delivered: the group's lag, at most the length less the pending, less a wake-up
-- entry at their head, plus a fair queue's jobs in its gate: the stats gauge `fair`), `running`
-- (delivered, not acknowledged) and `delayed` (its jobs in the delayed set: the stats gauge),
-- then the counters since the namespace began, `finished`, `failed` (ended error, whatever the
-- reason) and `dead`, and 1 when the stream is paused.
-- Returns: a flat list, 9 values a stream: stream, waiting, running, delayed, finished, failed,
-- dead, paused (1 or 0), the age (ms) of its oldest waiting entry (-1 when none waits).
-- Errors: none of its own; a stream broken by hand reads as empty.
local function hero_counts(keys, args)
  local group, name = args[1], args[2]
  local paused = {}
  for _, s in ipairs(redis.call('SMEMBERS', keys[2])) do paused[s] = true end
  local streams = redis.call('SUNION', keys[1], keys[2])
  -- a stream that does not exist yet (its only jobs wait in the delayed set) has stats only
  local seen = {}
  for _, s in ipairs(streams) do seen[s] = true end
  for _, f in ipairs(redis.call('HKEYS', keys[3])) do
    local s = string.match(f, '^(.*)|delayed$')
    if s and not seen[s] then
      seen[s] = true
      streams[#streams + 1] = s
    end
  end
  table.sort(streams)
  local out, now = {}, nil
  for _, s in ipairs(streams) do
    if name == '*' or covers(name, stream_parts(s)) then
      local len = redis.pcall('XLEN', s)
      if type(len) ~= 'number' then len = 0 end
      local running, lag, last = 0, nil, nil
      local pending = redis.pcall('XPENDING', s, group)
      if type(pending) == 'table' and not pending.err then running = tonumber(pending[1]) or 0 end
      local groups = redis.pcall('XINFO', 'GROUPS', s)
      if type(groups) == 'table' and not groups.err then
        for _, gi in ipairs(groups) do
          local gname, glag, glast = nil, nil, nil
          for k = 1, #gi, 2 do
            if gi[k] == 'name' then gname = gi[k + 1]
            elseif gi[k] == 'lag' then glag = tonumber(gi[k + 1])
            elseif gi[k] == 'last-delivered-id' then glast = gi[k + 1] end
          end
          if gname == group then lag, last = glag, glast end
        end
      end
      -- the lag, but never more than the entries left: Redis keeps a group's lag when entries
      -- past its last delivery are deleted (a drain, a stop), so it alone overcounts then
      local waiting = math.max(len - running, 0)
      if lag then waiting = math.min(lag, waiting) end
      local age = -1
      local c = redis.call('HMGET', keys[3], s .. '|delayed', s .. '|finished', s .. '|failed', s .. '|dead', s .. '|fair')
      local gated = math.max(tonumber(c[5]) or 0, 0)
      if waiting > 0 then
        local from = '-'
        if last and last ~= '0-0' then from = '(' .. last end
        local head = redis.pcall('XRANGE', s, from, '+', 'COUNT', 1)
        if type(head) == 'table' and not head.err and head[1] then
          if head[1][2][1] == 'w' then
            -- a fair gate's (or a resume's) wake-up entry, not a job
            waiting = waiting - 1
          else
            now = now or server_ms()
            age = math.max(now - (tonumber(string.match(head[1][1], '^(%d+)')) or now), 0)
          end
        end
      end
      -- a fair queue's jobs in its gate wait too (gate.lua): its gauge, and the age of the job
      -- it serves next
      if gated > 0 then
        waiting = waiting + gated
        local born = age < 0 and gate_head_ms(s)
        if born then
          now = now or server_ms()
          age = math.max(now - born, 0)
        end
      end
      local p = 0
      if paused[s] then p = 1 end
      local n = #out
      out[n + 1], out[n + 2], out[n + 3] = s, waiting, running
      out[n + 4], out[n + 5] = math.max(tonumber(c[1]) or 0, 0), tonumber(c[2]) or 0
      out[n + 6], out[n + 7], out[n + 8], out[n + 9] = tonumber(c[3]) or 0, tonumber(c[4]) or 0, p, age
    end
  end
  return out
end

-- hero_remove: delete one job that is not queued or running (BullMQ's `job.remove()`): an ended
-- one (finished or error), or a dead letter's record. A queued or delayed job is stopped first
-- (hero_stop), so that no stream entry or delayed member outlives its record; the caller does
-- that, then calls this.
-- KEYS[1] job hash
-- ARGV[1] job id
-- The record goes with its uniqueness key when it still holds it and the index entry of each
-- of its tags (`<ns>:tag:<tag>`); its results in its dependents' records stay theirs.
-- Returns: 'removed'; 'running' (started: stop it first, or wait for its end), 'queued'
-- (waiting or dispatched: stop it first), 'missing' (no such job). Nothing is written but for
-- 'removed'.
-- Errors: none of its own.
-- Deletes the record `job_key` (of `job_id`) with its tag index entries and its uniqueness key
-- while it holds it; `tags` and `unique` as the record gave them. hero_clean and hero_drain
-- delete through here too.
local function forget_job(job_key, job_id, tags, unique)
  local ns = ns_of(job_key, job_id)
  redis.call('DEL', job_key)
  if tags and tags ~= '' and tags ~= '[]' then
    local ok, list = pcall(cjson.decode, tags)
    if ok and type(list) == 'table' then
      for _, tag in ipairs(list) do
        if type(tag) == 'string' then redis.call('SREM', tag_key(ns, tag), job_id) end
      end
    end
  end
  if unique and unique ~= '' then
    local ukey = unique_key(ns, unique)
    if redis.call('GET', ukey) == job_id then redis.call('DEL', ukey) end
  end
end

local function hero_remove(keys, args)
  local job_key, job_id = keys[1], args[1]
  local r = redis.pcall('HMGET', job_key, 'status', 'tags', 'unique')
  if type(r) ~= 'table' or r.err or not r[1] then return 'missing' end
  if r[1] == 'started' then return 'running' end
  if r[1] ~= 'finished' and r[1] ~= 'error' then return 'queued' end
  forget_job(job_key, job_id, r[2], r[3])
  return 'removed'
end

-- hero_policy: store or clear one queue's policy on one shard and count the policies the other
-- functions apply (the config hash's `limited`, `rated`, `policed`, `aged`, `fair`: see policy.lua in
-- the library), so every language sets a policy the same way, checked once, here.
-- KEYS[1] policy hash  KEYS[2] config hash
-- ARGV[1] queue name (`<type>` or `<type>/<group>`, as hero_pause names queues)
-- ARGV[2] policy JSON
--   the policy whole (the caller merged it with what was set), or '' (or `{}`) to clear it. Fields (all optional): timeout_ms, retries, lease_ms, retention_ms, aging_ms
--   (whole numbers; aging at least 1), concurrency (at least 1), rate and key_rate ({max, per_ms},
--   each at least 1), backoff ({kind fixed or exponential, base_ms, cap_ms, jitter 0 to 1}),
--   fair (true: the queue's keys are served in turns, see gate.lua), fair_weights ({limit
--   key: turns}, each at least 1) and key_concurrency (at least 1: running jobs of one limit
--   key across every worker; only with fair, on this policy or its type's).
-- A policy that no longer sets fair (cleared, or stored without it) moves the jobs waiting in the
-- gates of the streams it covered, which are no longer fair, onto those streams in the same call
-- (O(jobs in the gates)), and drops the queue's paused keys (gate.lua's `unfair`).
-- Stats: the `fair` gauge of each stream whose gate it emptied (see above), down to 0.
-- Returns: the JSON stored ('' when cleared).
-- Errors: HERO_BAD_ARG naming the queue and the field for a name or a value it refuses, and for
-- fair share while the brokers' `fleet_lacks` names a live older process that lacks it, or on a
-- queue the legacy bridge dual-pushes (the bridge registry `<ns>:meta:bridge`); then nothing is
-- written.
local POLICY_COUNTS = {
  { 'limited', { 'concurrency' } },
  { 'rated', { 'rate', 'key_rate' } },
  { 'policed', { 'retries', 'backoff', 'retention_ms' } },
  { 'aged', { 'aging_ms' } },
  { 'fair', { 'fair' } },
}

local function hero_policy(keys, args)
  local hash, config, name, raw = keys[1], keys[2], args[1], args[2] or ''
  local function bad(why)
    return redis.error_reply('HERO_BAD_ARG the policy of queue ' .. tostring(name) .. ': ' .. why)
  end
  local t, g = string.match(name or '', '^([%w_%-]+)/?([%w_%-]*)$')
  if not t then return bad('name it <type> or <type>/<group> (a policy is not per instance)') end
  local p = {}
  if raw ~= '' then
    local ok, d = pcall(cjson.decode, raw)
    if not ok or type(d) ~= 'table' then return bad('it is not a JSON object') end
    p = d
  end
  local function whole(v, least)
    return type(v) == 'number' and v == math.floor(v) and v >= (least or 0)
  end
  local n = 0
  for k, v in pairs(p) do
    n = n + 1
    if k == 'timeout_ms' or k == 'retries' or k == 'lease_ms' or k == 'retention_ms' then
      if not whole(v) then return bad(k .. ' is not a whole number') end
    elseif k == 'aging_ms' then
      if not whole(v, 1) then return bad('aging_ms is not a whole number of at least 1 (0 would serve every job at the highest level)') end
    elseif k == 'concurrency' then
      if not whole(v, 1) then return bad('concurrency is not a whole number of at least 1 (to run nothing, pause the queue)') end
    elseif k == 'rate' or k == 'key_rate' then
      if type(v) ~= 'table' or not whole(v.max, 1) or not whole(v.per_ms, 1) then
        return bad(k .. ' is not {max, per_ms}, each at least 1')
      end
    elseif k == 'fair' then
      if v ~= true then return bad('fair is true or absent (clear the policy field to serve the queue first in, first out)') end
    elseif k == 'fair_weights' then
      if type(v) ~= 'table' then return bad('fair_weights is not an object of limit key -> turns') end
      for key, w in pairs(v) do
        if type(key) ~= 'string' or string.find(key, '[%s]') or not whole(w, 1) then
          return bad('fair_weights gives ' .. tostring(key) .. ' ' .. tostring(w) .. ': each limit key needs a whole number of turns of at least 1')
        end
      end
    elseif k == 'key_concurrency' then
      if not whole(v, 1) then return bad('key_concurrency is not a whole number of at least 1 (to run none of a key, pause the key)') end
      local fair = p.fair
      if not fair and g ~= '' then
        local ok, tp = pcall(cjson.decode, redis.call('HGET', hash, t) or 'null')
        fair = ok and type(tp) == 'table' and tp.fair
      end
      if not fair then return bad('key_concurrency needs fair share: a key\'s jobs wait in its lane of the gate until it has room (set fair too: hero queue set ' .. t .. ' --fair)') end
    elseif k == 'backoff' then
      local why = bad_value('backoff', cjson.encode(v))
      if why then return bad('backoff ' .. why) end
    else
      return bad('field ' .. tostring(k) .. ' is not a policy field')
    end
  end
  if p.fair then
    -- refused here, for every language: what an older process or a legacy actor cannot serve
    local ok, lacks = pcall(cjson.decode, redis.call('HGET', config, 'fleet_lacks') or '{}')
    local lack = ok and type(lacks) == 'table' and lacks.fair
    if type(lack) == 'table' then
      local who = type(lack.processes) == 'table' and table.concat(lack.processes, ', ') or 'some'
      return bad('fair share needs every live process at protocol 30 or later, and these are older: ' .. who .. ' (upgrade them, or wait until they are gone; hero actors shows each one\'s protocol)')
    end
    for _, s in ipairs(redis.call('HKEYS', meta_key(config, 'bridge'))) do
      local sp = stream_parts(s)
      if sp and sp.type == t and (g == '' or sp.group == g) then
        return bad('it is bridged to a legacy list (' .. s .. '), whose legacy actors pop in their own order, so it cannot be served fairly: stop bridging it or leave it first in, first out')
      end
    end
  end
  local was_ok, was = pcall(cjson.decode, redis.call('HGET', hash, name) or 'null')
  local was_fair = was_ok and type(was) == 'table' and was.fair
  local stored = ''
  if n == 0 then
    redis.call('HDEL', hash, name)
  else
    stored = cjson.encode(p)
    redis.call('HSET', hash, name, stored)
  end
  local counts = { 0, 0, 0, 0, 0 }
  local all = redis.call('HGETALL', hash)
  for i = 2, #all, 2 do
    local ok, q = pcall(cjson.decode, all[i])
    if ok and type(q) == 'table' then
      for c, spec in ipairs(POLICY_COUNTS) do
        for _, f in ipairs(spec[2]) do
          if q[f] ~= nil then
            counts[c] = counts[c] + 1
            break
          end
        end
      end
    end
  end
  redis.call('HSET', config, 'limited', counts[1], 'rated', counts[2], 'policed', counts[3], 'aged', counts[4], 'fair', counts[5])
  -- fair share turned off: the gates of the streams no longer fair go onto their streams now
  -- (no fetch would release them), and the queue's paused keys are forgotten
  if was_fair and not p.fair then unfair(config, name) end
  return stored
end

-- hero_beat: a live process's heartbeat, on Redis's clock and allowed past maxmemory
-- (`allow-oom`), so that neither a full Redis nor a skewed clock makes a live worker look dead,
-- and a worker can start and register while Redis is full. What it writes past maxmemory is
-- bounded: each live process's own fleet entry, presence keys and liveness member, rewritten
-- in place (about 0.5 KB a process and script type), never anything that grows with jobs.
-- KEYS[1] consumers sorted set (liveness deadlines)  KEYS[2] fleet hash  KEYS[3] config hash
-- KEYS[4] memory flag (the maxmemory policy, read from INFO, kept for MEMORY_CHECK_MS)
--   then KEYS[5..] the worker's presence keys, one per script type (none for a broker)
-- ARGV[1] process name (a worker's consumer; a broker's `broker:<host>:<pid>`)
-- ARGV[2] liveness ttl ms  ARGV[3] fleet entry: a JSON object without `expires_ms`, which this
-- adds as Redis's clock + ttl  ARGV[4] presence JSON (a worker's; '' for a broker): written to
-- each presence key with PX ttl, and the consumer's deadline (Redis's clock + ttl) to KEYS[1]
-- Returns: {now ms on Redis's clock, lease_ms, fleet_lacks, maxmemory policy} (the config
-- hash's two fields as the broker published them, false when absent)
-- Errors: HERO_BAD_ARG for a ttl that is not a positive number or an entry that is not a JSON
-- object.
local function hero_beat(keys, args)
  local name, ttl, entry, presence = args[1], tonumber(args[2]), args[3], args[4]
  if not ttl or ttl <= 0 then return redis.error_reply('HERO_BAD_ARG ttl ms is not a positive number') end
  if type(entry) ~= 'string' or string.sub(entry, 1, 1) ~= '{' or string.sub(entry, -1) ~= '}' then
    return redis.error_reply('HERO_BAD_ARG the fleet entry is not a JSON object')
  end
  local now = server_ms()
  local deadline = string.format('%d', now + ttl)
  local sep = entry == '{}' and '' or ','
  redis.call('HSET', keys[2], name, string.sub(entry, 1, -2) .. sep .. '"expires_ms":' .. deadline .. '}')
  if presence and presence ~= '' then
    local ttl_arg = string.format('%d', ttl)
    for i = 5, #keys do redis.call('SET', keys[i], presence, 'PX', ttl_arg) end
    redis.call('ZADD', keys[1], deadline, name)
  end
  local cfg = redis.call('HMGET', keys[3], 'lease_ms', 'fleet_lacks')
  return { now, cfg[1], cfg[2], memory_policy(keys[4], true) }
end

-- hero_duties: the queue's upkeep, done by whichever live process holds the duty lease, in
-- bounded steps, on Redis's clock: due delayed jobs and retries promoted, the jobs of dead
-- workers and idle deliveries recovered, running jobs past their time limit ended, ended jobs
-- past their retention deleted, dead letters past theirs trimmed, recurring jobs' due ticks fired
-- (cron.lua), and each queue's depth sampled
-- into the minute's stats (`<stream>|waiting`, for the dashboard's charts). Every worker (and broker) calls it on a timer; the one holding
-- the lease does the work, the others get an answer after one HGET, so a hundred workers do the
-- work of one broker. Each move goes through the function that makes it elsewhere (hero_promote,
-- hero_recover, hero_stop, hero_expire), which re-checks the job and makes a second move a
-- no-op: two holders at once (a lease that ran out mid-call) never double a move.
-- KEYS[1] duty lease hash  KEYS[2] delayed zset  KEYS[3] consumers zset  KEYS[4] queue registry set
-- KEYS[5] config hash  KEYS[6] event log  KEYS[7] stats hash  KEYS[8] retention stream
-- KEYS[9] dead-letter stream
-- ARGV[1] holder (the caller's process id)  ARGV[2] lease ms: how long the duties stay the
--   holder's without another call (a holder that dies is replaced once it passes); 0 hands them
--   back when the caller holds them (a process that stops), so the next caller takes them
-- ARGV[3] budget: the most jobs this call looks at, over all duties  ARGV[4] consumer group
-- ARGV[5] job key prefix  ARGV[6] '1' to recover dead workers' jobs and idle deliveries ('0'
--   while the caller saw Redis out of reach or refusing writes lately: a live worker's beat and
--   renewals failed through it too, and must get in before it is judged)  ARGV[7] '1' when XACKDEL
-- The settings are the config hash's, with the defaults here the one source for every language:
-- `lease_ms` (30 s), `max_attempts` (5), `retention_ms` (24 h), `dead_retention_ms` (24 h).
-- The lease hash holds `holder`, and when the paced duties are next due (`idle_at`: idle
-- deliveries, every half lease; `limits_at`: time limits, every second; `dead_at`: dead letters'
-- trim, every minute; `sample_at`: the depth sample, every 30 s; `fleet_at`: the fleet summary,
-- `fleet_lacks` in the config hash (lib/fleet.lua), every 10 s), and where a walk over the
-- streams that the budget cut short goes on (`idle_cursor`, `limits_cursor`); it expires with
-- the lease.
-- Stats and events: those of hero_promote, hero_recover, hero_stop (time limits) and
-- hero_expire, per job moved.
-- Returns: {held (1 when the caller holds the duties), holder, promoted, recovered, dead,
--   timed_out, expired, more (1 when the budget ran out: call again now), fired (recurring
--   jobs' ticks whose job was submitted), skipped (ticks missed under the skip policy)}
-- Errors: none of its own.

-- What hero_duties does, one table so the library stays within Lua's count of locals.
local duty = {}

-- Due delayed jobs and retries into their streams, through hero_promote.
function duty.promote(d, now_ms)
  local due = redis.call('ZRANGEBYSCORE', d.keys[2], '-inf', now_ms, 'LIMIT', 0, d.budget)
  for _, id in ipairs(due) do
    d.budget = d.budget - 1
    if #id > 128 or not string.match(id, '^[%w_%-%.]+$') then
      redis.call('ZREM', d.keys[2], id)
    else
      local job_key = d.prefix .. id
      local ok, f = pcall(redis.call, 'HMGET', job_key, 'script_type', 'group', 'instance', 'priority')
      local stream = ok and work_stream_of(d.ns, f)
      local why = ''
      if not ok then
        why = 'invalid job: its record could not be read'
      elseif not stream then
        why = 'invalid job: no valid script_type to dispatch it to'
      end
      local r = hero_promote({ d.keys[2], job_key, stream or d.keys[5], d.keys[4], d.keys[5], d.keys[6],
        d.keys[7], reply_prefix_of(d.ns) .. id, d.keys[8] }, { id, d.group, d.now_iso, why })
      if r == 'promoted' then d.out[3] = d.out[3] + 1 end
    end
  end
  return #due
end

-- Every stream a job may be delivered from: the registered ones and the paused ones.
function duty.streams(d)
  if not d.all then
    d.all = redis.call('SMEMBERS', d.keys[4])
    for _, s in ipairs(redis.call('SMEMBERS', paused_key(d.keys[4]))) do d.all[#d.all + 1] = s end
  end
  return d.all
end

-- One hero_recover call on `stream`, its counts added to the answer; the next cursor.
function duty.recover(d, stream, mode, consumer, min_idle, cursor)
  local r = hero_recover({ stream, d.keys[9], d.keys[5], d.keys[8], d.keys[6], d.keys[7] },
    { d.group, mode, consumer, tostring(min_idle), tostring(math.max(d.budget, 1)), d.prefix,
      reply_prefix_of(d.ns), tostring(setting(d.cfg, 'max_attempts', 5)), cursor, '0', d.now_iso,
      d.xackdel })
  d.out[4], d.out[5] = d.out[4] + r[1], d.out[5] + r[2]
  d.budget = d.budget - (r[1] + r[2] + r[3])
  return r[4]
end

-- The deliveries of workers whose liveness deadline passed, back into their streams; each such
-- worker leaves the liveness set once it holds nothing.
function duty.presence(d, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', d.keys[3], '-inf', now_ms, 'LIMIT', 0, 10)
  for _, consumer in ipairs(dead) do
    local whole = true
    for _, stream in ipairs(duty.streams(d)) do
      if d.budget <= 0 then whole = false break end
      if duty.recover(d, stream, 'consumer', consumer, 0, '0-0') ~= '0-0' then whole = false end
    end
    if not whole then return end
    redis.call('ZREM', d.keys[3], consumer)
  end
end

-- A paced walk over every stream (sorted, so the order holds between calls), `step(d, stream,
-- cursor)` answering where it stopped ('0-0' when through that stream). A walk the budget cut
-- short keeps its place in the lease hash (`<name>_cursor`: stream, then cursor) and goes on
-- from there at the next call; true once it went through every stream.
function duty.walk(d, name, step)
  local streams = duty.streams(d)
  table.sort(streams)
  local field = name .. '_cursor'
  local at = redis.call('HGET', d.keys[1], field)
  local from_stream, from_cursor = '', '0-0'
  if at then from_stream, from_cursor = string.match(at, '^(.*)|([^|]*)$') end
  for _, stream in ipairs(streams) do
    if stream >= (from_stream or '') then
      if d.budget <= 0 then
        redis.call('HSET', d.keys[1], field, stream .. '|0-0')
        return false
      end
      local cursor = '0-0'
      if stream == from_stream then cursor = from_cursor or '0-0' end
      local next_cursor = step(d, stream, cursor)
      if next_cursor ~= '0-0' then
        redis.call('HSET', d.keys[1], field, stream .. '|' .. next_cursor)
        return false
      end
    end
  end
  redis.call('HDEL', d.keys[1], field)
  return true
end

-- Deliveries idle past their queue's lease, claimed and put back (hero_recover 'idle').
function duty.idle_step(d, stream, cursor)
  local own = setting(d.cfg, 'lease_ms', 30000)
  local p = setting(d.cfg, 'policed', 0) > 0 and stream_policy(d.keys[5], stream, d.memo)
  if p and tonumber(p.lease_ms) then own = tonumber(p.lease_ms) end
  local next_cursor = duty.recover(d, stream, 'idle', 'hero-broker-reclaim', own, cursor)
  if next_cursor == '0-0' then duty.sweep(d, stream, own) end
  return next_cursor
end

-- Deletes the consumers of `stream` that hold nothing, were idle a lease or longer and are in
-- no worker's liveness entry: what a worker killed with a read in flight leaves behind (the
-- read reached Redis after its consumer was recovered and made it again), which nothing else
-- deletes. A live worker's is in the liveness set, or made again by its next read.
function duty.sweep(d, stream, min_idle)
  local info = redis.pcall('XINFO', 'CONSUMERS', stream, d.group)
  if type(info) ~= 'table' or info.err then return end
  for _, c in ipairs(info) do
    local f = {}
    for k = 1, #c, 2 do f[c[k]] = c[k + 1] end
    if f.pending == 0 and (tonumber(f.idle) or 0) >= min_idle and not is_bridge_consumer(f.name)
      and not redis.call('ZSCORE', d.keys[3], f.name) then
      redis.call('XGROUP', 'DELCONSUMER', stream, d.group, f.name)
    end
  end
end

-- The control list of the worker `worker_id` (`<group>:<instance>:<session>`) for a job of
-- `script_type` (Keyspace::ctl_of_worker), or the config hash when it names none of ours.
function duty.control(d, script_type, worker_id)
  local g, i = string.match(worker_id or '', '^([^:]+):([^:]+):[^:]+$')
  if not (name_ok(g) and name_ok(i) and name_ok(script_type)) then return d.keys[5], '' end
  return d.ns .. 'q:ctl:type:' .. script_type .. ':group:' .. g .. ':inst:' .. i, worker_id
end

-- Running jobs past their time limit (their own `timeout` s, else their queue policy's, else
-- 300 s) plus a grace of 2 s for the worker to end them itself, ended by hero_stop 'timeout'.
-- A walk of a stream ends at the newest delivery pending when it began (XPENDING's summary):
-- a group delivers in id order, so a later delivery has a later id and waits for the next pass,
-- a second on. Open-ended, a walk under load chased the new deliveries call after call, 100 rows
-- a call, without end (a quarter of Redis's time at 50,000 jobs/s). The cursor carries the end:
-- `<last walked> <end>`.
function duty.limits_step(d, stream, cursor)
  local from, last = '-', nil
  if cursor ~= '0-0' then
    local c, e = string.match(cursor, '^(%S+) (%S+)$')
    from, last = '(' .. (c or cursor), e
  end
  if not last then
    local s = redis.pcall('XPENDING', stream, d.group)
    if type(s) ~= 'table' or s.err or not s[3] then return '0-0' end
    last = s[3]
  end
  local asked = math.max(d.budget, 1)
  local rows = redis.pcall('XPENDING', stream, d.group, from, last, asked)
  if type(rows) ~= 'table' or rows.err then return '0-0' end
  for _, row in ipairs(rows) do
    d.budget = d.budget - 1
    local e = not is_bridge_consumer(row[2]) and redis.call('XRANGE', stream, row[1], row[1])[1]
    local job_id = e and entry_fields(e[2])
    if job_id and job_id ~= '' then
      local job_key = d.prefix .. job_id
      local ok, f = pcall(redis.call, 'HMGET', job_key, 'status', 'lease', 'started_at', 'timeout',
        'script_type', 'worker_id')
      local started = ok and f[1] == 'started' and f[2] == row[1] and iso_ms(f[3])
      if started then
        local limit = tonumber(f[4]) and tonumber(f[4]) * 1000
        if not limit then
          local p = setting(d.cfg, 'policed', 0) > 0 and stream_policy(d.keys[5], stream, d.memo)
          limit = (p and tonumber(p.timeout_ms)) or 300000
        end
        if started + limit + 2000 <= d.now_ms then
          local ctl, seen = duty.control(d, f[5], f[6])
          local r = hero_stop({ job_key, stream, d.keys[2], reply_prefix_of(d.ns) .. job_id, d.keys[5], ctl,
            d.keys[8], d.keys[6], d.keys[7] }, { d.group, seen, d.now_iso, d.xackdel, job_id, 'timeout' })
          if r == 'timeout' then d.out[6] = d.out[6] + 1 end
        end
      end
    end
  end
  if #rows >= asked then return rows[#rows][1] .. ' ' .. last end
  return '0-0'
end

-- Each queue's depth now into the minute's stats hash (`<stream>|waiting`), as hero_counts
-- counts it: the dashboard charts the last hour from these. O(queues), every 30 s.
function duty.sample(d)
  local c = hero_counts({ d.keys[4], paused_key(d.keys[4]), d.keys[7] }, { d.group, '*' })
  if #c == 0 then return end
  local key = minute_key(d.keys[7], d.now_iso)
  local fields = {}
  for i = 1, #c, 9 do
    fields[#fields + 1] = c[i] .. '|waiting'
    fields[#fields + 1] = c[i + 1]
  end
  for i = 1, #fields, 1000 do
    redis.call('HSET', key, unpack(fields, i, math.min(#fields, i + 999)))
  end
  redis.call('EXPIRE', key, 7200, 'NX')
end

local function hero_duties(keys, args)
  local lease_key, holder, lease_ms = keys[1], args[1], tonumber(args[2])
  local now_ms = server_ms()
  local current = redis.call('HGET', lease_key, 'holder')
  if current and current ~= holder then return { 0, current, 0, 0, 0, 0, 0, 0 } end
  if lease_ms <= 0 then
    -- handed back (the holder stops): the next caller takes them at once
    if current then redis.call('DEL', lease_key) end
    return { 0, '', 0, 0, 0, 0, 0, 0 }
  end
  redis.call('HSET', lease_key, 'holder', holder)
  redis.call('PEXPIRE', lease_key, lease_ms)
  local d = { keys = keys, budget = tonumber(args[3]), group = args[4], prefix = args[5],
    xackdel = args[7], cfg = settings(keys[5]), now_ms = now_ms, now_iso = iso_of(now_ms), memo = {},
    out = { 1, holder, 0, 0, 0, 0, 0, 0, 0, 0 } }
  d.ns = ns_of(d.prefix, '')
  local paced = redis.call('HMGET', lease_key, 'idle_at', 'limits_at', 'dead_at', 'sample_at', 'fleet_at')
  duty.promote(d, now_ms)
  if d.budget > 0 then d.out[9], d.out[10] = cron.pass(d) end
  if args[6] == '1' and d.budget > 0 then
    duty.presence(d, now_ms)
    if d.budget > 0 and (tonumber(paced[1]) or 0) <= now_ms and duty.walk(d, 'idle', duty.idle_step) then
      redis.call('HSET', lease_key, 'idle_at', now_ms + math.floor(setting(d.cfg, 'lease_ms', 30000) / 2))
    end
  end
  if d.budget > 0 and (tonumber(paced[2]) or 0) <= now_ms and duty.walk(d, 'limits', duty.limits_step) then
    redis.call('HSET', lease_key, 'limits_at', now_ms + 1000)
  end
  if d.budget > 0 then
    local retention = setting(d.cfg, 'retention_ms', 86400000)
    local dead_keep = setting(d.cfg, 'dead_retention_ms', 86400000)
    local r = hero_expire({ keys[8] }, { d.prefix, tostring(retention), '20', tostring(dead_keep) })
    d.out[7] = r[2]
    d.budget = d.budget - r[2]
    if r[3] == 1 then d.budget = 0 end
    if (tonumber(paced[3]) or 0) <= now_ms then
      redis.call('XTRIM', keys[9], 'MINID', tostring(math.max(now_ms - dead_keep, 0)) .. '-0')
      redis.call('HSET', lease_key, 'dead_at', now_ms + 60000)
    end
  end
  if (tonumber(paced[4]) or 0) <= now_ms then
    duty.sample(d)
    redis.call('HSET', lease_key, 'sample_at', now_ms + 30000)
  end
  if (tonumber(paced[5]) or 0) <= now_ms then
    fleet_view.publish(d)
    redis.call('HSET', lease_key, 'fleet_at', now_ms + 10000)
  end
  if d.budget <= 0 then d.out[8] = 1 end
  return d.out
end

-- hero_cron_next: the next ticks of a schedule, computed by the one cron engine every process
-- reaches (lib/cron_engine.lua), so Rust, Python and Node check a schedule and show its ticks
-- with the same answer hero_duties fires by.
-- KEYS: none.
-- ARGV[1] schedule (a cron expression of 5, 6 (seconds first) or 7 (a year last) fields,
--   `@hourly` and the like, or
--   `every <duration>`)  ARGV[2] time zone (an IANA name; '' is UTC)  ARGV[3] after (ms since
--   the epoch)  ARGV[4] how many ticks (1-100)
-- Returns: the ticks strictly after `after`, ms since the epoch, in order (fewer when the
-- schedule has no more).
-- Errors: HERO_INVALID_CRON <what is wrong and what to give> for a schedule or zone the engine
-- does not take; HERO_BAD_ARG for an `after` or count that is not a number.
local function hero_cron_next(keys, args)
  local after, n = tonumber(args[3]), tonumber(args[4])
  if not after or not n or n < 1 or n > 100 then
    return redis.error_reply('HERO_BAD_ARG after must be ms since the epoch and the count 1-100')
  end
  local sched, err = cron_engine.parse(args[1], args[2] ~= '' and args[2] or 'UTC')
  if not sched then return redis.error_reply('HERO_INVALID_CRON ' .. err) end
  local out = {}
  for _ = 1, n do
    local t = cron_engine.next_after(sched, after)
    if not t then break end
    out[#out + 1] = t
    after = t
  end
  return out
end

-- hero_clean: delete ended jobs older than a grace period (BullMQ's `queue.clean(grace, limit,
-- 'completed' | 'failed')`), oldest first, bounded per call. Ended jobs are named, in the order
-- they ended, by the retention stream, so the walk reads only ended jobs, never every job.
-- KEYS[1] retention stream
-- ARGV[1] job key prefix  ARGV[2] grace ms: only jobs that ended at least this long ago (on
--   Redis's clock)  ARGV[3] status: 'finished', 'error' (failed or timed out) or '' for both
-- ARGV[4] queue name (`<type>[/<group>[/<instance>]]`, covering what it names at any priority;
--   '' for every queue)  ARGV[5] the most jobs to delete  ARGV[6] cursor: the retention entry to
--   go on after ('' from the oldest; '=<entry>' from that entry itself, when a call stopped
--   inside it)
-- Each job goes as hero_remove deletes one (its tag index entries, its uniqueness key); its
-- retention entry stays, for hero_expire to trim (it skips a job that is gone).
-- Returns: {the next cursor ('' when the walk reached jobs younger than the grace, or the end),
--   the deleted job ids...}. A call reads at most 1,000 retention entries.
-- Errors: HERO_BAD_ARG for a grace, limit or status that is not one.
local function hero_clean(keys, args)
  local prefix, grace, status, queue = args[1], tonumber(args[2]), args[3], args[4]
  local limit, cursor = tonumber(args[5]), args[6]
  if not grace or grace < 0 or not limit or limit < 1 then
    return redis.error_reply('HERO_BAD_ARG grace must be ms (0 or more) and limit 1 or more')
  end
  if status ~= '' and status ~= 'finished' and status ~= 'error' then
    return redis.error_reply('HERO_BAD_ARG status must be finished, error or empty')
  end
  local before = server_ms() - grace
  local from = '-'
  if string.sub(cursor, 1, 1) == '=' then
    from = string.sub(cursor, 2)
  elseif cursor ~= '' then
    from = '(' .. cursor
  end
  local out = { '' }
  local read = 0
  while read < 1000 do
    local entries = redis.call('XRANGE', keys[1], from, '+', 'COUNT', 100)
    if #entries == 0 then
      out[1] = ''
      return out
    end
    for _, e in ipairs(entries) do
      read = read + 1
      if (tonumber(string.match(e[1], '^(%d+)')) or 0) > before then
        out[1] = ''
        return out
      end
      for id in string.gmatch(entry_fields(e[2]) or '', '%S+') do
        local job_key = prefix .. id
        local r = redis.pcall('HMGET', job_key, 'status', 'finished_at', 'script_type', 'group', 'instance')
        if type(r) == 'table' and not r.err and (r[1] == 'finished' or r[1] == 'error')
          and (status == '' or r[1] == status) and (iso_ms(r[2]) or 0) <= before
          and (queue == '' or covers(queue, { type = r[3], group = r[4] or false, instance = r[5] or false })) then
          if hero_remove({ job_key }, { id }) == 'removed' then out[#out + 1] = id end
          -- an entry names several jobs: stop at the limit inside it, and go on from it next
          -- call (the ones deleted are gone then, so none is answered twice)
          if #out - 1 >= limit then
            out[1] = '=' .. e[1]
            return out
          end
        end
      end
      -- the cursor names the last entry looked at whole: the next call goes on after it
      out[1] = e[1]
      from = '(' .. e[1]
      if #out - 1 >= limit then return out end
    end
  end
  return out
end

-- hero_drain: delete a queue's waiting jobs (BullMQ's `queue.drain(delayed)`), bounded per call:
-- the entries of its streams not yet delivered, the jobs in a fair queue's gate and, when asked,
-- its delayed jobs; running jobs are left alone. With `remove` (BullMQ's `obliterate`, once
-- nothing of the queue runs or ended jobs were cleaned by the caller), a stream left with no
-- entry and nothing pending is deleted and the queue's names leave the registry, the paused
-- sets and the held keys (its policy is the caller's to clear, through hero_policy).
-- KEYS[1] queue registry set  KEYS[2] delayed zset  KEYS[3] config hash  KEYS[4] stats hash
-- ARGV[1] consumer group  ARGV[2] job key prefix  ARGV[3] queue name (`<type>[/<group>[/
--   <instance>]]`, covering what it names at any priority)  ARGV[4] '1' to drain its delayed
--   jobs too  ARGV[5] budget: the most jobs deleted  ARGV[6] '1' to remove the queue once empty
-- ARGV[7] where the walk over the delayed set (every queue's, ZSCAN) goes on ('0' at first)
-- A waiting job goes whole (record, tag index entries, uniqueness key: forget_job).
-- Stats: the stream's `delayed` gauge down per delayed job, `fair` per gated one.
-- Returns: {deleted, more (1: call again), running (jobs of the queue delivered, not yet
--   acknowledged: what keeps `remove` from deleting a stream), the delayed set's cursor for the
--   next call ('0' when through it)}. A call reads at most 2,000 members of the delayed set.
-- Errors: HERO_BAD_ARG for a queue name that is no name, or a budget below 1.
local function hero_drain(keys, args)
  local registry, delayed, config = keys[1], keys[2], keys[3]
  local group, prefix, name, budget = args[1], args[2], args[3], tonumber(args[5])
  if not budget or budget < 1 or not name_ok(string.match(name, '^([^/]+)')) then
    return redis.error_reply('HERO_BAD_ARG drain takes a queue name <type>[/<group>[/<instance>]] and a budget of 1 or more')
  end
  local st = stats(keys[4])
  local deleted, running, more = 0, 0, 0
  local function forget(id)
    local r = redis.call('HMGET', prefix .. id, 'status', 'tags', 'unique')
    if r[1] == 'dispatched' or r[1] == 'waiting' then
      forget_job(prefix .. id, id, r[2], r[3])
      deleted = deleted + 1
    end
  end
  for _, s in ipairs(redis.call('SUNION', registry, paused_key(registry))) do
    local sp = stream_parts(s)
    if sp and covers(name, sp) then
      local last = nil
      local info = redis.pcall('XINFO', 'GROUPS', s)
      if type(info) == 'table' and not info.err then
        for _, g in ipairs(info) do
          local f = {}
          for k = 1, #g, 2 do f[g[k]] = g[k + 1] end
          if f.name == group then
            last = f['last-delivered-id']
            running = running + (tonumber(f.pending) or 0)
          end
        end
      end
      -- undelivered entries: after the group's last delivered one
      local from = '-'
      if last and last ~= '0-0' then from = '(' .. last end
      local left = budget - deleted
      if left <= 0 then more = 1 break end
      local entries = redis.call('XRANGE', s, from, '+', 'COUNT', left)
      for _, e in ipairs(entries) do
        local id, _, _, wake = entry_fields(e[2])
        if id ~= '' and not wake then forget(id) end
        redis.call('XDEL', s, e[1])
      end
      if #entries >= left then more = 1 end
      -- a fair queue's gate: its lanes, then its ring
      local ring = fair_ring_of(s)
      for _, key in ipairs(redis.call('LRANGE', ring, 0, -1)) do
        if budget - deleted <= 0 then more = 1 break end
        local lane = fair_lane_of(s, key)
        local items = redis.call('LPOP', lane, budget - deleted) or {}
        for _, item in ipairs(items) do
          local id = string.match(item, '^(%S+)')
          if id then forget(id) end
        end
        if #items > 0 then tally(st, s, 'fair', -#items) end
        if redis.call('LLEN', lane) == 0 then redis.call('LREM', ring, 0, key) else more = 1 end
      end
      if args[6] == '1' and more == 0 and redis.call('XLEN', s) == 0 and running == 0 then
        redis.call('DEL', s)
        redis.call('SREM', registry, s)
        redis.call('SREM', paused_key(registry), s)
        announce(registry, s)
      end
    end
  end
  local cursor = args[7] or '0'
  if args[4] == '1' or args[6] == '1' then
    -- the delayed set holds every queue's: pages of it, each record asked its queue
    local scanned = 0
    repeat
      if budget - deleted <= 0 or scanned >= 2000 then more = 1 break end
      local page = redis.call('ZSCAN', delayed, cursor, 'COUNT', 200)
      cursor = page[1]
      for k = 1, #page[2], 2 do
        local id = page[2][k]
        scanned = scanned + 1
        local r = redis.call('HMGET', prefix .. id, 'script_type', 'group', 'instance', 'priority')
        if covers(name, { type = r[1], group = r[2] or false, instance = r[3] or false }) then
          redis.call('ZREM', delayed, id)
          local s = work_stream_of(ns_of(prefix, ''), r)
          if s then tally(st, s, 'delayed', -1) end
          forget(id)
        end
      end
    until cursor == '0'
  end
  if args[6] == '1' and more == 0 and running == 0 then
    redis.call('SREM', paused_names_key(registry), name)
    local held = meta_key(config, 'held')
    for _, m in ipairs(redis.call('SMEMBERS', held)) do
      if string.sub(m, 1, #name + 1) == name .. '|' then redis.call('SREM', held, m) end
    end
  end
  flush_stats(st)
  return { deleted, more, running, cursor }
end

-- hero_list: one bounded page of a queue's jobs in one state, the one listing Python's and
-- Node's `getJobs`/`getFailed`/`get_jobs` call (BullMQ's names), so every language answers the
-- same jobs in the same order. Each state is read from where such jobs are named, never from a
-- scan of every key:
--   'finished', 'error': the retention stream, newest end first (a job ended twice is named by
--     the call once it reads both entries: the newer)
--   'delayed': the delayed set, soonest first (retries and run-at jobs)
--   'waiting', 'running': the entries of the work streams (registered and paused), stream after
--     stream in name order: the jobs whose record is `dispatched` (queued, not taken) or
--     `started`; for 'waiting', then each stream's fair gate (gate.lua): its lanes, the ring's
--     keys in ring order and then the held keys', each lane first in, first out
-- and kept when the job's record has that status and its queue is covered by ARGV[3].
-- KEYS[1] retention stream  KEYS[2] delayed zset  KEYS[3] queue registry set
-- ARGV[1] job key prefix  ARGV[2] state (above)  ARGV[3] queue name (`<type>[/<group>[/
--   <instance>]]`; '' for every queue)  ARGV[4] cursor ('' from the start, else the `next` a
--   call answered)  ARGV[5] the most jobs to answer (1-1000)
-- Returns: {next cursor ('' when the listing is at its end), the job ids...}. A call reads at
--   most 1,000 candidates: a page may come back short, even empty, with a cursor to go on
--   with; the callers read on until they hold their limit or the cursor is ''.
-- Errors: HERO_BAD_ARG for a state, limit or cursor that is not one.
local LIST_READ = 1000

local function hero_list(keys, args)
  local prefix, state, queue, cursor, limit = args[1], args[2], args[3], args[4], tonumber(args[5])
  if not limit or limit < 1 or limit > 1000 then
    return redis.error_reply('HERO_BAD_ARG limit must be 1-1000')
  end
  local want = ({ finished = 'finished', error = 'error', delayed = 'waiting', waiting = 'dispatched',
    running = 'started' })[state]
  if not want then
    return redis.error_reply('HERO_BAD_ARG state must be finished, error, delayed, waiting or running')
  end
  local out, read, seen = { '' }, 0, {}
  -- whether job `id` is in the state asked and in the queue; an answer when it is
  local function take(id)
    if seen[id] then return false end
    seen[id] = true
    local r = redis.pcall('HMGET', prefix .. id, 'status', 'script_type', 'group', 'instance')
    if type(r) == 'table' and not r.err and r[1] == want
      and (queue == '' or covers(queue, { type = r[2], group = r[3] or false, instance = r[4] or false })) then
      out[#out + 1] = id
    end
    return #out - 1 >= limit
  end

  if state == 'finished' or state == 'error' then
    -- cursor: the entry to go on before (exclusive), or `<entry>#<k>`: that entry from its k-th id
    local from, skip = '+', 0
    if cursor ~= '' then
      local e, k = string.match(cursor, '^(%d+%-%d+)#(%d+)$')
      if e then from, skip = e, tonumber(k) else from = '(' .. cursor end
      if not string.match(from, '%d+%-%d+$') then return redis.error_reply('HERO_BAD_ARG cursor ' .. cursor) end
    end
    while read < LIST_READ do
      local entries = redis.call('XREVRANGE', keys[1], from, '-', 'COUNT', 100)
      for _, e in ipairs(entries) do
        local k = 0
        for id in string.gmatch(entry_fields(e[2]) or '', '%S+') do
          k = k + 1
          if k > skip then
            read = read + 1
            if take(id) then
              out[1] = e[1] .. '#' .. k
              return out
            end
          end
        end
        skip = 0
        out[1] = e[1]
        from = '(' .. e[1]
        if read >= LIST_READ then return out end
      end
      if #entries < 100 then
        out[1] = ''
        return out
      end
    end
    return out
  end

  if state == 'delayed' then
    -- cursor: the rank to go on from
    local at = 0
    if cursor ~= '' then
      at = tonumber(cursor)
      if not at or at < 0 then return redis.error_reply('HERO_BAD_ARG cursor ' .. cursor) end
    end
    while read < LIST_READ do
      local ids = redis.call('ZRANGE', keys[2], at, at + 99)
      if #ids == 0 then
        out[1] = ''
        return out
      end
      for _, id in ipairs(ids) do
        at, read = at + 1, read + 1
        if take(id) then break end
      end
      out[1] = tostring(at)
      if #out - 1 >= limit then return out end
    end
    return out
  end

  -- waiting, running: cursor `<stream index>:<entry>` (exclusive), or `<stream index>:g<lane>:
  -- <item>`, that stream's gate from its lane-th lane (from 0), item-th job (from 0)
  local streams = redis.call('SUNION', keys[3], paused_key(keys[3]))
  table.sort(streams)
  local at, after, lane, item = 1, nil, nil, 0
  if cursor ~= '' then
    local i, e = string.match(cursor, '^(%d+):(%d+%-%d+)$')
    if i then
      at, after = tonumber(i), e
    else
      local g, l, k = string.match(cursor, '^(%d+):g(%d+):(%d+)$')
      if not g or state ~= 'waiting' then return redis.error_reply('HERO_BAD_ARG cursor ' .. cursor) end
      at, lane, item = tonumber(g), tonumber(l), tonumber(k)
    end
  end
  while at <= #streams and read < LIST_READ do
    local stream = streams[at]
    local p = stream_parts(stream)
    if not p or (queue ~= '' and not covers(queue, p)) then
      at, after, lane = at + 1, nil, nil
      out[1] = at .. ':0-0'
    elseif not lane then
      local from = after and ('(' .. after) or '-'
      local entries = redis.call('XRANGE', stream, from, '+', 'COUNT', 100)
      for _, e in ipairs(entries) do
        read = read + 1
        local id = entry_fields(e[2])
        if id and id ~= '' and take(id) then
          out[1] = at .. ':' .. e[1]
          return out
        end
      end
      if #entries == 100 then
        after = entries[#entries][1]
        out[1] = at .. ':' .. after
      elseif state == 'waiting' then
        lane, item = 0, 0
        out[1] = at .. ':g0:0'
      else
        at, after = at + 1, nil
        out[1] = at .. ':0-0'
      end
    else
      -- the gate's lanes from the lane-th: the ring's keys, read a window of 100 at a time (a
      -- ring may hold every customer's key), then the keys held under a name covering the
      -- stream (out of the ring until resumed), sorted so a cursor names the same lane again;
      -- each lane looked at counts as a candidate read, so empty lanes bound a call too
      local ring = fair_ring_of(stream)
      local ring_len, held_keys, window, window_at = redis.call('LLEN', ring), nil, {}, 0
      local function lane_key(k)
        if k < ring_len then
          if k < window_at or k >= window_at + #window then
            window, window_at = redis.call('LRANGE', ring, k, k + 99), k
          end
          return window[k - window_at + 1]
        end
        if not held_keys then
          held_keys = {}
          local names, ns = names_of(stream)
          for _, m in ipairs(#names > 0 and redis.call('SMEMBERS', ns .. ':meta:held') or {}) do
            local q, key = string.match(m, '^([^|]*)|(.*)$')
            for _, name in ipairs(names) do
              if q == name then held_keys[#held_keys + 1] = key end
            end
          end
          table.sort(held_keys)
        end
        return held_keys[k - ring_len + 1]
      end
      local key = lane_key(lane)
      while key and read < LIST_READ do
        read = read + 1
        local items = redis.call('LRANGE', fair_lane_of(stream, key), item, item + 99)
        for _, it in ipairs(items) do
          item, read = item + 1, read + 1
          if take(string.match(it, '^(%S+)') or '') then
            out[1] = at .. ':g' .. lane .. ':' .. item
            return out
          end
        end
        if #items < 100 then
          lane, item = lane + 1, 0
          key = lane_key(lane)
        end
        out[1] = at .. ':g' .. lane .. ':' .. item
      end
      if not key then
        at, after, lane = at + 1, nil, nil
        out[1] = at .. ':0-0'
      end
    end
  end
  if at > #streams then out[1] = '' end
  return out
end

-- hero_keys: one page of a fair queue's limit keys on this shard, the one reading behind
-- `hero queues --keys`, the API, the dashboard, Python's `Queue.keys` and Node's `getKeys`:
-- the keys are counted by each gate's ring length (one LLEN a stream, never a read of every
-- key), and the jobs waiting are read for at most a bounded count of keys (one LLEN a key),
-- from an index into the keys in ring order (streams in name order, each ring then the paused
-- keys).
-- KEYS[1] queue registry set (its paused set beside it)  KEYS[2] held-keys set
-- ARGV[1] queue name (`<type>[/<group>[/<instance>]]`)  ARGV[2] from: the index of the first
--   key to read (0 at first)  ARGV[3] the most keys to read (0-1000; 0 counts only)
-- Returns: {total (keys in the rings, plus the paused keys once per stream), read (keys read),
--   {the paused keys under or over the queue, `<queue name>|<key>`, sorted},
--   {key, waiting, key, waiting, ...} (the keys read with jobs waiting, summed over streams)}
-- Errors: HERO_BAD_ARG for a queue name, start or count that is not one.

-- Whether queue name `name` is `queue` or under it.
local function name_under(name, queue)
  return name == queue or string.sub(name, 1, #queue + 1) == queue .. '/'
end

local function hero_keys(keys, args)
  local queue, from, page = args[1], tonumber(args[2]), tonumber(args[3])
  if #queue > 200 or not string.match(queue, '^[%w_%-]+[%w_%-/]*$') or not from or from < 0 or not page or page < 0 or page > 1000 then
    return redis.error_reply('HERO_BAD_ARG give a queue name, a start of 0 or more and a count of 0-1000')
  end
  local held_members, held_keys = {}, {}
  for _, m in ipairs(redis.call('SMEMBERS', keys[2])) do
    local q = string.match(m, '^([^|]*)|')
    if q and (name_under(q, queue) or name_under(queue, q)) then held_members[#held_members + 1] = m end
  end
  table.sort(held_members)
  for k, m in ipairs(held_members) do held_keys[k] = string.match(m, '^[^|]*|(.*)$') end
  local streams = redis.call('SUNION', keys[1], paused_key(keys[1]))
  table.sort(streams)
  local total, at, read, by_key, order = 0, 0, 0, {}, {}
  for _, stream in ipairs(streams) do
    local p = stream_parts(stream)
    if p and covers(queue, p) then
      local ring = stream .. ':fair'
      local ring_len = redis.call('LLEN', ring)
      local len = ring_len + #held_keys
      total = total + len
      local start = math.max(from, at)
      if page - read > 0 and start < at + len then
        local lo = start - at
        local hi = math.min(lo + page - read, len)
        local list = {}
        if lo < ring_len then list = redis.call('LRANGE', ring, lo, math.min(hi, ring_len) - 1) end
        for h = math.max(lo - ring_len, 0) + 1, hi - ring_len do list[#list + 1] = held_keys[h] end
        read = read + #list
        -- a key twice in one ring is one lane, counted once; a paused key's lane may be empty
        local seen = {}
        for _, key in ipairs(list) do
          if not seen[key] then
            seen[key] = true
            local n = redis.call('LLEN', ring .. ':' .. key)
            if n > 0 then
              if not by_key[key] then
                order[#order + 1] = key
                by_key[key] = 0
              end
              by_key[key] = by_key[key] + n
            end
          end
        end
      end
      at = at + len
    end
  end
  local waiting = {}
  for _, key in ipairs(order) do
    waiting[#waiting + 1] = key
    waiting[#waiting + 1] = by_key[key]
  end
  return { total, read, held_members, waiting }
end

redis.register_function{function_name='hero_v35_version', callback=hero_version, flags={'no-writes'}}
redis.register_function('hero_v35_submit', hero_submit)
redis.register_function{function_name='hero_v35_fetch', callback=hero_fetch, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_complete', callback=hero_complete, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_renew', callback=hero_renew, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_stop', callback=hero_stop, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_recover', callback=hero_recover, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_promote', callback=hero_promote, flags={'allow-oom'}}
redis.register_function('hero_v35_bridge_in', hero_bridge_in)
redis.register_function('hero_v35_bridge_out', hero_bridge_out)
redis.register_function('hero_v35_bridge_watch', hero_bridge_watch)
redis.register_function{function_name='hero_v35_expire', callback=hero_expire, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_dead', callback=hero_dead, flags={'allow-oom'}}
redis.register_function('hero_v35_requeue', hero_requeue)
redis.register_function('hero_v35_fix', hero_fix)
redis.register_function('hero_v35_pause', hero_pause)
redis.register_function('hero_v35_cron', hero_cron)
redis.register_function('hero_v35_batch', hero_batch)
redis.register_function('hero_v35_batch_ends', hero_batch_ends)
redis.register_function{function_name='hero_v35_counts', callback=hero_counts, flags={'no-writes'}}
redis.register_function{function_name='hero_v35_remove', callback=hero_remove, flags={'allow-oom'}}
redis.register_function('hero_v35_policy', hero_policy)
redis.register_function{function_name='hero_v35_beat', callback=hero_beat, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_duties', callback=hero_duties, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_cron_next', callback=hero_cron_next, flags={'no-writes'}}
redis.register_function{function_name='hero_v35_clean', callback=hero_clean, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_drain', callback=hero_drain, flags={'allow-oom'}}
redis.register_function{function_name='hero_v35_list', callback=hero_list, flags={'no-writes'}}
redis.register_function{function_name='hero_v35_keys', callback=hero_keys, flags={'no-writes'}}
