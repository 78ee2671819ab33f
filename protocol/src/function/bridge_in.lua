-- hero_bridge_in: move ids that legacy producers pushed to a legacy list into the canonical work
-- stream of the mapping, oldest first. Each id leaves the list and enters the stream in the same
-- call, so a crash of the broker between calls leaves it in exactly one of the two.
-- KEYS[1] legacy list  KEYS[2] work stream  KEYS[3] queue registry set  KEYS[4] dead-letter stream
-- KEYS[5] config hash  KEYS[6] event log
-- ARGV[1] consumer group  ARGV[2] most ids to move  ARGV[3] job key prefix  ARGV[4] script type
-- ARGV[5] group ('' for none)  ARGV[6] instance ('' for none)  ARGV[7] now ISO 8601
-- Per id: the job hash (seed-001 fields are enough) gets status 'dispatched', the
-- mapping's script_type / group / instance, reply 'legacy' (a seed-001 caller may BLPOP
-- hero:reply:<id>: in compatibility mode it gets the bare result there, and nothing is pushed
-- to the canonical reply list no one waits on) and updated_at; leftovers of an earlier run (lease, output, error,
-- finished_at) are removed, so a legacy requeue of a crashed job runs it again. The worker that
-- takes it checks the rest of the record: a malformed one ends `error` with the reason.
-- An id with no job hash, or one of a job a worker of ours runs (started, with a lease), goes
-- to the dead-letter stream with the reason instead (its record, if any, is not written: there
-- is none, or it is a running job's that a worker reads, so it gets no `dead` index; readers
-- find such a letter by their bounded look at the newest letters). A job still queued in a
-- stream gets a second entry: whichever is read first runs it, the other is dropped as stale.
-- Events: `bridged_in` (q the stream, r the legacy list) per id moved, `dead` (r the reason)
-- per id dead-lettered.
-- Returns: {moved, dead, blocked}: blocked is 1 when the oldest id is a job the bridge handed
-- to this list's legacy actors (it stays where it is, for them).
-- Errors: none of its own.
local function hero_bridge_in(keys, args)
  local list, stream, registry, dead = keys[1], keys[2], keys[3], keys[4]
  local group, max, prefix = args[1], tonumber(args[2]), args[3]
  local stype, tgroup, tinst, now_iso = args[4], args[5], args[6], args[7]
  local moved, dead_n, blocked = 0, 0, 0
  local log = event_log(keys[6], settings(keys[5]))
  for _ = 1, max do
    local job_id = redis.call('RPOP', list)
    if not job_id then break end
    local job_key = prefix .. job_id
    local f = redis.call('HMGET', job_key, 'status', 'lease', 'bridge', 'attempts')
    if (f[3] or '') ~= '' then
      redis.call('RPUSH', list, job_id)
      blocked = 1
      break
    end
    local reason
    if redis.call('EXISTS', job_key) == 0 then
      reason = 'no job hash at ' .. job_key
    elseif f[1] == 'started' and (f[2] or '') ~= '' then
      reason = 'pushed to ' .. list .. ' while a worker runs it'
    end
    if reason then
      redis.call('XADD', dead, '*', 'j', job_id, 'reason', reason, 'queue', list)
      log_event(log, 'dead', job_id, nil, nil, nil, reason)
      dead_n = dead_n + 1
    else
      append(stream, group, registry, job_id, nil, f[4] or nil)
      local w = { 'status', 'dispatched', 'script_type', stype, 'reply', 'legacy', 'updated_at', now_iso }
      if tgroup ~= '' then w[#w + 1] = 'group'; w[#w + 1] = tgroup end
      if tinst ~= '' then w[#w + 1] = 'instance'; w[#w + 1] = tinst end
      redis.call('HDEL', job_key, 'lease', 'entry', 'output', 'value', 'error', 'finished_at', 'started_at')
      redis.call('HSET', job_key, unpack(w))
      log_event(log, 'bridged_in', job_id, stream, nil, nil, list)
      moved = moved + 1
    end
  end
  return { moved, dead_n, blocked }
end
