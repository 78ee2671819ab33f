-- Entries and the legacy side: what a work stream entry carries, and the dual-push bridge
-- that hands a job to a legacy list as well.

-- What a work stream entry carries (see append): the job id ('' when it has none), the
-- attempts made before this delivery (nil on a first one), whether it was dual-pushed, and
-- whether it is a wake-up (`w`: hero_pause's resume writes one to wake the workers blocked on
-- the stream; it names no job).
local function entry_fields(f)
  local job_id, attempts, dual, wake = '', nil, false, false
  for k = 1, #f, 2 do
    local name = f[k]
    if name == 'j' then job_id = f[k + 1]
    elseif name == 'a' then attempts = f[k + 1]
    elseif name == 'b' then dual = true
    elseif name == 'w' then wake = true end
  end
  return job_id, attempts, dual, wake
end

-- The dual-push mapping of `stream` (its JSON from the registry `bridges`, decoded), or false;
-- asked only while the broker published any (`bridged` in the config hash), and once per
-- stream per call (`memo`, a table the call keeps, remembers it in `memo.dual`).
local function dual_push_mapping(cfg, bridges, stream, memo)
  memo.dual = memo.dual or {}
  local m = memo.dual[stream]
  if m == nil then
    local raw = setting(cfg, 'bridged', 0) > 0 and redis.call('HGET', bridges, stream)
    m = raw and cjson.decode(raw) or false
    memo.dual[stream] = m
  end
  return m
end

-- Hands a dual-pushed job, queued as `entry`, to its mapping's legacy list as well: the record
-- names the list, its stop queue and the legacy worker, and the bridge tracks it until
-- `pickup_ms` from `now_ms` (docs/protocol.md §7).
local function hand_to_legacy(job_key, job_id, m, entry, now_ms)
  redis.call('HSET', job_key, 'id', job_id, 'entry', entry, 'bridge', m.list, 'bridge_stop', m.stop, 'worker_id', m.worker)
  redis.call('LPUSH', m.list, job_id)
  redis.call('ZADD', m.track, now_ms + m.pickup_ms, job_id)
end
