-- hero_recover: put abandoned deliveries of one work stream back into it (same stream, same
-- targeting, a new entry), or dead-letter them past the attempt budget.
-- KEYS[1] work stream  KEYS[2] dead-letter stream  KEYS[3] config hash  KEYS[4] retention stream
-- KEYS[5] event log  KEYS[6] stats hash
-- ARGV[1] consumer group  ARGV[2] mode: 'consumer' (the pending entries of consumer ARGV[3],
--         which is dead or handing its jobs back) or 'idle' (entries idle for ARGV[4] ms, listed
--         with XPENDING IDLE from cursor ARGV[9] and claimed as consumer ARGV[3]; entries held by
--         the legacy bridge, consumers named 'bridge:...', are skipped: the bridge's watch
--         decides when a legacy actor abandoned a job)
-- ARGV[3] consumer  ARGV[4] min idle ms  ARGV[5] count  ARGV[6] job key prefix
-- ARGV[7] reply key prefix  ARGV[8] max attempts  ARGV[9] cursor ('0-0' to start)
-- ARGV[10] '1' to hand back (the delivery does not count as an attempt)  ARGV[11] now ISO 8601
-- ARGV[12] '1' when XACKDEL
-- Stats: the stream's `recovered`, or `dead` and `failed` (per minute too), per job.
-- Events: per job, `recovered` (q, w the consumer it was taken from, a the attempts made, r
-- 'presence', 'idle' or 'handback') or `dead` (q, w, r the reason). Through the ended-jobs hook
-- (release_if_any): `dispatched` or `error` per dependent, `batch_done` per batch completed.
-- Dependents of a dead-lettered job end error, `dependency failed: <id>`. A dead-lettered job's
-- record names its letter: `dead` = the entry id (protocol 30), written with its end (not
-- while a reader older than 29 is live: see dead_index).
-- Returns: {requeued, dead, dropped, next cursor ('0-0' when done)}. In 'consumer' mode the
-- consumer is deleted from the group once it owns nothing.
-- Errors: HERO_BAD_ARG for an unknown mode.
local function hero_recover(keys, args)
  local stream, dead, cfg = keys[1], keys[2], settings(keys[3])
  local group, mode, consumer, min_idle, count = args[1], args[2], args[3], args[4], tonumber(args[5])
  local prefix, reply_prefix, max_attempts, cursor = args[6], args[7], tonumber(args[8]), args[9]
  local handback, now_iso, xackdel = args[10], args[11], args[12]
  local done = retained(keys[4], now_iso)
  local log = event_log(keys[5], cfg)
  local how = 'presence'
  if mode == 'idle' then how = 'idle' elseif handback == '1' then how = 'handback' end
  local owners = {} -- entry id -> the consumer that held it
  local memo = {} -- the stream's queue policy, read once
  local st = stats(keys[6], now_iso)
  if redis.call('EXISTS', stream) == 0 then return { 0, 0, 0, '0-0' } end
  local ids, next_cursor = {}, '0-0'
  if mode == 'consumer' then
    for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', count, consumer)) do
      ids[#ids + 1] = p[1]
      owners[p[1]] = consumer
    end
    if #ids == count then next_cursor = ids[#ids] end
  elseif mode == 'idle' then
    local from = '-'
    if cursor ~= '0-0' then from = cursor end
    local listed = redis.call('XPENDING', stream, group, 'IDLE', min_idle, from, '+', count)
    for _, p in ipairs(listed) do
      if not is_bridge_consumer(p[2]) then
        local claimed = redis.call('XCLAIM', stream, group, consumer, min_idle, p[1], 'JUSTID')
        if claimed[1] then
          ids[#ids + 1] = p[1]
          owners[p[1]] = p[2]
        end
      end
    end
    if #listed == count then next_cursor = next_id(listed[#listed][1]) end
  else
    return redis.error_reply('HERO_BAD_ARG unknown mode ' .. tostring(mode))
  end
  local requeued, dead_n, dropped = 0, 0, 0
  local ek, ei, eo = {}, {}, {} -- the jobs dead-lettered, whose dependents fail with them
  for _, id in ipairs(ids) do
    local entry = redis.call('XRANGE', stream, id, id)
    local job_id
    if entry[1] then job_id = entry_fields(entry[1][2]) end
    if job_id == '' then job_id = nil end
    local job_key = prefix .. (job_id or '')
    -- pcall: a job key holding another type is foreign data; its entry is dropped like one
    -- naming no job, instead of failing the recovery of every entry after it
    local j = job_id and redis.pcall('HMGET', job_key, 'status', 'lease', 'attempts', 'retries', 'reply')
    ack_del(stream, group, id, xackdel)
    if j and not j.err and j[1] == 'started' and j[2] == id then
      -- a started record without a count is on its first delivery (see hero_fetch)
      local attempts = tonumber(j[3]) or 1
      if handback == '1' and tonumber(j[3]) then
        -- computed here, not with HINCRBY: nothing may raise once the entry is acknowledged
        attempts = attempts - 1
        redis.call('HSET', job_key, 'attempts', attempts)
      elseif handback ~= '1' and not j[3] then
        -- the abandoned first delivery counts: the next fetch adds one to this
        redis.call('HSET', job_key, 'attempts', '1')
      end
      -- the budget is the record's retries or its queue policy's, whichever is larger
      local retries = tonumber(j[4]) or 0
      if setting(cfg, 'policed', 0) > 0 then
        local policy = stream_policy(keys[3], stream, memo)
        if policy and tonumber(policy.retries) and tonumber(policy.retries) > retries then
          retries = tonumber(policy.retries)
        end
      end
      local limit = math.max(max_attempts, retries + 1)
      if handback ~= '1' and attempts >= limit then
        local reason = 'abandoned after ' .. attempts .. ' attempts'
        local letter = redis.call('XADD', dead, '*', 'j', job_id, 'reason', reason, 'queue', stream)
        finish(job_key, job_id, reply_prefix .. job_id, cfg, 'error', reason, j[5], now_iso, done, dead_index(cfg, letter))
        log_event(log, 'dead', job_id, stream, owners[id], tostring(attempts), reason)
        dead_n = dead_n + 1
        ek[#ek + 1], ei[#ei + 1], eo[#eo + 1] = job_key, job_id, false
      else
        -- the entry carries the count for the next fetch; a first delivery handed back has none
        if handback == '1' and not tonumber(j[3]) then
          redis.call('XADD', stream, '*', 'j', job_id)
        else
          redis.call('XADD', stream, '*', 'j', job_id, 'a', tostring(attempts))
        end
        redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
        redis.call('HDEL', job_key, 'lease', 'worker_id', 'entry')
        log_event(log, 'recovered', job_id, stream, owners[id], tostring(attempts), how)
        requeued = requeued + 1
      end
    else
      dropped = dropped + 1
    end
  end
  if mode == 'consumer' and next_cursor == '0-0' then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer)
  elseif mode == 'idle' then
    -- the claimer held what it claimed only inside this call
    redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer)
  end
  release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso }, ek, ei, eo)
  flush_retained(done)
  if requeued > 0 and handback ~= '1' then tally(st, stream, 'recovered', requeued, true) end
  if dead_n > 0 then
    tally(st, stream, 'dead', dead_n, true)
    tally(st, stream, 'failed', dead_n, true)
  end
  flush_stats(st)
  return { requeued, dead_n, dropped, next_cursor }
end
