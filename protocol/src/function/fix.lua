-- hero_fix: repair one inconsistency `hero audit` found, re-checked here so that a repair of
-- something that changed since the audit read it is a no-op.
-- KEYS[1] the work stream (or any key of the namespace where none applies)  KEYS[2] job hash
-- (or any key)  KEYS[3] delayed zset  KEYS[4] queue registry set  KEYS[5] config hash
-- KEYS[6] event log  KEYS[7] the key to repair (a reply list, for 'reply_ttl'; else any key)
-- ARGV[1] consumer group  ARGV[2] what: 'stale_entry', 'lost_job', 'unleased_job',
-- 'stale_delay', 'reply_ttl' or 'idle_consumer'  ARGV[3] the entry id ('stale_entry',
-- 'unleased_job': the job's lease), the job id ('lost_job', 'stale_delay'), or the consumer
-- ('idle_consumer')  ARGV[4] job id where there is one ('' else)  ARGV[5] now ISO 8601
-- ARGV[6] '1' when XACKDEL
-- What each repairs, when it still holds:
--   stale_entry: a pending entry that is no job's delivery (no `j`, no record, a key of another
--     type, or a record that is not started with this entry as its lease): acknowledged and
--     deleted;
--   lost_job: a record `dispatched` with no entry in its stream: queued again (a new entry);
--   unleased_job: a record `started` whose lease is not pending in its stream (nothing would ever
--     recover it): queued again, its attempt counted;
--   stale_delay: a member of the delayed set whose record is not `waiting`: removed;
--   reply_ttl: a reply list without a TTL: given the reply TTL;
--   idle_consumer: a consumer that holds nothing: deleted from the group.
-- Events: `requeued` (q, r 'audit') for lost_job and unleased_job.
-- Returns: 'fixed', or 'unchanged' when the inconsistency no longer holds.
-- Errors: HERO_BAD_ARG for an unknown what.
local function hero_fix(keys, args)
  local stream, job_key, delayed, registry = keys[1], keys[2], keys[3], keys[4]
  local cfg, target = settings(keys[5]), keys[7]
  local group, what, ref, job_id, now_iso, xackdel = args[1], args[2], args[3], args[4], args[5], args[6]
  local function record(...)
    local r = redis.pcall('HMGET', job_key, ...)
    if type(r) ~= 'table' or r.err then return nil end
    return r
  end
  if what == 'stale_entry' then
    local e = redis.call('XRANGE', stream, ref, ref)
    if not e[1] then return 'unchanged' end
    local named = entry_fields(e[1][2])
    if named ~= '' and named == job_id then
      local f = record('status', 'lease')
      if f and f[1] == 'started' and f[2] == ref then return 'unchanged' end
    end
    ack_del(stream, group, ref, xackdel)
    return 'fixed'
  elseif what == 'lost_job' or what == 'unleased_job' then
    local f = record('status', 'lease', 'attempts')
    if not f then return 'unchanged' end
    if what == 'lost_job' then
      if f[1] ~= 'dispatched' then return 'unchanged' end
    else
      if f[1] ~= 'started' or (f[2] or '') == '' then return 'unchanged' end
      local p = redis.call('XPENDING', stream, group, f[2], f[2], 1)
      if p[1] then return 'unchanged' end
      local attempts = tonumber(f[3]) or 1
      redis.call('HSET', job_key, 'attempts', tostring(attempts))
      f[3] = tostring(attempts)
    end
    redis.call('HDEL', job_key, 'lease', 'worker_id', 'entry')
    redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
    append(stream, group, registry, job_id, nil, f[3])
    log_event(event_log(keys[6], cfg), 'requeued', job_id, stream, nil, nil, 'audit')
    return 'fixed'
  elseif what == 'stale_delay' then
    local f = record('status')
    if f and f[1] == 'waiting' then return 'unchanged' end
    if redis.call('ZREM', delayed, ref) == 0 then return 'unchanged' end
    return 'fixed'
  elseif what == 'reply_ttl' then
    if redis.call('PTTL', target) ~= -1 then return 'unchanged' end
    redis.call('PEXPIRE', target, setting_arg(cfg, 'reply_ttl_ms', 3600000))
    return 'fixed'
  elseif what == 'idle_consumer' then
    local p = redis.call('XPENDING', stream, group, '-', '+', 1, ref)
    if p[1] then return 'unchanged' end
    redis.call('XGROUP', 'DELCONSUMER', stream, group, ref)
    return 'fixed'
  end
  return redis.error_reply('HERO_BAD_ARG unknown repair ' .. tostring(what))
end
