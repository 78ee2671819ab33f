-- hero_cron_next: the next ticks of a schedule, computed by the one cron engine every process
-- reaches (lib/cron_engine.lua), so Rust, Python and Node check a schedule and show its ticks
-- with the same answer hero_duties fires by.
-- KEYS: none.
-- ARGV[1] schedule (a cron expression of 5, 6 (seconds first) or 7 (a year last) fields,
--   `@hourly` and the like, or
--   `every <duration>`)  ARGV[2] time zone (an IANA name; '' is UTC)  ARGV[3] after (ms since
--   the epoch)  ARGV[4] how many ticks (1-100)
-- Returns: the ticks strictly after `after`, ms since the epoch, in order (fewer when the
-- schedule has no more).
-- Errors: HERO_INVALID_CRON <what is wrong and what to give> for a schedule or zone the engine
-- does not take; HERO_BAD_ARG for an `after` or count that is not a number.
local function hero_cron_next(keys, args)
  local after, n = tonumber(args[3]), tonumber(args[4])
  if not after or not n or n < 1 or n > 100 then
    return redis.error_reply('HERO_BAD_ARG after must be ms since the epoch and the count 1-100')
  end
  local sched, err = cron_engine.parse(args[1], args[2] ~= '' and args[2] or 'UTC')
  if not sched then return redis.error_reply('HERO_INVALID_CRON ' .. err) end
  local out = {}
  for _ = 1, n do
    local t = cron_engine.next_after(sched, after)
    if not t then break end
    out[#out + 1] = t
    after = t
  end
  return out
end
