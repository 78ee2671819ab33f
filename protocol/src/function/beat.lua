-- hero_beat: a live process's heartbeat, on Redis's clock and allowed past maxmemory
-- (`allow-oom`), so that neither a full Redis nor a skewed clock makes a live worker look dead,
-- and a worker can start and register while Redis is full. What it writes past maxmemory is
-- bounded: each live process's own fleet entry, presence keys and liveness member, rewritten
-- in place (about 0.5 KB a process and script type), never anything that grows with jobs.
-- KEYS[1] consumers sorted set (liveness deadlines)  KEYS[2] fleet hash  KEYS[3] config hash
-- KEYS[4] memory flag (the maxmemory policy, read from INFO, kept for MEMORY_CHECK_MS)
--   then KEYS[5..] the worker's presence keys, one per script type (none for a broker)
-- ARGV[1] process name (a worker's consumer; a broker's `broker:<host>:<pid>`)
-- ARGV[2] liveness ttl ms  ARGV[3] fleet entry: a JSON object without `expires_ms`, which this
-- adds as Redis's clock + ttl  ARGV[4] presence JSON (a worker's; '' for a broker): written to
-- each presence key with PX ttl, and the consumer's deadline (Redis's clock + ttl) to KEYS[1]
-- Returns: {now ms on Redis's clock, lease_ms, fleet_lacks, maxmemory policy} (the config
-- hash's two fields as the broker published them, false when absent)
-- Errors: HERO_BAD_ARG for a ttl that is not a positive number or an entry that is not a JSON
-- object.
local function hero_beat(keys, args)
  local name, ttl, entry, presence = args[1], tonumber(args[2]), args[3], args[4]
  if not ttl or ttl <= 0 then return redis.error_reply('HERO_BAD_ARG ttl ms is not a positive number') end
  if type(entry) ~= 'string' or string.sub(entry, 1, 1) ~= '{' or string.sub(entry, -1) ~= '}' then
    return redis.error_reply('HERO_BAD_ARG the fleet entry is not a JSON object')
  end
  local now = server_ms()
  local deadline = string.format('%d', now + ttl)
  local sep = entry == '{}' and '' or ','
  redis.call('HSET', keys[2], name, string.sub(entry, 1, -2) .. sep .. '"expires_ms":' .. deadline .. '}')
  if presence and presence ~= '' then
    local ttl_arg = string.format('%d', ttl)
    for i = 5, #keys do redis.call('SET', keys[i], presence, 'PX', ttl_arg) end
    redis.call('ZADD', keys[1], deadline, name)
  end
  local cfg = redis.call('HMGET', keys[3], 'lease_ms', 'fleet_lacks')
  return { now, cfg[1], cfg[2], memory_policy(keys[4], true) }
end
