-- hero_promote: move one due job from the delayed set into its work stream; or, when the broker
-- found no queue to move it to (its record names no valid script type), end it `error` instead.
-- KEYS[1] delayed zset  KEYS[2] job hash  KEYS[3] work stream (the job hash with ARGV[4])
-- KEYS[4] queue registry set  KEYS[5] config hash  KEYS[6] event log  KEYS[7] stats hash
-- KEYS[8] reply list  KEYS[9] retention stream
-- ARGV[1] job id  ARGV[2] consumer group  ARGV[3] now ISO 8601
-- ARGV[4] why it cannot be queued ('' or absent to promote it): the job ends `error` with it
-- Stats: the stream's `delayed` gauge down by one when promoted (or when the job was no longer
-- waiting: it left the delayed set all the same); a job ended for ARGV[4] counts as `failed`
-- (per minute too) under the stream '' (it names none).
-- Events: `dispatched` (q) when promoted; `error` (r the reason) when ended for ARGV[4]. Through
-- the ended-jobs hook (release_if_any): `dispatched` or `error` per dependent, `batch_done` per
-- batch completed.
-- Returns: 'promoted', 'failed' (ended for ARGV[4]), 'gone' (another broker promoted it, or it
-- was stopped), 'skipped' (the job is no longer waiting or its hash is gone; the stale member
-- was removed).
-- Errors: none of its own.
local function hero_promote(keys, args)
  local delayed, job_key, stream, registry = keys[1], keys[2], keys[3], keys[4]
  local job_id, group, now_iso = args[1], args[2], args[3]
  if redis.call('ZREM', delayed, job_id) == 0 then return 'gone' end
  local why = args[4] or ''
  if why ~= '' then
    -- nothing to queue it to: it ends error, with its event, its count and its dependents
    local f = redis.pcall('HMGET', job_key, 'status', 'reply')
    if type(f) ~= 'table' or f.err or f[1] ~= 'waiting' then return 'skipped' end
    local cfg = settings(keys[5])
    local done, log, st = retained(keys[9], now_iso), event_log(keys[6], cfg), stats(keys[7], now_iso)
    finish(job_key, job_id, keys[8], cfg, 'error', why, f[2], now_iso, done)
    log_event(log, 'error', job_id, nil, nil, nil, why)
    tally(st, '', 'failed', 1, true)
    release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso }, { job_key }, { job_id }, { false })
    flush_retained(done)
    flush_stats(st)
    return 'failed'
  end
  local f = redis.call('HMGET', job_key, 'status', 'attempts')
  local st = stats(keys[7])
  tally(st, stream, 'delayed', -1)
  flush_stats(st)
  if f[1] ~= 'waiting' then return 'skipped' end
  append(stream, group, registry, job_id, nil, f[2] or nil)
  redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
  redis.call('HDEL', job_key, 'run_at')
  log_event(event_log(keys[6], settings(keys[5])), 'dispatched', job_id, stream)
  return 'promoted'
end
