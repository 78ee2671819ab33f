-- hero function library: shared helpers used by the functions that follow.
--
-- Every key a function touches is passed in KEYS, except a job hash or reply list named by a
-- stream entry; those are built from a prefix in ARGV (built by the client's keys module) and
-- share the namespace's hash slot. Errors are raised as 'HERO_<CODE> message'.

-- Acknowledge and delete one delivered entry: a done entry never stays in a work stream.
local function ack_del(stream, group, id, xackdel)
  if xackdel == '1' then
    redis.call('XACKDEL', stream, group, 'IDS', 1, id)
  else
    redis.call('XACK', stream, group, id)
    redis.call('XDEL', stream, id)
  end
end

-- Append a job id to a work stream, creating the stream, its group and its registry entry on
-- first use. Returns the new entry id; recording it in the job hash is the caller's, so that a
-- new job's record is written in one HSET.
local function append(stream, group, registry, job_id)
  if redis.call('EXISTS', stream) == 0 then
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
    redis.call('SADD', registry, stream)
  end
  return redis.call('XADD', stream, '*', 'j', job_id)
end

local function config_ms(config, field, default)
  return tonumber(redis.call('HGET', config, field)) or default
end

-- Write a terminal status, start the retention clock, and answer a waiting caller.
local function finish(job_key, reply_key, config, status, text, wants_reply, now_iso)
  local field = 'error'
  if status == 'finished' then field = 'output' end
  redis.call('HSET', job_key, 'status', status, field, text, 'finished_at', now_iso, 'updated_at', now_iso)
  redis.call('PEXPIRE', job_key, config_ms(config, 'retention_ms', 86400000))
  if wants_reply == '1' then
    local reply = { status = status, output = '', error = '' }
    reply[field] = text
    redis.call('LPUSH', reply_key, cjson.encode(reply))
    redis.call('PEXPIRE', reply_key, config_ms(config, 'reply_ttl_ms', 3600000))
  end
end
