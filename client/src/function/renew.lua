-- hero_renew: keep a running delivery from being recovered, fenced by its lease.
-- KEYS[1] job hash  KEYS[2] work stream
-- ARGV[1] lease (entry id)  ARGV[2] consumer group  ARGV[3] consumer name
-- Returns: 'ok' (idle time reset), 'stopped' (the job ended while running, e.g. stopped: the
-- handler should be interrupted), 'lost' (another delivery owns the job, or it is gone).
-- Errors: none of its own.
local function hero_renew(keys, args)
  local job_key, stream = keys[1], keys[2]
  local lease, group, consumer = args[1], args[2], args[3]
  local f = redis.call('HMGET', job_key, 'status', 'lease')
  if not f[1] or f[2] ~= lease then return 'lost' end
  if f[1] ~= 'started' then return 'stopped' end
  local claimed = redis.call('XCLAIM', stream, group, consumer, 0, lease, 'JUSTID')
  if #claimed == 0 then return 'lost' end
  return 'ok'
end
