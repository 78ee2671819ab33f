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
