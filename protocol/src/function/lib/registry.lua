-- The queue registry: which work streams exist, which are paused, and appending a job.

-- The parts of a work stream key, `<prefix>:q:work:type:<t>[:group:<g>[:inst:<i>]][:prio:<p>]`,
-- as { prefix, type, group, instance, priority } (group, instance false when absent; priority
-- '5' when absent), or false when the key is not of this form. Parsed once per stream per call.
local function stream_parts(stream)
  local prefix, rest = string.match(stream, '^(.*):q:work:type:(.+)$')
  if not prefix then return false end
  local p = { prefix = prefix, group = false, instance = false, priority = '5' }
  local path, prio = string.match(rest, '^(.-):prio:(%d)$')
  if path then rest, p.priority = path, prio end
  local t, g = string.match(rest, '^([^:]+):group:(.+)$')
  if t then
    p.type = t
    local g2, i = string.match(g, '^([^:]+):inst:([^:]+)$')
    if g2 then p.group, p.instance = g2, i else p.group = g end
  else
    p.type = rest
  end
  return p
end

-- Paused queues (see hero_pause): `<registry>:paused:names` holds the names an operator paused,
-- `<type>`, `<type>/<group>` or `<type>/<group>/<instance>`, each covering every stream under
-- it at any priority; `<registry>:paused` holds the streams so covered, moved out of the
-- registry, so the fetch (which asks the registry) skips them at no cost of its own.
-- Whether the name `name` covers the stream of parts `p` (see stream_parts).
local function covers(name, p)
  if not p then return false end
  local t, rest = string.match(name, '^([^/]+)/?(.*)$')
  if t ~= p.type then return false end
  if rest == '' then return true end
  local g, i = string.match(rest, '^([^/]+)/?(.*)$')
  if g ~= p.group then return false end
  return i == '' or i == p.instance
end

-- Wakes the workers blocked on the registry's signal stream: `stream` joined the registry (new,
-- or resumed), or left it (paused). They watch only the streams that existed at their last
-- fetch, and a worker that names only the registered streams (hero_fetch's ARGV[9]) learns from
-- the signal's last id that its list is out of date: every change of the registry announces.
local function announce(registry, stream)
  redis.call('XADD', queue_signal_key(registry), 'MAXLEN', '~', '100', '*', 's', stream)
end

-- Whether a paused name covers `stream`. Asked only when a stream joins the registry (a new
-- stream, or one of a paused queue that a submit appended to), never on the hot path.
local function paused_by(registry, stream)
  if redis.call('SISMEMBER', paused_key(registry), stream) == 1 then return true end
  local names = redis.call('SMEMBERS', paused_names_key(registry))
  if #names == 0 then return false end
  local p = stream_parts(stream)
  for _, name in ipairs(names) do
    if covers(name, p) then return true end
  end
  return false
end

-- Make a work stream a queue on first use: the stream, its group and its registry entry (the
-- registry names every work stream: the fetch and recovery read it). `known` (optional) is a
-- per-call set of streams already seen, so a batch onto one stream asks once, not once per
-- job. A registered stream is taken to have its group: one that was deleted or lost its group
-- by hand gets it back at the next fetch (see hero_fetch), which spares every submit an EXISTS.
-- Appending a job is gate.lua's `append`.
local function register(stream, group, registry, known)
  if not (known and known[stream]) then
    if redis.call('SADD', registry, stream) == 1 then
      -- new, or a stream made by hand (or whose registration was lost): it becomes a queue
      -- here, with its group (which a stream made by hand may have already)
      if redis.call('EXISTS', stream) == 0 then
        redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
      else
        redis.pcall('XGROUP', 'CREATE', stream, group, '0')
      end
      -- a queue an operator paused stays out of the registry the fetch reads (see hero_pause);
      -- any other new stream is announced to the workers waiting without watching it
      if paused_by(registry, stream) then
        redis.call('SMOVE', registry, paused_key(registry), stream)
      else
        announce(registry, stream)
      end
    end
    if known then known[stream] = true end
  end
end

-- the id of the stream's last entry into cursors[i] (left as it is when the stream is empty or
-- not a stream)
local function cursor_of(cursors, i, stream)
  local last = redis.pcall('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  if type(last) == 'table' and last[1] then cursors[i] = last[1][1] end
end

-- The wake-up cursors of a fetch that came up short. A registered stream's cursor is its last
-- entry (the last read, when the read reached the end). An unregistered one is '0-0' (XREAD from
-- there blocks until its first entry) unless something made it by hand with entries in it, which
-- must not wake the worker at once, over and over: one EXISTS asks that of all of them (a worker
-- names 30 streams a type; an XREVRANGE each cost Redis 10 calls a job at 5,000 jobs/s). Only
-- streams that can deliver are watched: a registered one (from its last entry, '0-0' when empty)
-- and one made by hand with entries; the others get '' (not watched: an XREAD BLOCK over 30
-- streams cost Redis ~50 us a wake, most of it for streams that never get an entry). A stream
-- that appears later announces itself on the registry's signal stream (`<registry>:new`, see
-- append), whose cursor comes last.
local function wake_cursors(f)
  local cursors, keys, n, last_read, present = {}, f.keys, f.n, f.last_read, f.present
  local unregistered, made = {}, 0
  for i = 1, n do
    cursors[i] = ''
    if last_read[i] then
      cursors[i] = last_read[i]
    elseif present[i] == 1 then
      cursors[i] = '0-0'
      cursor_of(cursors, i, keys[i + 4])
    else
      unregistered[#unregistered + 1] = keys[i + 4]
    end
  end
  for from = 1, #unregistered, 1000 do
    made = made + redis.call('EXISTS', unpack(unregistered, from, math.min(#unregistered, from + 999)))
  end
  if made > 0 then
    for i = 1, n do
      if present[i] ~= 1 then cursor_of(cursors, i, keys[i + 4]) end
    end
  end
  if f.signal then
    cursors[n + 1] = f.signal
  else
    cursors[n + 1] = '0-0'
    cursor_of(cursors, n + 1, queue_signal_key(keys[1]))
  end
  return cursors
end

-- A registry that is gone while queues are not (an evicting Redis an operator accepted evicts
-- any key): the caller's streams that exist are registered again (announced, paused ones kept
-- out), or no worker would ever see their jobs. Asked only when none of the caller's streams
-- is registered (an idle worker's fetch: one EXISTS), never on the hot path.
local function reregister(f)
  local keys = f.keys
  for i = 1, #f.present do if f.present[i] == 1 then return end end
  if redis.call('EXISTS', keys[1]) == 1 or #keys < 5 then return end
  if redis.call('EXISTS', unpack(keys, 5, math.min(#keys, 1004))) == 0 then return end
  for i = 5, #keys do
    if redis.call('EXISTS', keys[i]) == 1 then
      register(keys[i], f.group, keys[1])
      f.present[i - 4] = redis.call('SISMEMBER', keys[1], keys[i])
    end
  end
end
