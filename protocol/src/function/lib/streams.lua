-- Work stream entries: acknowledged, deleted and trimmed so that a done entry never stays in
-- a work stream.

-- Calls f(from, to) over runs of ids short enough for Lua's stack (unpack of a long list fails).
local function in_runs(ids, f)
  for from = 1, #ids, 1000 do
    f(from, math.min(#ids, from + 999))
  end
end

-- Acknowledge and delete delivered entries of one stream: a done entry never stays in a work
-- stream.
local function ack_del_many(stream, group, ids, xackdel)
  in_runs(ids, function(from, to)
    if xackdel == '1' then
      redis.call('XACKDEL', stream, group, 'IDS', to - from + 1, unpack(ids, from, to))
    else
      redis.call('XACK', stream, group, unpack(ids, from, to))
      redis.call('XDEL', stream, unpack(ids, from, to))
    end
  end)
end

local function ack_del(stream, group, id, xackdel)
  ack_del_many(stream, group, { id }, xackdel)
end

-- The stream id right after `id` ('<ms>-<seq>').
local function next_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return string.format('%d-%d', tonumber(ms), tonumber(seq) + 1)
end

-- Whether stream id `a` ('<ms>-<seq>') is at or after `b`, by number.
local function stream_id_at_least(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, aseq, bms, bseq = tonumber(ams), tonumber(aseq), tonumber(bms), tonumber(bseq)
  if not (ams and bms) then return false end
  return ams > bms or (ams == bms and aseq >= bseq)
end

-- Acknowledge delivered entries of one stream. Returns how many of them were pending.
local function ack(stream, group, ids)
  local acked = 0
  in_runs(ids, function(from, to)
    acked = acked + redis.call('XACK', stream, group, unpack(ids, from, to))
  end)
  return acked
end

-- Trim a stream of the entries `ids` just acknowledged and of every other done entry. XDEL
-- would seek each id (a scan inside its node, ~2 us each); XTRIM MINID drops runs from the head.
-- Entries are delivered in id order, so every entry below the oldest pending one (or, with
-- nothing pending, up to the group's last delivered one) was delivered and acknowledged:
-- nothing waiting or running is trimmed. An entry of `ids` behind an older job still running
-- is deleted by id, so every path that acknowledges an entry also deletes it. A few
-- entries (up to TRIM_BY_ID, as at light load) are deleted by id alone: one call, where the
-- trim asks XPENDING and XINFO first. Where the server has XACKDEL (Redis 8.2) deleting by id
-- is cheap, and each entry goes at once instead.
local TRIM_BY_ID = 8
local function trim_done(stream, group, ids, xackdel)
  if #ids == 0 then return end
  if #ids <= TRIM_BY_ID then
    redis.call('XDEL', stream, unpack(ids))
    return
  end
  if xackdel == '1' then
    in_runs(ids, function(from, to)
      redis.call('XDEL', stream, unpack(ids, from, to))
    end)
    return
  end
  local pending = redis.call('XPENDING', stream, group)
  local bound
  if pending[1] > 0 then
    bound = pending[2]
  else
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local name, last
      for k = 1, #g, 2 do
        if g[k] == 'name' then name = g[k + 1] elseif g[k] == 'last-delivered-id' then last = g[k + 1] end
      end
      if name == group and last then bound = next_id(last) end
    end
  end
  if bound then
    redis.call('XTRIM', stream, 'MINID', bound)
    -- ids of the same length compare as text (the ms part has 13 digits until the year 2286,
    -- so the same length means the same length of sequence too). Of different lengths (a
    -- submit of 50 in one millisecond numbers them 0 to 49: a fifth of a batch), the same
    -- millisecond as the bound's (`bms`, with its dash) makes the longer sequence the later, and
    -- different 13-digit milliseconds compare as text too; only an id of another form is
    -- parsed (stream_id_at_least: two matches and four numbers, ~10 k instructions an id,
    -- where these tests cost two C calls at most). With nothing pending, the bound is past
    -- every delivered entry.
    local behind = nil
    if pending[1] > 0 then
      local nb = #bound
      local bms = string.find(bound, '-', 1, true) == 14 and string.sub(bound, 1, 14)
      for k = 1, #ids do
        local id = ids[k]
        local later
        if #id == nb then
          later = id >= bound
        elseif bms and string.find(id, bms, 1, true) == 1 then
          later = #id > nb
        elseif bms and string.byte(id, 14) == 45 then
          later = id > bound
        else
          later = stream_id_at_least(id, bound)
        end
        if later then
          behind = behind or {}
          behind[#behind + 1] = id
        end
      end
    end
    if behind then
      in_runs(behind, function(from, to) redis.call('XDEL', stream, unpack(behind, from, to)) end)
    end
  else
    in_runs(ids, function(from, to) redis.call('XDEL', stream, unpack(ids, from, to)) end)
  end
end

-- Acknowledge a batch of done entries of one stream, then trim it (see trim_done).
local function ack_trim(stream, group, ids, xackdel)
  if xackdel == '1' then
    ack_del_many(stream, group, ids, xackdel)
    return
  end
  ack(stream, group, ids)
  trim_done(stream, group, ids, xackdel)
end
