-- Stats kept on write, so that reading them costs O(queues), never O(jobs). In the stats hash,
-- per work stream `<stream>`: counters `<stream>|finished`, `|failed` (ended error, whatever the
-- reason), `|retried`, `|recovered`, `|dead`, the gauge `|delayed` (jobs of the stream waiting in
-- the delayed set), and histograms `<stream>|wait|<b>` (dispatch to start) and `<stream>|run|<b>`
-- (start to end), where bucket b holds the times of [2^b - 1, 2^(b+1) - 1) ms, and their totals
-- `<stream>|wait|sum`, `<stream>|run|sum` (ms: a Prometheus histogram has a sum). The counters that
-- make rates are also counted per minute in `<stats hash>:<minute>`, the minute as the first 16
-- characters of the call's now ISO 8601 (`2026-11-23T11:40`: no clock read), which expires two
-- hours after its first write. A call gathers its increments and writes each field once.
local function stats(key, now_iso)
  local minute = nil
  if now_iso then minute = minute_key(key, now_iso) end
  return { key = key, at = minute, inc = {}, order = {}, minute = {}, morder = {} }
end

local function tally(st, stream, name, n, per_minute)
  local f = stream .. '|' .. name
  local v = st.inc[f]
  if v == nil then
    st.order[#st.order + 1] = f
    v = 0
  end
  st.inc[f] = v + n
  if per_minute then
    v = st.minute[f]
    if v == nil then
      st.morder[#st.morder + 1] = f
      v = 0
    end
    st.minute[f] = v + n
  end
end

local LN2 = 0.6931471805599453 -- ln 2 (math is not reachable while the library loads)

-- The histogram `name` (wait or run) of `stream` in this call: the callers add a sample of t ms
-- inline as `h[b] = (h[b] or 0) + 1`, b = floor(log2(t + 1)) (bucket b holds [2^b - 1, 2^(b+1) - 1)),
-- and t to `h.sum`.
local function histogram(st, stream, name)
  local h = { prefix = stream .. '|' .. name .. '|', sum = 0 }
  st.hists = st.hists or {}
  st.hists[#st.hists + 1] = h
  return h
end

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The last second iso_of wrote, its text up to the fraction, and the fractions written
-- (`.123Z` by ms): the library's state outlives a call, and the calls of one second (a fetch and
-- a completion each stamp their jobs) then pay a concatenation, not the calendar (~30 k
-- instructions a call, measured with benches/profile_functions.py).
local ISO = { secs = -1, head = '', frac = {} }

-- Time `ms` (ms since the epoch) as ISO 8601 UTC with milliseconds, as the clients write it.
local function iso_of(ms)
  local secs = math.floor(ms / 1000)
  local c = ISO
  if secs == c.secs then
    local r = ms - secs * 1000
    local f = c.frac[r]
    if not f then
      f = string.format('.%03dZ', r)
      c.frac[r] = f
    end
    return c.head .. f
  end
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  -- civil date of a day count (Howard Hinnant's algorithm)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if m > 12 then m = m - 12 end
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  c.secs = secs
  c.head = string.format('%04d-%02d-%02dT%02d:%02d:%02d', y, m, d, math.floor(rem / 3600),
    math.floor(rem % 3600 / 60), rem % 60)
  return iso_of(ms)
end

-- Redis's clock as ISO 8601 UTC with milliseconds, as the clients write it.
local function iso_now()
  return iso_of(server_ms())
end

-- The ms since the epoch an ISO 8601 UTC time of the clients' form names
-- ('2026-11-28T06:41:47.123Z', the fraction optional), or nil.
local function iso_ms(s)
  local y, mo, d, h, mi, se = string.match(s or '', '^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)')
  if not y then return nil end
  y, mo = tonumber(y), tonumber(mo)
  local frac = string.match(s, '^%.(%d+)', 20)
  local ms = frac and math.floor(tonumber(string.sub(frac .. '00', 1, 3))) or 0
  -- days from civil (Howard Hinnant's algorithm)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (mo + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + tonumber(d) - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000 + tonumber(se) * 1000 + ms
end

-- A due time `at` (ms) a caller computed on its own clock, whose time then was `caller_ms`,
-- moved to Redis's clock: the delay it meant kept, the caller's clock's error taken out. A
-- caller within SKEW_MS of Redis keeps its own value (no rounding of a well-kept clock).
local SKEW_MS = 1000
local function rebased(at, caller_ms, now)
  if not caller_ms then return at end
  local skew = now - caller_ms
  if skew > SKEW_MS or skew < -SKEW_MS then return at + skew end
  return at
end

-- Increments go out as text made with '%d': a Lua number argument becomes text through
-- printf's '%.14g', which cost Redis ~3 k instructions more an increment.
local function flush_stats(st)
  local order, inc, key = st.order, st.inc, st.key
  for k = 1, #order do
    local f = order[k]
    redis.call('HINCRBY', key, f, string.format('%d', inc[f]))
  end
  local morder = st.morder
  if #morder > 0 and st.at then
    local fresh, minute = false, st.minute
    for k = 1, #morder do
      local f = morder[k]
      local n = minute[f]
      -- the field's first write this minute is the one whose total is its own increment: the
      -- key's TTL is set then, not on every call (a command a call at low rates)
      if redis.call('HINCRBY', st.at, f, string.format('%d', n)) == n then fresh = true end
    end
    if fresh then redis.call('EXPIRE', st.at, '7200') end
  end
  local hists = st.hists
  if hists then
    for k = 1, #hists do
      local h = hists[k]
      local prefix = h.prefix
      for b, n in pairs(h) do
        if b ~= 'prefix' and n ~= 0 then redis.call('HINCRBY', key, prefix .. b, string.format('%d', n)) end
      end
    end
  end
  st.inc, st.order, st.minute, st.morder, st.hists = {}, {}, {}, {}, nil
end
