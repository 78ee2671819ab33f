-- The cron engine: the one place a recurring job's ticks are computed (hero_duties fires by it,
-- hero_cron_next shows and checks schedules with it). Stub: to be written.
local cron_engine = {}

function cron_engine.parse(schedule, tz)
  return nil, 'not built yet'
end

function cron_engine.next_after(sched, ms)
  return nil
end
