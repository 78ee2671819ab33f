-- hero function library, shared helpers continued: dependencies (prerequisites and their
-- dependents), used by hero_submit, hero_complete, hero_stop and hero_recover; the end of a
-- batch's member is counted through the same hook (release_if_any, see batches.lua).

-- Dependencies. A job submitted with prerequisites that have not all finished waits (status
-- waiting, `deps_left` the number still unfinished) and is named in the dependents hash of
-- each of them, `<ns>:deps:<prerequisite id>` (dependent id -> its work stream). The call that
-- ends a prerequisite releases its dependents in the same call (release_dependents): finished,
-- each one's count goes down and the one that reaches 0 is queued; ended error, each one ends
-- error `dependency failed: <id>`, and so do theirs, transitively. A call that ends jobs asks
-- whether any of them has dependents with one EXISTS over their hashes, so a job without any
-- costs its call nothing per job. Prerequisites must exist when their dependent is submitted,
-- and a record's list never changes, so no cycle can form.
local function deps_key(job_key, job_id)
  return ns_of(job_key, job_id) .. 'deps:' .. job_id
end

-- The count of jobs that have a dependents hash is the config hash's field `deps` (read with
-- the settings, so the hot completion asks nothing more of it), and a call that ends jobs looks
-- for dependents only while it is above 0. It may only run high (a dependents hash deleted by
-- hand), which costs the look, never a release.
local DEPS_FIELD = 'deps'

-- The set of the prerequisites that have a dependents hash, `<ns>:meta:waiting_on`
-- (`Keyspace::waiting_on`), beside the config hash: kept with the count above, on the
-- dependency paths only, so listing the jobs waiting on prerequisites reads it rather than
-- scanning every key.
local function waiting_on_key(config_key)
  return meta_key(config_key, 'waiting_on')
end

-- A prerequisite's result in its dependent's record, `result:<id>` = `<status>:<output or
-- error>` (finished or error), so a parent reads its children's results from its own record
-- (docs/protocol.md §3): however short the children's retention, the parent holds what they
-- gave it for as long as it is kept itself. A prerequisite that returned a value (its record's
-- `value`, MessagePack) leaves it as `value:<id>` too (since protocol 33).
local function keep_result(dependent_key, id, status, text, value)
  if value then
    redis.pcall('HSET', dependent_key, 'result:' .. id, status .. ':' .. text, 'value:' .. id, value)
  else
    redis.pcall('HSET', dependent_key, 'result:' .. id, status .. ':' .. text)
  end
end

local function waiting_dependents(cfg)
  return setting(cfg, DEPS_FIELD, 0) > 0
end

-- Releases the dependents of each job of `ended` ({job key, job id, ok}: ok true when it
-- finished, false when it ended error). `ctx`: cfg, log, st (stats), done (retained), now_iso,
-- and, to queue a released job, registry and group. A dependent failed here releases its own
-- dependents (failing them), breadth first, so a chain of any length ends in this one call.
-- Writes events: `dispatched` (a dependent released), `error` (a dependent failed).
-- Writes stats: `failed`.
local function release_dependents(ctx, ended)
  local k = 1
  while k <= #ended do
    local jk, jid, ok = ended[k][1], ended[k][2], ended[k][3]
    k = k + 1
    local dk = deps_key(jk, jid)
    local deps = redis.pcall('HGETALL', dk)
    if not deps.err and #deps > 0 then
      redis.call('DEL', dk)
      redis.call('HINCRBY', ctx.cfg.key, DEPS_FIELD, -1)
      redis.call('SREM', waiting_on_key(ctx.cfg.key), jid)
      local prefix = string.sub(jk, 1, #jk - #jid)
      local reply_prefix = reply_prefix_of(ns_of(jk, jid))
      local status, text, value = 'error', nil, nil
      if ok then status = 'finished' end
      local r = redis.pcall('HMGET', jk, ok and 'output' or 'error', 'value')
      if r.err then r = {} end
      text = r[1] or ''
      if ok then value = r[2] end
      for m = 1, #deps, 2 do
        local d, stream = deps[m], deps[m + 1]
        local dkey = prefix .. d
        local f = redis.pcall('HMGET', dkey, 'status', 'reply')
        if not f.err and f[1] == 'waiting' then
          keep_result(dkey, jid, status, text, value)
          if ok then
            if redis.call('HINCRBY', dkey, 'deps_left', -1) <= 0 then
              -- queued as a submit would queue it: also handed to the legacy list of a
              -- dual-push mapping of its stream (see hero_submit)
              local m = dual_push_mapping(ctx.cfg, bridge_registry_of(ctx.registry), stream, ctx)
              local entry = append(stream, ctx.group, ctx.registry, d, nil, nil, m and true)
              redis.call('HSET', dkey, 'status', 'dispatched', 'updated_at', ctx.now_iso)
              redis.call('HDEL', dkey, 'deps_left')
              if m then hand_to_legacy(dkey, d, m, entry, server_ms()) end
              log_event(ctx.log, 'dispatched', d, stream, nil, nil, 'prerequisites finished')
            end
          else
            local reason = 'dependency failed: ' .. jid
            redis.call('HDEL', dkey, 'deps_left')
            finish(dkey, d, reply_prefix .. d, ctx.cfg, 'error', reason, f[2], ctx.now_iso, ctx.done)
            log_event(ctx.log, 'error', d, stream, nil, nil, reason)
            tally(ctx.st, stream, 'failed', 1, true)
            ended[#ended + 1] = { dkey, d, false }
          end
        end
      end
    end
  end
end

-- Releases the dependents of the jobs a call ended, when any has some, and counts the ends
-- into their batches, when any batch is open: `jk`, `ji` their keys and ids, `ok` per job true
-- when it finished. One EXISTS asks for all their dependents (parallel lists, not a table per
-- job: a hot call ends many). A dependent failed in the release is counted into its batch too.
-- Writes events: `dispatched`, `error` (dependents released or failed), `batch_done`.
-- Writes stats: `failed`.
local function release_if_any(ctx, jk, ji, ok)
  if #jk == 0 then return end
  local ended = nil
  if waiting_dependents(ctx.cfg) then
    local ks = {}
    for k = 1, #jk do ks[k] = deps_key(jk[k], ji[k]) end
    local n = 0
    in_runs(ks, function(from, to) n = n + redis.call('EXISTS', unpack(ks, from, to)) end)
    if n > 0 then
      ended = {}
      for k = 1, #jk do ended[k] = { jk[k], ji[k], ok[k] } end
      release_dependents(ctx, ended)
    end
  end
  if open_batches(ctx.cfg) then
    if not ended then
      ended = {}
      for k = 1, #jk do ended[k] = { jk[k], ji[k], ok[k] } end
    end
    count_batch_ends(ctx, ended)
  end
end

-- Whether a call that ends jobs must collect them for release_if_any: some job has dependents,
-- or some batch is open.
local function collect_ended(cfg)
  return waiting_dependents(cfg) or open_batches(cfg)
end
