-- hero_fetch: claim up to COUNT jobs for one consumer, taking streams strictly in the order given
-- (the caller orders them instance -> group -> type, priority 0 first). Per entry it reads the
-- job's status only; the entry itself says how many attempts came before and whether the job was
-- dual-pushed (see append).
-- KEYS[1] queue registry set  KEYS[2] config hash  KEYS[3] event log  KEYS[4] stats hash
-- KEYS[5..n+4] work streams in precedence order
-- ARGV[1] consumer group  ARGV[2] consumer name  ARGV[3] count  ARGV[4] job key prefix
-- ARGV[5] now ISO 8601  ARGV[6] '1' when the server has XACKDEL
-- ARGV[7] concurrency limits: '' for none, else `<stream index> <max> <limit key>` triples
--   joined by spaces, for the streams of queues whose policy limits how many of their jobs run
--   at once across all workers (a worker that passes '' while some queue has a limit, the config
--   hash's `limited` above 0, gets the limits the policies set: see limits_from_policies). A
--   limit key (a sorted set, job id -> ms leased) is shared by
--   every stream the limit covers; the fetch takes from such a stream no more than the limit
--   leaves, adds what it leases, and when the set is full drops the members no longer started
--   (ended, stopped or recovered since) before it counts: O(limit), only at the limit.
-- ARGV[8] records: '1' asks a fetch that comes up short to hand back the records of the jobs
--   it leased (see records below); absent or '' for none.
-- ARGV[9] registry cursor: absent or '' to name every stream the caller serves, as above. '*'
--   does the same and also answers which of them are registered (see registered below), so
--   that the caller can name only those from then on: with the id of the registry's signal
--   stream `<registry>:new` that the answer carried, KEYS[5..] are the registered streams only,
--   and while that id is still the signal's last (no stream registered, paused or resumed
--   since) they are read without asking the registry; once it moved, the fetch claims nothing
--   and answers registered = 'stale' with the new id: the caller names every stream again
--   ('*'). A worker naming 300 streams of which one holds work so passes one key, not 300 (each
--   FCALL key costs Redis ~3 k instructions, the registry question and the wake-up cursors of
--   the others more).
-- Priority aging: while some queue's policy sets `aging_ms` (the config hash's `aged` above 0),
--   a stream of such a queue whose oldest undelivered entry has waited k periods is walked as
--   if k levels higher (not above 0) within its tier (instance, group, type): before the first
--   stream of its tier at that level, so a steady flow of higher-priority work starves no level
--   (see aging_order).
-- Stats: a `wait` sample per job leased (its entry's age: from dispatch to now, by Redis's clock).
-- Events: `started` per job leased (q, w the consumer, a the attempt).
-- Returns: {jobs, dropped, cursors, limited}, and with ARGV[8] '1' or ARGV[9] given a fifth,
--   records, and with ARGV[9] given a sixth and seventh, signal and registered
--   jobs: flat list of stream index (1..n: 1 is KEYS[5], the first stream), entry id, job id, three items
--         per job now leased to the consumer (flat because every Lua table costs Redis more
--         than the three values): the fetch wrote status started, lease = entry id,
--         worker_id = consumer, started_at (the record's updated_at from then on) and, from
--         the second delivery on, attempts = the count the entry carries + 1 (the first writes
--         none: a started record without attempts is on its first). Unless records (below)
--         hold it, the caller reads the record itself (one HGETALL per job, pipelined), and
--         runs the job only while that record still says started with this lease: a stop or
--         recovery in between took it away. Handing a record back from here costs Redis about
--         twice as much as the plain read, so only a short fetch does, when asked;
--   dropped: list of {stream index, entry id, job id, reason} for entries acknowledged and
--         deleted unclaimed: reason 'missing' (no job hash, or one without a status),
--         'foreign' (the job key holds another type), 'stale' (the job is no longer dispatched:
--         stopped, or already taken through another entry) or 'legacy' (a dual-pushed job a
--         legacy actor took from its list first);
--   cursors: empty when COUNT jobs were claimed, else per stream the id of its last entry
--         ('0-0' when empty), or '' for a stream not worth watching (not registered, no
--         entries), then one more: the cursor of the registry's signal stream `<registry>:new`,
--         which gets an entry whenever a stream is registered. XREAD BLOCK from these ids (the
--         watched streams and the signal) wakes on any later entry, and on a new stream;
--   limited: 1 when a concurrency limit held jobs back (no new entry will wake the caller
--         when a slot frees: it looks again soon), else 0;
--   records: empty when the fetch claimed COUNT jobs; else per job leased, in the order of
--         jobs, its record as HGETALL gives it (read after the lease was written, so it carries
--         it). A short fetch is a worker keeping up with its queues, where the job's start
--         waits on the read: handing the records back here saves that round trip (at 5,000
--         jobs/s a third of the worker's path from wake-up to start); a full fetch is a
--         backlog, where the plain reads cost Redis less and the start waits on no one. A
--         job read from a stream that came up short is read whole instead of its status
--         alone, and its record handed back as written: one call a job fewer where it counts;
--   signal: the id of the registry's signal stream's last entry ('0-0' when it has none);
--   registered: with ARGV[9] '*', the indexes (1..n) of the registered streams given; with an
--         id, empty, or 'stale' when the registry moved since that id (nothing was claimed).
-- Which streams exist is asked of the registry with one SMISMEMBER: append registers a stream in
-- the call that creates it (recovery walks the same set), and one question for every stream
-- costs Redis less than an EXISTS per stream (a worker names 30 streams per type, most of them
-- never used). A registered stream that was deleted, or lost its group, by hand gets its group
-- back here, from the stream's start: what a submit appended since is delivered.
-- A job is queued through one entry at a time, except when it was stopped while queued and then
-- queued again: the stop leaves the old entry behind (the record does not name its entry), and
-- whichever of the two is read first runs the job; the other is dropped as stale.
-- Errors: none of its own.
-- the id of the stream's last entry into cursors[i] (left as it is when the stream is empty or
-- not a stream)
local function cursor_of(cursors, i, stream)
  local last = redis.pcall('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  if type(last) == 'table' and last[1] then cursors[i] = last[1][1] end
end

-- The running count of limit `lim` ({key, max}), dropping the members no longer started when
-- it is full.
local function limit_running(lim, prefix)
  local n = redis.call('ZCARD', lim.key)
  if n >= lim.max then
    for _, id in ipairs(redis.call('ZRANGE', lim.key, 0, -1)) do
      local s = redis.pcall('HGET', prefix .. id, 'status')
      if s ~= 'started' then
        redis.call('ZREM', lim.key, id)
        n = n - 1
      end
    end
  end
  return n
end

-- The limits of `streams` (KEYS from 5 on) as the queue policies set them, for a fetch that
-- passed none (a worker of another language, or older than protocol 23): each stream's queue
-- is read from its key (`<ns>:q:work:type:<t>[:group:<g>...]`), and its group's policy, else its
-- type's, gives the limit. Only while some queue has one (`limited` in the config hash).
--
-- Rates, the same way: a queue whose policy sets `rate` ({max, per_ms}) starts at most `max` of
-- its jobs in any `per_ms` (a sliding window: the sorted set `<ns>:meta:rate:<queue>` of the
-- jobs started, by ms), whatever the worker; read while some queue has one (`rated`).
-- A queue's `key_rate` does the same per limit key (a job's `limit_key`): a job whose key has no
-- room is not started but parked in the delayed set until the window has room, its entry
-- acknowledged; the broker's promote queues it again then.
-- And the aging periods (ms, when `want_aging`: see aging_order).
-- Returns the limits (when `want_limits`), the rates, the key rates and the aging periods, by
-- stream index, or nil.
local function queue_policies(keys, want_limits, want_rates, want_aging)
  local limits, rates, keyrates, agings, by_queue, policies = nil, nil, nil, nil, {}, policy_key_of(keys[2])
  local function policy_of(queue)
    local p = by_queue[queue]
    if p == nil then
      local raw = redis.call('HGET', policies, queue)
      local ok, decoded = pcall(cjson.decode, raw or 'null')
      p = (ok and type(decoded) == 'table' and decoded) or false
      by_queue[queue] = p
    end
    return p
  end
  -- the policy that sets `field` for a stream: its group's, else its type's
  local function covering(t, g, field)
    if t and g then
      local p = policy_of(t .. '/' .. g)
      if p and p[field] then return t .. '/' .. g, p[field] end
    end
    if t then
      local p = policy_of(t)
      if p and p[field] then return t, p[field] end
    end
    return nil
  end
  local by_key = {}
  local function shared(key, make)
    local x = by_key[key]
    if not x then
      x = make()
      by_key[key] = x
    end
    return x
  end
  for i = 5, #keys do
    local t = string.match(keys[i], ':q:work:type:([^:]+)')
    local g = string.match(keys[i], ':group:([^:]+)')
    if want_limits then
      local queue, max = covering(t, g, 'concurrency')
      if queue and tonumber(max) then
        limits = limits or {}
        limits[i - 4] = shared(limit_key_of(keys[2], queue), function()
          return { key = limit_key_of(keys[2], queue), max = tonumber(max) }
        end)
      end
    end
    if want_rates then
      local queue, rate = covering(t, g, 'rate')
      if queue and type(rate) == 'table' and tonumber(rate.max) and tonumber(rate.per_ms) then
        rates = rates or {}
        rates[i - 4] = shared(rate_key_of(keys[2], queue), function()
          return { key = rate_key_of(keys[2], queue), max = tonumber(rate.max), per = tonumber(rate.per_ms) }
        end)
      end
      local kqueue, krate = covering(t, g, 'key_rate')
      if kqueue and type(krate) == 'table' and tonumber(krate.max) and tonumber(krate.per_ms) then
        keyrates = keyrates or {}
        keyrates[i - 4] = shared(rate_key_of(keys[2], kqueue) .. '|', function()
          return { prefix = rate_key_of(keys[2], kqueue) .. '|', max = tonumber(krate.max),
            per = tonumber(krate.per_ms), by_key = {} }
        end)
      end
    end
    if want_aging then
      local _, period = covering(t, g, 'aging_ms')
      if tonumber(period) and tonumber(period) > 0 then
        agings = agings or {}
        agings[i - 4] = tonumber(period)
      end
    end
  end
  return limits, rates, keyrates, agings
end

-- The order to walk the streams in when some have aged (nil: as given). A stream of level p > 0
-- with an aging period whose oldest undelivered entry (the one after its group's last
-- delivered) has waited k whole periods ranks as level max(0, p - k), ahead of the streams of
-- its tier really at that level; the rest keep their order. Costs two commands per registered
-- stream with a period, and only while some queue has one.
local function aging_order(keys, n, present, agings, group)
  local rank, moved, now = {}, false, nil
  for i = 1, n do
    local key = keys[i + 4]
    local tier = 3
    if string.find(key, ':inst:', 1, true) then tier = 1
    elseif string.find(key, ':group:', 1, true) then tier = 2 end
    local level = tonumber(string.match(key, ':prio:(%d)$')) or 5
    local at, aged = level, 1
    local period = agings[i]
    if period and present[i] == 1 and level > 0 then
      local last = nil
      local groups = redis.pcall('XINFO', 'GROUPS', key)
      if type(groups) == 'table' and not groups.err then
        for _, gi in ipairs(groups) do
          local name, delivered = nil, nil
          for k = 1, #gi, 2 do
            if gi[k] == 'name' then name = gi[k + 1]
            elseif gi[k] == 'last-delivered-id' then delivered = gi[k + 1] end
          end
          if name == group then last = delivered end
        end
      end
      if last then
        local head = redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', 1)
        if head[1] then
          now = now or server_ms()
          local born = tonumber(string.match(head[1][1], '^(%d+)')) or now
          local k = math.floor((now - born) / period)
          if k > 0 then
            at, aged, moved = math.max(0, level - k), 0, true
          end
        end
      end
    end
    rank[i] = { tier, at, aged, i }
  end
  if not moved then return nil end
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b)
    local x, y = rank[a], rank[b]
    for k = 1, 4 do
      if x[k] ~= y[k] then return x[k] < y[k] end
    end
    return false
  end)
  return order
