-- Queue policies, read by the functions only while some queue has a policy they apply (the
-- config hash's counters `policed`, `limited`, `rated`, `aged`), so a namespace without
-- policies pays nothing: a stream's policy (stream_policy), the retry back-off (backoff_ms), and
-- what the fetch enforces: concurrency limits (limit_running), rates and key rates (rate_room,
-- key_room), and priority aging (aging_order), all read by queue_policies.

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

-- The delay (ms) before the retry of failed attempt `attempt`: the longer of the job's own
-- back-off (`own`, the record's `backoff` JSON, or nil) and its queue policy's (the policy is a
-- floor, as its retries are); nil when neither sets one (the caller's time stands).
local function retry_delay(own, policy, attempt)
  local d = nil
  if own then
    local ok, b = pcall(cjson.decode, own)
    if ok and type(b) == 'table' then d = backoff_ms(b, attempt) end
  end
  if policy and type(policy.backoff) == 'table' then
    local p = backoff_ms(policy.backoff, attempt)
    if not d or p > d then d = p end
  end
  return d
end

-- The running count of limit `lim` ({key, max}), dropping the members no longer started when
-- it is full.
local function limit_running(lim, prefix)
  local n = redis.call('ZCARD', lim.key)
  if n >= lim.max then
    for _, id in ipairs(redis.call('ZRANGE', lim.key, 0, -1)) do
      local s = redis.pcall('HGET', prefix .. id, 'status')
      if s ~= 'started' then
        redis.call('ZREM', lim.key, id)
        n = n - 1
      end
    end
  end
  return n
end

-- The limits of `streams` (KEYS from 5 on) as the queue policies set them, for a fetch that
-- passed none (a worker of another language, or older than protocol 23): each stream's queue
-- is read from its key (`<ns>:q:work:type:<t>[:group:<g>...]`), and its group's policy, else its
-- type's, gives the limit. Only while some queue has one (`limited` in the config hash).
--
-- Rates, the same way: a queue whose policy sets `rate` ({max, per_ms}) starts at most `max` of
-- its jobs in any `per_ms` (a sliding window: the sorted set `<ns>:meta:rate:<queue>` of the
-- jobs started, by ms), whatever the worker; read while some queue has one (`rated`).
-- A queue's `key_rate` does the same per limit key (a job's `limit_key`): a job whose key has no
-- room is not started but parked in the delayed set until the window has room, its entry
-- acknowledged; the broker's promote queues it again then.
-- And the aging periods (ms, when `want_aging`: see aging_order).
-- Returns the limits (when `want_limits`), the rates, the key rates and the aging periods, by
-- stream index, or nil.
local function queue_policies(keys, want_limits, want_rates, want_aging)
  local limits, rates, keyrates, agings, by_queue, policies = nil, nil, nil, nil, {}, policy_key_of(keys[2])
  local function policy_of(queue)
    local p = by_queue[queue]
    if p == nil then
      local raw = redis.call('HGET', policies, queue)
      local ok, decoded = pcall(cjson.decode, raw or 'null')
      p = (ok and type(decoded) == 'table' and decoded) or false
      by_queue[queue] = p
    end
    return p
  end
  -- the policy that sets `field` for a stream: its group's, else its type's
  local function covering(t, g, field)
    if t and g then
      local p = policy_of(t .. '/' .. g)
      if p and p[field] then return t .. '/' .. g, p[field] end
    end
    if t then
      local p = policy_of(t)
      if p and p[field] then return t, p[field] end
    end
    return nil
  end
  local by_key = {}
  local function shared(key, make)
    local x = by_key[key]
    if not x then
      x = make()
      by_key[key] = x
    end
    return x
  end
  for i = 5, #keys do
    local t = string.match(keys[i], ':q:work:type:([^:]+)')
    local g = string.match(keys[i], ':group:([^:]+)')
    if want_limits then
      local queue, max = covering(t, g, 'concurrency')
      if queue and tonumber(max) then
        limits = limits or {}
        limits[i - 4] = shared(limit_key_of(keys[2], queue), function()
          return { key = limit_key_of(keys[2], queue), max = tonumber(max) }
        end)
      end
    end
    if want_rates then
      local queue, rate = covering(t, g, 'rate')
      if queue and type(rate) == 'table' and tonumber(rate.max) and tonumber(rate.per_ms) then
        rates = rates or {}
        rates[i - 4] = shared(rate_key_of(keys[2], queue), function()
          return { key = rate_key_of(keys[2], queue), max = tonumber(rate.max), per = tonumber(rate.per_ms) }
        end)
      end
      local kqueue, krate = covering(t, g, 'key_rate')
      if kqueue and type(krate) == 'table' and tonumber(krate.max) and tonumber(krate.per_ms) then
        keyrates = keyrates or {}
        keyrates[i - 4] = shared(rate_key_of(keys[2], kqueue) .. '|', function()
          return { prefix = rate_key_of(keys[2], kqueue) .. '|', max = tonumber(krate.max),
            per = tonumber(krate.per_ms), by_key = {} }
        end)
      end
    end
    if want_aging then
      local _, period = covering(t, g, 'aging_ms')
      if tonumber(period) and tonumber(period) > 0 then
        agings = agings or {}
        agings[i - 4] = tonumber(period)
      end
    end
  end
  return limits, rates, keyrates, agings
end

-- The age (ms) of the job a fair stream's gate serves next (its ring's head key's oldest), or
-- nil when the gate is empty (gate.lua): what priority aging reads for a fair stream, whose stream holds
-- only the jobs released.
local function gate_head_ms(stream)
  local key = redis.call('LINDEX', fair_ring_of(stream), 0)
  if not key then return nil end
  local item = redis.call('LINDEX', fair_lane_of(stream, key), 0)
  return item and tonumber(string.match(item, '^%S+ (%d+)'))
end

-- The order to walk the streams in when some have aged (nil: as given). A stream of level p > 0
-- with an aging period whose oldest undelivered entry (the one after its group's last
-- delivered) has waited k whole periods ranks as level max(0, p - k), ahead of the streams of
-- its tier really at that level; the rest keep their order. Costs two commands per registered
-- stream with a period, and only while some queue has one.
local function aging_order(keys, n, present, agings, group)
  local rank, moved, now = {}, false, nil
  for i = 1, n do
    local key = keys[i + 4]
    local tier = 3
    if string.find(key, ':inst:', 1, true) then tier = 1
    elseif string.find(key, ':group:', 1, true) then tier = 2 end
    local level = tonumber(string.match(key, ':prio:(%d)$')) or 5
    local at, aged = level, 1
    local period = agings[i]
    if period and present[i] == 1 and level > 0 then
      local last = nil
      local groups = redis.pcall('XINFO', 'GROUPS', key)
      if type(groups) == 'table' and not groups.err then
        for _, gi in ipairs(groups) do
          local name, delivered = nil, nil
          for k = 1, #gi, 2 do
            if gi[k] == 'name' then name = gi[k + 1]
            elseif gi[k] == 'last-delivered-id' then delivered = gi[k + 1] end
          end
          if name == group then last = delivered end
        end
      end
      if last then
        local head = redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', 1)
        -- a fair stream holds only what was released: its gate's next job ages it
        local born = head[1] and tonumber(string.match(head[1][1], '^(%d+)')) or gate_head_ms(key)
        if born then
          now = now or server_ms()
          local k = math.floor((now - born) / period)
          if k > 0 then
            at, aged, moved = math.max(0, level - k), 0, true
          end
        end
      end
    end
    rank[i] = { tier, at, aged, i }
  end
  if not moved then return nil end
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b)
    local x, y = rank[a], rank[b]
    for k = 1, 4 do
      if x[k] ~= y[k] then return x[k] < y[k] end
    end
    return false
  end)
  return order
