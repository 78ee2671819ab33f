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
-- Deletes the record `job_key` (of `job_id`) with its tag index entries and its uniqueness key
-- while it holds it; `tags` and `unique` as the record gave them. hero_clean and hero_drain
-- delete through here too.
local function forget_job(job_key, job_id, tags, unique)
  local ns = ns_of(job_key, job_id)
  redis.call('DEL', job_key)
  if tags and tags ~= '' and tags ~= '[]' then
    local ok, list = pcall(cjson.decode, tags)
    if ok and type(list) == 'table' then
      for _, tag in ipairs(list) do
        if type(tag) == 'string' then redis.call('SREM', tag_key(ns, tag), job_id) end
      end
    end
  end
  if unique and unique ~= '' then
    local ukey = unique_key(ns, unique)
    if redis.call('GET', ukey) == job_id then redis.call('DEL', ukey) end
  end
end

local function hero_remove(keys, args)
  local job_key, job_id = keys[1], args[1]
  local r = redis.pcall('HMGET', job_key, 'status', 'tags', 'unique')
  if type(r) ~= 'table' or r.err or not r[1] then return 'missing' end
  if r[1] == 'started' then return 'running' end
  if r[1] ~= 'finished' and r[1] ~= 'error' then return 'queued' end
  forget_job(job_key, job_id, r[2], r[3])
  return 'removed'
end
