-- Time zones for the cron engine: a POSIX TZ rule (lib/zones.lua) read into offsets, and the
-- UTC offset in force at any instant. Stub: to be written.
local tz_rules = {}
