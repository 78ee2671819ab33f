-- hero_fetch: claim up to COUNT jobs for one consumer, taking streams strictly in the order given
-- (the caller orders them instance -> group -> type, priority 0 first). Per entry it reads the
-- job's status only; the entry itself says how many attempts came before and whether the job was
-- dual-pushed (see append).
-- KEYS[1] queue registry set  KEYS[2] config hash  KEYS[3] event log  KEYS[4] stats hash
-- KEYS[5..n+4] work streams in precedence order
-- ARGV[1] consumer group  ARGV[2] consumer name  ARGV[3] count  ARGV[4] job key prefix
-- ARGV[5] now ISO 8601 (unused since protocol 31: `started_at` is Redis's clock)
-- ARGV[6] '1' when the server has XACKDEL
-- ARGV[7] concurrency limits: '' for none, else `<stream index> <max> <limit key>` triples
--   joined by spaces, for the streams of queues whose policy limits how many of their jobs run
--   at once across all workers (a worker that passes '' while some queue has a limit, the config
--   hash's `limited` above 0, gets the limits the policies set: see limits_from_policies). A
--   limit key (a sorted set, job id -> ms leased) is shared by
--   every stream the limit covers; the fetch takes from such a stream no more than the limit
--   leaves, adds what it leases, and when the set is full drops the members no longer started
--   (ended, stopped or recovered since) before it counts: O(limit), only at the limit.
-- ARGV[8] records: '1' asks a fetch that comes up short to hand back the records of the jobs
--   it leased (see records below); '2' asks every fetch to (since protocol 29: a client whose
--   per-command cost is high, as Node's, saves a command a job; Redis spends about what the
--   separate reads cost it); absent or '' for none.
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
-- Stats: a `wait` sample per job leased (its entry's age: from dispatch to now, by Redis's clock);
-- the stream's `delayed` gauge up for a job parked by its limit key's rate (see park); a fair
-- queue's `fair` gauge down by the jobs released from its gate (see release); `lost` per entry
-- dropped because its job's record is gone (since protocol 31).
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
--   records: empty when the fetch claimed COUNT jobs (unless ARGV[8] is '2'); else per job leased, in the order of
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
-- One fetch's state, by name. What the caller asked: group, consumer, want (how many more jobs
-- it takes), prefix (of job keys), now_iso, xackdel, whole (hand a short fetch's records back),
-- always (hand every fetch's records back),
-- since (the registry cursor). What the policies say: limits (stream index -> {key, max,
-- running}, shared per key), rates, keyrates, agings. What the call gathers for its reply: jobs
-- (stream index, entry id, job id: three items a job), recs (per job leased, when whole),
-- dropped, last_read (per stream read to its end: its last entry), limited, signal, present (per
-- stream: 1 when registered).
-- The table is made once and filled anew by each call (every field set here, those a call may
-- not set to nil): a table of this size made per call cost Redis ~20 k instructions a call in
-- garbage collection (a fetch of one job costs ~250 k).
local FETCH = {}
FIELDS.fetch = { 'events_max', 'limited', 'rated', 'aged', 'fair' }
-- The empty list a reply carries when nothing was dropped (only read, never written).
local NONE = {}
local function fetch_state(keys, args)
  local f = FETCH
  f.keys, f.n, f.group, f.consumer, f.want = keys, #keys - 4, args[1], args[2], tonumber(args[3])
  -- started_at is Redis's clock (what a time limit is measured from), read at the first lease
  -- of the call (since protocol 31: the caller's ARGV[5] is no longer used)
  f.prefix, f.now_iso, f.xackdel = args[4], nil, args[6]
  f.always = args[8] == '2'
  f.whole = f.always or args[8] == '1'
  f.since, f.limited, f.parked, f.now_ms, f.st = args[9] or '', 0, false, nil, stats(keys[4])
  f.jobs, f.dropped, f.recs, f.last_read = {}, nil, nil, {}
  f.regrouped, f.present, f.limits, f.lost = nil, {}, nil, nil
  f.rates, f.keyrates, f.agings = nil, nil, nil
  if args[7] and args[7] ~= '' then
    local limits, by_key = {}, {}
    for i, max, key in string.gmatch(args[7], '(%d+) (%d+) (%S+)') do
      local lim = by_key[key]
      if not lim then
        lim = { key = key, max = tonumber(max) }
        by_key[key] = lim
      end
      limits[tonumber(i)] = lim
    end
    f.limits = limits
  end
  f.cfg = settings(keys[2], FIELDS.fetch)
  f.policies, f.released = nil, false
  f.log = event_log(keys[3], f.cfg)
  local want_limits = not f.limits and setting(f.cfg, 'limited', 0) > 0
  local want_rates = setting(f.cfg, 'rated', 0) > 0
  local want_aging = setting(f.cfg, 'aged', 0) > 0
  if want_limits or want_aging or want_rates then
    local l
    l, f.rates, f.keyrates, f.agings = queue_policies(keys, want_limits, want_rates, want_aging)
    f.limits = f.limits or l
  end
  return f
end

-- Which streams given are registered (f.present), and the registry's signal when the caller
-- keeps a registry cursor; false when that cursor is stale (the fetch then claims nothing). In
-- runs of 1000 as in_runs makes them (unpack of a very long list overflows Lua's stack), written
-- out: in_runs' closure and copying the answers cost 0.8 k instructions per job here.
local function read_registry(f)
  local keys, since, signal = f.keys, f.since, nil
  if since ~= '' then
    signal = '0-0'
    local last = redis.call('XREVRANGE', queue_signal_key(keys[1]), '+', '-', 'COUNT', 1)
    if last[1] then signal = last[1][1] end
  end
  f.signal = signal
  if since ~= '' and since ~= '*' then
    if since ~= signal then return false end
    local present = f.present
    for i = 1, f.n do present[i] = 1 end
  else
    for from = 5, #keys, 1000 do
      local r = redis.call('SMISMEMBER', keys[1], unpack(keys, from, math.min(#keys, from + 999)))
      if from == 5 then f.present = r else for k = 1, #r do f.present[from - 5 + k] = r[k] end end
    end
    reregister(f)
  end
  return true
end

-- An entry acknowledged and deleted unclaimed, for the reply's dropped list.
local function drop(f, i, stream, id, job_id, why)
  ack_del(stream, f.group, id, f.xackdel)
  local dropped = f.dropped
  if not dropped then
    dropped = {}
    f.dropped = dropped
  end
  dropped[#dropped + 1] = { i, id, job_id, why }
  -- an entry whose record is gone is a job lost (an evicting Redis, a record deleted by hand):
  -- counted, so `hero audit` names it after the entry itself is gone
  if why == 'missing' then
    tally(f.st, stream, 'lost', 1)
    f.lost = true
  end
end

-- Stream i's new entries, up to `asked`; nil when it has none (or is not a stream). A registered
-- stream deleted, or its group destroyed, by hand gets its group back from the stream's start (a
-- submit since may have re-made the stream without one), and the read is made again.
local function read_new(f, i, stream, asked)
  local group, consumer = f.group, f.consumer
  local res = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', asked, 'STREAMS', stream, '>')
  if type(res) == 'table' and res.err and string.find(res.err, 'NOGROUP', 1, true)
    and not (f.regrouped and f.regrouped[i]) then
    f.regrouped = f.regrouped or {}
    f.regrouped[i] = true
    redis.pcall('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
    res = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', asked, 'STREAMS', stream, '>')
  end
  if type(res) ~= 'table' or res.err or #res[1][2] == 0 then return nil end
  return res[1][2]
end

-- Claims from registered stream i until the fetch has all it wants, the stream runs dry, or a
-- limit or rate holds the rest back. Each entry's job is leased to the consumer when it is
-- still dispatched (and its limit key has room), else dropped or parked. The entries are taken
-- in this loop, with the call's state in locals: a Lua call or a table field per job costs
-- Redis ~0.8 k instructions a job, a tenth of what the fetch spends on a job.
local function claim_from(f, i, ids)
  local stream, group, consumer, prefix = f.keys[i + 4], f.group, f.consumer, f.prefix
  local now_iso, xackdel, jobs = f.now_iso, f.xackdel, f.jobs
  local c, att = 0, nil -- jobs leased from this stream, and their attempts once one is a retry
  local lim = f.limits and f.limits[i]
  if lim and not lim.running then lim.running = limit_running(lim, prefix) end
  local rate, keyrate = f.rates and f.rates[i], f.keyrates and f.keyrates[i]
  local fair = fair_policy(f.keys[2], stream, f, setting(f.cfg, 'fair', 0) > 0)
  while f.want > 0 do
    local asked = (lim or rate) and room_of(f, lim, rate) or f.want
    if asked <= 0 then break end
    local read = read_new(f, i, stream, asked)
    if fair and (not read or #read < asked) then
      -- a fair queue's stream holds only what was released: release what this read lacks
      local got = read and #read or 0
      local moved, capped = release(f.st, f.keys[2], prefix, stream, fair, asked - got)
      if capped then f.limited = 1 end
      if moved > 0 then
        f.released = true
        local more = read_new(f, i, stream, asked - got)
        if more and read then
          for k = 1, #more do read[#read + 1] = more[k] end
        elseif more then
          read = more
        end
      end
    end
    if not read then break end
    local short = #read < asked
    if short then
      -- every new entry was read: the last is the stream's last, the wake-up cursor (no
      -- XREVRANGE for it), and another read would come back empty
      f.last_read[i] = read[#read][1]
    end
    local whole_now, want = f.whole and (short or f.always), f.want
    for k = 1, #read do -- not ipairs: its iterator is a C call an entry
      local e = read[k]
      local id, fields = e[1], e[2]
      -- an entry of a first delivery names the job only: read here, not through entry_fields
      local job_id, before, dual, wake
      if #fields == 2 and fields[1] == 'j' then job_id = fields[2] else job_id, before, dual, wake = entry_fields(fields) end
      local job_key = prefix .. job_id
      local status, bridge, err, rec
      if not (wake or dual or whole_now or keyrate) then
        -- the common case, written out
        local r = redis.pcall('HGET', job_key, 'status')
        -- `type` is a C call: only what is not the common answer is looked at
        if r == 'dispatched' then status = r elseif type(r) == 'table' then err = r.err else status = r end
      elseif not wake then
        status, bridge, err, rec = read_job(job_key, dual, whole_now, keyrate)
      end
      local keylog, room = nil, true
      if status == 'dispatched' and not err and keyrate and keyrate.lk and not dual then
        f.now_ms = f.now_ms or server_ms()
        room, keylog = key_room(keyrate, keyrate.lk, f.now_ms)
      end
      if wake then
        -- a resumed queue's wake-up (see hero_pause): it woke us, and names no job
        ack_del(stream, group, id, xackdel)
      elseif err then
        -- the key holds something other than a hash: foreign data, never a job of ours, and it
        -- must not stop this fetch for every entry behind it
        drop(f, i, stream, id, job_id, 'foreign')
      elseif not status then
        drop(f, i, stream, id, job_id, 'missing')
      elseif status ~= 'dispatched' then
        drop(f, i, stream, id, job_id, 'stale')
      elseif not room then
        park(f, stream, id, job_id, before, keylog)
      elseif bridge and bridge ~= '' and redis.call('LREM', bridge, 1, job_id) == 0 then
        -- dual-pushed, and a legacy actor popped it from its list first: it is theirs
        drop(f, i, stream, id, job_id, 'legacy')
      else
        -- one HSET with its arguments spelled out: building a table to unpack costs more than
        -- the command
        local counted = before and tonumber(before)
        if not now_iso then
          f.now_ms = f.now_ms or server_ms()
          now_iso = iso_of(f.now_ms)
          f.now_iso = now_iso
        end
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
        c = c + 1
        ids[c] = job_id
        if counted then
          if not att then
            att = {}
            for k = 1, c - 1 do att[k] = '1' end
          end
          att[c] = tostring(counted + 1)
        elseif att then
          att[c] = '1'
        end
        if rec then
          f.recs = f.recs or {}
          f.recs[n / 3 + 1] = as_leased(rec, id, consumer, now_iso, counted)
        end
        want = want - 1
        if lim or rate or keylog then count_start(f, lim, rate, keylog, job_id) end
      end
    end
    f.want = want
    if f.last_read[i] then break end
  end
  return c, att
end

-- The jobs leased: a `wait` sample each, its entry's age by Redis's clock (see sample_waits),
-- the jobs of a stream being contiguous in jobs. (Their `started` events were logged per stream
-- as it was claimed: see hero_fetch.)
-- Writes stats: `wait`.
local function record_started(f)
  local jobs, keys, st = f.jobs, f.keys, f.st
  local now_ms, n, lo = f.now_ms or server_ms(), #jobs, 1
  f.now_ms = now_ms
  while lo <= n do
    local at, hi = jobs[lo], lo
    while hi + 3 <= n and jobs[hi + 3] == at do hi = hi + 3 end
    sample_waits(histogram(st, keys[at + 4], 'wait'), jobs, lo, hi, now_ms)
    lo = hi + 3
  end
end

-- The reply, positional on the wire (see Returns): four parts, a fifth (records) when asked for
-- records or given a registry cursor, and a sixth and seventh with a registry cursor.
local function fetch_reply(f, cursors, registered)
  local jobs, dropped, limited, signal = f.jobs, f.dropped or NONE, f.limited, f.signal
  if not f.whole and not signal then return { jobs, dropped, cursors, limited } end
  local records = {}
  if f.whole and (f.want > 0 or f.always) then
    local recs, prefix = f.recs or NONE, f.prefix
    for k = 3, #jobs, 3 do
      records[#records + 1] = recs[#records + 1] or redis.call('HGETALL', prefix .. jobs[k])
    end
  end
  if not signal then return { jobs, dropped, cursors, limited, records } end
  if not registered then
    registered = {}
    if f.since == '*' then
      local present = f.present
      for i = 1, f.n do
        if present[i] == 1 then registered[#registered + 1] = i end
      end
    end
  end
  return { jobs, dropped, cursors, limited, records, signal, registered }
end

local function hero_fetch(keys, args)
  local f = fetch_state(keys, args)
  if not read_registry(f) then
    return fetch_reply(f, {}, 'stale')
  end
  local present, want = f.present, f.want
  local order = f.agings and aging_order(keys, f.n, present, f.agings, f.group)
  for oi = 1, f.n do
    if want <= 0 then break end
    local i = order and order[oi] or oi
    if present[i] == 1 then
      -- the stream's `started` event: one shared entry for the jobs it leased (the jobs of a
      -- first delivery, most, are logged with attempts '1' each: see log_shared)
      local ids = {}
      local c, att = claim_from(f, i, ids)
      if c > 0 then log_shared(f.log, 'started', ids, keys[i + 4], f.consumer, att or true) end
      want = f.want
    end
  end
  if #f.jobs > 0 then record_started(f) end
  if #f.jobs > 0 or f.parked or f.released or f.lost then flush_stats(f.st) end
  return fetch_reply(f, f.want > 0 and wake_cursors(f) or {}, nil)
end
