-- hero_clean: delete ended jobs older than a grace period (BullMQ's `queue.clean(grace, limit,
-- 'completed' | 'failed')`), oldest first, bounded per call. Ended jobs are named, in the order
-- they ended, by the retention stream, so the walk reads only ended jobs, never every job.
-- KEYS[1] retention stream
-- ARGV[1] job key prefix  ARGV[2] grace ms: only jobs that ended at least this long ago (on
--   Redis's clock)  ARGV[3] status: 'finished', 'error' (failed or timed out) or '' for both
-- ARGV[4] queue name (`<type>[/<group>[/<instance>]]`, covering what it names at any priority;
--   '' for every queue)  ARGV[5] the most jobs to delete  ARGV[6] cursor: the retention entry to
--   go on after ('' from the oldest; '=<entry>' from that entry itself, when a call stopped
--   inside it)
-- Each job goes as hero_remove deletes one (its tag index entries, its uniqueness key); its
-- retention entry stays, for hero_expire to trim (it skips a job that is gone).
-- Returns: {the next cursor ('' when the walk reached jobs younger than the grace, or the end),
--   the deleted job ids...}. A call reads at most 1,000 retention entries.
-- Errors: HERO_BAD_ARG for a grace, limit or status that is not one.
local function hero_clean(keys, args)
  local prefix, grace, status, queue = args[1], tonumber(args[2]), args[3], args[4]
  local limit, cursor = tonumber(args[5]), args[6]
  if not grace or grace < 0 or not limit or limit < 1 then
    return redis.error_reply('HERO_BAD_ARG grace must be ms (0 or more) and limit 1 or more')
  end
  if status ~= '' and status ~= 'finished' and status ~= 'error' then
    return redis.error_reply('HERO_BAD_ARG status must be finished, error or empty')
  end
  local before = server_ms() - grace
  local from = '-'
  if string.sub(cursor, 1, 1) == '=' then
    from = string.sub(cursor, 2)
  elseif cursor ~= '' then
    from = '(' .. cursor
  end
  local out = { '' }
  local read = 0
  while read < 1000 do
    local entries = redis.call('XRANGE', keys[1], from, '+', 'COUNT', 100)
    if #entries == 0 then
      out[1] = ''
      return out
    end
    for _, e in ipairs(entries) do
      read = read + 1
      if (tonumber(string.match(e[1], '^(%d+)')) or 0) > before then
        out[1] = ''
        return out
      end
      for id in string.gmatch(entry_fields(e[2]) or '', '%S+') do
        local job_key = prefix .. id
        local r = redis.pcall('HMGET', job_key, 'status', 'finished_at', 'script_type', 'group', 'instance')
        if type(r) == 'table' and not r.err and (r[1] == 'finished' or r[1] == 'error')
          and (status == '' or r[1] == status) and (iso_ms(r[2]) or 0) <= before
          and (queue == '' or covers(queue, { type = r[3], group = r[4] or false, instance = r[5] or false })) then
          if hero_remove({ job_key }, { id }) == 'removed' then out[#out + 1] = id end
          -- an entry names several jobs: stop at the limit inside it, and go on from it next
          -- call (the ones deleted are gone then, so none is answered twice)
          if #out - 1 >= limit then
            out[1] = '=' .. e[1]
            return out
          end
        end
      end
      -- the cursor names the last entry looked at whole: the next call goes on after it
      out[1] = e[1]
      from = '(' .. e[1]
      if #out - 1 >= limit then return out end
    end
  end
  return out
end
