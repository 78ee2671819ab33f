-- hero function library, shared helpers continued: batches (a set of jobs that calls back once
-- every member ended), used by hero_submit, hero_batch, and every call that ends or revives a
-- job (through release_if_any, hero_dead, hero_requeue).

-- A batch is the hash `<ns>:batch:<name>` (`Keyspace::batch`): `total`, `pending`, `finished`,
-- `failed` (members so far, and how many of them have not ended, finished, ended error),
-- `created_at`, then once closed `closed` ('1') and the callback specs `on_complete` /
-- `on_success`, and once done `done_at` and the callback job ids `complete_id` / `success_id`.
-- A member's record names it (`batch`). The submit that creates a member counts it; the call
-- that ends a member counts its end, and the call in which a closed batch has no member pending
-- submits its callbacks, in the same call: each batch calls back exactly once, however many
-- brokers and workers run. A member ended and queued again (a dead letter retried, a requeue)
-- is pending again while its batch is not done.
-- A callback spec is JSON the client built with its keys module: `id`, `key` (its job hash),
-- `stream`, `registry`, `group`, `fields` (field, value, ... of its record): nothing is derived
-- here. Its job gets env vars BATCH (its name), BATCH_TOTAL, BATCH_FINISHED and
-- BATCH_FAILED beside its own.
-- The count of batches not done is the config hash's `batches`: while it is 0 no call that ends
-- jobs asks their records for a batch.
local BATCHES_FIELD = 'batches'

local function batch_key(ns, name)
  return ns .. 'batch:' .. name
end

-- The index of batches `<ns>:meta:batches` (`Keyspace::batches`), a zset name -> created ms,
-- beside the config hash.
local function batches_key_of(config_key)
  return meta_key(config_key, 'batches')
end

local function open_batches(cfg)
  return setting(cfg, BATCHES_FIELD, 0) > 0
end

-- Whether batch `bkey` is done (its callbacks submitted): no member may join it then.
local function batch_done(bkey)
  return redis.call('HEXISTS', bkey, 'done_at') == 1
end

-- Counts a new member into batch `name` (created with its first member); `ended` when it
-- ended error in the call that created it (a failed prerequisite).
local function join_batch(config_key, bkey, name, ended, now_iso)
  if redis.call('HSETNX', bkey, 'created_at', now_iso) == 1 then
    redis.call('ZADD', batches_key_of(config_key), server_ms(), name)
    redis.call('HINCRBY', config_key, BATCHES_FIELD, 1)
  end
  redis.call('HINCRBY', bkey, 'total', 1)
  if ended then
    redis.call('HINCRBY', bkey, 'failed', 1)
  else
    redis.call('HINCRBY', bkey, 'pending', 1)
  end
end

-- Submits one callback job of batch `name` (counts `b`) from its spec; returns its id, or nil
-- for a spec that does not decode (written by hand).
-- Writes events: `batch_done`.
local function submit_callback(ctx, spec_json, name, b, which)
  local ok, spec = pcall(cjson.decode, spec_json)
  if not ok or type(spec) ~= 'table' or type(spec.fields) ~= 'table' or not spec.key then return nil end
  local env = {}
  local fields = { 'status', 'dispatched' }
  local f = spec.fields
  for k = 1, #f, 2 do
    if f[k] == 'env_vars' then
      local ok2, e = pcall(cjson.decode, f[k + 1])
      if ok2 and type(e) == 'table' then env = e end
    else
      fields[#fields + 1] = f[k]
      fields[#fields + 1] = f[k + 1]
    end
  end
  env.BATCH = name
  env.BATCH_TOTAL = tostring(b.total)
  env.BATCH_FINISHED = tostring(b.finished)
  env.BATCH_FAILED = tostring(b.failed)
  fields[#fields + 1] = 'env_vars'
  fields[#fields + 1] = cjson.encode(env)
  fields[#fields + 1] = 'created_at'
  fields[#fields + 1] = ctx.now_iso
  redis.call('HSET', spec.key, unpack(fields))
  append(spec.stream, spec.group, spec.registry, spec.id)
  log_event(ctx.log, 'batch_done', spec.id, spec.stream, nil, nil,
    'batch ' .. name .. ' ' .. which .. ': ' .. b.finished .. ' finished, ' .. b.failed .. ' failed')
  return spec.id
end

-- Submits the callbacks of batch `name` when it is closed and no member is pending: on_complete
-- always, on_success only when no member failed. The batch is done then, and expires after the
-- retention time. Returns true when it called back here.
-- Writes events: `batch_done`.
local function settle_batch(ctx, bkey, name)
  local r = redis.call('HMGET', bkey, 'closed', 'pending', 'finished', 'failed', 'total',
    'on_complete', 'on_success', 'done_at')
  if r[1] ~= '1' or (tonumber(r[2]) or 0) > 0 or r[8] then return false end
  local b = { finished = tonumber(r[3]) or 0, failed = tonumber(r[4]) or 0, total = tonumber(r[5]) or 0 }
  local done = { 'done_at', ctx.now_iso }
  if r[6] then
    local id = submit_callback(ctx, r[6], name, b, 'on_complete')
    if id then done[#done + 1] = 'complete_id'; done[#done + 1] = id end
  end
  if r[7] and b.failed == 0 then
    local id = submit_callback(ctx, r[7], name, b, 'on_success')
    if id then done[#done + 1] = 'success_id'; done[#done + 1] = id end
  end
  redis.call('HSET', bkey, unpack(done))
  redis.call('HINCRBY', ctx.cfg.key, BATCHES_FIELD, -1)
  redis.call('PEXPIRE', bkey, setting_arg(ctx.cfg, 'retention_ms', 86400000))
  return true
end

-- Counts the ends of the jobs in `ended` ({job key, job id, ok}) into their batches, then
-- settles each batch touched. Called only while some batch is not done; one HGET per job.
-- Writes events: `batch_done`.
local function count_batch_ends(ctx, ended)
  local touched, order = {}, {}
  for k = 1, #ended do
    local jk, jid, ok = ended[k][1], ended[k][2], ended[k][3]
    local name = redis.pcall('HGET', jk, 'batch')
    if type(name) == 'string' and name ~= '' then
      local bkey = batch_key(ns_of(jk, jid), name)
      -- one read: the batch exists (it has a total) and is not done
      local b = redis.call('HMGET', bkey, 'total', 'done_at')
      if b[1] and not b[2] then
        redis.call('HINCRBY', bkey, 'pending', -1)
        if ok then
          redis.call('HINCRBY', bkey, 'finished', 1)
        else
          redis.call('HINCRBY', bkey, 'failed', 1)
        end
        if not touched[bkey] then
          touched[bkey] = true
          order[#order + 1] = { bkey, name }
        end
      end
    end
  end
  for _, t in ipairs(order) do settle_batch(ctx, t[1], t[2]) end
end

-- A member that had ended (`was`: 'finished' or 'error') is queued again: pending again in its
-- batch while the batch is not done.
local function revive_member(cfg, job_key, job_id, was)
  if not open_batches(cfg) then return end
  local name = redis.pcall('HGET', job_key, 'batch')
  if type(name) ~= 'string' or name == '' then return end
  local bkey = batch_key(ns_of(job_key, job_id), name)
  local b = redis.call('HMGET', bkey, 'total', 'done_at')
  if not b[1] or b[2] then return end
  if was == 'finished' then
    redis.call('HINCRBY', bkey, 'finished', -1)
  else
    redis.call('HINCRBY', bkey, 'failed', -1)
  end
  redis.call('HINCRBY', bkey, 'pending', 1)
end
