-- common/counters.lua: The queue's gauges and counters, batched calls' state, the due index entry,
-- lazy lists trimmed and compacted.

-- Counters. ready/delayed/dead are exact gauges changed by every transition; when the ready (dead)
-- gauge reaches zero no live entry can remain in ready_key (dead_key), so the list and its stale
-- entries go, and the queue may have become empty. A gauge that leaves zero puts the queue in the
-- registry. The delayed gauge is two fields: `delayed` (every other change) plus `pd`, the delayed
-- publishes, which also count in published_total: a delayed publish increments `pd` alone (one
-- HINCRBY). qstat adds them up.
local GAUGE = {ready = true, delayed = true, dead = true}
-- Batched calls (batch.lua): the counters that only go up (*_total, pd) are added up over the
-- batch and written once, when it ends or before anything reads pd; the delayed gauge is written
-- at once (it is read with pd). batch_buckets: seconds whose bucket this batch knows to
-- be in prefix.."b" (bucket_add), so a batch of publishes into one second looks the bucket up once.
-- batch_gauges: the ready and dead gauges as the batch has changed them ({v = value, d = change
-- not written yet}), read once and written when the batch ends or before anything reads prefix.."s"
-- (their values still steer every call, exactly as written at once would).
local batch_totals, batch_total_names, batch_buckets, batch_gauges
local BATCHED_GAUGES = {'ready', 'dead'}

flush_totals = function()
  if not batch_totals then return end
  for _, name in ipairs(BATCHED_GAUGES) do
    local g = batch_gauges[name]
    if g and g.d ~= 0 then
      redis.call('HINCRBY', stats_key, name, g.d)
      g.d = 0
    end
  end
  if #batch_total_names == 0 then return end
  for _, name in ipairs(batch_total_names) do
    redis.call('HINCRBY', stats_key, name, batch_totals[name])
    batch_totals[name] = nil
  end
  batch_total_names = {}
end

-- Every FCALL starts outside a batch, even when an earlier batch ended in a Lua error before its
-- batch_end (these variables outlive a call): embed_scripts.py registers each script behind it.
local function call_begin()
  batch_totals, batch_total_names, batch_buckets, batch_gauges = nil, nil, nil, nil
  batch_due, batch_paused, batch_forget = nil, nil, nil
  moved_from_empty, hush_empty = false, false
  waited_cached, registered, bucket_lens, in_pump = nil, false, {}, false
end

-- ready: the ready gauge's value, when the caller has just read it (consume.lua's own batch).
local function batch_begin(ready)
  batch_totals, batch_total_names, batch_buckets, batch_gauges = {}, {}, {}, {}
  batch_forget = false
  if ready then batch_gauges.ready = {v = ready, d = 0} end
end
local function batch_end()
  flush_totals()
  local forget = batch_forget
  batch_forget = nil
  if forget then forget_if_empty() end
  batch_totals, batch_total_names, batch_buckets, batch_due, batch_paused = nil, nil, nil, nil, nil
  batch_gauges = nil
end

-- A batch's entry for the ready or dead gauge (see batch_gauges), read from prefix.."s" the first
-- time.
local function batch_gauge(name)
  local g = batch_gauges[name]
  if not g then
    g = {v = tonumber(redis.call('HGET', stats_key, name) or '0'), d = 0}
    batch_gauges[name] = g
  end
  return g
end

-- A gauge's value, as this batch has changed it when in a batch.
local function gauge(name)
  if batch_gauges then return batch_gauge(name).v end
  return tonumber(redis.call('HGET', stats_key, name) or '0')
end

-- Whether the queue is paused (QPAUSE): read once per call, or once per batch.
paused = function()
  if batch_paused ~= nil then return batch_paused end
  local p = redis.call('EXISTS', prefix .. 'p') == 1
  if batch_totals then batch_paused = p end
  return p
end

local function count(name, n)
  if name == 'ready' then ready_counted = true end
  if batch_totals and not GAUGE[name] then
    local sum = batch_totals[name]
    if not sum then batch_total_names[#batch_total_names + 1] = name end
    batch_totals[name] = (sum or 0) + n
    return nil  -- callers of the counters do not read the sum
  end
  local v
  if batch_gauges and name ~= 'delayed' then
    local g = batch_gauge(name)
    g.v, g.d = g.v + n, g.d + n
    v = g.v
  else
    if name == 'delayed' then flush_totals() end  -- the gauge is delayed + pd
    v = redis.call('HINCRBY', stats_key, name, n)
    if name == 'delayed' then v = v + tonumber(redis.call('HGET', stats_key, 'pd') or '0') end
  end
  if v == 0 then
    if name == 'ready' then
      redis.call('DEL', ready_key, priority_key)
      announce_empty()
    elseif name == 'dead' then
      redis.call('DEL', dead_key)
    end
    if GAUGE[name] then forget_if_empty() end
  elseif v == n and n > 0 and GAUGE[name] and REGISTRY and not registered then
    redis.call('SADD', REGISTRY, queue_tag())
    registered = true
  end
  return v
end

-- The due index entry of this queue is lowered to t (ms) when that is earlier.
local function due_at(t)
  if not DUE or in_pump or (batch_due and batch_due <= t) then return end
  redis.call('ZADD', DUE, 'LT', t, queue_tag())
  if batch_totals then batch_due = t end
end

-- Drops up to 4 stale entries at the head of a lazy list (ready_key wants READY, dead_key wants
-- DEAD), so the usual remove-in-FIFO-order patterns leave no garbage behind.
local function trim_head(list, want)
  for _ = 1, 4 do
    local e = redis.call('LINDEX', list, 0)
    if not e then return end
    local K, due = entry_key(e)
    local raw = redis.call('HGET', jobs_key, K)
    if raw and entry_live(raw, K, due, want) then return end
    redis.call('LPOP', list)
  end
end

-- Keeps a lazy list (ready_key wants READY, dead_key wants DEAD) at most twice its live entries
-- plus 64 long: past that it is rebuilt from its live entries, in order, each once. A removal that
-- leaves a stale entry checks the bound (one LLEN), so a queue that never runs empty and removes
-- jobs newest-first does not pile entries up; a rebuild of L entries follows at least L/2 removals,
-- so its cost per removal is O(1).
local function compact(list, want, live)
  local len = redis.call('LLEN', list)
  if len <= 2 * live + 64 then return end
  local all = redis.call('LRANGE', list, 0, -1)
  local keep, seen = {}, {}
  for i = 1, #all, 1000 do
    local chunk, dues = {}, {}
    for m = i, math.min(i + 999, #all) do chunk[#chunk + 1], dues[#chunk + 1] = entry_key(all[m]) end
    local raws = redis.call('HMGET', jobs_key, unpack(chunk))
    for m, K in ipairs(chunk) do
      local raw = raws[m]
      if raw and not seen[K] and entry_live(raw, K, dues[m], want) then
        seen[K] = true
        keep[#keep + 1] = all[i + m - 1]
      end
    end
  end
  redis.call('DEL', list)
  batched('RPUSH', list, keep)
end

