-- Appending a job to a work stream, and fair share within a queue (ARCHITECTURE.md "Fair share
-- within a queue"). A stream whose queue policy sets `fair` has a gate in front of it: a job
-- queued there waits in its limit key's lane `<stream>:fair:<key>` (FIFO; '' for a job without
-- a key), and the key waits in the stream's ring `<stream>:fair` while its lane has jobs. The
-- fetch releases jobs onto the stream in turns, as many as it is about to claim (release), so
-- the stream itself stays first in, first out and everything that reads it (pending lists,
-- recovery, trimming, the audit) is unchanged. Nothing here is read while no queue is fair (the
-- config hash's `fair` counts them).

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

-- Queues `job_id` (its record already written) in its limit key's lane of fair stream `stream`.
-- A worker sleeps on a fair stream only after a fetch found its gate empty (a fetch that came up
-- short released all it could), so the workers are woken with a wake-up entry (`w`, as a resumed
-- queue's: the fetch acknowledges and deletes it) only when the gate was empty: when the ring
-- gets its first key.
-- Writes stats: `fair` (the stream's gauge of jobs in its gate).
local function gate(registry, stream, job_id, attempts)
  local ns = ns_of_registry(registry)
  local key = redis.call('HGET', ns .. 'job:' .. job_id, 'limit_key') or ''
  local item = job_id
  if attempts then item = job_id .. ' ' .. attempts end
  if redis.call('RPUSH', fair_lane_of(stream, key), item) == 1
    and redis.call('RPUSH', fair_ring_of(stream), key) == 1 then
    redis.call('XADD', stream, '*', 'w', '1')
  end
  redis.call('HINCRBY', ns .. 'meta:stats', stream .. '|fair', 1)
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
      gate(registry, stream, job_id, attempts)
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

-- Moves up to `d` jobs from fair stream `stream`'s gate onto the stream, in turns: the ring's
-- head key gives up to its weight of jobs (policy `p`'s `fair_weights`, default 1; a turn is at
-- most what this fetch still wants) and goes back to the ring's tail while its lane has jobs.
-- O(jobs moved + turns), whatever the number of keys. Returns how many it moved.
-- Writes stats: `fair` (down by the jobs moved).
local function release(st, stream, p, d)
  local ring, moved, weights = fair_ring_of(stream), 0, p.fair_weights
  while moved < d do
    local key = redis.call('LPOP', ring)
    if not key then break end
    local lane = fair_lane_of(stream, key)
    local n = math.min(type(weights) == 'table' and tonumber(weights[key]) or 1, d - moved)
    local items = redis.call('LPOP', lane, n)
    if items then
      for k = 1, #items do
        local id, a = string.match(items[k], '^(%S+) ?(%S*)$')
        if id then
          if a ~= '' then
            redis.call('XADD', stream, '*', 'j', id, 'a', a)
          else
            redis.call('XADD', stream, '*', 'j', id)
          end
        end
      end
      moved = moved + #items
      if #items == n and redis.call('LLEN', lane) > 0 then redis.call('RPUSH', ring, key) end
    end
  end
  if moved > 0 then tally(st, stream, 'fair', -moved) end
  return moved
end
