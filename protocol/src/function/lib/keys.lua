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
