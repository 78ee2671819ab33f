-- hero_submit: store new jobs and queue them, or park them in the delayed set, a whole batch a
-- call (a producer's bulk submit costs one function call, not one per job).
-- KEYS[1] delayed zset  KEYS[2] queue registry set  KEYS[3] bridge registry hash (work stream ->
--   JSON of a dual-push mapping: {list, stop, track, worker, pickup_ms})
-- KEYS[4] config hash  KEYS[5] event log  KEYS[6] stats hash
-- KEYS[7..] the batch's work streams, each once (since protocol 35: a job's key is derived from
--   the prefix and its id, its stream named by its code)
-- A job queued now gets status 'dispatched'; its record does not name its stream entry (the
-- entry names the job), except on a stream the bridge registry names: such a job is also pushed
-- (LPUSH) to that legacy list, with `entry` = its entry id, `bridge` = the list, `bridge_stop` =
-- the legacy stop queue and `worker_id` = the legacy worker id, and tracked in the mapping's
-- zset; whichever side takes it first runs it, and the bridge deletes the entry the other side
-- never read.
-- ARGV[1] consumer group  ARGV[2] job key prefix (`<ns>:job:`)
-- ARGV[3] the caller's clock now, ms: a run-at is moved to Redis's clock by it (see rebased)
--   then per job: its id, its code `<s>.<n>` or `<s>.<n>@<run-at ms>` (s: its stream, 1 for
--   KEYS[7]; n: how many values follow; the run-at on the caller's clock, none or not in the
--   future: now), and those n values: field, value pairs of the job record (without status /
--   entry). Most jobs of a batch share one code, read once a call: a plain job is four
--   strings (since protocol 35; before, eleven). The record gets `created_at`, Redis's clock
--   now, and `script_type`, its stream's type, unless it names them (a named `created_at` is
--   kept, a named type checked against the stream)
-- Stats: the stream's `delayed` gauge for a job parked in the delayed set; a fair queue's `fair`
-- gauge up for each job its gate took (see gate).
-- Events: `submitted` per new job (q its stream; d its run-at when it waits in the delayed set);
-- `error` (r the reason) for a new job whose prerequisite already failed; `batch_done` (j the
-- callback job, r the batch) when a batch it joins is done in this call.
-- Batches: a job naming a `batch` is counted into it (`<ns>:batch:<name>`, made with its first
-- member, named in `<ns>:meta:batches`); a done batch takes none: HERO_INVALID_JOB (batches.lua).
-- Prerequisites (`prerequisites` or `dependencies`, a JSON array of job ids): each must exist or
-- come earlier in the batch, else HERO_INVALID_JOB. A job whose prerequisites all finished is
-- queued as any other; one with some unfinished waits for them (status waiting, see
-- release_dependents); one with a prerequisite that ended error ends error at once (`dependency
-- failed: <id>`); none may be delayed too. Each prerequisite's record names the new job in its
-- `dependents` field (a JSON array, in submit order).
-- Returns: kind, status per job, in order, one flat list (a table a job costs more than its
-- write): 'created', status for a new job ('dispatched' or 'waiting');
-- 'exists', status when the id is taken (nothing is written for it: submitting an existing id
-- is idempotent); 'duplicate:<id>', that job's status when the record's `unique` key is held by
-- job <id>, still queued or running (nothing is written: see claim_unique).
-- Errors: HERO_EVICTING <policy> when Redis's maxmemory policy may evict keys (INFO, at most once
-- a second: refuse_evicting) and the config's `accept_eviction` does not name it. HERO_BAD_ARG
-- when a code is not one (a stream not given, values not in pairs) or ARGV ends inside a job;
-- HERO_INVALID_JOB when a record is one a worker would refuse (refuse: an unknown field, a value
-- of the wrong form, a stream other than the record names). Then nothing of the batch is written.
-- A job's code (see ARGV) read: { s = its stream's index in KEYS, n = values that follow, at =
-- its run-at text or nil }, or nil when it is not one.
local function read_code(keys, code)
  local s, n, at = string.match(code, '^(%d+)%.(%d+)@?(%d*)$')
  s, n = tonumber(s), tonumber(n)
  if not s or s < 1 or 6 + s > #keys or n % 2 ~= 0 then return nil end
  return { s = 6 + s, n = n, at = at ~= '' and at ~= '0' and at or nil }
