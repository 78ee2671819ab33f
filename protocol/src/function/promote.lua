-- hero_promote: move one due job from the delayed set into its work stream.
-- KEYS[1] delayed zset  KEYS[2] job hash  KEYS[3] work stream  KEYS[4] queue registry set
-- KEYS[5] config hash  KEYS[6] event log  KEYS[7] stats hash
-- ARGV[1] job id  ARGV[2] consumer group  ARGV[3] now ISO 8601
-- Stats: the stream's `delayed` gauge down by one when promoted (or when the job was no longer
-- waiting: it left the delayed set all the same).
-- Events: `dispatched` (q) when promoted.
-- Returns: 'promoted', 'gone' (another broker promoted it, or it was stopped), 'skipped' (the job
-- is no longer waiting or its hash is gone; the stale member was removed).
-- Errors: none of its own.
local function hero_promote(keys, args)
  local delayed, job_key, stream, registry = keys[1], keys[2], keys[3], keys[4]
  local job_id, group, now_iso = args[1], args[2], args[3]
  if redis.call('ZREM', delayed, job_id) == 0 then return 'gone' end
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
