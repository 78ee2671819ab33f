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
