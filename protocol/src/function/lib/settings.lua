-- The settings the broker publishes in the config hash, each read at most once per call.
-- `prefetch` (optional) names the fields the call reads for sure, read with one HMGET: at one
-- job a call every command counts (a `redis.call` costs Redis ~4 us before its own work).
local function settings(config, prefetch)
  local cfg = { key = config }
  if prefetch then
    local r = redis.call('HMGET', config, unpack(prefetch))
    local raw = {}
    for k, f in ipairs(prefetch) do raw[f] = r[k] or false end
    cfg.raw = raw
  end
  return cfg
end

-- A field's text as the config hash holds it (nil when absent), prefetched or read now.
local function raw_setting(cfg, field)
  local raw = cfg.raw
  if raw and raw[field] ~= nil then return raw[field] or nil end
  return redis.call('HGET', cfg.key, field)
end

local function setting(cfg, field, default)
  local v = cfg[field]
  if v == nil then
    v = tonumber(raw_setting(cfg, field)) or default
    cfg[field] = v
  end
  return v
end

-- A numeric setting as the text a command argument takes, formatted once per call: Redis turns a
-- Lua number argument into text with printf, which is a visible cost when done once per job.
local function setting_arg(cfg, field, default)
  local args = cfg.args
  if not args then
    args = {}
    cfg.args = args
  end
  local v = args[field]
  if v == nil then
    v = string.format('%d', setting(cfg, field, default))
    args[field] = v
  end
  return v
end

-- A text setting ('' when the broker has not published it).
local function setting_text(cfg, field)
  local v = cfg[field]
  if v == nil then
    v = raw_setting(cfg, field) or ''
    cfg[field] = v
  end
  return v
end
