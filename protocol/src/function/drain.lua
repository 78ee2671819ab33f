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
