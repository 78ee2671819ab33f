-- The fleet summary: per feature some live process does not serve, those processes described
-- (`fleet_lacks` in the config hash), which hero-py and Node refuse a submit by rather than read
-- the fleet themselves. Written by hero_duties' holder every 10 s, so whatever language the
-- holder is in, and with no broker, it is kept; `hero_protocol::fleet::Fleet::summary` is the
-- same reading in Rust (tests/tests/duties.rs holds the two equal).

local fleet_view = {}

-- Key, what, first protocol that serves it: `Feature` in fleet.rs, in its order.
fleet_view.FEATURES = {
  { 'unique', 'a uniqueness key', 21 },
  { 'tags', 'tags', 22 },
  { 'limit_key', 'a limit key', 26 },
  { 'batch', 'a batch', 27 },
  { 'progress', 'progress and log lines', 27 },
  { 'shards', 'a sharded namespace', 28 },
  { 'job_policy', 'a job\'s own back-off or retention', 30 },
  { 'trace', 'a failed attempt\'s trace', 29 },
  { 'fair', 'fair share within a queue (--fair)', 30 },
}

-- The protocol a presence's `version` names, for processes that wrote no `protocol`
-- (`fleet::protocol_of_version`).
function fleet_view.protocol_of_version(v)
  v = string.match(v or '', '^%s*(.-)%s*$')
  local py = string.match(v, '^hero%-py %d+%.(%d+)')
  if py then return tonumber(py) end
  local npm = string.match(v, '^hero%-broker %(npm%) 0%.(%d+)')
  if npm then return tonumber(npm) end
  if v == '0.1.0' then return 27 end
  if v == '0.2.0' or v == '0.3.0' then return 28 end
  return nil
end

-- A member as `Member::describe` writes it: `worker g:i:s (hero-py 0.26.0, protocol 26)`.
function fleet_view.describe(m)
  local version = ''
  if m.version ~= '' then version = m.version .. ', ' end
  local protocol = 'protocol unknown'
  if m.protocol then protocol = 'protocol ' .. string.format('%d', m.protocol) end
  return m.role .. ' ' .. m.name .. ' (' .. version .. protocol .. ')'
end

-- A live consumer with no fleet entry (a worker released before protocol 29), from its
-- presence under one of the registered types (`fleet::older_worker`).
function fleet_view.older(consumer, ns, types)
  local m = { name = consumer, role = 'worker', version = '', shards = false }
  local g, i = string.match(consumer, '^([^:]+):([^:]+):[^:]+$')
  if not (name_ok(g) and name_ok(i)) then return m end
  for _, t in ipairs(types) do
    local raw = redis.call('GET', ns .. 'meta:actor:inst:' .. t .. ':' .. g .. ':' .. i)
    local ok, v = pcall(cjson.decode, raw or '')
    if ok and type(v) == 'table' and v.consumer == consumer then
      m.version = type(v.version) == 'string' and v.version or ''
      m.protocol = tonumber(v.protocol) or fleet_view.protocol_of_version(m.version)
      local p = fleet_view.protocol_of_version(m.version)
      if string.match(m.version, '^hero%-py ') or string.match(m.version, '^hero%-broker %(npm%)') then
        m.shards = p ~= nil and p >= 28
      else
        m.shards = m.version == '0.3.0'
      end
      return m
    end
  end
  return m
end

-- The live members: the fleet hash's unexpired entries, then the live consumers it does not
-- name (`Fleet::answer`).
function fleet_view.members(d)
  local out, known = {}, {}
  local raw = redis.call('HGETALL', d.ns .. 'meta:fleet')
  for k = 1, #raw, 2 do
    local ok, v = pcall(cjson.decode, raw[k + 1])
    if ok and type(v) == 'table' and (tonumber(v.expires_ms) or 0) >= d.now_ms then
      known[raw[k]] = true
      out[#out + 1] = { name = raw[k], role = v.role == 'broker' and 'broker' or 'worker',
        protocol = tonumber(v.protocol), version = type(v.version) == 'string' and v.version or '',
        shards = v.shards == true }
    end
  end
  local types = nil
  for _, c in ipairs(redis.call('ZRANGEBYSCORE', d.keys[3], d.now_ms, '+inf')) do
    if not known[c] then
      if not types then
        types = {}
        local seen = {}
        local prefix = d.ns .. 'q:work:type:'
        for _, s in ipairs(redis.call('SMEMBERS', d.keys[4])) do
          local t = string.sub(s, 1, #prefix) == prefix and string.match(string.sub(s, #prefix + 1), '^([^:]+)')
          if name_ok(t) and not seen[t] then seen[t] = true types[#types + 1] = t end
        end
        table.sort(types)
      end
      out[#out + 1] = fleet_view.older(c, d.ns, types)
    end
  end
  return out
end

-- Writes `fleet_lacks` (or removes it when every live process serves every feature).
function fleet_view.publish(d)
  local members = fleet_view.members(d)
  -- Fleet::answer sorts by role (workers first), then name
  table.sort(members, function(a, b)
    if a.role ~= b.role then return a.role == 'worker' end
    return a.name < b.name
  end)
  local summary, any = {}, false
  for _, f in ipairs(fleet_view.FEATURES) do
    local lacking = {}
    for _, m in ipairs(members) do
      local serves
      if f[1] == 'shards' then serves = m.shards else serves = (not m.protocol) or m.protocol >= f[3] end
      if not serves then lacking[#lacking + 1] = fleet_view.describe(m) end
    end
    if #lacking > 0 then
      summary[f[1]] = { what = f[2], since = f[3], processes = lacking }
      any = true
    end
  end
  if any then
    redis.call('HSET', d.keys[5], 'fleet_lacks', cjson.encode(summary))
  else
    redis.call('HDEL', d.keys[5], 'fleet_lacks')
  end
end
