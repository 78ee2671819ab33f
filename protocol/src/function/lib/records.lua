-- A job's record as a fetch reads it and hands it back: the one read of an entry's job
-- (read_job), and a record read whole patched as the lease left it (as_leased).

-- The status (and what else the checks need) of the job an entry names, in one read: the
-- legacy list of a dual-pushed job (the entry says which), the limit key under a key rate, or,
-- when a short fetch hands records back, the record whole (not its status now and the record
-- after the write). Nothing can raise before the lease's single write, so a corrupt record
-- never leaves a half-applied fetch. Returns status, bridge, err, rec.
local function read_job(job_key, dual, whole_now, keyrate)
  if dual then
    local r = redis.pcall('HMGET', job_key, 'status', 'bridge')
    return r[1], r[2], r.err, nil
  elseif whole_now then
    local rec = redis.pcall('HGETALL', job_key)
    if rec.err then return nil, nil, rec.err, rec end
    local status = nil
    if keyrate then keyrate.lk = nil end
    for k = 1, #rec, 2 do
      if rec[k] == 'status' then status = rec[k + 1] end
      if keyrate and rec[k] == 'limit_key' then keyrate.lk = rec[k + 1] end
    end
    return status, nil, nil, rec
  end
  local r = redis.pcall('HMGET', job_key, 'status', 'limit_key')
  keyrate.lk = r[2]
  return r[1], nil, r.err, nil
end

-- The record of a job leased with a whole read (`rec`, HGETALL's pairs) as the lease's HSET left
-- it, for a fetch to hand back: the lease's fields replaced where the record has them, appended in
-- the HSET's order where it has not. Compared by name in one pass: a table of the fields a job
-- (and a list literal to walk) cost more than the compares.
local function as_leased(rec, id, consumer, now_iso, counted)
  local attempts = counted and tostring(counted + 1) or nil
  local status, lease, worker, started, tries = false, false, false, false, not attempts
  for k = 1, #rec, 2 do
    local name = rec[k]
    if name == 'status' then
      rec[k + 1], status = 'started', true
    elseif name == 'lease' then
      rec[k + 1], lease = id, true
    elseif name == 'worker_id' then
      rec[k + 1], worker = consumer, true
    elseif name == 'started_at' then
      rec[k + 1], started = now_iso, true
    elseif name == 'attempts' and attempts then
      rec[k + 1], tries = attempts, true
    end
  end
  if not status then
    rec[#rec + 1] = 'status'
    rec[#rec + 1] = 'started'
  end
  if not lease then
    rec[#rec + 1] = 'lease'
    rec[#rec + 1] = id
  end
  if not worker then
    rec[#rec + 1] = 'worker_id'
    rec[#rec + 1] = consumer
  end
  if not started then
    rec[#rec + 1] = 'started_at'
    rec[#rec + 1] = now_iso
  end
  if not tries then
    rec[#rec + 1] = 'attempts'
    rec[#rec + 1] = attempts
  end
  return rec
end
