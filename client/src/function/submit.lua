-- hero_submit: store a new job and queue it, or park it in the delayed set.
-- KEYS[1] job hash  KEYS[2] work stream  KEYS[3] delayed zset  KEYS[4] queue registry set
-- ARGV[1] job id  ARGV[2] consumer group  ARGV[3] run-at ms ('0': now)  ARGV[4] now ISO 8601
-- ARGV[5..] field, value pairs of the job record (without status / entry)
-- Returns: {'created', status} for a new job, {'exists', status} when the id is taken (nothing
-- is written: submitting an existing id is idempotent).
-- Errors: HERO_BAD_ARG when the field list is not in pairs.
local function hero_submit(keys, args)
  local job_key, stream, delayed, registry = keys[1], keys[2], keys[3], keys[4]
  local job_id, group, run_at, now_iso = args[1], args[2], tonumber(args[3]), args[4]
  local existing = redis.call('HGET', job_key, 'status')
  if existing then
    return { 'exists', existing }
  end
  if (#args - 4) % 2 ~= 0 then
    return redis.error_reply('HERO_BAD_ARG job fields must come in field/value pairs')
  end
  redis.call('HSET', job_key, unpack(args, 5))
  if run_at and run_at > 0 then
    redis.call('HSET', job_key, 'status', 'waiting', 'run_at', args[3])
    redis.call('ZADD', delayed, run_at, job_id)
    return { 'created', 'waiting' }
  end
  enqueue(stream, group, registry, job_key, job_id, now_iso)
  return { 'created', 'dispatched' }
end
