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
  -- the tables are made by the first tally of the call (a fetch that leases nothing tallies
  -- nothing): each table made costs Redis ~0.7 k instructions a call
  return { key = key, iso = now_iso }
end

local function tally(st, stream, name, n, per_minute)
  local f = stream .. '|' .. name
  local inc = st.inc
  if not inc then
    inc = {}
    st.inc, st.order = inc, {}
  end
  local v = inc[f]
  if v == nil then
    st.order[#st.order + 1] = f
    v = 0
  end
  inc[f] = v + n
  if per_minute and st.iso then
    local minute = st.minute
    if not minute then
      minute = {}
      st.minute, st.morder = minute, {}
    end
    v = minute[f]
    if v == nil then
      st.morder[#st.morder + 1] = f
      v = 0
    end
    minute[f] = v + n
  end
end

local LN2 = 0.6931471805599453 -- ln 2 (math is not reachable while the library loads)

-- The histogram `name` (wait or run) of `stream` in this call: the callers add a sample of t ms
-- inline as `h[b] = (h[b] or 0) + 1`, b = floor(log2(t + 1)) (bucket b holds [2^b - 1, 2^(b+1) - 1)),
-- and t to `h.sum`. Its fields' names, `<prefix><b>`, are kept once made (BUCKETS, per
-- histogram, each name made at its first write: see flush_stats): a number made text costs
-- Redis ~2.7 k instructions, a table lookup ~0.2 k. The library's state outlives its calls, so
-- the cache is let go once it names BUCKETS_MAX histograms (streams come and go).
local BUCKETS, BUCKETS_N, BUCKETS_MAX = {}, 0, 10000
local function histogram(st, stream, name)
  local prefix = stream .. '|' .. name .. '|'
  local names = BUCKETS[prefix]
  if not names then
    if BUCKETS_N >= BUCKETS_MAX then BUCKETS, BUCKETS_N = {}, 0 end
    names = { prefix = prefix, sum = prefix .. 'sum' }
    BUCKETS[prefix], BUCKETS_N = names, BUCKETS_N + 1
  end
  local h = { sum = 0, names = names }
  local hists = st.hists
  if not hists then
    hists = {}
    st.hists = hists
  end
  hists[#hists + 1] = h
  return h
end

-- Adds to histogram `h` the waits of the jobs at positions lo .. hi (steps of 3) of a fetch's
-- flat jobs list (an entry id at +1), the entries of one stream's reads in id order: when the
-- first and the last share their millisecond every job between does, and one sample counts
-- them all; else the run is halved (`lo_ms`, `hi_ms`: the ends' milliseconds, when known). A
-- fetch's entries mostly come from a few submit calls, each appended in one millisecond, so a
-- fetch of 25 reads a handful of ids, not 25 (a match a job cost Redis ~3 k instructions).
local function sample_waits(h, jobs, lo, hi, now_ms, lo_ms, hi_ms)
  lo_ms = lo_ms or string.match(jobs[lo + 1], '^%d+')
  if lo == hi then
    hi_ms = lo_ms
  else
    hi_ms = hi_ms or string.match(jobs[hi + 1], '^%d+')
  end
  if lo_ms == hi_ms then
    local run, b = (hi - lo) / 3 + 1, 0
    local waited = now_ms - (tonumber(lo_ms) or now_ms)
    if waited > 0 then b = math.floor(math.log(waited + 1) / LN2) else waited = 0 end
    h[b] = (h[b] or 0) + run
    h.sum = h.sum + waited * run
    return
  end
  local mid = lo + 3 * math.floor((hi - lo) / 6)
  sample_waits(h, jobs, lo, mid, now_ms, lo_ms, nil)
  sample_waits(h, jobs, mid + 3, hi, now_ms, nil, hi_ms)
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

-- Increments go out as text made with '%d' (a Lua number argument becomes text through printf's
-- '%.17g', ~3 k instructions more an increment), the small ones once per library load (COUNTS).
local COUNTS = {}
local function count_text(n)
  local t = COUNTS[n]
  if not t then
    t = string.format('%d', n)
    if n >= 0 and n < 4096 then COUNTS[n] = t end
  end
  return t
end

local function flush_stats(st)
  local order, inc, key = st.order, st.inc, st.key
  if order then
    for k = 1, #order do
      local f = order[k]
      redis.call('HINCRBY', key, f, count_text(inc[f]))
    end
  end
  local morder = st.morder
  if morder then
    local at = minute_key(key, st.iso)
    local fresh, minute = false, st.minute
    for k = 1, #morder do
      local f = morder[k]
      local n = minute[f]
      -- the field's first write this minute is the one whose total is its own increment: the
      -- key's TTL is set then, not on every call (a command a call at low rates)
      if redis.call('HINCRBY', at, f, count_text(n)) == n then fresh = true end
    end
    if fresh then redis.call('EXPIRE', at, '7200') end
  end
  local hists = st.hists
  if hists then
    for k = 1, #hists do
      local h = hists[k]
      local names = h.names
      for b, n in pairs(h) do
        if b ~= 'names' and n ~= 0 then
          local field = names[b]
          if not field then
            field = names.prefix .. string.format('%d', b)
            names[b] = field
          end
          redis.call('HINCRBY', key, field, count_text(n))
        end
      end
    end
  end
  st.inc, st.order, st.minute, st.morder, st.hists = nil, nil, nil, nil, nil
end