end


-- How many more jobs rate `r` lets start now (its log trimmed to the window first).
local function rate_room(r, now)
  if not r.used then
    redis.call('ZREMRANGEBYSCORE', r.key, '-inf', now - r.per)
    r.used = redis.call('ZCARD', r.key)
  end
  return r.max - r.used
end

-- Whether limit key `lk` of key rate `kr` has room now; the rate log of each key is trimmed and
-- counted once per call.
local function key_room(kr, lk, now)
  local r = kr.by_key[lk]
  if not r then
    r = { key = kr.prefix .. lk, max = kr.max, per = kr.per }
    kr.by_key[lk] = r
  end
  return rate_room(r, now) > 0, r
end

-- How many entries a stream under limit `lim` and rate `rate` may be read for now: what the fetch still wants, within its
-- concurrency limit and its rate (0: held back, and f.limited says so).
local function room_of(f, lim, rate)
  local asked = f.want
  if lim then
    asked = math.min(asked, lim.max - lim.running)
    if asked <= 0 then
      f.limited = 1
      return 0
    end
  end
  if rate then
    f.now_ms = f.now_ms or server_ms()
    asked = math.min(asked, rate_room(rate, f.now_ms))
    if asked <= 0 then
      f.limited = 1
      return 0
    end
  end
  return asked
end

-- A job whose limit key has no room in this window: parked until the oldest start in it leaves,
-- as a delayed job (the broker's promote queues it again), not started.
-- Writes stats: `delayed`.
local function park(f, stream, id, job_id, before, keylog)
  ack_del(stream, f.group, id, f.xackdel)
  local job_key = f.prefix .. job_id
  local oldest = redis.call('ZRANGE', keylog.key, 0, 0, 'WITHSCORES')
  local run_at = (tonumber(oldest[2]) or f.now_ms) + keylog.per
  if before and tonumber(before) then
    redis.call('HSET', job_key, 'status', 'waiting', 'run_at', tostring(run_at), 'attempts', before)
  else
    redis.call('HSET', job_key, 'status', 'waiting', 'run_at', tostring(run_at))
  end
  redis.call('ZADD', delayed_key_of(f.keys[2]), run_at, job_id)
  tally(f.st, stream, 'delayed', 1)
  f.parked = true
end

-- A job a fetch just leased, counted against its queue's concurrency limit (`lim`), rate and
-- its limit key's rate (`keylog`).
local function count_start(f, lim, rate, keylog, job_id)
  if lim then
    f.now_ms = f.now_ms or server_ms()
    redis.call('ZADD', lim.key, f.now_ms, job_id)
    lim.running = lim.running + 1
  end
  if rate then
    redis.call('ZADD', rate.key, f.now_ms, job_id)
    redis.call('PEXPIRE', rate.key, rate.per)
    rate.used = rate.used + 1
  end
  if keylog then
    redis.call('ZADD', keylog.key, f.now_ms, job_id)
    redis.call('PEXPIRE', keylog.key, keylog.per)
    keylog.used = keylog.used + 1
  end
end