end


-- How many more jobs rate `r` lets start now (its log trimmed to the window first).
local function rate_room(r, now)
  if not r.used then
    redis.call('ZREMRANGEBYSCORE', r.key, '-inf', now - r.per)
    r.used = redis.call('ZCARD', r.key)
  end
  return r.max - r.used
end

-- Whether limit key `lk` of key rate `kr` has room now; the rate log of each key is trimmed and
-- counted once per call.
local function key_room(kr, lk, now)
  local r = kr.by_key[lk]
  if not r then
    r = { key = kr.prefix .. lk, max = kr.max, per = kr.per }
    kr.by_key[lk] = r
  end
  return rate_room(r, now) > 0, r
end

local function hero_fetch(keys, args)
  local group, consumer, want, prefix = args[1], args[2], tonumber(args[3]), args[4]
  local now_iso, xackdel = args[5], args[6]
  local limits, limited = nil, 0 -- stream index -> {key, max, running} (shared per key)
  if args[7] and args[7] ~= '' then
    limits = {}
    local by_key = {}
    for i, max, key in string.gmatch(args[7], '(%d+) (%d+) (%S+)') do
      local lim = by_key[key]
      if not lim then
        lim = { key = key, max = tonumber(max) }
        by_key[key] = lim
      end
      limits[tonumber(i)] = lim
    end
  end
  local jobs, dropped = {}, {}
  local last_read = {} -- per stream read to its end: its last entry
  local regrouped = {} -- per stream whose group this call made again
  local attempts = {} -- per job leased, for the event log
  local n = #keys - 4
  local st = stats(keys[4])
  local now_ms = nil -- Redis's clock, read once the first job is leased
  local cfg = settings(keys[2], { 'events_max', 'limited', 'rated', 'aged' })
  local log = event_log(keys[3], cfg)
  local rates, keyrates, agings = nil, nil, nil
  local want_limits = not limits and setting(cfg, 'limited', 0) > 0
  local want_aging = setting(cfg, 'aged', 0) > 0
  if want_limits or want_aging or setting(cfg, 'rated', 0) > 0 then
    local l
    l, rates, keyrates, agings = queue_policies(keys, want_limits, setting(cfg, 'rated', 0) > 0, want_aging)
    limits = limits or l
  end
  local parked = false -- a key rate sent a job back to the delayed set (its gauge to flush)

  -- in runs of 1000 as in_runs makes them (unpack of a very long list overflows Lua's stack),
  -- written out: in_runs' closure and copying the answers cost 0.8 k instructions per job here
  local present = {}
  local since, signal = args[9] or '', nil
  if since ~= '' then
    signal = '0-0'
    local last = redis.call('XREVRANGE', queue_signal_key(keys[1]), '+', '-', 'COUNT', 1)
    if last[1] then signal = last[1][1] end
  end
  if since ~= '' and since ~= '*' then
    if since ~= signal then return { {}, {}, {}, 0, {}, signal, 'stale' } end
    for i = 1, n do present[i] = 1 end
  else
    for from = 5, #keys, 1000 do
      local r = redis.call('SMISMEMBER', keys[1], unpack(keys, from, math.min(#keys, from + 999)))
      if from == 5 then present = r else for k = 1, #r do present[from - 5 + k] = r[k] end end
    end
  end
  local whole = args[8] == '1' -- read a short stream's records whole (see records)
  local recs = {} -- per job leased (by its place in jobs), its record as handed back
  local order = agings and aging_order(keys, n, present, agings, group)
  for oi = 1, n do
    if want <= 0 then break end
    local i = oi
    if order then i = order[oi] end
    local stream = keys[i + 4]
    if present[i] == 1 then
      local lim = limits and limits[i]
      if lim and not lim.running then lim.running = limit_running(lim, prefix) end
      local rate = rates and rates[i]
      local keyrate = keyrates and keyrates[i]
      while want > 0 do
        local asked = want
        if lim then
          asked = math.min(want, lim.max - lim.running)
          if asked <= 0 then
            limited = 1
            break
          end
        end
        if rate then
          now_ms = now_ms or server_ms()
          asked = math.min(asked, rate_room(rate, now_ms))
          if asked <= 0 then
            limited = 1
            break
          end
        end
        local res = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', asked, 'STREAMS', stream, '>')
        if type(res) == 'table' and res.err and string.find(res.err, 'NOGROUP', 1, true) and not regrouped[i] then
          -- a registered stream deleted, or its group destroyed, by hand: the group comes back
          -- from the stream's start (a submit since may have re-made the stream without one),
          -- and the read is made again
          regrouped[i] = true
          redis.pcall('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
          res = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', asked, 'STREAMS', stream, '>')
        end
        if type(res) ~= 'table' or res.err or #res[1][2] == 0 then break end
        local read = res[1][2]
        local short = #read < asked
        if short then
          -- every new entry was read: the last is the stream's last, the wake-up cursor (no
          -- XREVRANGE for it), and another read would come back empty
          last_read[i] = read[#read][1]
        end
        for _, e in ipairs(read) do
          local id = e[1]
          -- an entry of a first delivery names the job only: read here, not through entry_fields
          -- (a Lua call costs Redis ~0.8 k instructions a job)
          local f = e[2]
          local job_id, before, dual, wake
          if #f == 2 and f[1] == 'j' then job_id = f[2] else job_id, before, dual, wake = entry_fields(f) end
          if wake then
            -- a resumed queue's wake-up (see hero_pause): it woke us, and names no job
            ack_del(stream, group, id, xackdel)
          else
            local job_key = prefix .. job_id
            -- one read of what the checks need, the status (and the legacy list of a dual-pushed
            -- job; the entry says which, and how many attempts came before): nothing can raise
            -- before the single write, so a corrupt record never leaves a half-applied fetch
            local status, bridge, err, rec
            if dual then
              local r = redis.pcall('HMGET', job_key, 'status', 'bridge')
              err, status, bridge = r.err, r[1], r[2]
            elseif whole and short then
              -- the fetch is likely short: the record is read whole now, not its status now and
              -- the record after the write
              rec = redis.pcall('HGETALL', job_key)
              if rec.err then
                err = rec.err
              else
                for k = 1, #rec, 2 do
                  if rec[k] == 'status' then status = rec[k + 1] end
                end
              end
            elseif keyrate then
              local r = redis.pcall('HMGET', job_key, 'status', 'limit_key')
              err, status = r.err, r[1]
              rec = nil
              keyrate.lk = r[2]
            else
              local r = redis.pcall('HGET', job_key, 'status')
              if type(r) == 'table' then err = r.err else status = r end
            end
            if keyrate and rec and not rec.err then
              keyrate.lk = nil
              for k = 1, #rec, 2 do
                if rec[k] == 'limit_key' then keyrate.lk = rec[k + 1] end
              end
            end
            local room, keylog = true, nil
            if keyrate and keyrate.lk and not err and status == 'dispatched' and not dual then
              now_ms = now_ms or server_ms()
              room, keylog = key_room(keyrate, keyrate.lk, now_ms)
            end
            if err then
              -- the key holds something other than a hash: foreign data, never a job of ours, and
              -- it must not stop this fetch for every entry behind it
              ack_del(stream, group, id, xackdel)
              dropped[#dropped + 1] = { i, id, job_id, 'foreign' }
            elseif not status then
              ack_del(stream, group, id, xackdel)
              dropped[#dropped + 1] = { i, id, job_id, 'missing' }
            elseif status ~= 'dispatched' then
              ack_del(stream, group, id, xackdel)
              dropped[#dropped + 1] = { i, id, job_id, 'stale' }
            elseif not room then
              -- its limit key has no room in this window: parked until the oldest start in it
              -- leaves, as a delayed job (the broker's promote queues it again), not started
              ack_del(stream, group, id, xackdel)
              local oldest = redis.call('ZRANGE', keylog.key, 0, 0, 'WITHSCORES')
              local run_at = (tonumber(oldest[2]) or now_ms) + keylog.per
              if before and tonumber(before) then
                redis.call('HSET', job_key, 'status', 'waiting', 'run_at', tostring(run_at), 'attempts', before)
              else
                redis.call('HSET', job_key, 'status', 'waiting', 'run_at', tostring(run_at))
              end
              redis.call('ZADD', delayed_key_of(keys[2]), run_at, job_id)
              tally(st, stream, 'delayed', 1)
              parked = true

            elseif bridge and bridge ~= '' and redis.call('LREM', bridge, 1, job_id) == 0 then
              -- dual-pushed, and a legacy actor popped it from its list first: it is theirs
              ack_del(stream, group, id, xackdel)
              dropped[#dropped + 1] = { i, id, job_id, 'legacy' }
            else
              -- one HSET with its arguments spelled out: building a table to unpack costs more
              -- than the command
              local counted = before and tonumber(before)
              if counted then
                redis.call('HSET', job_key, 'status', 'started', 'lease', id, 'worker_id', consumer,
                  'started_at', now_iso, 'attempts', tostring(counted + 1))
              else
                redis.call('HSET', job_key, 'status', 'started', 'lease', id, 'worker_id', consumer,
                  'started_at', now_iso)
              end
              if bridge and bridge ~= '' then
                -- taken back from the legacy list above: no longer the legacy side's
                redis.call('HSET', job_key, 'bridge', '')
              end
              local n = #jobs
              jobs[n + 1], jobs[n + 2], jobs[n + 3] = i, id, job_id
              attempts[#attempts + 1] = counted and tostring(counted + 1) or '1'
              if rec then
                -- the record as the HSET above left it
                local set = { status = 'started', lease = id, worker_id = consumer, started_at = now_iso,
                  attempts = counted and tostring(counted + 1) or nil }
                for k = 1, #rec, 2 do
                  local v = set[rec[k]]
                  if v then
                    rec[k + 1] = v
                    set[rec[k]] = nil
                  end
                end
                for _, f in ipairs({ 'status', 'lease', 'worker_id', 'started_at', 'attempts' }) do
                  if set[f] then
                    rec[#rec + 1] = f
                    rec[#rec + 1] = set[f]
                  end
                end
                recs[#attempts] = rec
              end
              want = want - 1
              if lim then
                now_ms = now_ms or server_ms()
                redis.call('ZADD', lim.key, now_ms, job_id)
                lim.running = lim.running + 1
              end
              if rate then
                redis.call('ZADD', rate.key, now_ms, job_id)
                redis.call('PEXPIRE', rate.key, rate.per)
                rate.used = rate.used + 1
              end
              if keylog then
                redis.call('ZADD', keylog.key, now_ms, job_id)
                redis.call('PEXPIRE', keylog.key, keylog.per)
                keylog.used = keylog.used + 1
              end
            end
          end
        end
        if last_read[i] then break end
      end
    end
  end
  if log then
    -- one shared entry per stream: the jobs of a stream are contiguous in `jobs`
    local k = 1
    while k <= #jobs do
      local i, ids, att = jobs[k], {}, {}
      while k <= #jobs and jobs[k] == i do
        ids[#ids + 1] = jobs[k + 2]
        att[#att + 1] = attempts[(k + 2) / 3]
        k = k + 3
      end
      local logged = log_shared(log, 'started', ids, keys[i + 4], consumer, att)
      -- the entry's id is Redis's clock now: no TIME call for the wait samples
      if logged and not now_ms then now_ms = tonumber(string.match(logged, '^(%d+)')) end
    end
  end
  if #jobs > 0 then
    now_ms = now_ms or server_ms()
    -- each job's wait, its entry's age, sampled inline (a Lua call per job cost more); the jobs
    -- of a stream are contiguous
    local waits, at = nil, nil
    for k = 1, #jobs, 3 do
      if jobs[k] ~= at then
        at = jobs[k]
        waits = histogram(st, keys[at + 4], 'wait')
      end
      local id = jobs[k + 1]
      local waited = now_ms - (tonumber(string.sub(id, 1, string.find(id, '-', 1, true) - 1)) or now_ms)
      local b = 0
      if waited > 0 then
        b = math.floor(math.log(waited + 1) / LN2)
        waits.sum = waits.sum + waited
      end
      waits[b] = (waits[b] or 0) + 1
    end
    flush_stats(st)
  elseif parked then
    flush_stats(st)
  end
  local cursors = {}
  if want > 0 then
    -- a registered stream's cursor is its last entry (the last read, when the read reached the
    -- end). An unregistered one is '0-0' (XREAD from there blocks until its first entry) unless
    -- something made it by hand with entries in it, which must not wake the worker at once,
    -- over and over: one EXISTS asks that of all of them (a worker names 30 streams a type; an
    -- XREVRANGE each cost Redis 10 calls a job at 5,000 jobs/s)
    -- Only streams that can deliver are watched: a registered one (from its last entry, '0-0'
    -- when empty) and one made by hand with entries; the others get '' (not watched: an XREAD
    -- BLOCK over 30 streams cost Redis ~50 us a wake, most of it for streams that never get
    -- an entry). A stream that appears later announces itself on the registry's signal stream
    -- (`<registry>:new`, see append), whose cursor comes last.
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
    if signal then
      cursors[n + 1] = signal
    else
      cursors[n + 1] = '0-0'
      cursor_of(cursors, n + 1, queue_signal_key(keys[1]))
    end
  end
  if not whole and not signal then return { jobs, dropped, cursors, limited } end
  local records = {}
  if whole and want > 0 then
    for k = 3, #jobs, 3 do
      records[#records + 1] = recs[#records + 1] or redis.call('HGETALL', prefix .. jobs[k])
    end
  end
  if not signal then return { jobs, dropped, cursors, limited, records } end
  local registered = {}
  if since == '*' then
    for i = 1, n do
      if present[i] == 1 then registered[#registered + 1] = i end
    end
  end
  return { jobs, dropped, cursors, limited, records, signal, registered }
end
