-- hero_renew: keep a running delivery from being recovered, fenced by its lease, and record what
-- its handler reported since the last call (progress, log lines), so a report rides on the
-- renewal a long job makes anyway and a handler that reports nothing costs nothing more.
-- KEYS[1] job hash  KEYS[2] work stream  KEYS[3] event log (only with a report)
-- KEYS[4] config hash (only with a report)
-- ARGV[1] lease (entry id)  ARGV[2] consumer group  ARGV[3] consumer name
-- ARGV[4] job id (only with a report, for the event log)
-- ARGV[5] progress: '' for none, else a JSON object {"percent": 0-100, "message": "..."}
-- ARGV[6..] log lines, oldest first: appended to the record's `log` (a JSON array of strings),
--   which keeps its last LOG_LINES
-- Events: with a report, `progress` (r the progress JSON) and `logged` (r the lines joined by
--   newlines); w the consumer.
-- Returns: 'ok' (idle time reset, the report recorded), 'stopped' (the job ended while running,
-- e.g. stopped: the handler should be interrupted), 'lost' (another delivery owns the job, or it
-- is gone); a report is recorded only with 'ok'.
-- Errors: HERO_BAD_ARG for a progress that is not a JSON object with a number percent.
local LOG_LINES = 100

local function hero_renew(keys, args)
  local job_key, stream = keys[1], keys[2]
  local lease, group, consumer = args[1], args[2], args[3]
  local progress = args[5]
  if progress and progress ~= '' then
    local ok, p = pcall(cjson.decode, progress)
    if not ok or type(p) ~= 'table' or type(p.percent) ~= 'number' then
      return redis.error_reply('HERO_BAD_ARG progress is not a JSON object with a number percent')
    end
  end
  local f = redis.call('HMGET', job_key, 'status', 'lease')
  if not f[1] or f[2] ~= lease then return 'lost' end
  if f[1] ~= 'started' then return 'stopped' end
  local claimed = redis.call('XCLAIM', stream, group, consumer, 0, lease, 'JUSTID')
  if #claimed == 0 then return 'lost' end
  if #args < 4 then return 'ok' end
  local log = event_log(keys[3], settings(keys[4], FIELDS.renew))
  local job_id = args[4]
  if progress and progress ~= '' then
    redis.call('HSET', job_key, 'progress', progress)
    log_event(log, 'progress', job_id, stream, consumer, nil, progress)
  end
  if #args > 5 then
    local lines = {}
    local kept = redis.call('HGET', job_key, 'log')
    if kept then
      local ok, old = pcall(cjson.decode, kept)
      if ok and type(old) == 'table' then lines = old end
    end
    local new = {}
    for k = 6, #args do
      lines[#lines + 1] = args[k]
      new[#new + 1] = args[k]
    end
    if #lines > LOG_LINES then
      local tail = {}
      for k = #lines - LOG_LINES + 1, #lines do tail[#tail + 1] = lines[k] end
      lines = tail
    end
    redis.call('HSET', job_key, 'log', cjson.encode(lines))
    log_event(log, 'logged', job_id, stream, consumer, nil, table.concat(new, '\n'))
  end
  return 'ok'
end
