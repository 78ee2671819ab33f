-- hero_bridge_out: hand jobs of a canonical work stream to the legacy actors of a legacy list.
-- The bridge reads them as its own consumer (named 'bridge:...'), so each stays pending in the
-- stream until the job hash says finished or error (see hero_bridge_watch).
-- KEYS[1] work stream  KEYS[2] legacy list  KEYS[3] the mapping's tracking zset
-- KEYS[4] config hash  KEYS[5] event log
-- ARGV[1] consumer group  ARGV[2] bridge consumer  ARGV[3] most jobs  ARGV[4] job key prefix
-- ARGV[5] now ISO 8601  ARGV[6] pickup deadline ms (now + pickup time)  ARGV[7] legacy worker id
-- ARGV[8] legacy stop queue  ARGV[9] '1' when XACKDEL
-- Per job: status 'dispatched' (what seed-001 actors expect to find), lease = entry,
-- attempts + 1, worker_id = the legacy worker id, bridge = the list, bridge_stop = the stop
-- queue, bridge_taken = ''; LPUSH of the id to the list; tracked until the pickup deadline.
-- Entries naming no job hash, or a job that is no longer dispatched, are dropped.
-- Events: `bridged_out` (q, w the legacy worker id, a the attempt, r the legacy list) per job.
-- Returns: {handed out, dropped}
-- Errors: none of its own.
local function hero_bridge_out(keys, args)
  local stream, list, track = keys[1], keys[2], keys[3]
  local group, consumer, want, prefix = args[1], args[2], tonumber(args[3]), args[4]
  local now_iso, deadline, worker, stop_queue, xackdel = args[5], args[6], args[7], args[8], args[9]
  if redis.call('EXISTS', stream) == 0 then return { 0, 0 } end
  local res = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want, 'STREAMS', stream, '>')
  if not res then return { 0, 0 } end
  local handed, dropped = 0, 0
  local log = event_log(keys[5], settings(keys[4]))
  for _, e in ipairs(res[1][2]) do
    local id = e[1]
    local job_id = entry_fields(e[2])
    local job_key = prefix .. job_id
    local f = redis.call('HMGET', job_key, 'status', 'attempts')
    if f[1] ~= 'dispatched' then
      ack_del(stream, group, id, xackdel)
      dropped = dropped + 1
    else
      local attempts = tonumber(f[2])
      -- `id` too: a submit leaves it out, and seed-001 actors read it from the record
      local w = { 'id', job_id, 'status', 'dispatched', 'lease', id, 'worker_id', worker, 'bridge', list,
        'bridge_stop', stop_queue, 'bridge_taken', '', 'updated_at', now_iso }
      local attempt = nil
      if attempts or not f[2] then
        attempt = tostring((attempts or 0) + 1)
        w[#w + 1] = 'attempts'; w[#w + 1] = attempt
      end
      redis.call('HSET', job_key, unpack(w))
      redis.call('LPUSH', list, job_id)
      redis.call('ZADD', track, deadline, job_id)
      log_event(log, 'bridged_out', job_id, stream, worker, attempt, list)
      handed = handed + 1
    end
  end
  return { handed, dropped }
end
