-- hero_stop: stop a job wherever it is.
-- KEYS[1] job hash  KEYS[2] its work stream  KEYS[3] delayed zset  KEYS[4] reply list
-- KEYS[5] config hash  KEYS[6] control list of the worker the caller saw running it ('' allowed
-- when it saw none)  KEYS[7] retention stream  KEYS[8] event log  KEYS[9] stats hash
-- ARGV[1] consumer group  ARGV[2] worker_id the caller saw ('' for none)  ARGV[3] now ISO 8601
-- ARGV[4] '1' when XACKDEL  ARGV[5] job id
-- ARGV[6] why: 'stopped' (an operator's stop) or 'timeout' (the broker's time limit: only a
--   running job is taken, as a failed attempt: retried within its budget (the record's
--   `retries`, or its queue policy's when larger) on the longer of its own back-off and its
--   policy's (retry_delay), else 1 s doubling,
--   else ended with the error `timeout`; a job found anywhere else is 'changed')
-- A job the bridge handed to a legacy actor (`bridge` = the legacy list) is taken out of that
-- list when it is still there ('cancelled'); else its legacy worker is told the seed-001 way,
-- LPUSH of the job id to `bridge_stop` (`hero:stop_queue:<worker_id>`) ('interrupted').
-- A queued job's stream entry is deleted: the one the record names (a dual-pushed job), else
-- found among the first 1,000 undelivered (drop_queued_entry); one further back stays until a
-- worker reads it, finds the job stopped and drops it.
-- Stats: the stream's `failed` (per minute too), and its `delayed` gauge down for a waiting job;
-- for a timeout retried, `retried` (per minute too) and the `delayed` gauge up.
-- Events: `stopped` (q, w the worker when it was running, r 'cancelled', 'interrupted' or
-- 'timeout'); a job past its time limit with retries left is `retried` (r 'timeout', d the retry
-- time) instead. Through the ended-jobs hook (release_if_any): `dispatched` or `error` per
-- dependent, `batch_done` per batch completed.
-- A job submitted with its own retention once failed (`keep_failed`) expires after it (keep_ttl).
-- Dependents of the stopped job end error, `dependency failed: <id>` (see release_dependents).
-- Returns: 'cancelled' (it was queued or delayed and will never start), 'interrupted' (it was
-- running: it ends error/stopped now and its worker is told), 'timeout' (why 'timeout': it ends
-- error/timeout now and its worker is told), 'already_completed', or 'changed' (it started on
-- another worker since the caller looked, or is not running for a time limit: look again).
-- Errors: HERO_JOB_NOT_FOUND when there is no such job.
-- A queued job's entry, looked for among the first 1,000 undelivered entries of its stream and
-- deleted: a stream then holds no entry of a job that will never run, so the counts see it once
-- (failed, not waiting too) and removing its record later is not taken for a lost job. One
-- further back is dropped by the fetch that reaches it, as before (since protocol 32).
local function drop_queued_entry(stream, group, job_id)
  local from = '-'
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if type(groups) ~= 'table' or groups.err then return end
  for _, g in ipairs(groups) do
    local name, last = nil, nil
    for k = 1, #g, 2 do
      if g[k] == 'name' then name = g[k + 1] elseif g[k] == 'last-delivered-id' then last = g[k + 1] end
    end
    if name == group and last and last ~= '0-0' then from = '(' .. last end
  end
  for _, e in ipairs(redis.call('XRANGE', stream, from, '+', 'COUNT', 1000)) do
    if entry_fields(e[2]) == job_id then
      redis.call('XDEL', stream, e[1])
      return
    end
  end
end

local function hero_stop(keys, args)
  local job_key, stream, delayed, reply_key, cfg, ctl = keys[1], keys[2], keys[3], keys[4], settings(keys[5]), keys[6]
  local group, seen_worker, now_iso, xackdel, job_id = args[1], args[2], args[3], args[4], args[5]
  local why = args[6]
  if why ~= 'stopped' and why ~= 'timeout' then
    return redis.error_reply('HERO_BAD_ARG why is ' .. tostring(why) .. ', not stopped or timeout')
  end
  local f = redis.call('HMGET', job_key, 'status', 'entry', 'lease', 'worker_id', 'reply', 'bridge', 'bridge_stop')
  local was_delayed = false -- a waiting job in the delayed set (else it waits on prerequisites)
  local done = retained(keys[7], now_iso)
  local log = event_log(keys[8], cfg)
  -- the one job this call can end; `how` is what the caller is answered
  local function stopped(how)
    finish(job_key, job_id, reply_key, cfg, 'error', why, f[5], now_iso, done)
    -- a job's own retention once failed holds for a stop too (BullMQ's removeOnFail)
    local ttl = keep_ttl(cfg, job_key, 'error', nil)
    if ttl then redis.call('PEXPIRE', job_key, ttl) end
    local worker = nil
    if how == 'interrupted' then worker = f[4] end
    local queue = stream
    if stream == job_key then queue = nil end
    if why == 'timeout' then how = 'timeout' end
    log_event(log, 'stopped', job_id, queue, worker, nil, how)
    local st = stats(keys[9], now_iso)
    if queue then
      tally(st, queue, 'failed', 1, true)
      if f[1] == 'waiting' and was_delayed then tally(st, queue, 'delayed', -1) end
    end
    -- its dependents cannot run now: they end error too
    release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso }, { job_key }, { job_id }, { false })
    flush_retained(done)
    flush_stats(st)
    return how
  end
  local status = f[1]
  if not status then
    return redis.error_reply('HERO_JOB_NOT_FOUND no job hash at ' .. job_key)
  end
  if status == 'finished' or status == 'error' then return 'already_completed' end
  -- the time limit ends a running job only, the one delivery the caller saw
  if why == 'timeout' and (status ~= 'started' or (f[4] or '') ~= seen_worker or ctl == '') then
    return 'changed'
  end
  if (f[6] or '') ~= '' and (status == 'dispatched' or status == 'started') then
    local answer = 'cancelled'
    if redis.call('LREM', f[6], 0, job_id) == 0 then
      answer = 'interrupted'
      if (f[7] or '') ~= '' then redis.call('LPUSH', f[7], job_id) end
    end
    -- the entry the legacy side holds: the bridge's delivery (lease), or a dual-pushed job's
    -- unread entry
    local held = f[3]
    if (held or '') == '' then held = f[2] end
    if (held or '') ~= '' then ack_del(stream, group, held, xackdel) end
    return stopped(answer)
  end
  if status == 'waiting' then
    was_delayed = redis.call('ZREM', delayed, job_id) == 1
    redis.call('HDEL', job_key, 'deps_left')
  elseif status == 'dispatched' then
    if f[2] then ack_del(stream, group, f[2], xackdel) else drop_queued_entry(stream, group, job_id) end
  elseif status == 'started' then
    if (f[4] or '') ~= seen_worker or ctl == '' then return 'changed' end
    ack_del(stream, group, f[3], xackdel)
    redis.call('LPUSH', ctl, job_id)
    redis.call('PEXPIRE', ctl, 3600000)
    if why == 'timeout' then
      -- a timeout is a failed attempt: retried within the budget (the record's retries or its
      -- queue policy's, on the policy's back-off or 1 s doubling), ended when it is spent
      local a = redis.call('HMGET', job_key, 'attempts', 'retries', 'backoff')
      local attempts = tonumber(a[1]) or 1
      local budget = tonumber(a[2]) or 0
      local policy = setting(cfg, 'policed', 0) > 0 and stream_policy(keys[5], stream, {})
      if policy and tonumber(policy.retries) and tonumber(policy.retries) > budget then
        budget = tonumber(policy.retries)
      end
      if attempts <= budget then
        local delay = retry_delay(a[3], policy, attempts)
          or backoff_ms({ kind = 'exponential', base_ms = 1000, cap_ms = 3600000, jitter = 0.2 }, attempts)
        local retry_at = server_ms() + delay
        redis.call('HSET', job_key, 'status', 'waiting', 'error', 'timeout', 'run_at', tostring(retry_at),
          'attempts', tostring(attempts), 'updated_at', now_iso)
        redis.call('HDEL', job_key, 'lease', 'entry')
        redis.call('ZADD', delayed, retry_at, job_id)
        log_event(log, 'retried', job_id, stream, f[4], nil, 'timeout', retry_at)
        local st = stats(keys[9], now_iso)
        tally(st, stream, 'retried', 1, true)
        tally(st, stream, 'delayed', 1)
        flush_stats(st)
        return 'timeout'
      end
      stopped('interrupted')
      return 'timeout'
    end
    return stopped('interrupted')
  end
  return stopped('cancelled')
end
