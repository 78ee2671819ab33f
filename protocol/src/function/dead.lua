-- hero_dead: retry or purge dead letters. A retry takes the job out of the dead-letter stream and
-- queues it again with a fresh attempt budget in the same call, so it is never in both or in
-- neither; a purge deletes the entries and the jobs they name.
-- KEYS[1] dead-letter stream  KEYS[2] queue registry set  KEYS[3] config hash  KEYS[4] event log
-- KEYS[5] stats hash
--   then per dead letter i = 0, 1, ...: KEYS[6+2i] job hash  KEYS[7+2i] its work stream
-- ARGV[1] consumer group  ARGV[2] now ISO 8601  ARGV[3] action: 'retry' or 'purge'
--   then per dead letter i: ARGV[4+2i] dead-letter entry id  ARGV[5+2i] job id
-- Per dead letter, by what its entry and record say:
--   the entry is gone, or names another job: 'missing' (nothing written);
--   retry, a record that ended error: the entry is deleted; the record loses its run (attempts,
--     lease, worker_id, entry, output, error, started_at, finished_at) and its letter's index
--     (`dead`, protocol 30) and is dispatched to its work stream as a new entry, pending again
--     in its batch while the batch is not done:
--     'requeued';
--   retry, a record that is not error (it ran again since, or was changed by hand): 'not_dead'
--     (nothing written);
--   retry, no record: the entry is deleted: 'gone';
--   purge: the entry is deleted, and the record with it while it still says error: 'purged'.
-- Stats: the stream's `dead` and `failed` counts stay (they count what happened); nothing else.
-- Events: `requeued` (q, r 'dead letter') per retried job; `purged` (r 'dead letter') per purge.
-- Returns: one answer per dead letter, in order.
-- Errors: HERO_BAD_ARG for an unknown action or KEYS and ARGV that do not describe the same
-- dead letters; then nothing is written.
local function hero_dead(keys, args)
  local dead, registry, cfg = keys[1], keys[2], settings(keys[3])
  local group, now_iso, action = args[1], args[2], args[3]
  local n = (#keys - 5) / 2
  if n ~= math.floor(n) or #args ~= 3 + 2 * n then
    return redis.error_reply('HERO_BAD_ARG dead takes 5 keys and 3 arguments, then 2 keys and 2 arguments per dead letter')
  end
  if action ~= 'retry' and action ~= 'purge' then
    return redis.error_reply('HERO_BAD_ARG unknown action ' .. tostring(action))
  end
  local log = event_log(keys[4], cfg)
  local answers = {}
  for i = 0, n - 1 do
    local job_key, stream = keys[6 + 2 * i], keys[7 + 2 * i]
    local entry_id, job_id = args[4 + 2 * i], args[5 + 2 * i]
    local entry = redis.call('XRANGE', dead, entry_id, entry_id)
    local named = entry[1] and entry_fields(entry[1][2])
    local answer
    if named ~= job_id then
      answer = 'missing'
    else
      local r = redis.pcall('HGET', job_key, 'status')
      local status = type(r) == 'string' and r or nil
      if action == 'purge' then
        redis.call('XDEL', dead, entry_id)
        if status == 'error' then redis.call('DEL', job_key) end
        log_event(log, 'purged', job_id, nil, nil, nil, 'dead letter')
        answer = 'purged'
      elseif type(r) == 'table' or status == nil then
        redis.call('XDEL', dead, entry_id)
        answer = 'gone'
      elseif status ~= 'error' then
        answer = 'not_dead'
      else
        redis.call('XDEL', dead, entry_id)
        revive_member(cfg, job_key, job_id, 'error')
        redis.call('HDEL', job_key, 'attempts', 'lease', 'worker_id', 'entry', 'output', 'value', 'error',
          'started_at', 'finished_at', 'run_at', 'bridge', 'bridge_stop', 'bridge_taken', 'dead')
        redis.call('PERSIST', job_key)
        append(stream, group, registry, job_id)
        redis.call('HSET', job_key, 'status', 'dispatched', 'updated_at', now_iso)
        log_event(log, 'requeued', job_id, stream, nil, nil, 'dead letter')
        answer = 'requeued'
      end
    end
    answers[i + 1] = answer
  end
  return answers
end
