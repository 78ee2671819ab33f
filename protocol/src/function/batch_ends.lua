-- hero_batch_ends: count into their batches the ends that a library of protocol 26 or older
-- recorded without counting them (it knows no batches), as the broker finds them in the event
-- log: `finished` and `error` events written for a worker the fleet says speaks such a
-- protocol. Each end is counted once: the call moves the brokers' cursor over the event log in
-- the same step, and only from the cursor it expects (a second broker's call over the same
-- events answers 'moved' and counts nothing).
-- KEYS[1] config hash  KEYS[2] event log
-- KEYS[3..] job hash, one per job
-- ARGV[1] now ISO 8601  ARGV[2] the cursor expected ('' before the first call)
-- ARGV[3] the cursor after these events
--   then per job, in the order of KEYS: its id, and '1' when its event was `finished`, '0' for
--   `error`
-- A job is counted only while its record still says what its event said (not queued again
-- since), into a batch its record names that is not done.
-- Events: `batch_done` per callback job submitted (j its id, q its stream, r the batch and
--   its counts).
-- Returns: how many of the jobs still ended as their events said, or 'moved' when the cursor
-- was not the one expected (nothing counted).
-- Errors: none of its own.
local BATCH_ENDS_CURSOR = 'batch_ends_cursor'
local function hero_batch_ends(keys, args)
  local config, now_iso, expected, after = keys[1], args[1], args[2], args[3]
  local cur = redis.call('HGET', config, BATCH_ENDS_CURSOR) or ''
  if cur ~= expected then return 'moved' end
  redis.call('HSET', config, BATCH_ENDS_CURSOR, after)
  local cfg = settings(config)
  local ended = {}
  for i = 3, #keys do
    local k = 2 * (i - 3)
    local job_id, ok = args[4 + k], args[5 + k] == '1'
    local status = redis.pcall('HGET', keys[i], 'status')
    if (ok and status == 'finished') or (not ok and status == 'error') then
      ended[#ended + 1] = { keys[i], job_id, ok }
    end
  end
  if #ended > 0 and open_batches(cfg) then
    count_batch_ends({ cfg = cfg, log = event_log(keys[2], cfg), now_iso = now_iso }, ended)
  end
  return #ended
end
