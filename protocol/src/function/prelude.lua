-- hero function library: shared helpers used by the functions that follow.
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

-- The delayed set `<ns>:meta:delayed` (`Keyspace::delayed`), beside the config hash.
local function delayed_key_of(config_key)
  return meta_key(config_key, 'delayed')
end

-- Whether a consumer is the legacy bridge's (`keys::BRIDGE_CONSUMER_PREFIX`).
local function is_bridge_consumer(name)
  return string.sub(name, 1, 7) == 'bridge:'
end

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
    -- so the same length means the same length of sequence too); of different lengths they are
    -- told apart by number (stream_id_at_least), which is rare: a per-id parse cost a batch 7 k
    -- instructions a job. With nothing pending, the bound is past every delivered entry.
    local behind = nil
    if pending[1] > 0 then
      local nb = #bound
      for k = 1, #ids do
        local id = ids[k]
        if (#id == nb and id >= bound) or (#id ~= nb and stream_id_at_least(id, bound)) then
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
local function settings(config, prefetch)
  local cfg = { key = config }
  if prefetch then
    local r = redis.call('HMGET', config, unpack(prefetch))
    local raw = {}
    for k, f in ipairs(prefetch) do raw[f] = r[k] or false end
    cfg.raw = raw
  end
  return cfg
end

-- A field's text as the config hash holds it (nil when absent), prefetched or read now.
local function raw_setting(cfg, field)
  local raw = cfg.raw
  if raw and raw[field] ~= nil then return raw[field] or nil end
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
local function event_log(key, cfg)
  local max = setting_arg(cfg, 'events_max', 10000)
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

-- The shared entry of `ids` (a list of job ids of one stream and worker, with their `attempts`
-- when given): one entry for all but those whose id holds a space (a legacy id), which get one of
-- their own. The hot functions collect the lists inline as they go: calling a helper per job cost
-- Redis ~5 k instructions a job. Returns the id of the last entry written (see log_event).
local function log_shared(log, event, ids, queue, worker, attempts)
  if not log or #ids == 0 then return nil end
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
  local minute = nil
  if now_iso then minute = minute_key(key, now_iso) end
  return { key = key, at = minute, inc = {}, order = {}, minute = {}, morder = {} }
end

local function tally(st, stream, name, n, per_minute)
  local f = stream .. '|' .. name
  local v = st.inc[f]
  if v == nil then
    st.order[#st.order + 1] = f
    v = 0
  end
  st.inc[f] = v + n
  if per_minute then
    v = st.minute[f]
    if v == nil then
      st.morder[#st.morder + 1] = f
      v = 0
    end
    st.minute[f] = v + n
  end
end

local LN2 = 0.6931471805599453 -- ln 2 (math is not reachable while the library loads)

-- The histogram `name` (wait or run) of `stream` in this call: the callers add a sample of t ms
-- inline as `h[b] = (h[b] or 0) + 1`, b = floor(log2(t + 1)) (bucket b holds [2^b - 1, 2^(b+1) - 1)),
-- and t to `h.sum`.
local function histogram(st, stream, name)
  local h = { prefix = stream .. '|' .. name .. '|', sum = 0 }
  st.hists = st.hists or {}
  st.hists[#st.hists + 1] = h
  return h
end

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Redis's clock as ISO 8601 UTC with milliseconds, as the clients write it (for the rare call
-- that has no caller's time to use).
local function iso_now()
  local t = redis.call('TIME')
  local secs = tonumber(t[1])
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
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', y, m, d, math.floor(rem / 3600),
    math.floor(rem % 3600 / 60), rem % 60, math.floor(tonumber(t[2]) / 1000))
end

local function flush_stats(st)
  for _, f in ipairs(st.order) do
    redis.call('HINCRBY', st.key, f, st.inc[f])
  end
  if #st.morder > 0 and st.at then
    local fresh = false
    for _, f in ipairs(st.morder) do
      -- the field's first write this minute is the one whose total is its own increment: the
      -- key's TTL is set then, not on every call (a command a call at low rates)
      if redis.call('HINCRBY', st.at, f, st.minute[f]) == st.minute[f] then fresh = true end
    end
    if fresh then redis.call('EXPIRE', st.at, 7200) end
  end
  for _, h in ipairs(st.hists or {}) do
    for b, n in pairs(h) do
      if b ~= 'prefix' and n ~= 0 then redis.call('HINCRBY', st.key, h.prefix .. b, n) end
    end
  end
  st.inc, st.order, st.minute, st.morder, st.hists = {}, {}, {}, {}, nil
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

-- Append a job id to a work stream, creating the stream, its group and its registry entry on
-- first use (the registry names every work stream: the fetch and recovery read it). Returns the
-- new entry id. `known` (optional) is a per-call set of streams already seen, so a batch onto one
-- stream asks once, not once per job. A registered stream is taken to have its group: one that
-- was deleted or lost its group by hand gets it back at the next fetch (see hero_fetch), which
-- spares every submit an EXISTS. The entry tells the fetch what it would otherwise read from
-- the record: `attempts` (optional) is the count made so far, for a job queued again after a
-- delivery (field `a`), and `dual` marks a job also pushed to a legacy list (field `b`).
local function append(stream, group, registry, job_id, known, attempts, dual)
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
  if dual then
    if attempts then return redis.call('XADD', stream, '*', 'j', job_id, 'a', attempts, 'b', '1') end
    return redis.call('XADD', stream, '*', 'j', job_id, 'b', '1')
  end
  if attempts then return redis.call('XADD', stream, '*', 'j', job_id, 'a', attempts) end
  return redis.call('XADD', stream, '*', 'j', job_id)
end


-- Why the record of one submitted job is refused (nil when it is fine), then its uniqueness
-- key and TTL, its tags, its prerequisites (JSON text) and its batch when it has them: `args` from `from` to `to` are its field/value pairs, `stream`
-- its work stream; `parsed` caches stream_parts per stream for the call. Written out for the common case, a few fields of plain text: a table
-- or a string built per job here cost Redis several thousand instructions a job.
local function refuse(job_id, stream, args, from, to, parsed)
  local script, stype, grp, inst, prio = nil, nil, false, false, '5'
  local uniq, uttl, tags, prereqs, batch = nil, nil, nil, nil, nil
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
        local why = bad_value(kind, v)
        if why then return 'field `' .. name .. '` ' .. why end
      end
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
      elseif (name == 'prerequisites' or name == 'dependencies') and v ~= '' and v ~= '[]' then
        if prereqs then return 'fields `prerequisites` and `dependencies` are one list: give one' end
        prereqs = v
      end
    end
  end
  if not script then return 'field `script` is missing' end
  if not stype then return 'field `script_type` is missing' end
  if inst and not grp then return 'field `instance` needs a `group`' end
  local p = parsed[stream]
  if p == nil then
    p = stream_parts(stream)
    parsed[stream] = p
  end
  if not p or p.type ~= stype or p.group ~= grp or p.instance ~= inst or p.priority ~= prio then
    return 'its stream ' .. stream .. ' is not the queue its record names (type ' .. stype ..
      ', group ' .. tostring(grp) .. ', instance ' .. tostring(inst) .. ', priority ' .. prio .. ')'
  end
  if uttl and not uniq then return 'field `unique_ttl` needs a `unique` key' end
  if uttl == '0' or (uttl and string.match(uttl, '^0+$')) then
    return 'field `unique_ttl` is not at least 1 (ms)'
  end
  return nil, uniq, uttl, tags, prereqs, batch
end

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

-- Write a terminal status at finished_at = now_iso, and answer a waiting caller. finished_at is
-- the record's updated_at from then on (a reader takes the latest of the timestamps). `done`
-- registers the job for retention (see retained); nil when the caller names its jobs in a
-- retention entry itself. Returns false, having written nothing, when the job key holds another
-- type (foreign data): a caller that did not read the record first must not fail the rest of its
-- call on it.
local function finish(job_key, job_id, reply_key, cfg, status, text, wants_reply, now_iso, done)
  local field = 'error'
  if status == 'finished' then field = 'output' end
  local w = redis.pcall('HSET', job_key, 'status', status, field, text, 'finished_at', now_iso)
  if type(w) == 'table' and w.err then return false end
  if done then retain(done, job_key, job_id, cfg) end
  if wants_reply == '1' or wants_reply == 'legacy' then
    local output, err = '', ''
    if field == 'output' then output = text else err = text end
    push_reply(job_id, reply_key, cfg, status, output, err, wants_reply == '1', true)
  end
  return true
end

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
