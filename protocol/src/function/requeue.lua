-- hero_requeue: move one job to a queue (the same one or another), wherever it is now, so that
-- it is never in two queues or in none.
-- KEYS[1] job hash  KEYS[2] its current work stream  KEYS[3] the work stream to move it to
-- KEYS[4] delayed zset  KEYS[5] queue registry set  KEYS[6] config hash  KEYS[7] event log
-- KEYS[8] stats hash  KEYS[9] control list of the worker the caller saw running it (any key of
-- the namespace when it saw none)
-- ARGV[1] consumer group  ARGV[2] now ISO 8601  ARGV[3] '1' when XACKDEL  ARGV[4] job id
-- ARGV[5] worker_id the caller saw ('' for none)  ARGV[6] cursor: the entry id to look for the
-- queued job's entry from ('0-0' to start)  ARGV[7] script type  ARGV[8] group ('' for none)
-- ARGV[9] instance ('' for none)  ARGV[10] priority level ('' for the default)
-- By what the record says:
--   waiting (delayed or retry back-off): it leaves the delayed set and is queued now;
--   dispatched: taken out of the current stream's gate when its queue is fair and it waits
--     there (gate.lua), else its entry in the current stream is found (a queued record does not name it: the
--     stream is read from the cursor, 1000 entries per call at most) and deleted, then it is
--     queued anew; no entry found to the end: it is queued all the same (it was in no stream);
--   started: its delivery is acknowledged and deleted (the lease is revoked: the worker's
--     completion answers lease_lost and its renewal lost), its worker is told through its control
--     list, and it is queued anew, attempts kept;
--   finished or error: queued anew with a fresh attempt budget (attempts, output, error,
--     started_at, finished_at cleared; and `dead`, the index of its dead letter, which stays in
--     the dead-letter stream: the job is no longer dead); pending again in its batch while the
--     batch is not done.
-- The record takes the new target (script_type, group, instance, priority), status dispatched.
-- Stats: the current stream's `delayed` gauge down for a waiting job, its `fair` gauge down
-- for a job taken out of its gate.
-- Events: `requeued` (q the new stream, r where it was taken from).
-- Returns: {answer, cursor}: 'requeued'; 'searching' with the cursor to call again from (the
-- entry was not among the entries read); 'changed' (it started on another worker since the
-- caller looked: look again); 'missing' (no such job).
-- Errors: none of its own.
local function hero_requeue(keys, args)
  local job_key, old, new, delayed, registry = keys[1], keys[2], keys[3], keys[4], keys[5]
  local cfg, ctl = settings(keys[6]), keys[9]
  local group, now_iso, xackdel, job_id, seen_worker, cursor = args[1], args[2], args[3], args[4], args[5], args[6]
  local f = redis.pcall('HMGET', job_key, 'status', 'lease', 'worker_id', 'entry')
  if type(f) ~= 'table' or f.err or not f[1] then return { 'missing', '' } end
  local status, from = f[1], 'queued'
  if status == 'waiting' then
    redis.call('ZREM', delayed, job_id)
    local st = stats(keys[8])
    tally(st, old, 'delayed', -1)
    flush_stats(st)
    from = 'delayed'
  elseif status == 'dispatched' then
    local entry = f[4]
    -- a fair queue's job may wait in its gate rather than the stream (gate.lua)
    local lane_key = redis.call('HGET', job_key, 'limit_key') or ''
    if redis.call('EXISTS', fair_lane_of(old, lane_key)) == 1 then
      local st = stats(keys[8])
      if ungate(st, old, job_id, lane_key) then
        flush_stats(st)
        entry = 'gated'
      end
    end
    if entry == 'gated' then
      entry = nil
    elseif not entry or entry == '' then
      -- the record does not name its entry: read the stream for it, a page per call
      local start = '-'
      if cursor ~= '0-0' then start = '(' .. cursor end
      local page = redis.pcall('XRANGE', old, start, '+', 'COUNT', 1000)
      if type(page) == 'table' and not page.err then
        for _, e in ipairs(page) do
          if entry_fields(e[2]) == job_id then entry = e[1] break end
        end
        if not entry and #page == 1000 then return { 'searching', page[#page][1] } end
      end
    end
    if entry and entry ~= '' then redis.call('XDEL', old, entry) end
  elseif status == 'started' then
    if (f[3] or '') ~= seen_worker then return { 'changed', '' } end
    if (f[2] or '') ~= '' then ack_del(old, group, f[2], xackdel) end
    -- the revoked delivery counts: a first one left no count (see hero_fetch)
    if not redis.call('HGET', job_key, 'attempts') then redis.call('HSET', job_key, 'attempts', '1') end
    if seen_worker ~= '' and ctl ~= keys[6] then
      redis.call('LPUSH', ctl, job_id)
      redis.call('PEXPIRE', ctl, 3600000)
    end
    from = 'revoked from ' .. seen_worker
  else
    -- an ended member of a batch that is not done is pending in it again
    revive_member(cfg, job_key, job_id, status)
    redis.call('HDEL', job_key, 'attempts', 'output', 'value', 'error', 'started_at', 'finished_at', 'dead')
    -- the TTL its end gave it (its own retention or its queue's) is for an ended job
    redis.call('PERSIST', job_key)
    from = status
  end
  redis.call('HDEL', job_key, 'lease', 'worker_id', 'entry', 'run_at', 'bridge', 'bridge_stop', 'bridge_taken')
  local w = { 'status', 'dispatched', 'updated_at', now_iso, 'script_type', args[7] }
  if args[8] ~= '' then w[#w + 1] = 'group'; w[#w + 1] = args[8] end
  if args[9] ~= '' then w[#w + 1] = 'instance'; w[#w + 1] = args[9] end
  if args[10] ~= '' then w[#w + 1] = 'priority'; w[#w + 1] = args[10] end
  redis.call('HSET', job_key, unpack(w))
  local drop = {}
  if args[8] == '' then drop[#drop + 1] = 'group' end
  if args[9] == '' then drop[#drop + 1] = 'instance' end
  if args[10] == '' then drop[#drop + 1] = 'priority' end
  if #drop > 0 then redis.call('HDEL', job_key, unpack(drop)) end
  -- the entry carries the attempts so far for the next fetch to add to (see append)
  local attempts = redis.call('HGET', job_key, 'attempts')
  append(new, group, registry, job_id, nil, attempts)
  log_event(event_log(keys[7], cfg), 'requeued', job_id, new, nil, nil, from)
  return { 'requeued', '' }
end
