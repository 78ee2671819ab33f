-- hero_remove: delete one job that is not queued or running (BullMQ's `job.remove()`): an ended
-- one (finished or error), or a dead letter's record. A queued or delayed job is stopped first
-- (hero_stop), so that no stream entry or delayed member outlives its record; the caller does
-- that, then calls this.
-- KEYS[1] job hash
-- ARGV[1] job id
-- The record goes with its uniqueness key when it still holds it and the index entry of each
-- of its tags (`<ns>:tag:<tag>`); its results in its dependents' records stay theirs.
-- Returns: 'removed'; 'running' (started: stop it first, or wait for its end), 'queued'
-- (waiting or dispatched: stop it first), 'missing' (no such job). Nothing is written but for
-- 'removed'.
-- Errors: none of its own.
local function hero_remove(keys, args)
  local job_key, job_id = keys[1], args[1]
  local r = redis.pcall('HMGET', job_key, 'status', 'tags', 'unique')
  if type(r) ~= 'table' or r.err or not r[1] then return 'missing' end
  if r[1] == 'started' then return 'running' end
  if r[1] ~= 'finished' and r[1] ~= 'error' then return 'queued' end
  local ns = ns_of(job_key, job_id)
  redis.call('DEL', job_key)
  if r[2] and r[2] ~= '' and r[2] ~= '[]' then
    local ok, tags = pcall(cjson.decode, r[2])
    if ok and type(tags) == 'table' then
      for _, tag in ipairs(tags) do
        if type(tag) == 'string' then redis.call('SREM', tag_key(ns, tag), job_id) end
      end
    end
  end
  if r[3] and r[3] ~= '' then
    local ukey = unique_key(ns, r[3])
    if redis.call('GET', ukey) == job_id then redis.call('DEL', ukey) end
  end
  return 'removed'
end
