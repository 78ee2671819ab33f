-- Appending a job to a work stream, and fair share within a queue (ARCHITECTURE.md "Fair share
-- within a queue"). A stream whose queue policy sets `fair` has a gate in front of it: a job
-- queued there waits in its limit key's lane `<stream>:fair:<key>` (FIFO; '' for a job without
-- a key; items `<job id> <ms queued>[ <attempts>]`), and the key waits in the stream's ring
-- `<stream>:fair` while its lane has jobs. The fetch releases jobs onto the stream in turns, as
-- many as it is about to claim (release), so the stream itself stays first in, first out and
-- everything that reads it (pending lists, recovery, trimming, the audit) is unchanged. A key
-- held by `hero pause <type> --key` (the set `<ns>:meta:held`, members `<queue>|<key>`) leaves
-- the ring until it is resumed; a key at its queue's `key_concurrency` keeps its place but is
-- passed over. Nothing here is read while no queue is fair (the config hash's `fair` counts
-- them).

-- The policy of `stream`'s queue when it is fair, else nil. `memo` is a per-call table (see
-- stream_policy), `config_key` the config hash, `fair_on` whether any queue is fair.
local function fair_policy(config_key, stream, memo, fair_on)
  if not fair_on then return nil end
  local p = stream_policy(config_key, stream, memo)
  if p and p.fair then return p end
  return nil
end

-- Whether any queue of the namespace is fair: one HGET, asked once per call (memo.fair_on).
local function any_fair(registry, memo)
  local on = memo and memo.fair_on
  if on == nil then
    on = (tonumber(redis.call('HGET', ns_of_registry(registry) .. 'meta:config', 'fair')) or 0) > 0
    if memo then memo.fair_on = on end
  end
  return on
end

-- The queue names that cover `stream` (`<type>`, `<type>/<group>`, `<type>/<group>/<inst>`),
-- most specific last: the names a held key may be held under.
local function names_of(stream)
  local p = stream_parts(stream)
  if not p then return {}, '' end
  local out = { p.type }
  if p.group then
    out[2] = p.type .. '/' .. p.group
    if p.instance then out[3] = out[2] .. '/' .. p.instance end
  end
  return out, p.prefix
end

-- Whether limit key `key` of `stream`'s queue is held (paused by key) under any name covering it.
local function held(stream, key)
  local names, ns = names_of(stream)
  if #names == 0 then return false end
  local ask = {}
  for k = 1, #names do ask[k] = names[k] .. '|' .. key end
  for _, m in ipairs(redis.call('SMISMEMBER', ns .. ':meta:held', unpack(ask))) do
    if m == 1 then return true end
  end
  return false
end

-- Puts `key` at the back of fair stream `stream`'s ring; the first key of an empty ring wakes
-- the workers with a wake-up entry (`w`, as a resumed queue's: the fetch acknowledges and
-- deletes it), for a worker sleeps on a fair stream only after a fetch found its gate empty. A
-- paused stream (out of the registry `registry`) gets none: resuming it wakes them.
local function ring_in(stream, key, registry)
  if redis.call('RPUSH', fair_ring_of(stream), key) == 1
    and redis.call('SISMEMBER', registry, stream) == 1 then
    redis.call('XADD', stream, '*', 'w', '1')
  end
end

-- Pushes the first `n` of `items` onto limit key `key`'s lane of fair stream `stream`; the key
-- joins the ring when the lane was empty, unless the key is held.
local function lane_push(registry, stream, key, items, n)
  if redis.call('RPUSH', fair_lane_of(stream, key), unpack(items, 1, n)) == n
    and not held(stream, key) then
    ring_in(stream, key, registry)
  end
end

