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
