-- hero_complete: record the end of one delivery, fenced by its lease.
-- KEYS[1] job hash  KEYS[2] work stream  KEYS[3] delayed zset  KEYS[4] reply list  KEYS[5] config hash
-- ARGV[1] lease (the delivery's entry id)  ARGV[2] consumer group
-- ARGV[3] outcome: 'done' (ARGV[4] = output), 'fail' (ARGV[4] = error; retried at ARGV[5] while
--         attempts <= retries), 'retry' (retry at ARGV[5] while the budget lasts, else error
--         ARGV[4]), 'abort' (error ARGV[4], never retried)
-- ARGV[4] output or error text  ARGV[5] retry-at ms  ARGV[6] now ISO 8601  ARGV[7] '1' when XACKDEL
-- ARGV[8] job id
-- Returns: 'completed' (this delivery's outcome is recorded as final), 'retrying' (parked in the
-- delayed set), 'already_completed' (the job already ended, e.g. stopped), 'lease_lost' (another
-- delivery owns the job now, or the job is gone).
-- Errors: HERO_BAD_ARG for an unknown outcome.
local function hero_complete(keys, args)
  local job_key, stream, delayed, reply_key, config = keys[1], keys[2], keys[3], keys[4], keys[5]
  local lease, group, outcome, text, retry_at, now_iso, xackdel, job_id =
    args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8]
  if outcome ~= 'done' and outcome ~= 'fail' and outcome ~= 'retry' and outcome ~= 'abort' then
    return redis.error_reply('HERO_BAD_ARG unknown outcome ' .. tostring(outcome))
  end
  local f = redis.call('HMGET', job_key, 'status', 'lease', 'attempts', 'retries', 'reply')
  local status, cur_lease = f[1], f[2]
  if not status or cur_lease ~= lease then
    return 'lease_lost'
  end
  if status ~= 'started' then
    return 'already_completed'
  end
  ack_del(stream, group, lease, xackdel)
  local attempts, retries = tonumber(f[3]) or 1, tonumber(f[4]) or 0
  if (outcome == 'fail' or outcome == 'retry') and attempts <= retries then
    redis.call('HSET', job_key, 'status', 'waiting', 'error', text, 'run_at', retry_at, 'updated_at', now_iso)
    redis.call('HDEL', job_key, 'entry', 'lease')
    redis.call('ZADD', delayed, retry_at, job_id)
    return 'retrying'
  end
  if outcome == 'done' then
    finish(job_key, reply_key, config, 'finished', text, f[5], now_iso)
  else
    finish(job_key, reply_key, config, 'error', text, f[5], now_iso)
  end
  return 'completed'
end