-- Queues `job_id` (its record already written) in its limit key's lane of fair stream `stream`;
-- its key joins the ring when the lane was empty, unless the key is held. `memo` is the call's
-- table (append's `known`) or nil. A submit's `known` has `gated`: it gives the limit key
-- (`memo.lk`, else the record is asked), reads the clock once, and has its jobs gathered while
-- they follow one another into one lane (a batch of one customer's jobs costs one RPUSH, not
-- one a job), written with the `fair` gauges at its end (flush_gated).
-- Writes stats: `fair` (the stream's gauge of jobs in its gate).
local function gate(registry, stream, job_id, attempts, memo)
  local key = memo and memo.lk
  if not key then
    key = redis.call('HGET', ns_of_registry(registry) .. 'job:' .. job_id, 'limit_key') or ''
  end
  local tail = memo and memo.gate_tail
  if not tail then
    -- the clock as text once: a number joined to a string costs a sprintf each time
    tail = ' ' .. string.format('%d', server_ms())
    if memo then memo.gate_tail = tail end
  end
  local item = job_id .. tail
  if attempts then item = item .. ' ' .. attempts end
  local gated = memo and memo.gated
  if not gated then
    lane_push(registry, stream, key, { item }, 1)
    redis.call('HINCRBY', ns_of_registry(registry) .. 'meta:stats', stream .. '|fair', 1)
    return
  end
  gated[stream] = (gated[stream] or 0) + 1
  -- the run is one array kept for the call (a table a run costs more than the RPUSH it saves
  -- when a batch's keys alternate), its first `run_n` items the run's
  local n = memo.run_n
  if n and n < 1000 and memo.run_key == key and memo.run_stream == stream then
    n = n + 1
    memo.run[n] = item
    memo.run_n = n
    return
  end
  if n then lane_push(memo.run_registry, memo.run_stream, memo.run_key, memo.run, n) end
  local run = memo.run or {}
  run[1] = item
  memo.run, memo.run_n = run, 1
  memo.run_registry, memo.run_stream, memo.run_key = registry, stream, key
end

-- Writes the jobs a call's gate calls gathered (see gate) to their lane, and the `fair` gauges
-- they counted (`memo.gated`) to the stats hash `stats_key`: a call that gates with a `gated`
-- table calls it before it returns.
local function flush_gated(memo, stats_key)
  local n = memo.run_n
  if n then
    lane_push(memo.run_registry, memo.run_stream, memo.run_key, memo.run, n)
    memo.run_n = nil
  end
  for stream, c in pairs(memo.gated) do
    redis.call('HINCRBY', stats_key, stream .. '|fair', c)
  end
end

-- Append a job id to a work stream, registering the stream on first use (register). Returns
-- the new entry id, or nil when the stream is fair and the job went into its gate (the record
-- must be written first: the gate reads its limit key). `known` (optional) is the call's set
-- of streams already seen; a fair stream is marked 'fair' in it (not true), so a caller's
-- shortcut for streams it knows (`known[stream] == true`: XADD directly) skips it. The entry
-- tells the fetch what it would otherwise read from the record: `attempts` (optional) is the
-- count made so far, for a job queued again after a delivery (field `a`), and `dual` marks a
-- job also pushed to a legacy list (field `b`; a bridged queue is never fair).
local function append(stream, group, registry, job_id, known, attempts, dual)
  register(stream, group, registry, known)
  if not dual and any_fair(registry, known) then
    local memo = known or {}
    if fair_policy(ns_of_registry(registry) .. 'meta:config', stream, memo, true) then
      if known then known[stream] = 'fair' end
      gate(registry, stream, job_id, attempts, known)
      return nil
    end
  end
  if dual then
    if attempts then return redis.call('XADD', stream, '*', 'j', job_id, 'a', attempts, 'b', '1') end
    return redis.call('XADD', stream, '*', 'j', job_id, 'b', '1')
  end
  if attempts then return redis.call('XADD', stream, '*', 'j', job_id, 'a', attempts) end
  return redis.call('XADD', stream, '*', 'j', job_id)
end

-- The running set of limit key `key` under policy `p`'s `key_concurrency` for `stream`:
-- `<ns>:meta:limit:<queue>|<key>`, the queue being the name whose own policy sets it (the
-- group's, else the type's); nil without one.
local function key_cap_set(config_key, stream, p, key)
  if not tonumber(p.key_concurrency) then return nil end
  local q = p.kc_queue
  if not q then
    local names = names_of(stream)
    q = names[1] or ''
    if names[2] then
      local raw = redis.call('HGET', policy_key_of(config_key), names[2])
      local ok, d = pcall(cjson.decode, raw or 'null')
      if ok and type(d) == 'table' and d.key_concurrency then q = names[2] end
    end
    p.kc_queue = q
  end
  return limit_key_of(config_key, q) .. '|' .. key
end

-- Moves up to `d` jobs from fair stream `stream`'s gate onto the stream, in turns (round robin
-- over the ring's keys, a key's turn giving its weight of jobs: policy `p`'s `fair_weights`,
-- default 1), the turns of a pass counted at once rather than walked one by one: up to `d`
-- keys leave the ring's head, each is asked for as many jobs as its turns within `d` come to
-- (whole rounds, then the turns left over in ring order) with one LPOP of its lane, and the
-- keys go back so that the next turn is where round robin would be: a key given no turn back
-- at the head, the others to the tail, those after the last one given a left-over turn first.
-- A key whose lane ran dry leaves the ring; its share goes to the next pass (at most 4).
-- Under `key_concurrency` a key is asked for no more than the room it has (counted once per
-- key and call by limit_running, which drops the members no longer started: the jobs released
-- here start when this fetch claims them), and a key without room keeps its place. Costs an
-- LPOP and an LLEN a key and an XADD a job, whatever the number of keys waiting. Returns how
-- many it moved, and whether a key's concurrency held jobs back.
-- Writes stats: `fair` (down by the jobs moved).
local function release(st, config_key, prefix, stream, p, d)
  local ring, weights = fair_ring_of(stream), p.fair_weights
  local cap, rooms = tonumber(p.key_concurrency), {}
  local moved, capped = 0, false
  for _ = 1, 4 do
    local want = d - moved
    if want <= 0 then break end
    local keys = redis.call('LPOP', ring, want)
    if not keys then break end
    local w, total = {}, 0
    for i = 1, #keys do
      w[i] = type(weights) == 'table' and tonumber(weights[keys[i]]) or 1
      total = total + w[i]
    end
    local full = math.floor(want / total)
    local left, last = want - full * total, 0
    local head, later, first, before = {}, {}, {}, moved
    for i = 1, #keys do
      local key = keys[i]
      local n = full * w[i]
      if left > 0 then
        local extra = math.min(w[i], left)
        n, left, last = n + extra, left - extra, i
      end
      local lane, set = fair_lane_of(stream, key), nil
      if cap and n > 0 then
        set = key_cap_set(config_key, stream, p, key)
        if rooms[key] == nil then rooms[key] = cap - limit_running({ key = set, max = cap }, prefix) end
        if rooms[key] < n then
          n = math.max(rooms[key], 0)
          capped = true
        end
      end
      local keep = true
      if n > 0 then
        local items = redis.call('LPOP', lane, n)
        local got = items and #items or 0
        local ms = set and server_ms()
        for k = 1, got do
          -- `<id> <ms>[ <attempts>]`, cut with a plain find (a pattern costs more a job); the
          -- clock has 13 digits, so an item that ends there has no attempts
          local item = items[k]
          local s1 = string.find(item, ' ', 1, true)
          local id = s1 and string.sub(item, 1, s1 - 1)
          if id then
            local s2 = #item > s1 + 13 and string.find(item, ' ', s1 + 1, true)
            if s2 then
              redis.call('XADD', stream, '*', 'j', id, 'a', string.sub(item, s2 + 1))
            else
              redis.call('XADD', stream, '*', 'j', id)
            end
            -- released to be claimed by this fetch at once: it runs (a stale one leaves the set
            -- when the set is next full, see limit_running)
            if set then redis.call('ZADD', set, ms, id) end
          end
        end
        moved = moved + got
        if set then rooms[key] = rooms[key] - got end
        keep = got == n and redis.call('LLEN', lane) > 0
      elseif full == 0 and i > last then
        -- no turn came to it in this pass: it keeps its place at the head
        head[#head + 1] = key
        keep = false
      end
      if keep then
        if i <= last then first[#first + 1] = key else later[#later + 1] = key end
      end
    end
    for i = #head, 1, -1 do redis.call('LPUSH', ring, head[i]) end
    for i = 1, #first do later[#later + 1] = first[i] end
    if #later > 0 then redis.call('RPUSH', ring, unpack(later)) end
    if moved == before then break end
  end
  if moved > 0 then tally(st, stream, 'fair', -moved) end
  return moved, capped
end

-- Takes job `job_id`, queued with limit key `key`, out of fair stream `stream`'s gate (a
-- requeue moving it elsewhere): its lane is read whole (an operator's action, O(lane)), and a
-- lane left empty takes its key out of the ring. Returns whether it was there.
-- Writes stats: `fair` (down by one when it was).
local function ungate(st, stream, job_id, key)
  local lane = fair_lane_of(stream, key)
  local items = redis.call('LRANGE', lane, 0, -1)
  for k = 1, #items do
    if string.match(items[k], '^(%S+)') == job_id then
      redis.call('LREM', lane, 1, items[k])
      if redis.call('LLEN', lane) == 0 then redis.call('LREM', fair_ring_of(stream), 0, key) end
      tally(st, stream, 'fair', -1)
      return true
    end
  end
  return false
end

-- Fair share turned off for queue `name` (`hero_policy`): every stream it covers that is no
-- longer fair (its group's policy may still be) gets its gate's jobs appended in ring order, a
-- key's lane at a time (a paused key's too), and the queue's paused keys are forgotten.
-- O(jobs in the gates): an operator's action, once.
-- Writes stats: `fair` (each stream's gauge, down to 0).
local function unfair(config_key, name)
  local registry = meta_key(config_key, 'queues')
  local held_set = meta_key(config_key, 'held')
  local held_keys = {}
  for _, m in ipairs(redis.call('SMEMBERS', held_set)) do
    local q, key = string.match(m, '^([^|]*)|(.*)$')
    if q and (q == name or string.sub(q, 1, #name + 1) == name .. '/') then
      held_keys[#held_keys + 1] = key
      redis.call('SREM', held_set, m)
    end
  end
  local st = stats(meta_key(config_key, 'stats'))
  local memo = {}
  for _, s in ipairs(redis.call('SUNION', registry, registry .. ':paused')) do
    local sp = stream_parts(s)
    if sp and covers(name, sp) and not fair_policy(config_key, s, memo, true) then
      local keys = redis.call('LRANGE', fair_ring_of(s), 0, -1)
      for _, k in ipairs(held_keys) do keys[#keys + 1] = k end
      local moved = 0
      for _, key in ipairs(keys) do
        local lane = fair_lane_of(s, key)
        for _, item in ipairs(redis.call('LRANGE', lane, 0, -1)) do
          local id, a = string.match(item, '^(%S+) %d+ ?(%S*)$')
          if id then
            if a ~= '' then redis.call('XADD', s, '*', 'j', id, 'a', a) else redis.call('XADD', s, '*', 'j', id) end
            moved = moved + 1
          end
        end
        redis.call('DEL', lane)
      end
      redis.call('DEL', fair_ring_of(s))
      if moved > 0 then tally(st, s, 'fair', -moved) end
    end
  end
  flush_stats(st)
end
