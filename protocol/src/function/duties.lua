-- hero_duties: the queue's upkeep, done by whichever live process holds the duty lease, in
-- bounded steps, on Redis's clock: due delayed jobs and retries promoted, the jobs of dead
-- workers and idle deliveries recovered, running jobs past their time limit ended, ended jobs
-- past their retention deleted, dead letters past theirs trimmed, recurring jobs' due ticks fired
-- (cron.lua), and each queue's depth sampled
-- into the minute's stats (`<stream>|waiting`, for the dashboard's charts). Every worker (and broker) calls it on a timer; the one holding
-- the lease does the work, the others get an answer after one HGET, so a hundred workers do the
-- work of one broker. Each move goes through the function that makes it elsewhere (hero_promote,
-- hero_recover, hero_stop, hero_expire), which re-checks the job and makes a second move a
-- no-op: two holders at once (a lease that ran out mid-call) never double a move.
-- KEYS[1] duty lease hash  KEYS[2] delayed zset  KEYS[3] consumers zset  KEYS[4] queue registry set
-- KEYS[5] config hash  KEYS[6] event log  KEYS[7] stats hash  KEYS[8] retention stream
-- KEYS[9] dead-letter stream
-- ARGV[1] holder (the caller's process id)  ARGV[2] lease ms: how long the duties stay the
--   holder's without another call (a holder that dies is replaced once it passes); 0 hands them
--   back when the caller holds them (a process that stops), so the next caller takes them
-- ARGV[3] budget: the most jobs this call looks at, over all duties  ARGV[4] consumer group
-- ARGV[5] job key prefix  ARGV[6] '1' to recover dead workers' jobs and idle deliveries ('0'
--   while the caller saw Redis out of reach or refusing writes lately: a live worker's beat and
--   renewals failed through it too, and must get in before it is judged)  ARGV[7] '1' when XACKDEL
-- The settings are the config hash's, with the defaults here the one source for every language:
-- `lease_ms` (30 s), `max_attempts` (5), `retention_ms` (24 h), `dead_retention_ms` (24 h).
-- The lease hash holds `holder`, and when the paced duties are next due (`idle_at`: idle
-- deliveries, every half lease; `limits_at`: time limits, every second; `dead_at`: dead letters'
-- trim, every minute; `sample_at`: the depth sample, every 30 s; `fleet_at`: the fleet summary,
-- `fleet_lacks` in the config hash (lib/fleet.lua), every 10 s), and where a walk over the
-- streams that the budget cut short goes on (`idle_cursor`, `limits_cursor`); it expires with
-- the lease.
-- Stats and events: those of hero_promote, hero_recover, hero_stop (time limits) and
-- hero_expire, per job moved.
-- Returns: {held (1 when the caller holds the duties), holder, promoted, recovered, dead,
--   timed_out, expired, more (1 when the budget ran out: call again now), fired (recurring
--   jobs' ticks whose job was submitted), skipped (ticks missed under the skip policy)}
-- Errors: none of its own.

-- What hero_duties does, one table so the library stays within Lua's count of locals.
local duty = {}

-- Due delayed jobs and retries into their streams, through hero_promote.
function duty.promote(d, now_ms)
  local due = redis.call('ZRANGEBYSCORE', d.keys[2], '-inf', now_ms, 'LIMIT', 0, d.budget)
  for _, id in ipairs(due) do
    d.budget = d.budget - 1
    if #id > 128 or not string.match(id, '^[%w_%-%.]+$') then
      redis.call('ZREM', d.keys[2], id)
    else
      local job_key = d.prefix .. id
      local ok, f = pcall(redis.call, 'HMGET', job_key, 'script_type', 'group', 'instance', 'priority')
      local stream = ok and work_stream_of(d.ns, f)
      local why = ''
      if not ok then
        why = 'invalid job: its record could not be read'
      elseif not stream then
        why = 'invalid job: no valid script_type to dispatch it to'
      end
      local r = hero_promote({ d.keys[2], job_key, stream or d.keys[5], d.keys[4], d.keys[5], d.keys[6],
        d.keys[7], reply_prefix_of(d.ns) .. id, d.keys[8] }, { id, d.group, d.now_iso, why })
      if r == 'promoted' then d.out[3] = d.out[3] + 1 end
    end
  end
  return #due
end

-- Every stream a job may be delivered from: the registered ones and the paused ones.
function duty.streams(d)
  if not d.all then
    d.all = redis.call('SMEMBERS', d.keys[4])
    for _, s in ipairs(redis.call('SMEMBERS', paused_key(d.keys[4]))) do d.all[#d.all + 1] = s end
  end
  return d.all
end

-- One hero_recover call on `stream`, its counts added to the answer; the next cursor.
function duty.recover(d, stream, mode, consumer, min_idle, cursor)
  local r = hero_recover({ stream, d.keys[9], d.keys[5], d.keys[8], d.keys[6], d.keys[7] },
    { d.group, mode, consumer, tostring(min_idle), tostring(math.max(d.budget, 1)), d.prefix,
      reply_prefix_of(d.ns), tostring(setting(d.cfg, 'max_attempts', 5)), cursor, '0', d.now_iso,
      d.xackdel })
  d.out[4], d.out[5] = d.out[4] + r[1], d.out[5] + r[2]
  d.budget = d.budget - (r[1] + r[2] + r[3])
  return r[4]
end

-- The deliveries of workers whose liveness deadline passed, back into their streams; each such
-- worker leaves the liveness set once it holds nothing.
function duty.presence(d, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', d.keys[3], '-inf', now_ms, 'LIMIT', 0, 10)
  for _, consumer in ipairs(dead) do
    local whole = true
    for _, stream in ipairs(duty.streams(d)) do
      if d.budget <= 0 then whole = false break end
      if duty.recover(d, stream, 'consumer', consumer, 0, '0-0') ~= '0-0' then whole = false end
    end
    if not whole then return end
    redis.call('ZREM', d.keys[3], consumer)
  end
end

-- A paced walk over every stream (sorted, so the order holds between calls), `step(d, stream,
-- cursor)` answering where it stopped ('0-0' when through that stream). A walk the budget cut
-- short keeps its place in the lease hash (`<name>_cursor`: stream, then cursor) and goes on
-- from there at the next call; true once it went through every stream.
function duty.walk(d, name, step)
  local streams = duty.streams(d)
  table.sort(streams)
  local field = name .. '_cursor'
  local at = redis.call('HGET', d.keys[1], field)
  local from_stream, from_cursor = '', '0-0'
  if at then from_stream, from_cursor = string.match(at, '^(.*)|([^|]*)$') end
  for _, stream in ipairs(streams) do
    if stream >= (from_stream or '') then
      if d.budget <= 0 then
        redis.call('HSET', d.keys[1], field, stream .. '|0-0')
        return false
      end
      local cursor = '0-0'
      if stream == from_stream then cursor = from_cursor or '0-0' end
      local next_cursor = step(d, stream, cursor)
      if next_cursor ~= '0-0' then
        redis.call('HSET', d.keys[1], field, stream .. '|' .. next_cursor)
        return false
      end
    end
  end
  redis.call('HDEL', d.keys[1], field)
  return true
end

-- Deliveries idle past their queue's lease, claimed and put back (hero_recover 'idle').
function duty.idle_step(d, stream, cursor)
  local own = setting(d.cfg, 'lease_ms', 30000)
  local p = setting(d.cfg, 'policed', 0) > 0 and stream_policy(d.keys[5], stream, d.memo)
  if p and tonumber(p.lease_ms) then own = tonumber(p.lease_ms) end
  local next_cursor = duty.recover(d, stream, 'idle', 'hero-broker-reclaim', own, cursor)
  if next_cursor == '0-0' then duty.sweep(d, stream, own) end
  return next_cursor
end

-- Deletes the consumers of `stream` that hold nothing, were idle a lease or longer and are in
-- no worker's liveness entry: what a worker killed with a read in flight leaves behind (the
-- read reached Redis after its consumer was recovered and made it again), which nothing else
-- deletes. A live worker's is in the liveness set, or made again by its next read.
function duty.sweep(d, stream, min_idle)
  local info = redis.pcall('XINFO', 'CONSUMERS', stream, d.group)
  if type(info) ~= 'table' or info.err then return end
  for _, c in ipairs(info) do
    local f = {}
    for k = 1, #c, 2 do f[c[k]] = c[k + 1] end
    if f.pending == 0 and (tonumber(f.idle) or 0) >= min_idle and not is_bridge_consumer(f.name)
      and not redis.call('ZSCORE', d.keys[3], f.name) then
      redis.call('XGROUP', 'DELCONSUMER', stream, d.group, f.name)
    end
  end
end

-- The control list of the worker `worker_id` (`<group>:<instance>:<session>`) for a job of
-- `script_type` (Keyspace::ctl_of_worker), or the config hash when it names none of ours.
function duty.control(d, script_type, worker_id)
  local g, i = string.match(worker_id or '', '^([^:]+):([^:]+):[^:]+$')
  if not (name_ok(g) and name_ok(i) and name_ok(script_type)) then return d.keys[5], '' end
  return d.ns .. 'q:ctl:type:' .. script_type .. ':group:' .. g .. ':inst:' .. i, worker_id
end

-- Running jobs past their time limit (their own `timeout` s, else their queue policy's, else
-- 300 s) plus a grace of 2 s for the worker to end them itself, ended by hero_stop 'timeout'.
-- A walk of a stream ends at the newest delivery pending when it began (XPENDING's summary):
-- a group delivers in id order, so a later delivery has a later id and waits for the next pass,
-- a second on. Open-ended, a walk under load chased the new deliveries call after call, 100 rows
-- a call, without end (a quarter of Redis's time at 50,000 jobs/s). The cursor carries the end:
-- `<last walked> <end>`.
function duty.limits_step(d, stream, cursor)
  local from, last = '-', nil
  if cursor ~= '0-0' then
    local c, e = string.match(cursor, '^(%S+) (%S+)$')
    from, last = '(' .. (c or cursor), e
  end
  if not last then
    local s = redis.pcall('XPENDING', stream, d.group)
    if type(s) ~= 'table' or s.err or not s[3] then return '0-0' end
    last = s[3]
  end
  local asked = math.max(d.budget, 1)
  local rows = redis.pcall('XPENDING', stream, d.group, from, last, asked)
  if type(rows) ~= 'table' or rows.err then return '0-0' end
  for _, row in ipairs(rows) do
    d.budget = d.budget - 1
    local e = not is_bridge_consumer(row[2]) and redis.call('XRANGE', stream, row[1], row[1])[1]
    local job_id = e and entry_fields(e[2])
    if job_id and job_id ~= '' then
      local job_key = d.prefix .. job_id
      local ok, f = pcall(redis.call, 'HMGET', job_key, 'status', 'lease', 'started_at', 'timeout',
        'script_type', 'worker_id')
      local started = ok and f[1] == 'started' and f[2] == row[1] and iso_ms(f[3])
      if started then
        local limit = tonumber(f[4]) and tonumber(f[4]) * 1000
        if not limit then
          local p = setting(d.cfg, 'policed', 0) > 0 and stream_policy(d.keys[5], stream, d.memo)
          limit = (p and tonumber(p.timeout_ms)) or 300000
        end
        if started + limit + 2000 <= d.now_ms then
          local ctl, seen = duty.control(d, f[5], f[6])
          local r = hero_stop({ job_key, stream, d.keys[2], reply_prefix_of(d.ns) .. job_id, d.keys[5], ctl,
            d.keys[8], d.keys[6], d.keys[7] }, { d.group, seen, d.now_iso, d.xackdel, job_id, 'timeout' })
          if r == 'timeout' then d.out[6] = d.out[6] + 1 end
        end
      end
    end
  end
  if #rows >= asked then return rows[#rows][1] .. ' ' .. last end
  return '0-0'
end

-- Each queue's depth now into the minute's stats hash (`<stream>|waiting`), as hero_counts
-- counts it: the dashboard charts the last hour from these. O(queues), every 30 s.
function duty.sample(d)
  local c = hero_counts({ d.keys[4], paused_key(d.keys[4]), d.keys[7] }, { d.group, '*' })
  if #c == 0 then return end
  local key = minute_key(d.keys[7], d.now_iso)
  local fields = {}
  for i = 1, #c, 9 do
    fields[#fields + 1] = c[i] .. '|waiting'
    fields[#fields + 1] = c[i + 1]
  end
  for i = 1, #fields, 1000 do
    redis.call('HSET', key, unpack(fields, i, math.min(#fields, i + 999)))
  end
  redis.call('EXPIRE', key, 7200, 'NX')
end

local function hero_duties(keys, args)
  local lease_key, holder, lease_ms = keys[1], args[1], tonumber(args[2])
  local now_ms = server_ms()
  local current = redis.call('HGET', lease_key, 'holder')
  if current and current ~= holder then return { 0, current, 0, 0, 0, 0, 0, 0 } end
  if lease_ms <= 0 then
    -- handed back (the holder stops): the next caller takes them at once
    if current then redis.call('DEL', lease_key) end
    return { 0, '', 0, 0, 0, 0, 0, 0 }
  end
  redis.call('HSET', lease_key, 'holder', holder)
  redis.call('PEXPIRE', lease_key, lease_ms)
  local d = { keys = keys, budget = tonumber(args[3]), group = args[4], prefix = args[5],
    xackdel = args[7], cfg = settings(keys[5]), now_ms = now_ms, now_iso = iso_of(now_ms), memo = {},
    out = { 1, holder, 0, 0, 0, 0, 0, 0, 0, 0 } }
  d.ns = ns_of(d.prefix, '')
  local paced = redis.call('HMGET', lease_key, 'idle_at', 'limits_at', 'dead_at', 'sample_at', 'fleet_at')
  duty.promote(d, now_ms)
  if d.budget > 0 then d.out[9], d.out[10] = cron.pass(d) end
  if args[6] == '1' and d.budget > 0 then
    duty.presence(d, now_ms)
    if d.budget > 0 and (tonumber(paced[1]) or 0) <= now_ms and duty.walk(d, 'idle', duty.idle_step) then
      redis.call('HSET', lease_key, 'idle_at', now_ms + math.floor(setting(d.cfg, 'lease_ms', 30000) / 2))
    end
  end
  if d.budget > 0 and (tonumber(paced[2]) or 0) <= now_ms and duty.walk(d, 'limits', duty.limits_step) then
    redis.call('HSET', lease_key, 'limits_at', now_ms + 1000)
  end
  if d.budget > 0 then
    local retention = setting(d.cfg, 'retention_ms', 86400000)
    local dead_keep = setting(d.cfg, 'dead_retention_ms', 86400000)
    local r = hero_expire({ keys[8] }, { d.prefix, tostring(retention), '20', tostring(dead_keep) })
    d.out[7] = r[2]
    d.budget = d.budget - r[2]
    if r[3] == 1 then d.budget = 0 end
    if (tonumber(paced[3]) or 0) <= now_ms then
      redis.call('XTRIM', keys[9], 'MINID', tostring(math.max(now_ms - dead_keep, 0)) .. '-0')
      redis.call('HSET', lease_key, 'dead_at', now_ms + 60000)
    end
  end
  if (tonumber(paced[4]) or 0) <= now_ms then
    duty.sample(d)
    redis.call('HSET', lease_key, 'sample_at', now_ms + 30000)
  end
  if (tonumber(paced[5]) or 0) <= now_ms then
    fleet_view.publish(d)
    redis.call('HSET', lease_key, 'fleet_at', now_ms + 10000)
  end
  if d.budget <= 0 then d.out[8] = 1 end
  return d.out
end
