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
