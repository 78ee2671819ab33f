-- hero_submit: store new jobs and queue them, or park them in the delayed set, a whole batch a
-- call (a producer's bulk submit costs one function call, not one per job).
-- KEYS[1] delayed zset  KEYS[2] queue registry set  KEYS[3] bridge registry hash (work stream ->
--   JSON of a dual-push mapping: {list, stop, track, worker, pickup_ms})
-- KEYS[4] config hash  KEYS[5] event log  KEYS[6] stats hash
--   then per job i = 0, 1, ...: KEYS[7+2i] job hash  KEYS[8+2i] its work stream
-- A job queued now gets status 'dispatched'; its record does not name its stream entry (the
-- entry names the job), except on a stream the bridge registry names: such a job is also pushed
-- (LPUSH) to that legacy list, with `entry` = its entry id, `bridge` = the list, `bridge_stop` =
-- the legacy stop queue and `worker_id` = the legacy worker id, and tracked in the mapping's
-- zset; whichever side takes it first runs it, and the bridge deletes the entry the other side
-- never read.
-- ARGV[1] consumer group
--   then per job, in the order of KEYS: its id, its run-at ms ('0' or not in the future: now;
--   the producer's clock, rebased by the record's `created_at`), n = how many values
--   follow, and those n values: field, value pairs of the job record (without status / entry);
--   a record without `created_at` is given the server's time now (since protocol 29)
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
-- when ARGV does not describe one job per pair of KEYS or a field list is not in pairs;
-- HERO_INVALID_JOB when a record is one a worker would refuse (refuse: an unknown field, a value
-- of the wrong form, a stream other than the record names). Then nothing of the batch is written.
-- The uniqueness key of a job (`<ns>:unique:<key>`, beside `<ns>:job:<id>`): when it names
-- another job that is still waiting, dispatched or started, that job's id and status (the
-- submit is a duplicate: nothing is written); else the key is taken for `job_id`, for its TTL
-- (the job's `unique_ttl` ms, or the broker's retention time, read once a call through `cfg`),
-- and nil. A holder that ended or is gone releases the key to the next submit: nothing on the
-- job path has to clear it. The common case, a key no one holds, is one SET NX GET (Redis 7.0
-- takes NX with GET): taken, and nil back; only a key someone holds is looked at further.
local function claim_unique(cfg, job_key, job_id, u)
  local ukey = unique_key(ns_of(job_key, job_id), u[1])
  local ttl = u[2] or setting_arg(cfg, 'retention_ms', 86400000)
  local holder = redis.call('SET', ukey, job_id, 'NX', 'GET', 'PX', ttl)
  if not holder then return nil end
  if holder ~= job_id then
    local status = redis.call('HGET', string.sub(job_key, 1, #job_key - #job_id) .. holder, 'status')
    if status == 'waiting' or status == 'dispatched' or status == 'started' then
      return holder, status
    end
  end
  redis.call('SET', ukey, job_id, 'PX', ttl)
  return nil
end

-- Names a new job in the `dependents` field of each of its prerequisites (protocol.md §3), a
-- JSON array grown in place as text (a string copy, not a parse, per submit); a field that is
-- not an array (edited by hand) is left as it is, a key of another type skipped (pcall).
local function note_dependent(prefix, deps, job_id)
  local quoted = cjson.encode(job_id)
  for _, d in ipairs(deps) do
    local k = prefix .. d
    local cur = redis.pcall('HGET', k, 'dependents')
    if cur == false or cur == '[]' then
      redis.call('HSET', k, 'dependents', '[' .. quoted .. ']')
    elseif type(cur) == 'string' and string.sub(cur, 1, 1) == '[' and string.sub(cur, -1) == ']' then
      redis.call('HSET', k, 'dependents', string.sub(cur, 1, -2) .. ',' .. quoted .. ']')
    end
  end
end

-- Adds a new job to the index of each of its tags (`<ns>:tag:<tag>`, a set), so listing by tag
-- reads the index, not every job. A batch pays one SADD a tag (flush_tags writes `index.ids`, tag
-- key -> ids, in `index.order`), and each distinct JSON text of its tags is decoded and its keys
-- made once (`index.decoded`): a job costs one append a tag (~3 k instructions fewer for two).
local function index_tags(index, job_key, job_id, tags)
  local ns = ns_of(job_key, job_id)
  local e = index.decoded[tags]
  if not e or e.ns ~= ns then
    e = { ns = ns, lists = {} }
    for _, t in ipairs(cjson.decode(tags)) do
      local k = tag_key(ns, t)
      local ids = index.ids[k]
      if not ids then
        ids, index.order[#index.order + 1] = {}, k
        index.ids[k] = ids
      end
      e.lists[#e.lists + 1] = ids
    end
    index.decoded[tags] = e
  end
  local lists = e.lists
  for k = 1, #lists do lists[k][#lists[k] + 1] = job_id end
end

local function flush_tags(index)
  for _, k in ipairs(index.order) do
    local ids = index.ids[k]
    for from = 1, #ids, 1000 do
      redis.call('SADD', k, unpack(ids, from, math.min(#ids, from + 999)))
    end
  end
end

-- The state of a new job's prerequisites `list` (job ids, `prefix` their key prefix): how many
-- have not finished yet, the first that ended error (nil when none did), and the results of
-- those that ended ({id, status, text, value}), which keep_result writes into the new job's record.
local function prerequisites_state(prefix, list)
  local left, failed, ended = 0, nil, {}
  for _, p in ipairs(list) do
    local r = redis.pcall('HMGET', prefix .. p, 'status', 'output', 'error', 'value')
    local s = not r.err and r[1]
    if s == 'error' then
      failed = failed or p
      ended[#ended + 1] = { p, s, r[3] or '' }
    elseif s == 'finished' then
      ended[#ended + 1] = { p, s, r[2] or '', r[4] }
    else
      left = left + 1
    end
  end
  return left, failed, ended
end

local function hero_submit(keys, args)
  local delayed, registry, bridges, group = keys[1], keys[2], keys[3], args[1]
  local n = (#keys - 6) / 2
  if n ~= math.floor(n) then
    return redis.error_reply('HERO_BAD_ARG submit takes 2 keys per job after the first 6')
  end
  -- check the whole batch before the first write
  -- at: a job's first argument; counts: a count's text -> number (tonumber: 2 strtod, ~0.8 k)
  local at, counts = {}, {}
  local parsed = { good = n > 1 and {} or nil } -- stream -> its parts (see stream_parts); good: see refuse
  local unique = nil -- per job with a uniqueness key: { key, ttl ms or nil }
  local tagged = nil -- per job with tags: their JSON array (checked by refuse)
  local deps = nil -- per job with prerequisites: their ids, each once
  local batch = nil -- job id -> true for the jobs before this one, made when one has prerequisites
  local members = nil -- per job that names a batch: { batch key, batch name }
  local undated = nil -- per job without `created_at`: true (it gets the server's time)
  local kept, pos = false, 2 -- kept: some job has a retention of its own (keep_ttl)
  for i = 1, n do
    local count = counts[args[pos + 2]] or tonumber(args[pos + 2])
    if not count or count % 2 ~= 0 or pos + 2 + count > #args then
      return redis.error_reply('HERO_BAD_ARG job fields must come in field/value pairs')
    end
    counts[args[pos + 2]] = count
    local why, uniq, uttl, tags, prereqs, bname, dated, own_keep = refuse(args[pos], keys[6 + 2 * i], args, pos + 3, pos + 2 + count, parsed)
    if why then
      return redis.error_reply('HERO_INVALID_JOB job ' .. tostring(args[pos]) .. ': ' .. why)
    end
    if own_keep then kept = true end
    if not dated then
      undated = undated or {}
      undated[i] = true
    end
    if bname then
      local bkey = batch_key(ns_of(keys[5 + 2 * i], args[pos]), bname)
      if batch_done(bkey) then
        return redis.error_reply('HERO_INVALID_JOB job ' .. args[pos] .. ': batch ' .. bname ..
          ' is done (its callbacks were submitted): a new member needs a new batch')
      end
      members = members or {}
      members[i] = { bkey, bname }
    end
    if prereqs then
      -- each must exist already, or come earlier in this batch (a flow: children first): a
      -- job can only wait on jobs older than itself, so no cycle can form
      local job_key, job_id = keys[5 + 2 * i], args[pos]
      local prefix = string.sub(job_key, 1, #job_key - #job_id)
      local list, seen = {}, {}
      if not batch then
        batch = {}
        for k = 1, i - 1 do batch[args[at[k]]] = true end
      end
      if tonumber(args[pos + 1]) and tonumber(args[pos + 1]) > 0 then
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
      deps[i] = list
    end
    if batch then batch[args[pos]] = true end
    if uniq then
      unique = unique or {}
      unique[i] = { uniq, uttl }
    end
    if tags then
      tagged = tagged or {}
      tagged[i] = tags
    end
    at[i] = pos
    pos = pos + 3 + count
  end
  if pos ~= #args + 1 then
    return redis.error_reply('HERO_BAD_ARG more arguments than the keys describe jobs')
  end
  local answers = {}
  -- `bridged`: how many dual-push mappings the bridge registry holds (the broker publishes it
  -- with the registry); while none, a submit asks the registry nothing
  local cfg = settings(keys[4], unique and FIELDS.submit_unique or FIELDS.submit)
  local evicting = refuse_evicting(cfg)
  if evicting then return evicting end
  -- tag key -> ids of this call (see index_tags); only a batch with tagged jobs makes it
  local tag_index = tagged and { ids = {}, order = {}, decoded = {} }
  local log = event_log(keys[5], cfg)
  local st = nil -- stats, when a job of the batch is delayed
  local submitted, order = {}, {} -- per stream, the ids queued now (the event log's entries)
  local dual = {} -- per stream: its dual-push mapping, or false; read once per call
  -- streams seen to exist in this call; `gated` counts the jobs a fair queue's gate took (see
  -- gate), written once at the end
  local known = { gated = {} }
  local bridged = setting(cfg, 'bridged', 0) > 0 -- see dual_push_mapping
  local now_ms
  -- Whether any job of the batch exists already, with one EXISTS over all their keys: a new
  -- job's id is new, and asking each record for its status cost a call a job (a third of the
  -- submit's calls at 5,000 jobs/s). Only when some key exists is each one asked; a job written
  -- earlier in this call is asked too (an id given twice in one batch).
  local taken = 0
  do
    local job_keys = {}
    for i = 1, n do job_keys[i] = keys[5 + 2 * i] end
    for from = 1, n, 1000 do
      taken = taken + redis.call('EXISTS', unpack(job_keys, from, math.min(n, from + 999)))
    end
  end
  local written = {} -- job keys written in this call
  for i = 1, n do
    local job_key, stream = keys[5 + 2 * i], keys[6 + 2 * i]
    local p = at[i]
    local job_id, run_at_text, count = args[p], args[p + 1], counts[args[p + 2]]
    local run_at = run_at_text == '0' and 0 or tonumber(run_at_text)
    local existing = nil
    if taken > 0 or written[job_key] then existing = redis.call('HGET', job_key, 'status') end
    written[job_key] = true
    local holder, held = nil, nil
    if not existing and unique and unique[i] then
      holder, held = claim_unique(cfg, job_key, job_id, unique[i])
    end
    local blocked, failed_dep, results = 0, nil, nil
    if not existing and not holder and deps and deps[i] then
      blocked, failed_dep, results = prerequisites_state(string.sub(job_key, 1, #job_key - #job_id), deps[i])
    end
    -- the run-at on Redis's clock (rebased by created_at); one not in the future is no delay
    local due = nil
    if run_at and run_at > 0 and not existing and not holder then
      local created = nil
      for q = p + 3, p + 1 + count, 2 do
        if args[q] == 'created_at' then created = args[q + 1] break end
      end
      now_ms = now_ms or server_ms()
      due = rebased(run_at, iso_ms(created), now_ms)
      if due <= now_ms then due = nil end
    end
    if existing then
      answers[2 * i - 1], answers[2 * i] = 'exists', existing
    elseif holder then
      answers[2 * i - 1], answers[2 * i] = 'duplicate:' .. holder, held
    elseif failed_dep then
      -- a prerequisite ended error already: so does this job, at once, with the reason
      local reason = 'dependency failed: ' .. failed_dep
      redis.call('HSET', job_key, 'status', 'error', 'error', reason, 'finished_at', iso_now(), unpack(args, p + 3, p + 2 + count))
      redis.call('PEXPIRE', job_key, setting_arg(cfg, 'retention_ms', 86400000))
      log_event(log, 'error', job_id, stream, nil, nil, reason)
      answers[2 * i - 1], answers[2 * i] = 'created', 'error'
    elseif blocked > 0 then
      -- waits for its prerequisites: each names it in its dependents hash, and the call that
      -- ends the last one queues it (see release_dependents)
      redis.call('HSET', job_key, 'status', 'waiting', 'deps_left', blocked, unpack(args, p + 3, p + 2 + count))
      local prefix = string.sub(job_key, 1, #job_key - #job_id)
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
      if tagged and tagged[i] then index_tags(tag_index, job_key, job_id, tagged[i]) end
    elseif due then
      if due ~= run_at then run_at, run_at_text = due, string.format('%d', due) end
      redis.call('HSET', job_key, 'status', 'waiting', 'run_at', run_at_text, unpack(args, p + 3, p + 2 + count))
      redis.call('ZADD', delayed, run_at, job_id)
      st = st or stats(keys[6])
      tally(st, stream, 'delayed', 1)
      log_event(log, 'submitted', job_id, stream, nil, nil, nil, run_at_text)
      answers[2 * i - 1], answers[2 * i] = 'created', 'waiting'
      if tagged and tagged[i] then index_tags(tag_index, job_key, job_id, tagged[i]) end
    else
      -- the common case written out: no dual-push mapping, the stream registered earlier in
      -- this call (two Lua calls a job cost ~1.6 k instructions)
      -- the record first: a fair queue's gate reads its limit key (see append)
      local m = bridged and dual_push_mapping(cfg, bridges, stream, dual)
      redis.call('HSET', job_key, 'status', 'dispatched', unpack(args, p + 3, p + 2 + count))
      local entry
      local seen = not m and known[stream]
      if seen == true then
        entry = redis.call('XADD', stream, '*', 'j', job_id)
      else
        -- a fair stream's gate files the job by its limit key: given here, not read back
        -- (from the end: the Rust client writes it among the last fields, and as in HSET the
        -- last of a field given twice counts)
        local lk = ''
        for q = p + 1 + count, p + 3, -2 do
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
      end
      if m then
        now_ms = now_ms or server_ms()
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
      if tagged and tagged[i] then index_tags(tag_index, job_key, job_id, tagged[i]) end
    end
    -- the prerequisites that ended before it, their results in its record (a later end writes
    -- its own there: release_dependents)
    if results then
      for _, r in ipairs(results) do keep_result(job_key, r[1], r[2], r[3], r[4]) end
    end
  end
  if kept then redis.call('HSETNX', keys[4], KEPT_FIELD, '1') end
  if undated then
    -- a record without `created_at` (a foreign client's) is dated by the server, so that every
    -- record says when it was made
    local now_iso = iso_now()
    for i in pairs(undated) do
      if answers[2 * i - 1] == 'created' then redis.call('HSETNX', keys[5 + 2 * i], 'created_at', now_iso) end
    end
  end
  if members then
    -- each new member counts in its batch; one that ended at once (a failed prerequisite)
    -- counts as failed, and may be what its closed batch waited for
    local ctx = nil
    for i = 1, n do
      local m = members[i]
      if m and answers[2 * i - 1] == 'created' then
        local now_iso = iso_now()
        join_batch(keys[4], m[1], m[2], answers[2 * i] == 'error', now_iso)
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
        local job_key, job_id = keys[5 + 2 * i], args[at[i]]
        note_dependent(string.sub(job_key, 1, #job_key - #job_id), deps[i], job_id)
      end
    end
  end
  if tag_index then flush_tags(tag_index) end
  for _, stream in ipairs(order) do log_shared(log, 'submitted', submitted[stream], stream) end
  if st then flush_stats(st) end
  if next(known.gated) then flush_gated(known, keys[6]) end
  return answers
end
