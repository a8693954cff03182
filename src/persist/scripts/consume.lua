-- consume.lua -- lease up to `count` ready jobs, oldest first.
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  ttr_ms  lease length; the lease ends at now_ms + ttr_ms
-- ARGV[3]  count   1..1000
--
-- A paused queue (QPAUSE sets prefix.."p") hands out nothing: the reply is {0} and nothing changes.
-- State change: first, staged jobs due by now_ms join the ready list (common/moving.lua bring_due, as
-- pump.lua's step (1) would); then, per popped entry of prefix.."h" (the ready jobs with a
-- priority, highest level first, then in order), then of prefix.."r" (at most count + 1000 pops per
-- call):
--   stale entry (record gone or not ready)  -> dropped
--   ready, ttl passed                       -> removed (recurring: next occurrence), expired_total++
--   ready                                   -> leased: tries_left-1, attempt+1, ttr recorded,
--                                              ZADD l now+ttr; ready--, consumed_total++
--                                              (a lease nack "undo" gives back stays counted;
--                                              it counts in undelivered_total too);
--                                              the queue's dq:due entry lowered to now+ttr
-- Returns: { ready_left, K1, payload1, tries_left1, ttl_left_s1, attempt1, created_ms1, K2, ... }
--   ready_left = the ready gauge after the call. Fewer jobs than asked while ready_left > 0 means
--   the pop bound was hit on stale entries: call again. ttl_left_s = -1 when the job never expires.

-- BEGIN common
-- END common

local now, ttr, n = now_arg(ARGV[1]), arg_int(ARGV[2]), arg_int(ARGV[3])
if not now or not ttr or not n or n < 1 or ttr >= 2 ^ 32 then
  return redis.error_reply('ERR deferq consume: bad arguments')
end
-- Paused: ready_left 0, so the caller does not call again for this queue. One call tells the
-- usual queue (not paused, no ready job with a priority) from the others.
local maybe_high, unpaused = true, false
if batch_paused == nil then
  if redis.call('EXISTS', prefix .. 'p', priority_key) == 0 then
    maybe_high, unpaused = false, true
    if batch_totals then batch_paused = false end
  elseif paused() then
    return {0}
  end
elseif batch_paused then
  return {0}
end
-- Staged jobs due by now are ready even when the pump has not moved them yet (common/moving.lua
-- move_due): they join the ready list before it is read (some of them prefix.."h", maybe).
if bring_due(now) then maybe_high = true end

-- Several jobs (a COUNT, or a pipeline of CONSUMEs sent as one call): from the second job on, the
-- ready gauge is kept in Lua and written once, as in a batch (common/counters.lua batch_begin),
-- seeded with the value the first job's HINCRBY returned; so a COUNT that finds one job reads
-- no gauge and writes it once. Inside batch.lua, its batch.
local own_batch = n > 1 and not batch_totals
local out = {0}
local got, pops = 0, 0
local deadline = fmt(now + ttr)  -- the lease's score; a number would be formatted as a float per job
local left  -- the ready gauge after the last change, when there was one
-- The ready gauge went down by one job (count's value v).
local function took(v)
  left = v
  if own_batch and not batch_totals then
    batch_begin(v)
    if unpaused then batch_paused = false end
  end
end
-- One popped ready entry (of prefix.."h" when high, else of prefix.."r"): leased, expired or
-- dropped.
local function take(e, high)
  local K, due = entry_key(e)
  local raw = redis.call('HGET', jobs_key, K)
  local flags, created, ttl_s = 0, 0, 0
  if raw then
    flags, created, ttl_s = struct.unpack('<BI6I4', raw)
    -- A staged record the pump made ready keeps its state bits DELAYED (common/record.lua entry_live).
    local live
    if high then live = high_live(raw, K, due) else live = entry_live(raw, K, due, READY) end
    if not live then raw = nil end
  end
  if raw and bit.band(flags, FLAG_EVERY) == 0 then
    -- One-off job: leased in place, nothing else decoded or encoded.
    if ttl_s ~= 0 and now > created + ttl_s * 1000 then
      redis.call('HDEL', jobs_key, K)
      drop_error(K, att_in_place(raw), READY)
      took(count('ready', -1))
      count('expired_total', 1)
      retire_raw(K, raw, now, 'x')
    else
      lease_one_in_place(out, K, raw, ttr, deadline, now)
      took(count('ready', -1))
      got = got + 1
    end
  elseif raw then
    local r = decode(raw)
    if is_expired(r, now) then
      redis.call('HDEL', jobs_key, K)
      took(count('ready', -1))
      expire(K, r, now)
    else
      r.state, r.ttr = LEASED, ttr
      if r.tries_left > 0 then r.tries_left = r.tries_left - 1 end
      if r.attempt < 65535 then r.attempt = r.attempt + 1 end
      redis.call('HSET', jobs_key, K, encode(r))
      lease_add(K, deadline)
      took(count('ready', -1))
      push_job(out, K, r, now)
      got = got + 1
    end
  end
end

-- The jobs with a priority first (prefix.."h": highest level, then oldest), then prefix.."r" in
-- order. Once the ready gauge is 0 (`left`), both lists are gone (common/counters.lua count): no
-- pop is tried on them.
while maybe_high and got < n and pops < n + 1000 and left ~= 0 do
  local z = redis.call('ZPOPMIN', priority_key)
  if #z == 0 then break end
  pops = pops + 1
  take(z[1], true)
end
while got < n and pops < n + 1000 and left ~= 0 do
  local e = redis.call('LPOP', ready_key)
  if not e then
    left = 0  -- the gauge counts live entries of ready_key and prefix.."h", and there are none
    break
  end
  pops = pops + 1
  take(e, false)
end
if got > 0 then
  count('consumed_total', got)
  due_at(now + ttr)  -- the pump ends these leases if nobody ACKs them
end
out[1] = left or gauge('ready')
if own_batch and batch_totals then batch_end() end
return out
