-- common/moving.lua: Jobs falling due: wake-up markers and announcements, moving due staged jobs to
-- ready, the pump's direct lease.

-- Whether some deferq instance has consumers blocked on this queue (it keeps prefix.."wt" alive):
-- then the pump moves due staged jobs at their due ms (pump.lua lazy_ms), and reads leave it
-- to the pump, so each such move is timed (its lateness observed) as before lazy moving.
local function waited_on()
  if waited_cached == nil then waited_cached = redis.call('EXISTS', prefix .. 'wt') == 1 end
  return waited_cached
end

-- Cross-instance wake-ups: while the marker exists, a call that makes jobs ready announces the
-- queue's tag ("ns/queue") once on channel dq:ready. Without it this costs one EXISTS per call.
local function announce_ready()
  if announced then return end
  announced = true
  if waited_on() then
    redis.call('PUBLISH', 'dq:ready', string.sub(prefix, 5, -3))
  end
end

-- The ready list of a queue consumers wait on went empty: "empty ns/queue" on the same channel
-- tells every instance it has nothing to offer there, until the next ready news (which follows
-- it on the channel: jobs made ready later, in this call too, are announced again).
announce_empty = function()
  announced = false
  if hush_empty then return end
  if waited_on() then
    redis.call('PUBLISH', 'dq:ready', 'empty ' .. string.sub(prefix, 5, -3))
  end
end

-- When the job of record `raw` expires (expires_at without decoding a one-off job's record), or
-- nil when never.
local function raw_expiry(raw)
  local flags, created, ttl = struct.unpack('<BI6I4', raw)
  if ttl == 0 then return nil end
  if bit.band(flags, FLAG_EVERY) ~= 0 then return expires_at(decode(raw)) end
  return created + ttl * 1000
end

-- The ready list of this queue just went from empty to holding `raw`'s job: the pump must look
-- at its head when that job's ttl passes (pump.lua removes expired jobs from the head; with one
-- TTL per queue the head expires first). Later jobs behind a live head need no entry.
local function ready_expiry_due(raw)
  if not DUE then return end
  local e = raw_expiry(raw)
  if e then due_at(e + 1) end
end

-- Due staged jobs become ready: their prefix.."w" members, earliest due first (at most `limit`),
-- move to the ready list as they are (ZRANGEBYSCORE + ZREMRANGEBYRANK of prefix.."w", one RPUSH);
-- records untouched (staged_member, entry_live). pump.lua's step (1), and the first step of
-- consume, peek and job, so a staged job is ready at its due ms whether or not the pump has moved
-- it yet
-- (docs/storage.md "Lazy moving"). Returns the moved members.
local function move_due(now, limit, extra, hold)
  local items = {}
  if limit > 0 then
    items = redis.call('ZRANGEBYSCORE', staged_key, '-inf', now, 'LIMIT', 0, limit)
  end
  local n = #items
  if n > 0 then redis.call('ZREMRANGEBYRANK', staged_key, 0, n - 1) end
  -- `extra`: due members that never were in prefix.."w" (pump.lua's direct ones), merged in due
  -- order.
  if extra and #extra > 0 and n == 0 and #extra == 1 then
    items, n = extra, 1
  elseif extra and #extra > 0 then
    local function due_of(e) return (struct.unpack('>I6', e, 2)) end
    table.sort(extra, function(a, b) return due_of(a) < due_of(b) end)
    local merged, i, j = {}, 1, 1
    while i <= n or j <= #extra do
      if j > #extra or (i <= n and due_of(items[i]) <= due_of(extra[j])) then
        merged[#merged + 1] = items[i]
        i = i + 1
      else
        merged[#merged + 1] = extra[j]
        j = j + 1
      end
    end
    items, n = merged, #merged
  end
  if n == 0 then return items, 0 end
  -- Not count(): the delayed gauge must not reach 0 (forgetting the queue) before these n jobs
  -- count as ready.
  redis.call('HINCRBY', stats_key, 'delayed', -n)
  registered = true  -- it held these delayed jobs
  -- `hold` (pump.lua's direct lease): how many of the first items the caller leases itself
  -- (lease_held); those never join the ready list nor count as ready.
  local h = hold and hold(items) or 0
  if h == n then return items, h end
  local rest = items
  if h > 0 then
    rest = {}
    for m = h + 1, n do rest[#rest + 1] = items[m] end
  end
  n = n - h
  push_members(rest)
  if count('ready', n) == n then
    moved_from_empty = true
    if not in_pump then ready_expiry_due(redis.call('HGET', jobs_key, (entry_key(rest[1])))) end
  end
  announce_ready()
  return items, h
end

-- The direct lease (pump.lua lease_count): due members (move_due's items, in due order) that go
-- straight to a waiting consumer, as consume.lua's fast path would lease them from the ready
-- list, without passing through it. holdable: how many of the first `count` it can take, with
-- their records: all of them or none, so the ready list keeps its order; none when some item has
-- a priority (consume would take that one first) or some record is not a live, unexpired one-off
-- job (consume's other paths handle those).
local held_keys, held_raws  -- the jobs a direct lease holds (holdable), until lease_held
local function holdable(items, count, now)
  local h = math.min(count, #items)
  if h < 1 then return 0 end
  for m = 1, #items do
    if string.byte(items[m], 1) ~= 255 then return 0 end
  end
  local ks, dues = {}, {}
  for m = 1, h do ks[m], dues[m] = entry_key(items[m]) end
  local raws = redis.call('HMGET', jobs_key, unpack(ks))
  for m = 1, h do
    local raw = raws[m]
    if not raw or not entry_live(raw, ks[m], dues[m], READY) or
       expired_in_place(raw, now) ~= false then
      return 0
    end
  end
  held_keys, held_raws = ks, raws
  return h
end

-- move_due's `hold` for pump.lua's lease of up to `count` jobs: holdable, when nothing was ready
-- before (`ready_before`, the gauge read at the start of the call, and nothing counted ready
-- since: bind clears ready_counted), the queue is not paused and has no ready job with a priority.
local function direct_hold(count, ready_before, now)
  if count == 0 or ready_before ~= 0 then return nil end
  return function(items)
    if ready_counted or
       redis.call('EXISTS', prefix .. 'p', priority_key) ~= 0 then
      return 0
    end
    return holdable(items, count, now)
  end
end

-- Leases the held jobs (holdable's) for ttr_ms: consume.lua's fast path for each. Returns
-- consume.lua's reply: {ready_left, six fields per job}.
local function lease_held(ready_left, ttr, now)
  local out, ks, raws = {ready_left}, held_keys, held_raws
  held_keys, held_raws = nil, nil
  local deadline = fmt(now + ttr)
  for m = 1, #ks do lease_one_in_place(out, ks[m], raws[m], ttr, deadline, now) end
  count('consumed_total', #ks)
  return out
end

-- move_due for a call that is about to read the ready list, unless consumers wait (see
-- waited_on): one ZRANGE when nothing is due. True when it moved jobs.
local function bring_due(now)
  if in_pump then return false end
  local w = redis.call('ZRANGE', staged_key, 0, 0, 'WITHSCORES')
  if #w > 0 and tonumber(w[2]) <= now and not waited_on() then
    return #move_due(now, 1000) > 0
  end
  return false
end

