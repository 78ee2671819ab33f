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
