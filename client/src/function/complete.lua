-- hero_complete: record the end of one or more deliveries, each fenced by its lease. A worker
-- records a whole batch of outcomes in one call: the settings are read once, and each stream's
-- done entries are acknowledged with one command and trimmed with another (see ack_trim).
-- KEYS[1] delayed zset  KEYS[2] config hash
--   then per job i = 0, 1, ...: KEYS[3+3i] job hash  KEYS[4+3i] its work stream
--   KEYS[5+3i] its reply list
-- ARGV[1] consumer group  ARGV[2] now ISO 8601  ARGV[3] '1' when the server has XACKDEL
--   then per job i: ARGV[4+5i] lease (the delivery's entry id)  ARGV[5+5i] outcome
--   ARGV[6+5i] output or error text  ARGV[7+5i] retry-at ms  ARGV[8+5i] job id
--   outcome: 'done' (text = output), 'fail' (text = error; retried at retry-at while
--   attempts <= retries), 'retry' (retried at retry-at while the budget lasts, else error text),
--   'abort' (error text, never retried)
-- Returns: one answer per job, in order: 'completed' (this delivery's outcome is recorded as
-- final), 'retrying' (parked in the delayed set), 'already_completed' (the job already ended,
-- e.g. stopped), 'lease_lost' (another delivery owns the job now, or the job is gone).
-- Errors: HERO_BAD_ARG for an unknown outcome or KEYS and ARGV that do not describe the same
-- jobs; then nothing is written.
local function hero_complete(keys, args)
  local delayed, cfg = keys[1], settings(keys[2])
  local group, now_iso, xackdel = args[1], args[2], args[3]
  local n = (#keys - 2) / 3
  if n ~= math.floor(n) or #args ~= 3 + 5 * n then
    return redis.error_reply('HERO_BAD_ARG complete takes 3 keys and 5 arguments per job')
  end
  for i = 0, n - 1 do
    local outcome = args[5 + 5 * i]
    if outcome ~= 'done' and outcome ~= 'fail' and outcome ~= 'retry' and outcome ~= 'abort' then
      return redis.error_reply('HERO_BAD_ARG unknown outcome ' .. tostring(outcome))
    end
  end
  local answers = {}
  local acks, streams = {}, {}
  for i = 0, n - 1 do
    local job_key, stream, reply_key = keys[3 + 3 * i], keys[4 + 3 * i], keys[5 + 3 * i]
    local lease, outcome, text, retry_at, job_id =
      args[4 + 5 * i], args[5 + 5 * i], args[6 + 5 * i], args[7 + 5 * i], args[8 + 5 * i]
    -- pcall: a job key replaced by another type is gone for this delivery, and must not fail
    -- the whole batch of other workers' jobs with it
    local f = redis.pcall('HMGET', job_key, 'status', 'lease', 'attempts', 'retries', 'reply')
    local status, cur_lease = f[1], f[2]
    if f.err or not status or cur_lease ~= lease then
      answers[#answers + 1] = 'lease_lost'
    elseif status ~= 'started' then
      answers[#answers + 1] = 'already_completed'
    else
      local ids = acks[stream]
      if not ids then
        ids = {}
        acks[stream] = ids
        streams[#streams + 1] = stream
      end
      ids[#ids + 1] = lease
      local attempts, retries = tonumber(f[3]) or 1, tonumber(f[4]) or 0
      if (outcome == 'fail' or outcome == 'retry') and attempts <= retries then
        redis.call('HSET', job_key, 'status', 'waiting', 'error', text, 'run_at', retry_at, 'updated_at', now_iso)
        redis.call('HDEL', job_key, 'entry', 'lease')
        redis.call('ZADD', delayed, retry_at, job_id)
        answers[#answers + 1] = 'retrying'
      else
        if outcome == 'done' then
          finish(job_key, job_id, reply_key, cfg, 'finished', text, f[5], now_iso)
        else
          finish(job_key, job_id, reply_key, cfg, 'error', text, f[5], now_iso)
        end
        answers[#answers + 1] = 'completed'
      end
    end
  end
  for _, stream in ipairs(streams) do
    ack_trim(stream, group, acks[stream], xackdel)
  end
  return answers
end
