-- Time zones for the cron engine: the proleptic Gregorian calendar (days since the epoch and
-- back, month lengths, weekdays), a POSIX TZ rule (lib/zones.lua holds one per IANA name, as
-- tzfile(5) footers write them: `CET-1CEST,M3.5.0,M10.5.0/3`, `<+0545>-5:45`, `<-03>3`, Jn
-- and n dates, `/time` from -167 to 167 hours) read into offsets, the offset in force at any
-- instant with the transitions either side of it, and a local wall-clock time resolved to the
-- instants that show it (none in a spring-forward gap, two in a fall-back overlap).
-- Offsets here are seconds east of UTC (POSIX writes them west); instants and wall-clock times
-- are whole seconds since the epoch, a wall-clock time counted as if its zone were UTC.
local tz_rules = {}

-- Hinnant's days_from_civil: exact for any year, with no os.time to lean on inside Redis.
function tz_rules.days(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

function tz_rules.civil(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

function tz_rules.leap(y)
  return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)
end

function tz_rules.month_len(y, m)
  if m == 2 then return tz_rules.leap(y) and 29 or 28 end
  return 30 + (m + math.floor(m / 8)) % 2
end

-- 0 is Sunday, as cron counts; the epoch was a Thursday.
function tz_rules.weekday(z)
  return (z + 4) % 7
end

-- `[+-]hh[:mm[:ss]]` at `pos` of `s`: its seconds and the position after it, or nil.
function tz_rules.hms(s, pos, max_h)
  local sign, h, at = string.match(s, '^([+-]?)(%d+)()', pos)
  if not h or #h > 3 or tonumber(h) > max_h then return nil end
  local secs = tonumber(h) * 3600
  for unit = 60, 1, -59 do
    local part, after = string.match(s, '^:(%d%d?)()', at)
    if not part then break end
    if tonumber(part) > 59 then return nil end
    secs, at = secs + tonumber(part) * unit, after
  end
  return sign == '-' and -secs or secs, at
end

-- A zone abbreviation (`CET`, `<+0545>`): the position after it, or nil.
function tz_rules.abbr(s, pos)
  if string.sub(s, pos, pos) == '<' then
    local close = string.find(s, '>', pos, true)
    return close and close > pos + 1 and close + 1 or nil
  end
  local word = string.match(s, '^%a+', pos)
  return word and #word >= 3 and pos + #word or nil
end

-- A DST start or end (`M3.5.0/3`, `J60`, `59/-1`): the date rule and the position after it.
function tz_rules.date_rule(s, pos)
  local r = {}
  local m, w, d, at = string.match(s, '^M(%d+)%.(%d)%.(%d)()', pos)
  if m then
    r.m, r.w, r.d = tonumber(m), tonumber(w), tonumber(d)
    if r.m < 1 or r.m > 12 or r.w < 1 or r.w > 5 or r.d > 6 then return nil end
  else
    local j, n
    j, n, at = string.match(s, '^(J?)(%d+)()', pos)
    if not n then return nil end
    r.n, r.julian = tonumber(n), j == 'J'
    if r.n > 365 or (r.julian and r.n < 1) then return nil end
  end
  r.time = 7200
  if string.sub(s, at, at) == '/' then
    r.time, at = tz_rules.hms(s, at + 1, 167)
    if not r.time then return nil end
  end
  return r, at
end

-- A POSIX TZ rule read into { std =, dst = (nil without daylight time), on =, off = } or nil.
-- A daylight name without dates takes the US rule, as glibc does without posixrules.
function tz_rules.parse(spec)
  local at = tz_rules.abbr(spec, 1)
  if not at then return nil end
  local west
  west, at = tz_rules.hms(spec, at, 24)
  if not west then return nil end
  local rule = { std = -west, years = {} }
  if at > #spec then return rule end
  at = tz_rules.abbr(spec, at)
  if not at then return nil end
  rule.dst = rule.std + 3600
  if at <= #spec and string.sub(spec, at, at) ~= ',' then
    west, at = tz_rules.hms(spec, at, 24)
    if not west then return nil end
    rule.dst = -west
  end
  if at > #spec then spec, at = spec .. ',M3.2.0,M11.1.0', at end
  if string.sub(spec, at, at) ~= ',' then return nil end
  rule.on, at = tz_rules.date_rule(spec, at + 1)
  if not rule.on or string.sub(spec, at, at) ~= ',' then return nil end
  rule.off, at = tz_rules.date_rule(spec, at + 1)
  if not rule.off or at <= #spec then return nil end
  return rule
end

-- The day (since the epoch) a date rule names in year y.
function tz_rules.rule_day(r, y)
  if r.m then
    local first = tz_rules.days(y, r.m, 1)
    local day = first + (r.d - tz_rules.weekday(first)) % 7 + 7 * (r.w - 1)
    if day >= first + tz_rules.month_len(y, r.m) then day = day - 7 end
    return day
  end
  local jan1 = tz_rules.days(y, 1, 1)
  if not r.julian then return jan1 + r.n end
  -- Jn never counts February 29
  return jan1 + r.n - 1 + ((r.n >= 60 and tz_rules.leap(y)) and 1 or 0)
end

-- The instants daylight time starts and ends in year y: the start is written in standard
-- time, the end in daylight time. Kept per rule, which lives for one call.
function tz_rules.year(rule, y)
  local t = rule.years[y]
  if not t then
    t = { tz_rules.rule_day(rule.on, y) * 86400 + rule.on.time - rule.std,
      tz_rules.rule_day(rule.off, y) * 86400 + rule.off.time - rule.dst }
    rule.years[y] = t
  end
  return t[1], t[2]
end

-- At instant t: the offset in force, the last transition at or before t with the offset
-- before it, and the first transition after t with the offset after it (infinite without
-- daylight time). The three years around t hold both, whatever hour a rule names.
function tz_rules.around(rule, t)
  local std, dst = rule.std, rule.dst
  if not dst then return std, -math.huge, std, math.huge, std end
  local y = tz_rules.civil(math.floor((t + std) / 86400))
  local tp, o, tn, on = -math.huge, std, math.huge, std
  for yy = y - 1, y + 1 do
    local on_at, off_at = tz_rules.year(rule, yy)
    if on_at <= t and on_at > tp then tp, o = on_at, dst end
    if off_at <= t and off_at > tp then tp, o = off_at, std end
    if on_at > t and on_at < tn then tn, on = on_at, dst end
    if off_at > t and off_at < tn then tn, on = off_at, std end
  end
  return o, tp, o == dst and std or dst, tn, on
end

function tz_rules.offset_at(rule, t)
  return (tz_rules.around(rule, t))
end

-- The instants whose wall clock shows local time c, in order: one, two in a fall-back overlap,
-- or none in a spring-forward gap (then also the transition instant that opened the gap).
function tz_rules.instants(rule, c)
  local std, dst = rule.std, rule.dst or rule.std
  local out = {}
  if tz_rules.offset_at(rule, c - std) == std then out[1] = c - std end
  if dst ~= std and tz_rules.offset_at(rule, c - dst) == dst then out[#out + 1] = c - dst end
  if out[2] and out[2] < out[1] then out[1], out[2] = out[2], out[1] end
  if out[1] then return out end
  local _, _, _, opened = tz_rules.around(rule, c - math.max(std, dst))
  return out, opened
end