end

local function hero_submit(keys, args)
  local delayed, registry, bridges, group, prefix = keys[1], keys[2], keys[3], args[1], args[2]
  -- check the whole batch before the first write
  -- at: a job's first argument; cs: its code read (codes: a code's text -> read, once a call);
  -- jk: its key
  local at, cs, jk, codes = {}, {}, {}, {}
  -- stream -> its parts (see stream_parts); good: see refuse, made from the second job on
  local parsed = {}
  local unique = nil -- per job with a uniqueness key: { key, ttl ms or nil }
  local tagged = nil -- per job with tags: their JSON array (checked by refuse)
  local deps = nil -- per job with prerequisites: their ids, each once
  local batch = nil -- job id -> true for the jobs before this one, made when one has prerequisites
  local members = nil -- per job that names a batch: { batch key, batch name }
  local kept, pos, n = false, 4, 0 -- kept: some job has a retention of its own (keep_ttl)
  while pos <= #args do
    local code = args[pos + 1]
    local c = code and (codes[code] or read_code(keys, code))
    if not c or pos + 1 + c.n > #args then
      return redis.error_reply('HERO_BAD_ARG job ' .. tostring(args[pos]) .. ': code ' .. tostring(code) ..
        ' is not <stream>.<values>[@<run-at ms>] of a stream given, with the values in field/value pairs')
    end
    codes[code] = c
    if n == 1 then parsed.good = {} end
    n = n + 1
    local job_id = args[pos]
    local job_key = prefix .. job_id
    local why, uniq, uttl, tags, prereqs, bname, own_keep = refuse(job_id, keys[c.s], args, pos + 2, pos + 1 + c.n, parsed)
    if why then
      return redis.error_reply('HERO_INVALID_JOB job ' .. tostring(job_id) .. ': ' .. why)
    end
    if own_keep then kept = true end
    if bname then
      local bkey = batch_key(ns_of(job_key, job_id), bname)
      if batch_done(bkey) then
        return redis.error_reply('HERO_INVALID_JOB job ' .. job_id .. ': batch ' .. bname ..
          ' is done (its callbacks were submitted): a new member needs a new batch')
      end
      members = members or {}
      members[n] = { bkey, bname }
    end
    if prereqs then
      -- each must exist already, or come earlier in this batch (a flow: children first): a
      -- job can only wait on jobs older than itself, so no cycle can form
      local list, seen = {}, {}
      if not batch then
        batch = {}
        for k = 1, n - 1 do batch[args[at[k]]] = true end
      end
      if c.at then
        return redis.error_reply('HERO_INVALID_JOB job ' .. job_id .. ': a job with prerequisites cannot also be delayed')
      end
      for _, p in ipairs(cjson.decode(prereqs)) do
        if not seen[p] then
          seen[p] = true
          list[#list + 1] = p
          if not batch[p] and redis.call('EXISTS', prefix .. p) == 0 then
            return redis.error_reply('HERO_INVALID_JOB job ' .. job_id .. ': prerequisite ' .. p ..
              ' does not exist (submit it first, or earlier in the same batch)')
          end
        end
      end
      deps = deps or {}
      deps[n] = list
    end
    if batch then batch[job_id] = true end
    if uniq then
      unique = unique or {}
      unique[n] = { uniq, uttl }
    end
    if tags then
      tagged = tagged or {}
      tagged[n] = tags
    end
    at[n], cs[n], jk[n] = pos, c, job_key
    pos = pos + 2 + c.n
  end
  local answers = {}
  -- `bridged`: how many dual-push mappings the bridge registry holds (the broker publishes it
  -- with the registry); while none, a submit asks the registry nothing
  local cfg = settings(keys[4], unique and FIELDS.submit_unique or FIELDS.submit)
  local evicting = refuse_evicting(cfg)
  if evicting then return evicting end
  -- tag key -> ids of this call (see index_tags); only a batch with tagged jobs makes it
  local tag_index = tagged and { ids = {}, order = {}, decoded = {} }
  -- the namespace's key prefix, for uniqueness and tag keys: made once, not once a job
  local ns = (unique or tagged) and ns_of(prefix, '')
  local log = event_log(keys[5], cfg)
  local st = nil -- stats, when a job of the batch is delayed
  local submitted, order = {}, {} -- per stream, the ids queued now (the event log's entries)
  local dual = {} -- per stream: its dual-push mapping, or false; read once per call
  -- streams seen to exist in this call; `gated` counts the jobs a fair queue's gate took (see
  -- gate), written once at the end
  local known = { gated = {} }
  local bridged = setting(cfg, 'bridged', 0) > 0 -- see dual_push_mapping
  -- Redis's clock, read once a call (a record's `created_at`, a run-at's rebase): the first job
  -- queued tells it by its entry's id (`ms`), else TIME does
  local now_ms, now_iso, caller_ms = nil, nil, tonumber(args[3])
  local function stamp(ms)
    now_ms = now_ms or ms or server_ms()
    now_iso = now_iso or iso_of(now_ms)
    return now_iso
  end
  -- Whether any job of the batch exists already, with one EXISTS over all their keys: a new
  -- job's id is new, and asking each record for its status cost a call a job (a third of the
  -- submit's calls at 5,000 jobs/s). Only when some key exists is each one asked; a job written
  -- earlier in this call is asked too (an id given twice in one batch).
  local taken = 0
  do
    for from = 1, n, 1000 do
      taken = taken + redis.call('EXISTS', unpack(jk, from, math.min(n, from + 999)))
    end
  end
  local written = {} -- job keys written in this call
  for i = 1, n do
    local job_key, c, p = jk[i], cs[i], at[i]
    local stream, job_id, run_at_text = keys[c.s], args[p], c.at
    -- the values' span, and the record's defaults: its stream's type, Redis's clock (a value
    -- the job names comes later in the HSET, and the last of a field given twice counts)
    local from, to, stype = p + 2, p + 1 + c.n, parsed[stream].type
    local existing = nil
    if taken > 0 or written[job_key] then existing = redis.call('HGET', job_key, 'status') end
    written[job_key] = true
    local holder, held = nil, nil
    if not existing and unique and unique[i] then
      holder, held = claim_unique(cfg, ns, prefix, job_id, unique[i])
    end
    local blocked, failed_dep, results = 0, nil, nil
    if not existing and not holder and deps and deps[i] then
      blocked, failed_dep, results = prerequisites_state(prefix, deps[i])
    end
    -- the run-at on Redis's clock (rebased by the caller's); one not in the future is no delay
    local due, run_at = nil, nil
    if run_at_text and not existing and not holder then
      run_at = tonumber(run_at_text)
      stamp()
      due = rebased(run_at, caller_ms, now_ms)
      if due <= now_ms then due = nil end
    end
    if existing then
      answers[2 * i - 1], answers[2 * i] = 'exists', existing
    elseif holder then
      answers[2 * i - 1], answers[2 * i] = 'duplicate:' .. holder, held
    elseif failed_dep then
      -- a prerequisite ended error already: so does this job, at once, with the reason
      local reason = 'dependency failed: ' .. failed_dep
      local iso = stamp()
      redis.call('HSET', job_key, 'status', 'error', 'error', reason, 'finished_at', iso, 'script_type', stype,
        'created_at', iso, unpack(args, from, to))
      redis.call('PEXPIRE', job_key, setting_arg(cfg, 'retention_ms', 86400000))
      log_event(log, 'error', job_id, stream, nil, nil, reason)
      answers[2 * i - 1], answers[2 * i] = 'created', 'error'
    elseif blocked > 0 then
      -- waits for its prerequisites: each names it in its dependents hash, and the call that
      -- ends the last one queues it (see release_dependents)
      redis.call('HSET', job_key, 'status', 'waiting', 'deps_left', blocked, 'script_type', stype,
        'created_at', stamp(), unpack(args, from, to))
      for _, d in ipairs(deps[i]) do
        local s = redis.call('HGET', prefix .. d, 'status')
        if s ~= 'finished' then
          local dk = deps_key(prefix .. d, d)
          if redis.call('EXISTS', dk) == 0 then
            redis.call('HINCRBY', keys[4], DEPS_FIELD, 1)
            redis.call('SADD', waiting_on_key(keys[4]), d)
          end
          redis.call('HSET', dk, job_id, stream)
        end
      end
      log_event(log, 'submitted', job_id, stream, nil, nil, 'waiting on ' .. blocked .. ' prerequisites')
      answers[2 * i - 1], answers[2 * i] = 'created', 'waiting'
      if tagged and tagged[i] then index_tags(tag_index, ns, job_id, tagged[i]) end
    elseif due then
      if due ~= run_at then run_at, run_at_text = due, string.format('%d', due) end
      redis.call('HSET', job_key, 'status', 'waiting', 'run_at', run_at_text, 'script_type', stype,
        'created_at', now_iso, unpack(args, from, to))
      redis.call('ZADD', delayed, run_at, job_id)
      st = st or stats(keys[6])
      tally(st, stream, 'delayed', 1)
      log_event(log, 'submitted', job_id, stream, nil, nil, nil, run_at_text)
      answers[2 * i - 1], answers[2 * i] = 'created', 'waiting'
      if tagged and tagged[i] then index_tags(tag_index, ns, job_id, tagged[i]) end
    else
      -- the common case written out: no dual-push mapping, the stream registered earlier in
      -- this call (two Lua calls a job cost ~1.6 k instructions); the record is written after
      -- the entry (a fair queue's gate is given the limit key, and the call is atomic), so the
      -- first entry's id dates the call
      local m = bridged and dual_push_mapping(cfg, bridges, stream, dual)
      local entry
      local seen = not m and known[stream]
      if seen == true then
        entry = redis.call('XADD', stream, '*', 'j', job_id)
      else
        -- a fair stream's gate files the job by its limit key: given here, not read back
        -- (from the end: the Rust client writes it among the last fields, and as in HSET the
        -- last of a field given twice counts)
        local lk = ''
        for q = to - 1, from, -2 do
          if args[q] == 'limit_key' then
            lk = args[q + 1]
            break
          end
        end
        known.lk = lk
        if seen == 'fair' then
          -- a stream this call found fair (append marked it): straight into its gate
          gate(registry, stream, job_id, nil, known)
        else
          entry = append(stream, group, registry, job_id, known, nil, m and true)
        end
        if not now_iso then stamp(entry and tonumber(string.match(entry, '^%d+'))) end
      end
      redis.call('HSET', job_key, 'status', 'dispatched', 'script_type', stype, 'created_at', now_iso or stamp(),
        unpack(args, from, to))
      if m then
        hand_to_legacy(job_key, job_id, m, entry, now_ms)
      end
      if log then
        local ids = submitted[stream]
        if not ids then
          ids = {}
          submitted[stream] = ids
          order[#order + 1] = stream
        end
        ids[#ids + 1] = job_id
      end
      answers[2 * i - 1], answers[2 * i] = 'created', 'dispatched'
      if tagged and tagged[i] then index_tags(tag_index, ns, job_id, tagged[i]) end
    end
    -- the prerequisites that ended before it, their results in its record (a later end writes
    -- its own there: release_dependents)
    if results then
      for _, r in ipairs(results) do keep_result(job_key, r[1], r[2], r[3], r[4]) end
    end
  end
  if kept then redis.call('HSETNX', keys[4], KEPT_FIELD, '1') end
  if members then
    -- each new member counts in its batch; one that ended at once (a failed prerequisite)
    -- counts as failed, and may be what its closed batch waited for
    local ctx = nil
    for i = 1, n do
      local m = members[i]
      if m and answers[2 * i - 1] == 'created' then
        join_batch(keys[4], m[1], m[2], answers[2 * i] == 'error', stamp())
        if answers[2 * i] == 'error' then
          ctx = ctx or { cfg = settings(keys[4]), log = log, now_iso = now_iso }
          settle_batch(ctx, m[1], m[2])
        end
      end
    end
  end
  if deps then
    for i = 1, n do
      if deps[i] and answers[2 * i - 1] == 'created' then
        note_dependent(prefix, deps[i], args[at[i]])
      end
    end
  end
  if tag_index then flush_tags(tag_index) end
  for _, stream in ipairs(order) do log_shared(log, 'submitted', submitted[stream], stream) end
  if st then flush_stats(st) end
  if next(known.gated) then flush_gated(known, keys[6]) end
  return answers
end
