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
