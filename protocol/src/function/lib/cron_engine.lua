-- The cron engine: the one place a recurring job's ticks are computed (hero_duties fires by
-- it, hero_cron_next shows and checks schedules with it), so every language gets the same
-- ticks. `every <duration>` is read as humantime reads it (ticks at whole multiples of it
-- since the epoch, 1s at least); a cron expression as croner 3.0.1's Cron::from_str: 5 fields,
-- 6 with seconds first, 7 with a year last; JAN and MON; `*` `?` lists ranges steps; `L` `nW`
-- in the day of month, `5L` `5#3` in the day of week, where a leading `+` ANDs it with the day
-- of month (else either matches, unless one is `*`); @yearly @annually @monthly @weekly @daily
-- @hourly. Beyond croner: `LW` (the last weekday) and `7L` (the last Sunday), which croner
-- refuses or never fires. The expression is read in its zone's wall-clock time. A fixed-time
-- schedule (second, minute and hour one value each, no `*` or step) fires once where its time
-- falls in a spring-forward gap, at the transition (the gap's end), and where it occurs twice,
-- at the first; any other schedule skips a gap's times and fires at both instants of a
-- repeated time, in instant order. Ticks are whole seconds, each search bounded (3000 steps of
-- a day, a month or a year, up to croner's year 5000) so a call stays cheap inside Redis.
local cron_engine = {
  memo = {}, kept = 0,
  ESC = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t', ['\0'] = '\\0' },
  FIELDS = { 'second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week', 'year' },
  BOUNDS = { { 0, 59 }, { 0, 59 }, { 0, 23 }, { 1, 31 }, { 1, 12 }, { 0, 7 }, { 1, 5000 } },
  -- croner's characters beyond `*/0-9,-` per field (`?` is already `*` there when checked)
  EXTRA = { [4] = 'LW?', [6] = '#L?' },
  NICKNAMES = { ['@YEARLY'] = '0 0 1 1 *', ['@ANNUALLY'] = '0 0 1 1 *', ['@MONTHLY'] = '0 0 1 * *',
    ['@WEEKLY'] = '0 0 * * 0', ['@DAILY'] = '0 0 * * *', ['@HOURLY'] = '0 * * * *' },
  -- replaced anywhere, in this order, as croner does (MON in the month field is January)
  NAMES = { '%-SUN', '-7', 'SUN', '0', 'MON', '1', 'TUE', '2', 'WED', '3', 'THU', '4', 'FRI', '5',
    'SAT', '6', 'JAN', '1', 'FEB', '2', 'MAR', '3', 'APR', '4', 'MAY', '5', 'JUN', '6', 'JUL', '7',
    'AUG', '8', 'SEP', '9', 'OCT', '10', 'NOV', '11', 'DEC', '12' },
  -- seconds a unit, or (negative) nanoseconds for the units below a second
  UNITS = { nanos = -1, nsec = -1, ns = -1, usec = -1e3, us = -1e3, ['\194\181s'] = -1e3,
    millis = -1e6, msec = -1e6, ms = -1e6, seconds = 1, second = 1, secs = 1, sec = 1, s = 1,
    minutes = 60, minute = 60, min = 60, mins = 60, m = 60, hours = 3600, hour = 3600,
    hr = 3600, hrs = 3600, h = 3600, days = 86400, day = 86400, d = 86400, weeks = 604800,
    week = 604800, wk = 604800, wks = 604800, w = 604800, months = 2630016, month = 2630016,
    M = 2630016, years = 31557600, year = 31557600, yr = 31557600, yrs = 31557600, y = 31557600 },
}

-- A string as Rust's {:?} writes it, so messages read as the Rust side's did.
function cron_engine.quote(s)
  return '"' .. string.gsub(s, '[%c"\\]', function(c)
    return cron_engine.ESC[c] or string.format('\\u{%x}', string.byte(c))
  end) .. '"'
end

-- A schedule in a zone: { step = ms } for `every`, else { cron = the parsed expression, rule =
-- the zone's rule }. Parsed expressions (~40 us to make) are kept by their text, none changed
-- once made, so hero_duties' pass over every spec parses each once: at most 256 (~4 KB each),
-- all dropped when full.
function cron_engine.parse(schedule, tz)
  local rule = type(tz) == 'string' and ZONES[tz] and tz_rules.parse(ZONES[tz])
  if not rule then
    return nil, 'time zone ' .. cron_engine.quote(tostring(tz))
      .. ' is not an IANA zone name (e.g. UTC, Europe/Amsterdam)'
  end
  local text = string.match(schedule, '^%s*every (.-)%s*$')
  if text and text ~= '' then
    local ms, why = cron_engine.duration(string.match(text, '^%s*(.*)$'))
    if not ms then
      return nil, 'schedule ' .. cron_engine.quote(schedule) .. ': ' .. cron_engine.quote(text)
        .. ' is not a duration (' .. why .. ')'
    end
    if ms >= 1000 then return { step = ms } end
    return nil, 'schedule ' .. cron_engine.quote(schedule) .. ': the shortest interval is 1s'
  end
  local s, why = cron_engine.memo[schedule], nil
  if not s then
    s, why = cron_engine.cron(schedule)
    if not s then
      return nil, 'schedule ' .. cron_engine.quote(schedule) .. ' is not a cron expression ('
        .. why .. ') nor `every <duration>`'
    end
    if cron_engine.kept >= 256 then cron_engine.memo, cron_engine.kept = {}, 0 end
    cron_engine.memo[schedule], cron_engine.kept = s, cron_engine.kept + 1
  end
  return { cron = s, rule = rule }
end

-- humantime::parse_duration in ms: numbers each with a unit (`1h 30m`, `1h30m`), blanks
-- allowed inside a number (`1 0s` is 10s), a fraction that must come out whole (in
-- nanoseconds up to minutes, in seconds above).
function cron_engine.duration(s)
  if s == '0' then return 0 end
  local at, secs, nanos = 1, 0, 0
  while true do
    local int, p, dot, raw, unit, after =
      string.match(s, '^%s*(%d[%d%s]*)()(%.?)([%d%s]*)([%a\194\181]*)()', at)
    if not int then
      if at > 1 and string.find(s, '^%s*$', at) then break end
      if string.find(s, '^%s*$', at) then return nil, 'value was empty' end
      return nil, 'expected number at ' .. (at > 1 and at or 0)
    end
    local c, frac = string.sub(s, after, after), string.gsub(raw, '%s', '')
    if dot == '.' and frac == '' then
      return nil, 'invalid character at ' .. (#raw == 0 and p - 1 or p + #raw)
    elseif c ~= '' and not string.find(c, '[%d%s]') then
      return nil, 'invalid character at ' .. (after - 1)
    end
    -- a number past u64 is refused before its unit is looked at, as humantime reads digits first
    local n, f = tonumber((string.gsub(int, '%s', ''))), cron_engine.UNITS[unit] or 0
    if f == 0 and n < 2 ^ 64 then
      if unit == '' then
        return nil, 'time unit needed, for example ' .. string.format('%.0f', n) .. 'sec or '
          .. string.format('%.0f', n) .. 'ms'
      end
      return nil, 'unknown time unit ' .. cron_engine.quote(unit) .. ', supported units: ns, '
        .. 'us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)'
    end
    if f < 0 then nanos = nanos - n * f else secs = secs + n * f end
    local num, den = tonumber(frac), 10 ^ #frac
    local scale = f < 0 and -f or (f <= 60 and f * 1e9 or f)
    local whole = not num or (f ~= -1 and #frac <= 19 and (num * scale) % den == 0)
    if num and whole and f <= 60 then nanos = nanos + num * scale / den
    elseif num and whole then secs = secs + num * scale / den end
    if not whole or n >= 2 ^ 64 or secs + nanos / 1e9 > 2 ^ 53 / 1000 then
      return nil, 'number is too large or cannot be represented without a lack of precision '
        .. '(values below 1ns are not supported)'
    end
    at = after
  end
  return secs * 1000 + math.floor(nanos / 1e6)
end

-- Croner's Cron::from_str, giving a schedule table or nil and why.
function cron_engine.cron(schedule)
  local p = string.match(string.upper(schedule), '^%s*(.-)%s*$')
  if p == '' then return nil, 'it is empty' end
  if string.find(p, '@', 1, true) then p = cron_engine.NICKNAMES[p] or p end
  for k = 1, #cron_engine.NAMES, 2 do
    p = string.gsub(p, cron_engine.NAMES[k], cron_engine.NAMES[k + 1])
  end
  local parts, raw = {}, {}
  for w in string.gmatch(p, '%S+') do parts[#parts + 1] = w end
  for w in string.gmatch(schedule, '%S+') do raw[#raw + 1] = w end
  local given = #parts
  if given < 5 or given > 7 then
    return nil, 'it has ' .. given .. (given == 1 and ' field' or ' fields') .. ': give 5 '
      .. '(minute hour day-of-month month day-of-week), 6 with a second first, or 7 with a year last'
  end
  if given == 5 then table.insert(parts, 1, '0') end
  if #parts == 6 then parts[7] = '*' end
  if #raw ~= given then raw = parts elseif given == 5 then table.insert(raw, 1, '0') end
  parts[4], parts[6] = string.gsub(parts[4], '%?', '*'), string.gsub(parts[6], '%?', '*')
  local both = string.sub(parts[6], 1, 1) == '+'
  if both then parts[6] = string.sub(parts[6], 2) end
  for k = 1, 7 do
    local bad = string.match(parts[k], '[^%*/%d,%-' .. (cron_engine.EXTRA[k] or '') .. ']')
    if bad then
      return nil, 'the ' .. cron_engine.FIELDS[k] .. ' field ' .. cron_engine.quote(raw[k])
        .. ' may not hold ' .. cron_engine.quote(bad)
    end
  end
  local s = { star_dom = parts[4] == '*', star_dow = parts[6] == '*', both = both, fixed = true }
  local comps = {}
  for k = 1, 7 do
    local c = { min = cron_engine.BOUNDS[k][1], max = cron_engine.BOUNDS[k][2], step = 1,
      all = {}, nth = {}, last = {}, w = {}, nth_ok = k == 6 }
    local why = (k < 7 or parts[7] ~= '*') and cron_engine.field(c, parts[k])
    if why then
      return nil, 'the ' .. cron_engine.FIELDS[k] .. ' field ' .. cron_engine.quote(raw[k])
        .. ': ' .. why
    end
    comps[k] = c
  end
  for k = 1, 3 do
    local c, count = comps[k], 0
    for _ in pairs(c.all) do count = count + 1 end
    s.fixed = s.fixed and c.step == 1 and not c.wild and count == 1
    s[k] = cron_engine.nexts(c.all, 0, c.max)
  end
  local dow = comps[6]
  -- 7 is Sunday too (croner moves its plain and nth flags, and forgets 7L)
  dow.all[0], dow.last[0] = dow.all[0] or dow.all[7], dow.last[0] or dow.last[7]
  for k in pairs(dow.nth[7] or {}) do dow.nth[0] = dow.nth[0] or {}; dow.nth[0][k] = true end
  s.dom, s.dom_last, s.wdays, s.lw = comps[4].all, comps[4].last_on, comps[4].w, comps[4].lw
  s.dow, s.nth, s.dlast = dow.all, dow.nth, dow.last
  s.months = comps[5].all
  s.nmonth = cron_engine.nexts(s.months, 1, 12)
  if parts[7] ~= '*' then s.years = comps[7].all end
  s.dom_plain = s.star_dow and not s.dom_last and not next(s.wdays) and not s.lw
  if s.dom_plain then s.ndom = cron_engine.nexts(s.dom, 1, 31) end
  s.never = cron_engine.never(s)
  return s
end

-- The next value of a set from each value on, so a search steps straight to it.
function cron_engine.nexts(set, lo, hi)
  local t = {}
  for v = hi, lo, -1 do t[v] = set[v] and v or t[v + 1] end
  return t
end

-- Croner's CronComponent::parse on one field: nil, or why the field is refused. Sets
-- c.all[v] for plain values, c.nth[v][k] for `v#k`, c.last[v] for `vL`, c.w[n] for `nW`,
-- c.last_on for `L`, c.lw for `LW`; c.step and c.wild as croner keeps them.
function cron_engine.field(c, text)
  local function u16(t)
    return string.match(t, '^%d+$') and tonumber(t) <= 65535 and tonumber(t) or nil
  end
  -- the flag a part sets: `...L` last, `...#k` the kth, else plain; and the part before `#`
  local function flag(part)
    local bare = string.match(part, '^[^#]*')
    if string.sub(part, -1) == 'L' then return 'last', nil, bare end
    local hash = string.find(part, '#', 1, true)
    if not hash then return 'all', nil, bare end
    local k = tonumber(string.match(part, '^#(%d+)$', hash) or '')
    if not k or k > 255 then return nil, 'the nth weekday after # is not a number' end
    if k < 1 or k > 5 then return nil, '#' .. k .. ': the nth weekday is 1-5' end
    return 'nth', k, bare
  end
  local function set(v, how, k)
    if v < c.min or v > c.max then return v .. ' is out of range ' .. c.min .. '-' .. c.max end
    if how == 'nth' and not c.nth_ok then return '# is taken in the day-of-week field only' end
    if how == 'all' then c.all[v] = true
    elseif how == 'last' then c.last[v] = true
    else c.nth[v] = c.nth[v] or {}; c.nth[v][k] = true end
  end
  if text == '*' then c.wild = true; for v = c.min, c.max do c.all[v] = true end return end
  for part in string.gmatch(text, '[^,]+') do
    local why, written = nil, part
    if string.find(part, '/', 1, true) then
      local how, k, bare = flag(part)
      if not how then return k end
      local range, step = string.match(bare, '^([^/]*)/([^/]*)$')
      step = step and u16(step)
      if not step then return cron_engine.quote(part) .. ' is not <range>/<step>' end
      c.step = step
      if step == 0 then return 'a step of 0' end
      local lo, hi
      if range == '*' then
        c.wild, lo, hi = true, c.min, c.max
      elseif string.find(range, '-', 1, true) then
        local a, b = string.match(range, '^([^-]*)-([^-]*)$')
        lo, hi = a and u16(a), b and u16(b)
      else
        lo, hi = u16(range), c.max
      end
      if not lo or not hi then return cron_engine.quote(part) .. ' is not <range>/<step>' end
      if lo < c.min or hi > c.max or lo > hi then
        return cron_engine.quote(range) .. ' is out of range ' .. c.min .. '-' .. c.max
      end
      local v = lo
      while v <= hi and not why do
        why = set(v, how, k)
        v = v + step
        if v > 65535 then return 'the step runs past 65535' end
      end
    elseif string.find(part, '-', 1, true) then
      local how, k, bare = flag(part)
      if not how then return k end
      local a, b = string.match(bare, '^([^-]*)-([^-]*)$')
      local lo, hi = a and u16(a), b and u16(b)
      if not lo or not hi then return cron_engine.quote(part) .. ' is not a range <from>-<to>' end
      if lo > hi or lo < c.min or hi > c.max then
        return cron_engine.quote(part) .. ' is backwards or out of range ' .. c.min .. '-' .. c.max
      end
      for v = lo, hi do why = why or set(v, how, k) end
    elseif part == 'LW' then
      c.lw = true
    elseif string.find(part, 'W', 1, true) then
      -- croner reads the day before the W and ignores what follows it
      local day = u16(string.match(part, '^[^W]*'))
      if not day then return cron_engine.quote(part) .. ': W needs a day before it (15W)' end
      if day < c.min or day > c.max then return 'the day of ' .. part .. ' is out of range 1-31' end
      c.w[day] = true
    elseif part == 'L' then
      c.last_on = true
    else
      if string.sub(part, -1) == 'L' and not string.find(part, '#', 1, true) then
        part = string.gsub(part, 'L', '#L')
      end
      if not c.nth_ok and string.find(part, '[#L]') then
        return cron_engine.quote(written) .. ': nL and n#k are taken in the day-of-week field only'
      end
      local how, k, bare = flag(part)
      if not how then return k end
      local v = u16(bare)
      if not v then return cron_engine.quote(written) .. ' is not a number' end
      why = set(v, how, k)
    end
    if why then return why end
  end
end

-- Whether a schedule can never fire, found without searching (an empty field, the 30th of
-- February), so such a schedule costs nothing.
function cron_engine.never(s)
  if not s[1][0] or not s[2][0] or not s[3][0] or not s.nmonth[1] then return true end
  if s.years and not next(s.years) then return true end
  local dom = next(s.dom) or s.dom_last or next(s.wdays) or s.lw
  local dow = next(s.dow) or next(s.nth) or next(s.dlast)
  if (s.star_dom and not dow) or (s.star_dow and not dom) or not (dom or dow)
    or (s.both and not (dom and dow)) then return true end
  if s.dom_plain then
    local longest = 0
    for m = 1, 12 do
      if s.months[m] then longest = math.max(longest, tz_rules.month_len(2000, m)) end
    end
    return not s.ndom[1] or s.ndom[1] > longest
  end
  return false
end

-- Croner's day_match: day y-m-d (weekday wd, mlen days in its month) against the day fields.
function cron_engine.day_match(s, y, m, d, mlen, wd)
  local dm = s.dom[d] or (s.dom_last and d == mlen)
  if not dm and s.lw then
    local last = (wd + mlen - d) % 7
    dm = d == (last == 6 and mlen - 1 or last == 0 and mlen - 2 or mlen)
  end
  if not dm then
    for n in pairs(s.wdays) do
      if n <= mlen then
        local wn = (wd + n - d) % 7
        local target = wn == 6 and (n > 1 and n - 1 or n + 2)
          or wn == 0 and (n < mlen and n + 1 or n - 2) or n
        if target == d then dm = true break end
      end
    end
  end
  local nth = s.nth[wd]
  local dw = s.dow[wd] or (nth and nth[math.ceil(d / 7)]) or (s.dlast[wd] and d + 7 > mlen)
  if (dm and s.star_dow) or (dw and s.star_dom) then return true end
  if s.star_dom or s.star_dow then return false end
  if s.both then return dm and dw and true or false end
  return (dm or dw) and true or false
end

-- The first wall-clock time at or after `from` the expression matches, or nil past the
-- search's bound. Steps skip a year, a month or a day at a time; a day is searched by the
-- second, minute and hour sets' next-value tables.
function cron_engine.local_next(s, from)
  local z, sod = math.floor(from / 86400), from % 86400
  local y, m, d = tz_rules.civil(z)
  local h, mi, se = math.floor(sod / 3600), math.floor(sod % 3600 / 60), sod % 60
  local hs, ms, ss = s[3], s[2], s[1]
  for _ = 1, 3000 do
    if y > 5000 or y < 1 then return nil end
    if s.years and not s.years[y] then
      repeat y = y + 1 until y > 5000 or s.years[y]
      m, d, h, mi, se = 1, 1, 0, 0, 0
    elseif not s.months[m] or d > tz_rules.month_len(y, m) then
      local nm = s.nmonth[m + 1]
      if nm then m = nm else y, m = y + 1, s.nmonth[1] end
      d, h, mi, se = 1, 0, 0, 0
    else
      local mlen = tz_rules.month_len(y, m)
      if cron_engine.day_match(s, y, m, d, mlen, tz_rules.weekday(tz_rules.days(y, m, d))) then
        while h <= 23 do
          local H = hs[h]
          if not H then break end
          if H ~= h then h, mi, se = H, 0, 0 end
          local M = ms[mi]
          if M and M ~= mi then mi, se = M, 0 end
          local S = M and ss[se]
          if S then return tz_rules.days(y, m, d) * 86400 + h * 3600 + mi * 60 + S end
          if M and mi < 59 then mi, se = mi + 1, 0 else h, mi, se = h + 1, 0, 0 end
        end
        d = d + 1
      elseif s.dom_plain then
        d = s.ndom[d] or 32
      else
        d = d + 1
      end
      h, mi, se = 0, 0, 0
    end
  end
  return nil
end

-- The first tick strictly after instant `ms` (ms since the epoch), or nil. Time is walked a
-- stretch of one offset (between two transitions) at a time, whose ticks are its wall-clock
-- matches less its offset: so ticks come in instant order where wall-clock times repeat. A
-- fixed time in a gap fires at the transition; one repeated after a fall-back fires once.
function cron_engine.next_after(sched, ms)
  if sched.step then return (math.floor(ms / sched.step) + 1) * sched.step end
  local s, rule, u = sched.cron, sched.rule, math.floor(ms / 1000) + 1
  if s.never then return nil end
  local lo, hi = math.min(rule.std, rule.dst or rule.std), math.max(rule.std, rule.dst or rule.std)
  -- no match in wall-clock [seen_from, seen) and one at seen: saves searching again
  local seen_from, seen
  for _ = 1, 64 do
    local o, tp, op, tn = tz_rules.around(rule, u)
    if s.fixed and u == tp and o > op then
      local c = cron_engine.local_next(s, tp + op)
      if c and c < tp + o then return tp * 1000 end
      seen_from, seen = tp + op, c
    end
    local from = u + o
    if s.fixed and o < op and tp + op > from then from = tp + op end
    local c = seen
    if not (seen and from >= seen_from and from <= seen) then
      c = cron_engine.local_next(s, from)
      seen_from, seen = from, c
    end
    if not c then return nil end
    if c < tn + o then return (c - o) * 1000 end
    -- later stretches show no wall-clock time before tn + lo, so none before c can come
    if from <= tn + lo and c - hi > tn then u = c - hi else u = tn end
  end
  return nil
end
