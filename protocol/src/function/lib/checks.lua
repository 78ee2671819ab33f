-- What a submitted record may hold, and the form of each value: the checks a worker's decoder
-- makes (docs/protocol.md §3), made at submit so that a bad job from any language fails there,
-- loudly, before anything of its batch is written. A field named `x_...` or `x-...` is an
-- extension, stored and ignored. The system's own fields (status, attempts, lease, ...) are the
-- functions' to write.
local SUBMIT_FIELDS = {
  id = 'text', script = 'text', script_type = 'name', group = 'name', instance = 'name',
  priority = 'level', timeout = 'count', retries = 'count', concurrent = 'bool', reply = 'reply',
  created_at = 'time', updated_at = 'time', env_vars = 'object', prerequisites = 'list',
  dependencies = 'list', dependents = 'list', tags = 'list', caller_id = 'text',
  context_id = 'text', log_path = 'text', traceparent = 'trace', unique = 'text',
  unique_ttl = 'count', payload = 'text', limit_key = 'text', batch = 'name',
  backoff = 'backoff', keep = 'count', keep_failed = 'count',
}

-- The fields whose values refuse keeps, or checks against the job: one lookup a field, where
-- the chain of comparisons cost Redis ~1 k instructions a field it does not name (a payload).
local KEPT_FIELDS = {
  script = true, script_type = true, group = true, instance = true, priority = true, id = true,
  unique = true, unique_ttl = true, tags = true, batch = true, keep = true, keep_failed = true,
  prerequisites = true, dependencies = true,
}

-- Why the value `v` is not of form `kind` (nil when it is).
local function bad_value(kind, v)
  if kind == 'text' then return nil end
  if kind == 'name' then
    if #v < 1 or #v > 64 or not string.match(v, '^[%w_%-]+$') then
      return 'is not 1-64 characters of [A-Za-z0-9_-]'
    end
  elseif kind == 'level' then
    if not string.match(v, '^%d$') then return 'is not a priority level 0 to 9' end
  elseif kind == 'count' then
    if not string.match(v, '^%d+$') then return 'is not a whole number' end
  elseif kind == 'bool' then
    if v ~= 'true' and v ~= 'false' then return 'is not true or false' end
  elseif kind == 'reply' then
    if v ~= '1' and v ~= '' then return 'is not 1' end
  elseif kind == 'trace' then
    -- W3C trace context: version-trace id-parent id-flags, lowercase hex
    local h = '[0-9a-f]'
    if not string.match(v, '^' .. h .. h .. '%-' .. string.rep(h, 32) .. '%-' .. string.rep(h, 16) .. '%-' .. h .. h .. '$') then
      return 'is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)'
    end
  elseif kind == 'backoff' then
    -- a job's own back-off, as a queue policy writes one (`Backoff` in policy.rs)
    local ok, b = pcall(cjson.decode, v)
    if not ok or type(b) ~= 'table' then return 'is not a JSON object {kind, base_ms, cap_ms, jitter}' end
    if b.kind ~= 'fixed' and b.kind ~= 'exponential' then return 'has a kind that is not fixed or exponential' end
    for _, f in ipairs({ 'base_ms', 'cap_ms' }) do
      local n = b[f]
      if (f == 'base_ms' or n ~= nil) and (type(n) ~= 'number' or n < 0 or n ~= math.floor(n)) then
        return 'has a ' .. f .. ' that is not a whole number of ms'
      end
    end
    if b.jitter ~= nil and (type(b.jitter) ~= 'number' or b.jitter < 0 or b.jitter > 1) then
      return 'has a jitter that is not a number from 0 to 1'
    end
  elseif kind == 'time' then
    if not string.match(v, '^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d') then
      return 'is not an RFC 3339 timestamp'
    end
  elseif v ~= '' then
    local ok, t = pcall(cjson.decode, v)
    if not ok or type(t) ~= 'table' then return 'is not JSON ' .. kind end
    local n = 0
    for k, x in pairs(t) do
      n = n + 1
      if type(x) ~= 'string' then return 'holds a value that is not a string' end
      if kind == 'object' and type(k) ~= 'string' then return 'is not a JSON object' end
    end
    if kind == 'list' and n ~= #t then return 'is not a JSON array' end
  end
  return nil
end

