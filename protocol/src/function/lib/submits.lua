-- What a submit does beside writing a record and queueing it: a job's uniqueness key, its
-- place in its prerequisites' `dependents`, the tag indexes, and the state of its
-- prerequisites (hero_submit, submit.lua).

-- The uniqueness key of a job (`<ns>:unique:<key>`, beside `<ns>:job:<id>`): when it names
-- another job that is still waiting, dispatched or started, that job's id and status (the
-- submit is a duplicate: nothing is written); else the key is taken for `job_id`, for its TTL
-- (the job's `unique_ttl` ms, or the broker's retention time, read once a call through `cfg`),
-- and nil. A holder that ended or is gone releases the key to the next submit: nothing on the
-- job path has to clear it. The common case, a key no one holds, is one SET NX GET (Redis 7.0
-- takes NX with GET): taken, and nil back; only a key someone holds is looked at further.
-- `ns` is the namespace's key prefix (`<ns>:`) and `prefix` its job keys' (`<ns>:job:`), each
-- made once a call.
local function claim_unique(cfg, ns, prefix, job_id, u)
  local ukey = unique_key(ns, u[1])
  local ttl = u[2] or setting_arg(cfg, 'retention_ms', 86400000)
  local holder = redis.call('SET', ukey, job_id, 'NX', 'GET', 'PX', ttl)
  if not holder then return nil end
  if holder ~= job_id then
    local status = redis.call('HGET', prefix .. holder, 'status')
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
-- `ns` is the namespace's key prefix (`<ns>:`), made once a call.
local function index_tags(index, ns, job_id, tags)
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
