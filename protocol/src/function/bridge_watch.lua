-- hero_bridge_watch: follow the jobs a legacy list's actors hold (handed out by
-- hero_bridge_out, or dual-pushed by hero_submit) until their job hash says they ended, and
-- take back the ones a legacy actor never picked up or abandoned.
-- KEYS[1] tracking zset (job id -> next deadline ms)  KEYS[2] legacy list  KEYS[3] work stream
-- KEYS[4] queue registry set  KEYS[5] config hash  KEYS[6] dead-letter stream
-- KEYS[7] retention stream  KEYS[8] event log  KEYS[9] stats hash
-- ARGV[1] consumer group  ARGV[2] job key prefix  ARGV[3] reply key prefix  ARGV[4] now ISO 8601
-- ARGV[5] now ms  ARGV[6] pickup time ms  ARGV[7] max attempts  ARGV[8] '1' for a dual-push
-- mapping  ARGV[9] '1' when XACKDEL  ARGV[10] most jobs to look at  ARGV[11] rank to start at
-- Per tracked job, by what its hash says:
--   gone, or `bridge` empty (a new worker took it, or it was taken back): no longer tracked;
--   finished / error (a legacy actor recorded it, or it was stopped): the bridge's stream entry
--     is acknowledged (or the unread dual-push entry deleted); if no function ended it,
--     finished_at, the retention clock and the canonical JSON reply are added (the legacy actor
--     answered hero:reply:<id> itself);
--   dispatched, past the pickup deadline, still in the list: taken out of the list; a dual-push
--     job stays in its stream for new workers, an outbound one is queued again (new entry) or,
--     past the attempt budget, ends error 'no legacy actor took it from <list> within <t> s';
--   started, or dispatched but no longer in the list (popped, not yet marked): taken; the
--     deadline becomes now + the job's timeout (started_at set; a dual-push job counts an
--     attempt here);
--   taken and past that deadline: the legacy actor is gone: queued again (new entry; dual-push
--     mappings push it to the list again) or, past the attempt budget, dead-lettered and ended
--     error 'abandoned after <n> attempts: legacy actor of <list> did not finish within <t> s'.
--   A dead-lettered job's record names its letter: `dead` = the entry id (protocol 30; not while
--     a reader older than 29 is live: see dead_index).
-- Stats: the stream's `finished`, `failed`, `recovered` and `dead` as jobs end or come back;
-- `fair` when a job taken back goes into a fair queue's gate.
-- Events: `started` (r the legacy list, a the attempt of a dual-pushed job) when a legacy actor
-- took a job; `finished` or `error` (r the error) when it ended one no function had ended;
-- `recovered` (q, a, r why) when a job is taken back; `dead` (q, r the reason) past the budget;
-- through the ended-jobs hook (release_if_any), `dispatched` or `error` per dependent and
-- `batch_done` per batch completed.
-- Dependents of a job a legacy actor ended (or that was dead-lettered here) are released with it.
-- Returns: {ended, requeued, failed, next rank (0 when the whole set was seen)}
-- Errors: none of its own.
local function hero_bridge_watch(keys, args)
  local track, list, stream, registry, cfg, dead = keys[1], keys[2], keys[3], keys[4], settings(keys[5]), keys[6]
  local group, prefix, reply_prefix, now_iso = args[1], args[2], args[3], args[4]
  local now_ms, pickup_ms, max_attempts = tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  local dual, xackdel, count, from = args[8] == '1', args[9], tonumber(args[10]), tonumber(args[11])
  local done = retained(keys[7], now_iso)
  local log = event_log(keys[8], cfg)
  local st = stats(keys[9], now_iso)
  local tracked = redis.call('ZRANGE', track, from, from + count - 1, 'WITHSCORES')
  local ended, requeued, failed, removed = 0, 0, 0, 0
  local ek, ei, eo = {}, {}, {} -- the jobs ended here, whose dependents are released with them

  -- the stream entry the legacy side held: acknowledged if the bridge read it (its delivery is
  -- the lease), else the unread entry of a dual-pushed job (the record names it) is deleted
  local function release(lease, entry)
    if lease and lease ~= '' then
      ack_trim(stream, group, { lease }, xackdel)
    elseif entry and entry ~= '' then
      redis.call('XDEL', stream, entry)
    end
  end

  local function untrack(job_id)
    redis.call('ZREM', track, job_id)
    removed = removed + 1
  end

  -- back into the stream, or error past the budget
  local function take_back(job_id, job_key, f, attempts, reason)
    release(f[3], f[4])
    local limit = math.max(max_attempts, (tonumber(f[6]) or 0) + 1)
    if attempts >= limit then
      local letter = redis.call('XADD', dead, '*', 'j', job_id, 'reason', reason, 'queue', list)
      local index = dead_index(cfg, letter)
      if index then
        redis.call('HSET', job_key, 'bridge', '', 'bridge_taken', '', 'dead', index)
      else
        redis.call('HSET', job_key, 'bridge', '', 'bridge_taken', '')
      end
      finish(job_key, job_id, reply_prefix .. job_id, cfg, 'error', reason, f[7], now_iso, done)
      log_event(log, 'dead', job_id, stream, nil, tostring(attempts), reason)
      ek[#ek + 1], ei[#ei + 1], eo[#eo + 1] = job_key, job_id, false
      tally(st, stream, 'dead', 1, true)
      tally(st, stream, 'failed', 1, true)
      untrack(job_id)
      failed = failed + 1
      return
    end
    local new = append(stream, group, registry, job_id, nil, tostring(attempts), dual)
    redis.call('HSET', job_key, 'status', 'dispatched', 'lease', '', 'bridge_taken', '',
      'updated_at', now_iso)
    if dual then
      redis.call('HSET', job_key, 'entry', new)
      redis.call('LPUSH', list, job_id)
      redis.call('ZADD', track, now_ms + pickup_ms, job_id)
    else
      redis.call('HSET', job_key, 'bridge', '')
      redis.call('HDEL', job_key, 'entry')
      untrack(job_id)
    end
    log_event(log, 'recovered', job_id, stream, nil, tostring(attempts), reason)
    tally(st, stream, 'recovered', 1, true)
    requeued = requeued + 1
  end

  for k = 1, #tracked, 2 do
    local job_id, due = tracked[k], tonumber(tracked[k + 1]) <= now_ms
    local job_key = prefix .. job_id
    -- 1 status 2 bridge 3 lease 4 entry 5 attempts 6 retries 7 reply 8 timeout 9 finished_at
    -- 10 bridge_taken 11 output 12 error
    local f = redis.call('HMGET', job_key, 'status', 'bridge', 'lease', 'entry', 'attempts', 'retries',
      'reply', 'timeout', 'finished_at', 'bridge_taken', 'output', 'error')
    local status = f[1]
    local timeout_s = tonumber(f[8]) or 300
    if not status or (f[2] or '') ~= list then
      untrack(job_id)
    elseif status == 'finished' or status == 'error' then
      release(f[3], f[4])
      redis.call('HSET', job_key, 'bridge', '', 'bridge_taken', '')
      if not f[9] then
        redis.call('HSET', job_key, 'finished_at', now_iso, 'updated_at', now_iso)
        retain(done, job_key, job_id, cfg)
        ek[#ek + 1], ei[#ei + 1], eo[#eo + 1] = job_key, job_id, status == 'finished'
        if f[7] == '1' then
          push_reply(job_id, reply_prefix .. job_id, cfg, status, f[11] or '', f[12] or '', true, false)
        end
        if status == 'finished' then
          log_event(log, 'finished', job_id, stream, nil, nil, list)
          tally(st, stream, 'finished', 1, true)
        else
          log_event(log, 'error', job_id, stream, nil, nil, f[12] or '')
          tally(st, stream, 'failed', 1, true)
        end
      end
      untrack(job_id)
      ended = ended + 1
    elseif f[10] ~= '1' then
      local taken = status == 'started'
      if not taken and due then
        if redis.call('LREM', list, 1, job_id) == 1 then
          if dual then
            redis.call('HSET', job_key, 'bridge', '')
            untrack(job_id)
          else
            take_back(job_id, job_key, f, tonumber(f[5]) or 1,
              'no legacy actor took it from ' .. list .. ' within ' .. (pickup_ms / 1000) .. ' s')
          end
        else
          taken = true
        end
      end
      if taken then
        local w = { 'bridge_taken', '1', 'started_at', now_iso }
        local attempt = f[5]
        if dual then
          attempt = tostring((tonumber(f[5]) or 0) + 1)
          w[#w + 1] = 'attempts'; w[#w + 1] = attempt
        end
        redis.call('HSET', job_key, unpack(w))
        log_event(log, 'started', job_id, stream, nil, attempt, list)
        redis.call('ZADD', track, now_ms + timeout_s * 1000, job_id)
      end
    elseif due then
      take_back(job_id, job_key, f, tonumber(f[5]) or 1,
        'abandoned after ' .. (tonumber(f[5]) or 1) .. ' attempts: legacy actor of ' .. list ..
        ' did not finish within ' .. timeout_s .. ' s')
    end
  end
  release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso, registry = registry,
    group = group }, ek, ei, eo)
  flush_retained(done)
  flush_stats(st)
  local next_rank = 0
  if #tracked == 2 * count then next_rank = from + count - removed end
  return { ended, requeued, failed, next_rank }
end