-- A queue as a refusal names it: group and instance `none` where there is none.
local function queue_text(stype, grp, inst, prio)
  return 'type ' .. tostring(stype or 'none') .. ', group ' .. (grp or 'none') .. ', instance ' ..
    (inst or 'none') .. ', priority ' .. tostring(prio)
end

-- Why the record of one submitted job is refused (nil when it is fine), then its uniqueness
-- key and TTL, its tags, its prerequisites (JSON text), its batch when it has them, and whether
-- it has a retention of its own (`keep`, `keep_failed`: see keep_ttl). A record without
-- `script_type` is of its stream's type (hero_submit writes it):
-- `args` from `from` to `to` are its field/value pairs, `stream`
-- its work stream; `parsed` caches stream_parts per stream for the call, and in `parsed.good`
-- the values found good (the caller makes it, { good = {} }, for a call of several jobs: for one
-- job the tables would cost more than they save). Written out for the common case, a few fields of plain text: a table
-- or a string built per job here cost Redis several thousand instructions a job.
local function refuse(job_id, stream, args, from, to, parsed)
  local script, stype, grp, inst, prio = nil, nil, false, false, '5'
  local uniq, uttl, tags, prereqs, batch, kept = nil, nil, nil, nil, nil, false
  for k = from, to, 2 do
    local name, v = args[k], args[k + 1]
    local kind = SUBMIT_FIELDS[name]
    if not kind then
      local p = string.sub(name, 1, 2)
      if p ~= 'x_' and p ~= 'x-' then
        return 'field `' .. name .. '` is not a field a submit may write (an extension is named x_...)'
      end
    else
      if kind ~= 'text' then
        -- the jobs of a batch mostly carry the same values (a type, tags, a timestamp of the
        -- same millisecond): each value is checked once a call per form (`parsed.good`, form ->
        -- value -> true); a JSON value is decoded to be checked, a pattern matched
        local memo = parsed.good
        local good = memo and memo[kind]
        if memo and not good then
          good = {}
          memo[kind] = good
        end
        if not (good and good[v]) then
          local why = bad_value(kind, v)
          if why then return 'field `' .. name .. '` ' .. why end
          if good then good[v] = true end
        end
      end
      if KEPT_FIELDS[name] then
        if name == 'script' then script = v
        elseif name == 'script_type' then stype = v
        elseif name == 'group' then grp = v
        elseif name == 'instance' then inst = v
        elseif name == 'priority' then prio = v
        elseif name == 'id' and v ~= job_id then return 'field `id` is not the job id ' .. job_id
        elseif name == 'unique' then
          if #v < 1 or #v > 200 then return 'field `unique` is not 1-200 characters' end
          uniq = v
        elseif name == 'unique_ttl' then uttl = v
        elseif name == 'tags' and v ~= '' and v ~= '[]' then tags = v
        elseif name == 'batch' then batch = v
        elseif name == 'keep' or name == 'keep_failed' then kept = true
        elseif (name == 'prerequisites' or name == 'dependencies') and v ~= '' and v ~= '[]' then
          if prereqs then return 'fields `prerequisites` and `dependencies` are one list: give one' end
          prereqs = v
        end
      end
    end
  end
  if not script then return 'field `script` is missing' end
  if inst and not grp then
    return 'field `instance` needs a `group`: an instance is named within its group (queue <type>/<group>/<instance>)'
  end
  local p = parsed[stream]
  if p == nil then
    p = stream_parts(stream)
    parsed[stream] = p
  end
  if not p then
    return 'its stream ' .. stream .. ' is not a work stream (its record names ' ..
      queue_text(stype, grp, inst, prio) .. ')'
  end
  stype = stype or p.type
  if p.type ~= stype or p.group ~= grp or p.instance ~= inst or p.priority ~= prio then
    return 'its stream ' .. stream .. ' is the queue of ' ..
      queue_text(p.type, p.group, p.instance, p.priority) .. ', but its record names ' ..
      queue_text(stype, grp, inst, prio)
  end
  if uttl and not uniq then return 'field `unique_ttl` needs a `unique` key' end
  if uttl == '0' or (uttl and string.match(uttl, '^0+$')) then
    return 'field `unique_ttl` is not at least 1 (ms)'
  end
  return nil, uniq, uttl, tags, prereqs, batch, kept
end
