-- hero_complete: record the end of one or more deliveries, each fenced by its lease. A worker
-- records a whole batch of outcomes in one call: the settings are read once, and each stream's
-- entries are acknowledged with one command and trimmed with another (see trim_done).
-- KEYS[1] delayed zset  KEYS[2] config hash  KEYS[3] retention stream  KEYS[4] event log
-- KEYS[5] stats hash  KEYS[6] queue registry set
-- KEYS[7..] the batch's work streams, each once (since protocol 34: a job's own keys are
--   derived from the prefixes, its stream from its place in the batch)
-- ARGV[1] consumer group  ARGV[2] now ISO 8601  ARGV[3] '1' when the server has XACKDEL
-- ARGV[4] the batch's job ids joined by single spaces, for the retention entry
--   (ARGV[2] is the caller's clock, read only to rebase its retry times: the ends are stamped
--   with Redis's TIME since protocol 33)
-- ARGV[5] consumer name (for the event log)
-- ARGV[6] retention per job: `<i> <ms>` pairs joined by spaces ('' when no job has one), the
--   TTL (PEXPIRE) a job of index i (from 0) gets in this call when it ends here: its queue
--   policy keeps ended jobs shorter than the broker's retention
-- ARGV[7] job key prefix (`<ns>:job:`: a job's reply list is derived from it too)
-- ARGV[8] how many jobs of the batch each stream of KEYS[7..] holds, in that order, joined by
--   single spaces: the jobs come grouped by stream, the first count's jobs on KEYS[7], ...
--   then per job i = 0, 1, ...: ARGV[9+4i] lease (the delivery's entry id)  ARGV[10+4i] job id
--   ARGV[11+4i] code: the outcome's letter (d done, f fail, r retry, a abort, g again), then
--   how long the attempt ran in ms as the worker measured it (none: unknown), as `d12`
--   ARGV[12+4i] output or error text
-- then, optionally, pairs (i the job's index from 0, in the order above): `<i>` and the trace
--   of that job's failed attempt (store_trace in finish.lua; since protocol 30); `v<i>` and the
--   MessagePack value job i's handler returned, stored as the record's `value` beside the
--   `output` text when it ends finished (since protocol 33); `t<i>` and job i's retry-at ms, on
--   the caller's clock, moved to Redis's by ARGV[2] when the two differ by over a second (none:
--   due at once); `w<i>` and job i's `reply` field as read with the record (none: no one waits);
--   so a batch of successes no one waits on passes four strings a job and nothing more
--   outcome: done (text = output), fail (text = error; retried at retry-at while
--   attempts <= retries), retry (retried at retry-at while the budget lasts, else error text),
--   abort (error text, never retried), again (retried at retry-at whatever the record's
--   budget: the worker applied its queue policy's larger budget)
-- The fence: a delivery's entry stays pending in the group exactly as long as its lease holds,
-- because whatever takes a started job away (recovery, stop, dead-lettering) acknowledges its
-- entry in the same call. So one XACK per stream acknowledges the batch and proves every lease
-- in it at once; only when it acknowledged fewer entries than it was given are the records
-- read, to tell the deliveries that still hold their job from the ones that lost it.
-- Policies: while some queue has one the functions apply (`policed` in the config hash), a
-- failure's budget is the larger of the record's `retries` and its queue policy's, its retry
-- time the policy's back-off when it sets one, and a job this call ends expires after the
-- policy's `retention_ms`: every worker, of any language, gets them.
-- Retention: the batch is named in one entry of the retention stream as the caller joined it
-- (ARGV[4] as given; joining it here costs Redis ~2 k instructions a job). A job of the batch this call
-- does not end is named too, and harmlessly: hero_expire deletes only a job whose record
-- carries the entry's finished_at, and only this call wrote that one. A job id holds no space
-- (the worker completes valid ids only); checking the list here would cost Redis more than the
-- PEXPIRE it replaces (string.gsub over it: ~4 k instructions a job), so an id with a space from
-- a foreign caller is split, and that job is simply never deleted.
-- Stats: per stream, `finished`, `failed` and `retried` (each per minute too), the `delayed`
-- gauge for a retry, and a `run` sample per job recorded.
-- Dependents and batches: the jobs waiting on those this call ends are released in it, and the
-- ends are counted into their batches, whose callbacks are submitted when the last member ends
-- (release_if_any in dependencies.lua); while no job anywhere has dependents and no batch is
-- open (the config hash's `deps` and `batches`, read with the settings), the call asks nothing
-- more.
-- Events: per job this call ends or parks, `finished`, `error` (r the error) or `retried` (r the
-- error, d the retry time); q its stream, w the consumer. Through the ended-jobs hook
-- (release_if_any): `dispatched` or `error` per dependent released or failed, `batch_done` per
-- batch this call completes.
-- Returns: one answer per job, in order: 'completed' (this delivery's outcome is recorded as
-- final), 'retrying' (parked in the delayed set), 'already_completed' (the job already ended,
-- e.g. stopped), 'lease_lost' (another delivery owns the job now, or the job is gone); the
-- entry of a lost lease whose job is dispatched (queued again under that entry, as a Redis
-- restarted from an older snapshot leaves it) is not deleted (since protocol 31).
-- Errors: HERO_BAD_ARG for an unknown outcome or KEYS and ARGV that do not describe the same
-- jobs; then nothing is written.
FIELDS.complete = { 'events_max', DEPS_FIELD, 'policed', BATCHES_FIELD, KEPT_FIELD }
-- a code's first byte: the outcome it names
local OUTCOMES = { [100] = 'done', [102] = 'fail', [114] = 'retry', [97] = 'abort', [103] = 'again' }
local function hero_complete(keys, args)
  local delayed, cfg = keys[1], settings(keys[2], FIELDS.complete)
  -- the queue policies the completion applies itself (retries, back-off, retention), for a
  -- worker of any language: read only while some queue has one
  local policed = setting(cfg, 'policed', 0) > 0
  -- some job was submitted with its own retention (keep_ttl in finish.lua)
  local kept = setting(cfg, KEPT_FIELD, 0) > 0
  local ended -- the status the job in hand ended with
  local memo = {}
  local caller_ms = nil -- the caller's clock as ms, parsed from ARGV[2] for the first retry
  -- an end is stamped on Redis's clock, as a start is (hero_fetch): a dependent's started_at is
  -- never before its prerequisite's finished_at, whatever the worker's estimate of the offset
  local server_now = server_ms()
  local group, now_iso, xackdel, ids = args[1], iso_of(server_now), args[3], args[4]
  local log = event_log(keys[4], cfg)
  local consumer, job_prefix = args[5], args[7]
  local st = stats(keys[5], now_iso)
  -- the jobs of each stream: most batches name one stream, one number
  local n = tonumber(args[8])
  local counts = { n }
  if not n or n % 1 ~= 0 then
    counts, n = {}, 0
    for c in string.gmatch(args[8] or '', '%d+') do
      counts[#counts + 1] = tonumber(c)
      n = n + tonumber(c)
    end
  end
  local extra = #args - 8 - 4 * n
  if #counts ~= #keys - 6 or extra < 0 or extra % 2 ~= 0 then
    return redis.error_reply('HERO_BAD_ARG complete takes 6 keys and a stream each, 8 arguments (the 8th counting each stream\'s jobs) and 4 a job, then (index, trace), (v<index>, value), (t<index>, retry-at) or (w<index>, reply) pairs')
  end
  -- the pairs, by job index: parsed only when the batch has one
  local traces, values, retry_ats, replies = nil, nil, nil, nil
  if extra > 0 then
    traces, values, retry_ats, replies = {}, {}, {}, {}
    for k = 9 + 4 * n, #args, 2 do
      local at = args[k]
      local b = string.byte(at, 1)
      if b == 118 then -- 'v'
        values[tonumber(string.sub(at, 2))] = args[k + 1]
      elseif b == 116 then -- 't'
        retry_ats[tonumber(string.sub(at, 2))] = args[k + 1]
      elseif b == 119 then -- 'w'
        replies[tonumber(string.sub(at, 2))] = args[k + 1]
      else
        traces[tonumber(at)] = args[k + 1]
      end
    end
  end
  -- check every outcome before the first write (a run of one code is checked once)
  local code = nil
  for c = 11, 10 + 4 * n, 4 do
    if args[c] ~= code then
      code = args[c]
      if not OUTCOMES[string.byte(code, 1) or 0] then
        return redis.error_reply('HERO_BAD_ARG unknown outcome code ' .. code)
      end
    end
  end
  -- the queue policies' retention, by job index: parsed only when a job of the batch has one
  local keep = nil
  if args[6] ~= '' then
    keep = {}
    for i, ms in string.gmatch(args[6], '(%d+) (%d+)') do keep[tonumber(i)] = ms end
  end
  local answers = {}
  -- the jobs this call ends (key, id, finished), collected only while some job has dependents
  -- or some batch is open (read with the settings: a plain batch pays nothing per job)
  local ek = nil
  if collect_ended(cfg) then ek = {} end
  local ei, eo = {}, {}
  -- the code in hand, its outcome and run-time sample (text, number, bucket): most of a batch of
  -- short jobs shares one code, parsed once
  local outcome, ran, ran_bucket = nil, nil, 0
  code = nil
  local first = 0 -- the index of the stream's first job
  for s = 1, #counts do
    local stream, count = keys[6 + s], counts[s]
    local entries = {}
    for k = 1, count do entries[k] = args[5 + 4 * (first + k)] end
    local finished = {} -- for the event log's shared entry of this stream
    local failed, retries, runs = 0, 0, nil
    local all_held = count == 0 or ack(stream, group, entries) == count
    local spared = nil -- by position in entries: entries this call must not delete
    for k = 1, count do
      local i = first + k - 1
      local a = 4 * i
      local job_id, text = args[10 + a], args[12 + a]
      local job_key = job_prefix .. job_id
      if args[11 + a] ~= code then
        code = args[11 + a]
        outcome = OUTCOMES[string.byte(code, 1)]
        ran = nil
        if #code > 1 then ran = tonumber(string.sub(code, 2)) end
        if ran and ran > 0 then ran_bucket = math.floor(math.log(ran + 1) / LN2) else ran_bucket = 0 end
      end
      local reply = replies and replies[i]
      local answer
      if not all_held then
        -- pcall: a job key replaced by another type is gone for this delivery, and must not fail
        -- the whole batch of other workers' jobs with it
        local f = redis.pcall('HMGET', job_key, 'status', 'lease')
        if f.err or not f[1] or f[2] ~= entries[k] then
          answer = 'lease_lost'
          -- a job queued again under this very entry (a Redis restarted from an older snapshot
          -- restored it before its delivery): the entry is its place in the queue, kept
          if not f.err and f[1] == 'dispatched' then
            spared = spared or {}
            spared[k] = true
          end
        elseif f[1] ~= 'started' then
          answer = 'already_completed'
        end
      end
      if not answer then
        -- The entries were acknowledged already: from here on nothing may raise, or the jobs
        -- after this one would stay started with no pending entry for recovery to find. A job
        -- key holding another type is foreign data, lost for this delivery (pcall, finish).
        local retried = false
        local policy_retry_at = nil
        ended = 'finished'
        if outcome == 'fail' or outcome == 'retry' or outcome == 'again' then
          -- only a failure needs the budget: a success is recorded without reading the record
          local f = redis.pcall('HMGET', job_key, 'attempts', 'retries', 'backoff')
          if f.err then
            answer = 'lease_lost'
          else
            local budget = tonumber(f[2]) or 0
            local policy = policed and stream_policy(keys[2], stream, memo)
            if policy and tonumber(policy.retries) and tonumber(policy.retries) > budget then
              budget = tonumber(policy.retries)
            end
            retried = outcome == 'again' or (tonumber(f[1]) or 1) <= budget
            if retried and outcome == 'fail' then
              -- the job's own back-off and its policy's, the longer delay, whatever the worker
              -- computed (retry_delay in policy.lua)
              local delay = retry_delay(f[3], policy, tonumber(f[1]) or 1)
              if delay then policy_retry_at = tostring(server_ms() + delay) end
            end
            -- a first delivery left no count (see hero_fetch): the next one must count from it
            if retried and not f[1] then redis.call('HSET', job_key, 'attempts', '1') end
          end
        end
        if retried then
          local retry_at = policy_retry_at
          if not retry_at then
            -- the worker's retry time, on its clock, moved to Redis's (rebased)
            retry_at = retry_ats and retry_ats[i] or '0'
            caller_ms = caller_ms or iso_ms(args[2]) or false
            local at = tonumber(retry_at)
            if at and caller_ms then
              local due = rebased(at, caller_ms, server_now)
              if due ~= at then retry_at = string.format('%d', due) end
            end
          end
          redis.call('HSET', job_key, 'status', 'waiting', 'error', text, 'run_at', retry_at, 'updated_at', now_iso)
          redis.call('HDEL', job_key, 'lease', 'entry')
          store_trace(job_key, traces and traces[i])
          redis.call('ZADD', delayed, retry_at, job_id)
          answer = 'retrying'
          retries = retries + 1
          log_event(log, 'retried', job_id, stream, consumer, nil, text, retry_at)
        elseif not answer and outcome == 'done' and not reply then
          -- a success no one waits on, the common case, is written here: through finish it costs
          -- Redis 1.3 k more instructions a job (a Lua call of eight arguments)
          local value, w = values and values[i], nil
          if value then
            w = redis.pcall('HSET', job_key, 'status', 'finished', 'output', text, 'value', value, 'finished_at', now_iso)
          else
            w = redis.pcall('HSET', job_key, 'status', 'finished', 'output', text, 'finished_at', now_iso)
          end
          -- a started record gains `output` and `finished_at`: 2, the common answer, is not
          -- given to `type` (a C call, ~0.9 k instructions a job)
          if w ~= 2 and type(w) == 'table' and w.err then
            answer = 'lease_lost'
          else
            answer = 'completed'
            finished[#finished + 1] = job_id
            if ek then
              local e = #ek + 1
              ek[e], ei[e], eo[e] = job_key, job_id, true
            end
          end
        elseif not answer then
          local status = 'error'
          if outcome == 'done' then status = 'finished' end
          ended = status
          -- the reply list only where someone waits (finish reads it only then)
          local reply_key = stream
          if reply then reply_key = reply_prefix_of(string.sub(job_prefix, 1, #job_prefix - 4)) .. job_id end
          if finish(job_key, job_id, reply_key, cfg, status, text, reply or '', now_iso) then
            answer = 'completed'
            if ek then
              local e = #ek + 1
              ek[e], ei[e], eo[e] = job_key, job_id, status == 'finished'
            end
            if status == 'finished' then
              if values and values[i] then redis.call('HSET', job_key, 'value', values[i]) end
              finished[#finished + 1] = job_id
            else
              failed = failed + 1
              store_trace(job_key, traces and traces[i])
              log_event(log, 'error', job_id, stream, consumer, nil, text)
            end
          else
            answer = 'lease_lost'
          end
        end
      end
      answers[i + 1] = answer
      if answer == 'completed' and (keep or policed or kept) then
        local ttl = keep and keep[i]
        if policed then
          local policy = stream_policy(keys[2], stream, memo)
          if policy and tonumber(policy.retention_ms) then ttl = policy.retention_ms end
        end
        if kept then ttl = keep_ttl(cfg, job_key, ended, ttl) end
        if ttl then redis.call('PEXPIRE', job_key, ttl) end
      end
      -- sampled inline: a Lua call per job costs more than the sample
      if ran and (answer == 'completed' or answer == 'retrying') then
        runs = runs or histogram(st, stream, 'run')
        if ran > 0 then runs.sum = runs.sum + ran end
        runs[ran_bucket] = (runs[ran_bucket] or 0) + 1
      end
    end
    if count > 0 then
      -- not the entry of a job queued under it (spared above): deleting it would strand the job
      local owned = entries
      if spared then
        owned = {}
        for k = 1, count do
          if not spared[k] then owned[#owned + 1] = entries[k] end
        end
      end
      trim_done(stream, group, owned, xackdel)
    end
    log_shared(log, 'finished', finished, stream, consumer)
    if #finished > 0 then tally(st, stream, 'finished', #finished, true) end
    if failed > 0 then tally(st, stream, 'failed', failed, true) end
    if retries > 0 then
      tally(st, stream, 'retried', retries, true)
      tally(st, stream, 'delayed', retries)
    end
    first = first + count
  end
  if ek then
    local done = retained(keys[3], now_iso)
    release_if_any({ cfg = cfg, log = log, st = st, done = done, now_iso = now_iso, registry = keys[6],
      group = group }, ek, ei, eo)
    flush_retained(done)
  end
  flush_stats(st)
  if n > 0 then add_retention_entry(keys[3], now_iso, ids) end
  return answers
end
