-- hero_batch: close a batch, naming the callback jobs to submit once every member ended. A batch
-- closed with no member pending (every one ended already, or none was added) calls back in this
-- very call; else the call that ends its last pending member does (see batches.lua). Members
-- may still be added while it is not done, and closing again replaces the callbacks.
-- KEYS[1] batch hash  KEYS[2] config hash  KEYS[3] batch index (zset)  KEYS[4] event log
-- ARGV[1] batch name  ARGV[2] now ISO 8601
-- ARGV[3] on_complete: the callback spec to submit once every member ended ('' for none)
-- ARGV[4] on_success: the callback spec to submit once every member ended and none failed
--   ('' for none); a spec is JSON: id, key, stream, registry, group, fields (see batches.lua)
-- Events: `batch_done` per callback job submitted (j its id, q its stream, r the batch and
--   its counts).
-- Returns: {state, total, pending, finished, failed, complete_id, success_id}: state 'open'
-- (members are pending), 'done' (called back in this call) or 'already_done' (it had called
-- back before: nothing written); an id is '' where no such callback was submitted.
-- Errors: HERO_BAD_ARG when neither callback is given.
local function hero_batch(keys, args)
  local bkey, config, index, name, now_iso = keys[1], keys[2], keys[3], args[1], args[2]
  local on_complete, on_success = args[3], args[4]
  if on_complete == '' and on_success == '' then
    return redis.error_reply('HERO_BAD_ARG a batch closes with an on_complete or an on_success callback')
  end
  local cfg = settings(config)
  local state = 'open'
  if batch_done(bkey) then
    state = 'already_done'
  else
    if redis.call('HSETNX', bkey, 'created_at', now_iso) == 1 then
      redis.call('ZADD', index, server_ms(), name)
      redis.call('HINCRBY', config, BATCHES_FIELD, 1)
    end
    local w = { 'closed', '1' }
    if on_complete ~= '' then w[#w + 1] = 'on_complete'; w[#w + 1] = on_complete end
    if on_success ~= '' then w[#w + 1] = 'on_success'; w[#w + 1] = on_success end
    redis.call('HSET', bkey, unpack(w))
    if on_complete == '' then redis.call('HDEL', bkey, 'on_complete') end
    if on_success == '' then redis.call('HDEL', bkey, 'on_success') end
    local ctx = { cfg = cfg, log = event_log(keys[4], cfg), now_iso = now_iso }
    if settle_batch(ctx, bkey, name) then state = 'done' end
  end
  local r = redis.call('HMGET', bkey, 'total', 'pending', 'finished', 'failed', 'complete_id', 'success_id')
  return { state, tonumber(r[1]) or 0, tonumber(r[2]) or 0, tonumber(r[3]) or 0, tonumber(r[4]) or 0,
    r[5] or '', r[6] or '' }
end
