-- hero_cron: claim one tick of a recurring job, and fire it, atomically. Every broker computes
-- the same next tick from the schedule; the first whose call finds the tick it expects in the
-- next-tick hash moves it on (compare-and-set), and only that call submits the tick's job, so
-- each tick fires once however many brokers run, and a broker that dies mid-pass leaves
-- nothing half done (no lock, no TTL to lapse).
-- KEYS[1] cron next-tick hash  KEYS[2..9] hero_submit's keys for one job
-- ARGV[1] name  ARGV[2] the tick the caller expects ('' before the first)
-- ARGV[3] the tick after it  ARGV[4] 'fire' (submit the job) or 'skip' (move on only: a tick
--   missed under the skip policy, or the first claim)
-- ARGV[5..] hero_submit's arguments for one job
-- Counts in the hash: `<name>|fires` (ticks fired) and `<name>|last` (the last tick fired).
-- Returns: {'claimed', the next tick} or {'taken', the tick another broker moved it to}.
-- Errors: those of hero_submit (then nothing is claimed).
local function hero_cron(keys, args)
  local next_hash, name, expected, after, action = keys[1], args[1], args[2], args[3], args[4]
  local current = redis.call('HGET', next_hash, name) or ''
  if current ~= expected then return { 'taken', current } end
  if action == 'fire' then
    local r = hero_submit({ unpack(keys, 2) }, { unpack(args, 5) })
    if r.err then return r end
    redis.call('HINCRBY', next_hash, name .. '|fires', 1)
    redis.call('HSET', next_hash, name .. '|last', expected)
  end
  redis.call('HSET', next_hash, name, after)
  return { 'claimed', after }
end
