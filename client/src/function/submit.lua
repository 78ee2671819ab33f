-- hero_submit: store a new job and queue it, or park it in the delayed set.
-- KEYS[1] job hash  KEYS[2] work stream  KEYS[3] delayed zset  KEYS[4] queue registry set
-- ARGV[1] job id  ARGV[2] consumer group  ARGV[3] run-at ms ('0': now)
-- ARGV[4..] field, value pairs of the job record (without status / entry)
-- Returns: {'created', status} for a new job, {'exists', status} when the id is taken (nothing
-- is written: submitting an existing id is idempotent).
-- Errors: HERO_BAD_ARG when the field list is not in pairs.
local function hero_submit(keys, args)
  local job_key, stream, delayed, registry = keys[1], keys[2], keys[3], keys[4]
  local job_id, group, run_at = args[1], args[2], tonumber(args[3])
  local existing = redis.call('HGET', job_key, 'status')
  if existing then
    return { 'exists', existing }
  end
  if (#args - 3) % 2 ~= 0 then
    return redis.error_reply('HERO_BAD_ARG job fields must come in field/value pairs')
  end
  if run_at and run_at > 0 then
    redis.call('HSET', job_key, 'status', 'waiting', 'run_at', args[3], unpack(args, 4))
    redis.call('ZADD', delayed, run_at, job_id)
    return { 'created', 'waiting' }
  end
  local entry = append(stream, group, registry, job_id)
  redis.call('HSET', job_key, 'status', 'dispatched', 'entry', entry, unpack(args, 4))
  return { 'created', 'dispatched' }
end
