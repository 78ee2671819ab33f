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
