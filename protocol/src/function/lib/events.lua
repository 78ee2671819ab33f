-- The event log: every change of a job's state is logged by the call that makes it (so there is no
-- event without its change, and no change without its event), in a stream capped at about
-- `events_max` entries (a broker setting, 10000 by default; 0 turns the log off). An entry has
-- `e` the event, `j` the job id and, where they apply, `q` the work stream, `w` the worker
-- (consumer name, or a legacy worker id), `a` the attempt, `r` the reason or detail, `d` the time
-- (ms) a waiting job is due. The entry id is the time of the change.
-- Jobs of one call that share event, stream and worker, and have no reason or due time, share one
-- entry: `j` then holds their ids and `a` their attempts, each separated by single spaces. An
-- entry per job cost Redis ~20 k instructions a job per event (a third more for the worker path);
-- a shared one costs ~1 k.
-- The cap as the XADD's MAXLEN takes it, by the config's text (absent: ''), made once per text
-- and library load: read through setting_arg each call it cost Redis ~10 k instructions a call.
local EVENTS_MAX = {}
local function event_log(key, cfg)
  local raw = raw_setting(cfg, 'events_max') or ''
  local max = EVENTS_MAX[raw]
  if not max then
    max = setting_arg(cfg, 'events_max', 10000)
    EVENTS_MAX[raw] = max
  end
  if max == '0' then return false end
  return { key = key, max = max }
end

-- One entry of its own, written now. Returns its id (Redis's clock now: callers that need the
-- time read it there instead of calling TIME), nil when the log is off.
local function log_event(log, event, job_id, queue, worker, attempt, reason, due)
  if not log then return nil end
  local f = { 'XADD', log.key, 'MAXLEN', '~', log.max, '*', 'e', event, 'j', job_id }
  if queue and queue ~= '' then f[#f + 1] = 'q'; f[#f + 1] = queue end
  if worker and worker ~= '' then f[#f + 1] = 'w'; f[#f + 1] = worker end
  if attempt then f[#f + 1] = 'a'; f[#f + 1] = attempt end
  if reason and reason ~= '' then f[#f + 1] = 'r'; f[#f + 1] = reason end
  if due then f[#f + 1] = 'd'; f[#f + 1] = due end
  return redis.call(unpack(f))
end

-- The attempts of c first deliveries as a shared entry writes them ('1 1 ... 1'), made once per
-- count and library load.
local ONES = {}
local function ones_text(c)
  local t = ONES[c]
  if not t then
    t = string.rep('1 ', c - 1) .. '1'
    ONES[c] = t
  end
  return t
end

-- The shared entry of `ids` (a list of job ids of one stream and worker, with their `attempts`
-- when given: a list, or true when every one is a first delivery): one entry for all but those
-- whose id holds a space (a legacy id), which get one of their own. The hot functions collect
-- the lists inline as they go: calling a helper per job cost Redis ~5 k instructions a job.
-- Returns the id of the last entry written (see log_event).
local function log_shared(log, event, ids, queue, worker, attempts)
  if not log or #ids == 0 then return nil end
  -- one search of the ids run together instead of one an id (a C call a job): only when some
  -- id holds a space is each one looked at
  if not string.find(table.concat(ids), ' ', 1, true) then
    local a = nil
    if attempts == true then
      a = ones_text(#ids)
    elseif attempts then
      a = table.concat(attempts, ' ')
    end
    return log_event(log, event, table.concat(ids, ' '), queue, worker, a)
  end
  if attempts == true then
    attempts = {}
    for k = 1, #ids do attempts[k] = '1' end
  end
  for k = 1, #ids do
    if string.find(ids[k], ' ', 1, true) then
      local plain, plain_attempts = {}, {}
      for m = 1, #ids do
        if string.find(ids[m], ' ', 1, true) then
          log_event(log, event, ids[m], queue, worker, attempts and attempts[m])
        else
          plain[#plain + 1] = ids[m]
          if attempts then plain_attempts[#plain_attempts + 1] = attempts[m] end
        end
      end
      if attempts then attempts = plain_attempts end
      ids = plain
      if #ids == 0 then return nil end
      break
    end
  end
  local a = nil
  if attempts then a = table.concat(attempts, ' ') end
  return log_event(log, event, table.concat(ids, ' '), queue, worker, a)
end
