-- hero_expire: delete the ended jobs whose retention time has passed, oldest first, as the
-- retention stream names them (one entry per call that ended jobs: see retained in the prelude).
-- KEYS[1] retention stream
-- ARGV[1] job key prefix  ARGV[2] retention ms  ARGV[3] most entries to take in this call
-- ARGV[4] the dead letters' retention ms (optional, since protocol 31): a dead-lettered job (its
--   record names its letter, `dead`) is kept while its letter is, so a letter can always be
--   retried: its record gets a TTL to the letter's end instead of being deleted now
-- An entry is due once it is older than the retention time by Redis's clock (its id). Each job
-- it names is deleted when its record still says finished or error with the finished_at the
-- entry carries; any other is left alone: it ran again since (whatever ended it again added a
-- newer entry), or it is gone already; a job with a retention of its own (`keep`, `keep_failed`)
-- and a TTL from it is left to that TTL. An entry that is not of this form (foreign data) names
-- no job. A deleted job leaves the index of each of its tags (`<ns>:tag:<tag>`). The entries
-- taken are deleted, and the stream with them once it is empty.
-- Returns: {entries taken, jobs deleted, 1 when more entries are due, else 0}
-- Errors: none of its own.
local function hero_expire(keys, args)
  local stream, prefix = keys[1], args[1]
  local ns = ns_of(prefix, '')
  local retention_ms, count = tonumber(args[2]), tonumber(args[3])
  local now_ms = server_ms()
  local dead_keep = tonumber(args[4] or '')
  if dead_keep and dead_keep <= retention_ms then dead_keep = nil end
  local cutoff = now_ms - retention_ms
  if cutoff < 0 then return { 0, 0, 0 } end
  -- pcall: a retention key holding another type (foreign data) holds no job of ours
  local entries = redis.pcall('XRANGE', stream, '-', string.format('%d', cutoff), 'COUNT', count)
  if entries.err or #entries == 0 then return { 0, 0, 0 } end
  local deleted = 0
  for _, e in ipairs(entries) do
    local t, ids
    local f = e[2]
    for k = 1, #f, 2 do
      if f[k] == 't' then t = f[k + 1] elseif f[k] == 'j' then ids = f[k + 1] end
    end
    if t and ids then
      for job_id in string.gmatch(ids, '[^ ]+') do
        local job_key = prefix .. job_id
        -- pcall: a job key holding another type is not a job of ours
        local r = redis.pcall('HMGET', job_key, 'status', 'finished_at', 'tags', 'keep', 'keep_failed', 'dead')
        local own = nil -- a retention of its own (keep_ttl): its TTL deletes it, however long
        if not r.err then
          if r[1] == 'finished' then own = r[4] else own = r[5] end
        end
        local letter_ms = dead_keep and not r.err and r[6] and tonumber(string.match(r[6], '^(%d+)-'))
        local keep_for = letter_ms and letter_ms + dead_keep - now_ms
        if own and redis.call('PTTL', job_key) > 0 then
          -- kept for its own retention (a job ended where it was not applied has no TTL: the
          -- broker's retention deletes it as any other)
        elseif keep_for and keep_for > 0 and r[1] == 'error' and r[2] == t then
          -- its dead letter outlives the retention time: the record goes with the letter
          redis.call('PEXPIRE', job_key, string.format('%d', keep_for))
        elseif not r.err and (r[1] == 'finished' or r[1] == 'error') and r[2] == t then
          redis.call('DEL', job_key)
          deleted = deleted + 1
          if r[3] and r[3] ~= '' and r[3] ~= '[]' then
            -- out of its tags' indexes with it (a record's tags were checked at submit; one
            -- written by hand that does not decode leaves its index entries to the lister)
            local ok, tags = pcall(cjson.decode, r[3])
            if ok and type(tags) == 'table' then
              for _, tag in ipairs(tags) do
                if type(tag) == 'string' then redis.call('SREM', tag_key(ns, tag), job_id) end
              end
            end
          end
        end
      end
    end
  end
  -- entries are taken from the head, so everything up to the last one taken goes
  redis.call('XTRIM', stream, 'MINID', next_id(entries[#entries][1]))
  if redis.call('XLEN', stream) == 0 then redis.call('DEL', stream) end
  local more = 0
  if #entries == count then more = 1 end
  return { #entries, deleted, more }
end
