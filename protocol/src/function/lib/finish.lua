-- Ending a job: the reply to a waiting caller, the retention entry, the terminal write.

-- Answer a waiting caller: the JSON reply on the canonical list and, in compatibility mode
-- (the broker published the legacy reply prefix), the bare text on the legacy list
-- `hero:reply:<id>` that seed-001 callers BLPOP.
-- A job moved in from a legacy list has reply 'legacy': only the legacy list is answered.
-- A reply key holding another type (foreign data) gets no answer, and fails nothing: callers
-- such as hero_complete have acknowledged entries before they answer.
local function push_reply(job_id, reply_key, cfg, status, output, err, canonical, legacy_too)
  local ttl = setting_arg(cfg, 'reply_ttl_ms', 3600000)
  local function answer(key, text)
    local pushed = redis.pcall('LPUSH', key, text)
    if type(pushed) ~= 'table' then redis.call('PEXPIRE', key, ttl) end
  end
  if canonical then
    answer(reply_key, cjson.encode({ status = status, output = output, error = err }))
  end
  local legacy = setting_text(cfg, 'legacy_reply_prefix')
  if legacy_too and legacy ~= '' then
    local text = output
    if status ~= 'finished' then text = err end
    answer(legacy .. job_id, text)
  end
end

-- The jobs one call ends, for the retention stream: a job gets no TTL of its own (a PEXPIRE per
-- job was 8 % of the worker path's cost to Redis); the call adds one entry naming all of them,
-- and the broker deletes them once the retention time has passed (hero_expire). Every job a call
-- ends shares its `finished_at`, `now_iso`, which the entry carries so that a job ended again
-- later (retried by hand) is not deleted early on the strength of the older entry.
local function retained(stream, now_iso)
  return { key = stream, t = now_iso, ids = {} }
end

-- One retention entry (hero_expire reads it): `t` the finished_at, `j` the ids joined by spaces.
local function add_retention_entry(stream, now_iso, joined_ids)
  redis.call('XADD', stream, '*', 't', now_iso, 'j', joined_ids)
end

local function flush_retained(done)
  if #done.ids > 0 then add_retention_entry(done.key, done.t, table.concat(done.ids, ' ')) end
end

-- Register a job that just ended (its finished_at = done.t) for retention.
local function retain(done, job_key, job_id, cfg)
  if string.find(job_id, ' ', 1, true) then
    -- a legacy job id with a space cannot go into the entry's list: it gets a TTL instead
    redis.call('PEXPIRE', job_key, setting_arg(cfg, 'retention_ms', 86400000))
  else
    done.ids[#done.ids + 1] = job_id
  end
end

-- The index of a dead letter to write into its job's record (`dead`, the entry id `letter`), or
-- nil while a reader older than protocol 29 is live (the brokers' `fleet_lacks` names `trace`,
-- the feature of 29 such a reader lacks): it refuses a record field it does not know, and a
-- reader finds an unindexed letter among the newest ones instead.
local function dead_index(cfg, letter)
  local lacks = raw_setting(cfg, 'fleet_lacks')
  if lacks and string.find(lacks, '"trace"', 1, true) then return nil end
  return letter
end

-- Write a terminal status at finished_at = now_iso, and answer a waiting caller. finished_at is
-- the record's updated_at from then on (a reader takes the latest of the timestamps). `done`
-- registers the job for retention (see retained); nil when the caller names its jobs in a
-- retention entry itself. Returns false, having written nothing, when the job key holds another
-- type (foreign data): a caller that did not read the record first must not fail the rest of its
-- call on it. `dead` (a dead-letter entry id, or nil) is written as the record's `dead` in the
-- same HSET: the index by which a reader finds the job's letter without scanning the stream.
local function finish(job_key, job_id, reply_key, cfg, status, text, wants_reply, now_iso, done, dead)
  local field = 'error'
  if status == 'finished' then field = 'output' end
  local w
  if dead then
    w = redis.pcall('HSET', job_key, 'status', status, field, text, 'finished_at', now_iso, 'dead', dead)
  else
    w = redis.pcall('HSET', job_key, 'status', status, field, text, 'finished_at', now_iso)
  end
  if type(w) == 'table' and w.err then return false end
  if done then retain(done, job_key, job_id, cfg) end
  if wants_reply == '1' or wants_reply == 'legacy' then
    local output, err = '', ''
    if field == 'output' then output = text else err = text end
    push_reply(job_id, reply_key, cfg, status, output, err, wants_reply == '1', true)
  end
  return true
end

-- A failed attempt's trace (a Python traceback, a Node stack, a Rust error chain), as the worker
-- gave it to hero_complete: kept in the record's `trace` field, cut at TRACE_MAX bytes whatever
-- the caller sent, so a runaway traceback cannot grow a record without bound. Each failure
-- hero_complete records replaces it (a failure given none removes it), so the field is always
-- the last recorded failure's; a success leaves it, as the reason the job was retried.
local TRACE_MAX = 16384

local function store_trace(job_key, trace)
  if trace and trace ~= '' then
    redis.pcall('HSET', job_key, 'trace', string.sub(trace, 1, TRACE_MAX))
  else
    redis.pcall('HDEL', job_key, 'trace')
  end
end

-- A job's own retention (docs/operations.md): `keep` (ms) once it finished, `keep_failed` once it
-- ended error, each at least KEEP_FLOOR_MS, so that a wait already waiting (which reads the record
-- when the end's event reaches it) still finds it: 0 means as soon as that is safe. Read only
-- while some job was ever submitted with one (the config hash's `kept`, set by hero_submit), so a
-- namespace that never used it pays nothing.
local KEEP_FLOOR_MS = 10000
local KEPT_FIELD = 'kept'

-- The TTL (ms) a job that just ended `status` gets: the larger of its own retention and `other`
-- (its queue policy's, or nil), as a queue policy's retries are a floor under a job's own; nil
-- when neither sets one (the broker's retention pass deletes it then).
local function keep_ttl(cfg, job_key, status, other)
  if setting(cfg, KEPT_FIELD, 0) > 0 then
    local field = 'keep_failed'
    if status == 'finished' then field = 'keep' end
    local own = tonumber(redis.pcall('HGET', job_key, field))
    if own then
      own = math.max(own, KEEP_FLOOR_MS)
      if other == nil or own > (tonumber(other) or 0) then return own end
    end
  end
  return other
end
