-- BEGIN common.lua -- queue keys, record codec, job placement: the code every script shares.
-- Each script has an empty placeholder (these BEGIN/END lines). The build makes one Redis
-- Functions library of this file followed by every script's body as a function
-- (src/persist/embed_scripts.py), so Redis compiles this code once per FUNCTION LOAD, not per call.

-- Keys. KEYS[1] is the queue prefix P = "dq:{ns/queue}:"; every key is P .. suffix, so all of them
-- share the hash tag and live in one Redis Cluster slot. Redis runs one function at a time, so
-- these library-level variables are the current call's: `bind` sets them first in every call.
local P    -- the queue prefix
local KJ   -- HASH  K -> record of a ready, leased, dead or staged job (see entry_live)
local KR   -- LIST  ready FIFO of K (lazy: entries whose record is not ready are skipped)
local KH   -- ZSET  ready entries of jobs with a priority (level >= 1): highest level first, then
           -- in order (see push_ready); exact, no stale entries
local KL   -- ZSET  K scored by lease deadline (ms)
local KX   -- LIST  dead letter of K in order of death (lazy like KR)
local KB   -- ZSET  seconds whose bucket P .. 'd:' .. SEC is not yet staged
local KI   -- prefix of the index HASHes P.."i:"..XXX: K -> due ms for delayed jobs whose position is
           -- not derivable (index_key)
local KS   -- HASH  gauges and counters (see count), the staging mark (stage_sec, stage_cursor)
local KW   -- ZSET  staged member (see staged_member) -> due ms, for staged jobs not yet due
local KE   -- HASH  K -> why the job's last attempt failed (see record_error), for jobs that failed
local stage_sec_cached  -- P.."s" stage_sec, read at most once per call (see stage_sec)
local announced         -- this call already announced ready jobs (see announce_ready)
local ahead_ms          -- the pump's look-ahead, when the call knows it (see due_at)
local created_bucket    -- the earliest second whose bucket this call created (see bucket_add)
local clock_ms          -- this call's now_ms, when it takes one (now_arg): retention needs it
local moved_from_empty  -- move_due found the ready list empty (its jobs were the first ready)
local hush_empty        -- the ready list going empty needs no "empty" news (pump.lua's lease)
local ready_counted     -- the ready gauge changed since the caller cleared this (pump.lua)
-- Per call and queue: whether P.."wt" exists (waited_on; nil: not read yet), whether the queue is
-- known to be in the registry (count), the bucket lengths read (bucket_len).
local waited_cached, registered, bucket_lens
-- The call is pump.lua's, which writes the queue's due index entry itself at its end (due_at and
-- the ready list's expiry entry have nothing to add) and moves due jobs itself (bring_due).
local in_pump

-- Retention (docs/storage.md "Retention"): a queue that holds no job keeps its counters P.."s"
-- (the totals QSTAT and /metrics show) this long, then they go with the pump call at its end.
-- deferq replaces this line with its server.retain_seconds (persist/scripts.cc), which makes the
-- library one of its own (its name carries the value).
local RETAIN_MS = 600000

-- Pool-wide keys, one of each per pool (docs/storage.md "Registry and due index"), given as
-- KEYS[2] and KEYS[3] (deferq passes "dq:queues" and "dq:due"): the queues that hold a job (SET of
-- "ns/queue"), and when each queue's pump has work next (ZSET, ms; a lower bound, made exact by
-- every pump call). The pump owner reads the due index instead of visiting every queue. They are
-- not in the queue's hash slot, so on Redis Cluster the caller leaves them out (every script
-- works without them; the cluster design is in docs/storage.md).
local REGISTRY, DUE

local function bind(keys)
  if keys[1] ~= P then  -- pipelined calls on one queue reuse the key names of the last call
    P = keys[1]
    KJ, KR, KL, KX, KH = P .. 'j', P .. 'r', P .. 'l', P .. 'x', P .. 'h'
    KB, KI, KS, KW, KE = P .. 'b', P .. 'i:', P .. 's', P .. 'w', P .. 'e'
    waited_cached, registered, bucket_lens = nil, false, {}
  end
  REGISTRY, DUE = keys[2], keys[3]
  stage_sec_cached, announced, ahead_ms, created_bucket, clock_ms = nil, false, 2000, nil, nil
  ready_counted = false
end

local function queue_tag() return string.sub(P, 5, -3) end

-- Where in the first half of its look-ahead a queue's buckets are staged (ms after "ahead_ms
-- before the bucket's second"): fixed per queue, spread over queues, so the buckets of 1,000
-- queues falling due in one second are not all staged in the same millisecond (one burst of
-- 1,000 pump calls a second, late jobs behind it). 0 without a look-ahead.
local function stage_spread()
  local half = math.floor((ahead_ms or 0) / 2)
  if half < 1 then return 0 end
  local h = 0
  for i = 1, #P do h = (h * 33 + string.byte(P, i)) % 65521 end
  return h % half
end

-- A queue with no job in any state leaves the registry and the due index.
local flush_totals  -- defined below (batched calls)
-- For a batch (batch.lua): the lowest due index entry it set (due_at), whether the queue is
-- paused (paused; nothing in a batch pauses or resumes it), and whether some call may have left
-- the queue empty (forget_if_empty runs once, when the batch ends).
local batch_due, batch_paused, batch_forget

-- Whether the queue holds no job in any state.
local function queue_empty()
  if redis.call('ZCARD', KL) > 0 then return false end
  flush_totals()  -- it reads pd
  local v = redis.call('HMGET', KS, 'ready', 'delayed', 'dead', 'pd')
  return tonumber(v[1] or '0') == 0 and tonumber(v[3] or '0') == 0 and
         tonumber(v[2] or '0') + tonumber(v[4] or '0') == 0
end

local paused  -- defined below
local announce_empty  -- defined below

-- An emptied queue leaves the registry (unless paused: QUEUES lists a paused queue until
-- QRESUME) and its retention starts: retain_until in P.."s", and the due index entry at that
-- time, when the pump deletes the counters (pump.lua (3)).
local function forget_if_empty()
  if batch_forget ~= nil then batch_forget = true return end
  if not REGISTRY or not queue_empty() then return end
  redis.call('DEL', KW)  -- with no delayed job left, every staged entry is stale
  batch_due = nil  -- the due index entry is set here: the batch's next due_at must lower it
  if paused() then return end
  -- A queue that was never listed and has no counters never held a job (consumers waited on it,
  -- its pump was told): there is nothing to keep.
  registered = false
  if redis.call('SREM', REGISTRY, queue_tag()) == 0 and redis.call('EXISTS', KS) == 0 then
    return
  end
  local t = (clock_ms or 0) + RETAIN_MS
  redis.call('HSET', KS, 'retain_until', string.format('%d', t))
  redis.call('ZADD', DUE, t, queue_tag())
end

local READY, LEASED, DEAD, DELAYED = 0, 1, 2, 3
local STATE_NAME = {[0] = 'ready', 'leased', 'dead', 'delayed'}

-- Record flag bits (bits 0-1 are the state).
local F_T, F_E, F_B, F_D, F_R, F_O = 4, 8, 16, 32, 64, 128
-- Bucket fields start with a big-endian u16 OFFSET (due_ms % 1000 < 1024); bit 15 marks the 12-byte
-- derivable form. The length alone cannot tell them apart: a custom K "#" .. 9-char id is 10 bytes.
local DERIVABLE_BIT = 32768

local function fmt(n) return string.format('%d', n) end

-- An integer argument, or nil when it is not a non-negative integer.
local function arg_int(s)
  local n = tonumber(s)
  if n == nil or n < 0 or n ~= math.floor(n) or n >= 2 ^ 53 then return nil end
  return n
end

-- A script's now_ms argument (arg_int), kept as the call's clock for the rules that need the
-- time deep down (forget_if_empty's retention).
local function now_arg(s)
  clock_ms = arg_int(s)
  return clock_ms
end

local function bucket_key(sec) return P .. 'd:' .. fmt(sec) end
local function sec_of(ms) return (ms - ms % 1000) / 1000 end

-- Record codec. Layout (little-endian): u8 flags, u48 created_ms, u32 ttl_s, then the optional
-- blocks in this order: T u16 tries_left,u16 attempt,u16 tries_total, or (PRIORITY, RETAIN,
-- CALL) u16 tries_left, u16 attempt, u16 0, u16 tries_total, u8 level + flags, [u32 retain_s]
-- (t_len); E u32 every_s;
-- B u32 backoff_s, or (BACKOFF with MAX or JITTER) u32 0, u32 backoff_s, u32 max_s + 2^31 *
-- jitter (b_len); D u48 at_ms; R u32 ttr_ms; O u48 occurrence due (recurring jobs whose at_ms is
-- not the occurrence); then the payload. Absent blocks mean their defaults.
-- A B block starting with u32 0 is the long form: a short one never holds 0 (no B block then).

-- The length of the B block at pos.
local function b_len(s, pos)
  if struct.unpack('<I4', s, pos) == 0 then return 12 end
  return 4
end

-- The long T block's last byte: the priority level (bits 0-3) and the result flags (retire):
-- L_NOTIFY, someone waits for the job to finish (CALL, WAITJOB); L_RETAIN, a u32 retain_s follows
-- (PUBLISH ... RETAIN s).
local L_NOTIFY, L_RETAIN = 16, 32

-- The length of the T block at pos: 6, or for the long form (a priority or result flags) whose
-- third u16 is 0 (tries_total is never 0) 9, or 13 with its retain_s.
local function t_len(s, pos)
  if struct.unpack('<I2', s, pos + 4) ~= 0 then return 6 end
  if bit.band(string.byte(s, pos + 8), L_RETAIN) ~= 0 then return 13 end
  return 9
end

-- The priority level of an encoded record (0 when none), without decoding it.
local function level_in_place(s)
  if bit.band(string.byte(s, 1), F_T) == 0 or struct.unpack('<I2', s, 16) ~= 0 then return 0 end
  return string.byte(s, 20) % 16
end

-- Whether an encoded record keeps its result or has someone waiting for it (retire), without
-- decoding it.
local function has_result_flags(s)
  if bit.band(string.byte(s, 1), F_T) == 0 or struct.unpack('<I2', s, 16) ~= 0 then return false end
  return string.byte(s, 20) >= L_NOTIFY
end

-- The length of the E block at pos: u32 every_s, or the long form (a schedule) u32 0, u16 n, n
-- bytes (cron_next below).
local function e_len(s, pos)
  if struct.unpack('<I4', s, pos) == 0 then return 6 + struct.unpack('<I2', s, pos + 4) end
  return 4
end

-- Whether r recurs (EVERY or CRON).
local function recurring(r) return r.every > 0 or r.sched ~= nil end

local function decode(s)
  local flags, created, ttl, pos = struct.unpack('<BI6I4', s)
  local r = {state = flags % 4, created = created, ttl = ttl, tl = 1, att = 0, tt = 1,
             every = 0, backoff = 0, level = 0}
  if bit.band(flags, F_T) ~= 0 then
    r.tl, r.att, r.tt, pos = struct.unpack('<I2I2I2', s, pos)
    if r.tt == 0 then
      local lv
      r.tt, lv, pos = struct.unpack('<I2B', s, pos)
      r.level = lv % 16
      if lv >= L_NOTIFY then
        r.notify = bit.band(lv, L_NOTIFY) ~= 0
        if bit.band(lv, L_RETAIN) ~= 0 then r.retain, pos = struct.unpack('<I4', s, pos) end
      end
    end
  end
  if bit.band(flags, F_E) ~= 0 then
    r.every, pos = struct.unpack('<I4', s, pos)
    if r.every == 0 then
      local n
      n, pos = struct.unpack('<I2', s, pos)
      r.sched, pos = string.sub(s, pos, pos + n - 1), pos + n
    end
  end
  if bit.band(flags, F_B) ~= 0 then
    r.backoff, pos = struct.unpack('<I4', s, pos)
    if r.backoff == 0 then
      local m
      r.backoff, m, pos = struct.unpack('<I4I4', s, pos)
      r.bmax, r.jitter = m % 2147483648, m >= 2147483648
    end
  end
  if bit.band(flags, F_D) ~= 0 then r.at, pos = struct.unpack('<I6', s, pos) end
  if bit.band(flags, F_R) ~= 0 then r.ttr, pos = struct.unpack('<I4', s, pos) end
  if bit.band(flags, F_O) ~= 0 then r.occ, pos = struct.unpack('<I6', s, pos) end
  r.payload = string.sub(s, pos)
  if recurring(r) and r.occ == nil then r.occ = r.at or r.created end
  return r
end

local function encode(r)
  local flags, parts = r.state, {''}
  local lv = (r.level or 0)
  if r.notify then lv = lv + L_NOTIFY end
  if (r.retain or 0) > 0 then lv = lv + L_RETAIN end
  if lv > 0 then
    flags = flags + F_T
    parts[#parts + 1] = struct.pack('<I2I2I2I2B', r.tl, r.att, 0, r.tt, lv)
    if (r.retain or 0) > 0 then parts[#parts + 1] = struct.pack('<I4', r.retain) end
  elseif r.tl ~= 1 or r.att ~= 0 or r.tt ~= 1 then
    flags = flags + F_T
    parts[#parts + 1] = struct.pack('<I2I2I2', r.tl, r.att, r.tt)
  end
  if r.sched then
    flags = flags + F_E
    parts[#parts + 1] = struct.pack('<I4I2', 0, #r.sched) .. r.sched
  elseif r.every > 0 then
    flags = flags + F_E
    parts[#parts + 1] = struct.pack('<I4', r.every)
  end
  if r.backoff > 0 then
    flags = flags + F_B
    if (r.bmax or 0) > 0 or r.jitter then
      local m = r.bmax or 0
      if r.jitter then m = m + 2147483648 end
      parts[#parts + 1] = struct.pack('<I4I4I4', 0, r.backoff, m)
    else
      parts[#parts + 1] = struct.pack('<I4', r.backoff)
    end
  end
  if r.at then flags = flags + F_D; parts[#parts + 1] = struct.pack('<I6', r.at) end
  if r.ttr then flags = flags + F_R; parts[#parts + 1] = struct.pack('<I4', r.ttr) end
  if recurring(r) and r.occ ~= r.at then
    flags = flags + F_O; parts[#parts + 1] = struct.pack('<I6', r.occ)
  end
  parts[1] = struct.pack('<BI6I4', flags, r.created, r.ttl)
  parts[#parts + 1] = r.payload
  return table.concat(parts)
end

-- Replaces the state bits of an encoded record without decoding it (the publish fast path).
local function with_state(s, state)
  return string.char(bit.band(string.byte(s, 1), 252) + state) .. string.sub(s, 2)
end

-- A record with at_ms (D) := t and state bits `state`, every other byte as it was (no decode).
-- A delayed record has no R block, so D goes right after T, E and B, before O and the payload.
-- Staging uses it to give a staged non-derivable record its due time (see bucket_add).
local function with_at(s, t, state)
  local flags = string.byte(s, 1)
  local pos = 12
  if bit.band(flags, F_T) ~= 0 then pos = pos + t_len(s, pos) end
  if bit.band(flags, F_E) ~= 0 then pos = pos + e_len(s, pos) end
  if bit.band(flags, F_B) ~= 0 then pos = pos + b_len(s, pos) end
  local head = bit.band(flags, 252) + state
  local rest = pos
  if bit.band(flags, F_D) ~= 0 then rest = pos + 6 else head = head + F_D end
  return string.char(head) .. string.sub(s, 2, pos - 1) .. struct.pack('<I6', t) ..
         string.sub(s, rest)
end

-- The due ms of a staged record (state bits DELAYED, in P.."j"): its D block, or, for a job at
-- its derivable place (no D), the timestamp in its generated K.
local function staged_due(s, K)
  local flags = string.byte(s, 1)
  if bit.band(flags, F_D) == 0 then return (struct.unpack('>I6', K)) end
  local pos = 12
  if bit.band(flags, F_T) ~= 0 then pos = pos + t_len(s, pos) end
  if bit.band(flags, F_E) ~= 0 then pos = pos + e_len(s, pos) end
  if bit.band(flags, F_B) ~= 0 then pos = pos + b_len(s, pos) end
  return (struct.unpack('<I6', s, pos))
end

-- A staged job is K in P.."w" under the member MARK .. u48 due ms (big-endian) .. K, and the pump
-- moves exactly that member to the ready list when the job falls due: a ready-list entry is
-- either K or such a member. Its first byte is 255 - the job's priority level (0..9), and no K
-- starts with a byte of 246 or more (a generated K starts with its timestamp, a custom one with
-- "#").
local function staged_member(K, due, level)
  return string.char(255 - (level or 0)) .. struct.pack('>I6', due) .. K
end

-- K of a list entry, and the due time for a staged member.
local function entry_key(e)
  if string.byte(e, 1) >= 246 then return string.sub(e, 8), (struct.unpack('>I6', e, 2)) end
  return e, nil
end

-- Whether list entry e (of K, due as entry_key gives them) is live for a list of `want` jobs,
-- raw being K's record in P.."j". A staged record keeps its state bits DELAYED when the pump
-- makes it ready: it is live through the member the pump pushed for it (same due time), never
-- through a plain K (a stale entry of the job's earlier life in the list).
local function entry_live(raw, K, due, want)
  local st = string.byte(raw, 1) % 4
  local live
  if due then
    live = want == READY and st == DELAYED and staged_due(raw, K) == due
  else
    live = st == want
  end
  -- P.."r" holds the ready jobs without a priority, P.."h" those with one (push_ready): an entry
  -- of P.."r" left from a job published again with a priority (REPLACE) is stale.
  if live and want == READY then return level_in_place(raw) == 0 end
  return live
end

-- entry_live for an entry of P.."h": a ready job with a priority.
local function high_live(raw, K, due)
  local st = string.byte(raw, 1) % 4
  local live
  if due then live = st == DELAYED and staged_due(raw, K) == due else live = st == READY end
  return live and level_in_place(raw) > 0
end

-- A ready one-off record leased in place (consume's fast path): state LEASED, tries_left - 1
-- (not below 0), attempt + 1, R (ttr) := ttr_ms, every other byte as it was. Returns the new
-- record, tries_left, attempt and the payload. Not for recurring records (E), which need decode.
local function lease_in_place(s, ttr_ms)
  local flags = string.byte(s, 1)
  local tl, att, tt, keep, pos = 1, 0, 1, 12, 12
  if bit.band(flags, F_T) ~= 0 then
    tl, att, tt = struct.unpack('<I2I2I2', s, 12)
    keep, pos = 18, 12 + t_len(s, 12)  -- a long T block's rest is kept as it is
  end
  if tl > 0 then tl = tl - 1 end
  if att < 65535 then att = att + 1 end  -- a snoozed job (NACK KEEPTRY) can be leased without end
  local r_at = pos  -- R follows B and D (E is absent)
  if bit.band(flags, F_B) ~= 0 then r_at = r_at + b_len(s, r_at) end
  if bit.band(flags, F_D) ~= 0 then r_at = r_at + 6 end
  local after = r_at
  if bit.band(flags, F_R) ~= 0 then after = r_at + 4 end
  local head = bit.bor(bit.band(flags, 252), F_T, F_R) + LEASED
  local payload = string.sub(s, after)
  return string.char(head) .. string.sub(s, 2, 11) .. struct.pack('<I2I2I2', tl, att, tt) ..
         string.sub(s, keep, r_at - 1) .. struct.pack('<I4', ttr_ms) .. payload, tl, att, payload
end

-- consume's fast path for one live, unexpired one-off record `raw` of K: leased in place until
-- `deadline` (fmt(now + ttr_ms)), and consume.lua's six reply fields appended to `out`. The
-- gauges are the caller's.
local function lease_one_in_place(out, K, raw, ttr_ms, deadline, now)
  local _, created, ttl_s = struct.unpack('<BI6I4', raw)
  local leased, tl, att, payload = lease_in_place(raw, ttr_ms)
  redis.call('HSET', KJ, K, leased)
  redis.call('ZADD', KL, deadline, K)
  local ttl_left = -1
  if ttl_s ~= 0 then ttl_left = math.ceil((created + ttl_s * 1000 - now) / 1000) end
  out[#out + 1] = K
  out[#out + 1] = payload
  out[#out + 1] = tl
  out[#out + 1] = ttl_left
  out[#out + 1] = att
  out[#out + 1] = created
end

-- Whether a one-off record's ttl has passed, read from its header alone; nil for a recurring
-- record, whose expiry needs its occurrence (decode it).
local function expired_in_place(s, now)
  local flags, created, ttl = struct.unpack('<BI6I4', s)
  if bit.band(flags, F_E) ~= 0 then return nil end
  return ttl ~= 0 and now > created + ttl * 1000
end

-- Time rules. A one-off job expires ttl seconds after created_ms; an occurrence of a recurring job
-- ttl seconds after its due time (or after created_ms when a RESPAWN reset it later than that).
-- Expired means strictly past: TTL equal to the delay still lets the pump make the job ready.
local function expires_at(r)
  if r.ttl == 0 then return nil end
  local base = r.created
  if recurring(r) and r.occ > base then base = r.occ end
  return base + r.ttl * 1000
end

local function is_expired(r, now)
  local e = expires_at(r)
  return e ~= nil and now > e
end

local function ttl_left(r, now)
  local e = expires_at(r)
  if e == nil then return -1 end
  if e <= now then return 0 end
  return math.ceil((e - now) / 1000)
end

-- BACKOFF s waits s * 2^(attempt-1) seconds, capped at one day or at MAX s. With JITTER ("full
-- jitter") it waits a part of that drawn evenly from [0, 1): from SHA-1 of K, now and the
-- attempt, since a script's math.random repeats itself in every call.
local function backoff_ms(r, K, now)
  if r.backoff == 0 then return 0 end
  local n = r.att
  if n < 1 then n = 1 end
  local cap = 86400
  if (r.bmax or 0) > 0 then cap = r.bmax end
  local wait = math.min(cap, r.backoff * 2 ^ (n - 1)) * 1000
  if r.jitter then
    local h = tonumber(string.sub(redis.sha1hex(K .. fmt(now) .. fmt(r.att)), 1, 8), 16)
    wait = math.floor(wait * h / 4294967296)
  end
  return wait
end

-- Schedules (CRON spec [TZ zone], docs/commands.md). A cron job's E block is the long form: u32 0,
-- u16 n, then n bytes written by deferq (src/schedule/cron.cc EncodeSchedule): u8 flags (1 seconds
-- field, 2 day-of-month "*", 4 day-of-week "*", 8 the zone has daylight saving time), the fields'
-- bit masks (seconds and minutes as two u32 each, hours u32, days u32, months u16, weekdays u8),
-- the zone's rule (i32 standard and daylight offsets in seconds east of UTC, then the change into
-- daylight saving time and the one out of it: u8 kind, month, week, weekday, u16 day, i32 time),
-- and the spec and zone name as given (u8 length each). The search below is cron.cc's, step for
-- step, on the civil calendar (days since 1970-01-01 of local wall-clock dates).
local function idiv(a, b) return math.floor(a / b) end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = idiv(y, 400)
  local yoe = y - era * 400
  local mp = m + 9
  if m > 2 then mp = m - 3 end
  local doe = yoe * 365 + idiv(yoe, 4) - idiv(yoe, 100) + idiv(153 * mp + 2, 5) + d - 1
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = idiv(z, 146097)
  local doe = z - era * 146097
  local yoe = idiv(doe - idiv(doe, 1460) + idiv(doe, 36524) - idiv(doe, 146096), 365)
  local doy = doe - (365 * yoe + idiv(yoe, 4) - idiv(yoe, 100))
  local mp = idiv(5 * doy + 2, 153)
  local m = mp - 9
  if mp < 10 then m = mp + 3 end
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, doy - idiv(153 * mp + 2, 5) + 1
end

local function is_leap(y) return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) end
local MONTH_DAYS = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
local function month_days(y, m)
  if m == 2 and is_leap(y) then return 29 end
  return MONTH_DAYS[m]
end

local function has_bit(mask, v) return bit.band(mask, bit.lshift(1, v)) ~= 0 end

local function decode_schedule(b)
  local s = {}
  local flags, pos
  flags, s.slo, s.shi, s.mlo, s.mhi, s.hours, s.days, s.months, s.wdays, s.std, s.dst, pos =
      struct.unpack('<BI4I4I4I4I4I4I2Bi4i4', b)
  s.with_seconds, s.days_any = bit.band(flags, 1) ~= 0, bit.band(flags, 2) ~= 0
  s.wdays_any, s.has_dst = bit.band(flags, 4) ~= 0, bit.band(flags, 8) ~= 0
  s.start, s.stop = {}, {}
  for _, c in ipairs({s.start, s.stop}) do
    c.kind, c.month, c.week, c.wday, c.day, c.time, pos = struct.unpack('<BBBBI2i4', b, pos)
  end
  local n = string.byte(b, pos)
  s.text = string.sub(b, pos + 1, pos + n)
  pos = pos + 1 + n
  s.zone = string.sub(b, pos + 1, pos + string.byte(b, pos))
  return s
end

-- The UTC second of a zone change in `year`, the offset before it being `before`.
local function change_at(c, year, before)
  local day
  if c.kind == 0 then
    local first = days_from_civil(year, c.month, 1)
    local d = 1 + (c.wday - (first + 4) % 7 + 7) % 7 + (c.week - 1) * 7
    while d > month_days(year, c.month) do d = d - 7 end
    day = first + d - 1
  elseif c.kind == 1 then
    day = days_from_civil(year, 1, 1) + c.day - 1
    if is_leap(year) and c.day >= 60 then day = day + 1 end
  else
    day = days_from_civil(year, 1, 1) + c.day
  end
  return day * 86400 + c.time - before
end

local function offset_at(s, t)
  if not s.has_dst then return s.std end
  local year = civil_from_days(idiv(t + s.std, 86400))
  local a, b = change_at(s.start, year, s.std), change_at(s.stop, year, s.dst)
  local dst
  if a < b then dst = t >= a and t < b else dst = not (t >= b and t < a) end
  if dst then return s.dst end
  return s.std
end

local function day_matches(s, days)
  local _, _, d = civil_from_days(days)
  local dom, dow = has_bit(s.days, d), has_bit(s.wdays, (days + 4) % 7)
  if not s.days_any and not s.wdays_any then return dom or dow end
  return dom and dow
end

-- The first civil second after c that the fields match (nil: none within the bound).
local function next_civil(s, c)
  local t
  if s.with_seconds then t = c + 1 else t = (idiv(c, 60) + 1) * 60 end
  for _ = 1, 20000 do
    local days = idiv(t, 86400)
    local sod = t - days * 86400
    local y, m = civil_from_days(days)
    local h, mi, sec = idiv(sod, 3600), idiv(sod, 60) % 60, sod % 60
    if not has_bit(s.months, m) then
      if m == 12 then y, m = y + 1, 1 else m = m + 1 end
      t = days_from_civil(y, m, 1) * 86400
    elseif not day_matches(s, days) then
      t = (days + 1) * 86400
    elseif not has_bit(s.hours, h) then
      t = days * 86400 + (h + 1) * 3600
    elseif not (mi < 32 and has_bit(s.mlo, mi) or mi >= 32 and has_bit(s.mhi, mi - 32)) then
      t = days * 86400 + h * 3600 + (mi + 1) * 60
    elseif not (sec < 32 and has_bit(s.slo, sec) or sec >= 32 and has_bit(s.shi, sec - 32)) then
      t = t + 1
    else
      return t
    end
  end
  return nil
end

-- The first change of the zone's offset after UTC second u.
local function next_change(s, u)
  local year = civil_from_days(idiv(u + s.std, 86400))
  local best
  for y = year - 1, year + 1 do
    for _, at in ipairs({change_at(s.start, y, s.std), change_at(s.stop, y, s.dst)}) do
      if at > u and (not best or at < best) then best = at end
    end
  end
  return best
end

-- Hour "*": the wall clock of whichever offset is in force (cron.cc NextByEitherOffset).
local function next_by_either_offset(s, t)
  local best
  for _, off in ipairs({s.std, s.dst}) do
    local u = t
    for _ = 1, 8 do
      local c = next_civil(s, u + off)
      if not c then break end
      if offset_at(s, c - off) == off then
        if not best or c - off < best then best = c - off end
        break
      end
      u = next_change(s, c - off) - 1
    end
  end
  return best
end

-- The first occurrence after after_ms (ms), nil when none. A wall-clock time that does not exist
-- fires at the first instant after the change; one that happens twice fires at its first instance
-- only; with the hour field "*", the wall clock of whichever offset is in force (cron.h).
local function cron_next(s, after_ms)
  local t = idiv(after_ms, 1000)
  if s.hours == 16777215 and s.has_dst then
    local u = next_by_either_offset(s, t)
    return u and u * 1000
  end
  local c = t + offset_at(s, t)
  for _ = 1, 4000 do
    c = next_civil(s, c)
    if not c then return nil end
    local a, b = c - s.std, c - s.dst
    local a_ok = offset_at(s, a) == s.std
    local b_ok = s.has_dst and offset_at(s, b) == s.dst
    local first
    if a_ok and b_ok then
      first = math.min(a, b)  -- the repeated hour: its first pass
    elseif a_ok or b_ok then
      if a_ok then first = a else first = b end
    else
      local lo, hi = math.min(a, b), math.max(a, b)
      local lo_off = offset_at(s, lo)
      while hi - lo > 1 do
        local mid = lo + idiv(hi - lo, 2)
        if offset_at(s, mid) == lo_off then lo = mid else hi = mid end
      end
      first = hi
    end
    if first > t then return first * 1000 end
  end
  return nil
end

-- The first occurrence after now: the cron schedule's, or on the EVERY grid (occurrence +
-- k * every, k >= 1). A schedule without one left (a century's bound) ends: the job is
-- put a century ahead, where CANCEL finds it.
local function next_occurrence(r, now)
  if r.sched then return cron_next(decode_schedule(r.sched), now) or now + 3155760000000 end
  local period = r.every * 1000
  local k = math.floor((now - r.occ) / period) + 1
  if k < 1 then k = 1 end
  return r.occ + k * period
end

-- Failures (docs/commands.md NACK REASON). The end of a failed attempt -- a NACK, with its REASON
-- or without, or a lease that expired -- records in P.."e" K -> u16 attempt, u48 at_ms, reason.
-- Only a job that failed an attempt has an entry, so only a job past its first attempt, or out of
-- the leased state after it, can have one (may_have_error): the usual ACK of a first attempt
-- looks at nothing. A job leaving the queue takes its entry along (drop_error); respawning or a
-- recurring job's next occurrence starts it afresh. When the queue's retention ends its key goes
-- with the counters (pump.lua (3)), so nothing outlives the queue.
local MAX_REASON = 512

local function record_error(K, att, now, reason)
  redis.call('HSET', KE, K, struct.pack('<I2I6', att, now) .. string.sub(reason, 1, MAX_REASON))
end

local function may_have_error(att, state)
  return att >= 2 or (att >= 1 and state ~= LEASED)
end

local function drop_error(K, att, state)
  if may_have_error(att, state) then redis.call('HDEL', KE, K) end
end

-- The attempt of an encoded record, without decoding it.
local function att_in_place(s)
  if bit.band(string.byte(s, 1), F_T) == 0 then return 0 end
  return (struct.unpack('<I2', s, 14))
end

-- Lease fencing (ACK/NACK/TOUCH ... ATTEMPT n): nil when the call goes on -- no fence given
-- (`want` nil or ""), or record `raw` is leased at attempt `want`; -1 (stale: nothing changes)
-- when raw is there in another state or attempt. A missing record is the caller's (0).
local function fenced(raw, want)
  if want == nil or want == '' or not raw then return nil end
  if string.byte(raw, 1) % 4 == LEASED and att_in_place(raw) == tonumber(want) then return nil end
  return -1
end

-- The failure recorded for K: reason (false when none), attempt, at_ms (0, 0 when none).
local function last_error(K, att, state)
  if not may_have_error(att, state) then return false, 0, 0 end
  local e = redis.call('HGET', KE, K)
  if not e then return false, 0, 0 end
  local a, at, pos = struct.unpack('<I2I6', e)
  return string.sub(e, pos), a, at
end

-- Results (docs/commands.md CALL, RESULT, RETAIN). A one-off job published with RETAIN s keeps,
-- once it finishes, its outcome in a key of its own, P.."f:"..K, for s seconds (Redis expires it;
-- nothing else tracks it): u8 outcome ("f" finished by ACK, "x" expired, "c" cancelled), u48
-- when, u16 its last attempt, u48 created_ms, then the text (ACK ... RESULT). A job someone waits
-- for (L_NOTIFY: CALL, WAITJOB) is announced when it finishes, on the pool's channel: "done
-- ns/queue " .. u16 #K (big-endian) .. K .. outcome .. u16 attempt .. u48 when .. text; "d" when
-- it died (text: its reason; it keeps no result key, it is in the dead letter).
local function result_key(K) return P .. 'f:' .. K end
local OUTCOME_NAME = {f = 'finished', x = 'expired', c = 'cancelled', d = 'dead'}

local function retire(K, r, now, outcome, text)
  text = text or ''
  if (r.retain or 0) > 0 and outcome ~= 'd' then
    redis.call('SET', result_key(K), outcome .. struct.pack('<I6I2I6', now, r.att, r.created) .. text,
               'PX', r.retain * 1000)
  end
  if r.notify then
    redis.call('PUBLISH', 'dq:ready', 'done ' .. string.sub(P, 5, -3) .. ' ' ..
               struct.pack('>I2', #K) .. K .. outcome .. struct.pack('<I2I6', r.att, now) .. text)
  end
end

-- A one-off job's record `raw` left its place without being decoded (an expired job dropped in
-- place): retired when it carries result flags.
local function retire_raw(K, raw, now, outcome)
  if has_result_flags(raw) then retire(K, decode(raw), now, outcome) end
end

-- Counters. ready/delayed/dead are exact gauges changed by every transition; when the ready (dead)
-- gauge reaches zero no live entry can remain in KR (KX), so the list and its stale entries go,
-- and the queue may have become empty. A gauge that leaves zero puts the queue in the registry.
-- The delayed gauge is two fields: `delayed` (every other change) plus `pd`, the delayed
-- publishes, which also count in published_total: a delayed publish increments `pd` alone (one
-- HINCRBY). qstat adds them up.
local GAUGE = {ready = true, delayed = true, dead = true}
-- Batched calls (batch.lua): the counters that only go up (*_total, pd) are added up over the
-- batch and written once, when it ends or before anything reads pd; the delayed gauge is written
-- at once (it is read with pd). batch_buckets: seconds whose bucket this batch knows to
-- be in P.."b" (bucket_add), so a batch of publishes into one second looks the bucket up once.
-- batch_gauges: the ready and dead gauges as the batch has changed them ({v = value, d = change
-- not written yet}), read once and written when the batch ends or before anything reads P.."s"
-- (their values still steer every call, exactly as written at once would).
local batch_totals, batch_total_names, batch_buckets, batch_gauges
local BATCHED_GAUGES = {'ready', 'dead'}

flush_totals = function()
  if not batch_totals then return end
  for _, name in ipairs(BATCHED_GAUGES) do
    local g = batch_gauges[name]
    if g and g.d ~= 0 then
      redis.call('HINCRBY', KS, name, g.d)
      g.d = 0
    end
  end
  if #batch_total_names == 0 then return end
  for _, name in ipairs(batch_total_names) do
    redis.call('HINCRBY', KS, name, batch_totals[name])
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

local function batch_begin()
  batch_totals, batch_total_names, batch_buckets, batch_gauges = {}, {}, {}, {}
  batch_forget = false
end
local function batch_end()
  flush_totals()
  local forget = batch_forget
  batch_forget = nil
  if forget then forget_if_empty() end
  batch_totals, batch_total_names, batch_buckets, batch_due, batch_paused = nil, nil, nil, nil, nil
  batch_gauges = nil
end

-- A batch's entry for the ready or dead gauge (see batch_gauges), read from P.."s" the first time.
local function batch_gauge(name)
  local g = batch_gauges[name]
  if not g then
    g = {v = tonumber(redis.call('HGET', KS, name) or '0'), d = 0}
    batch_gauges[name] = g
  end
  return g
end

-- A gauge's value, as this batch has changed it when in a batch.
local function gauge(name)
  if batch_gauges then return batch_gauge(name).v end
  return tonumber(redis.call('HGET', KS, name) or '0')
end

-- Whether the queue is paused (QPAUSE): read once per call, or once per batch.
paused = function()
  if batch_paused ~= nil then return batch_paused end
  local p = redis.call('EXISTS', P .. 'p') == 1
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
    v = redis.call('HINCRBY', KS, name, n)
    if name == 'delayed' then v = v + tonumber(redis.call('HGET', KS, 'pd') or '0') end
  end
  if v == 0 then
    if name == 'ready' then
      redis.call('DEL', KR, KH)
      announce_empty()
    elseif name == 'dead' then
      redis.call('DEL', KX)
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

-- Drops up to 4 stale entries at the head of a lazy list (KR wants READY, KX wants DEAD), so the
-- usual remove-in-FIFO-order patterns leave no garbage behind.
local function trim_head(list, want)
  for _ = 1, 4 do
    local e = redis.call('LINDEX', list, 0)
    if not e then return end
    local K, due = entry_key(e)
    local raw = redis.call('HGET', KJ, K)
    if raw and entry_live(raw, K, due, want) then return end
    redis.call('LPOP', list)
  end
end

-- Calls one command with a long argument list in chunks of 1000 (unpack() has a limit; pairs stay
-- whole: 1000 is even).
local function batched(cmd, key, args)
  for i = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

-- Keeps a lazy list (KR wants READY, KX wants DEAD) at most twice its live entries plus 64 long:
-- past that it is rebuilt from its live entries, in order, each once. A removal that leaves a
-- stale entry checks the bound (one LLEN), so a queue that never runs empty and removes jobs
-- newest-first does not pile entries up; a rebuild of L entries follows at least L/2 removals,
-- so its cost per removal is O(1).
local function compact(list, want, live)
  local len = redis.call('LLEN', list)
  if len <= 2 * live + 64 then return end
  local all = redis.call('LRANGE', list, 0, -1)
  local keep, seen = {}, {}
  for i = 1, #all, 1000 do
    local chunk, dues = {}, {}
    for m = i, math.min(i + 999, #all) do chunk[#chunk + 1], dues[#chunk + 1] = entry_key(all[m]) end
    local raws = redis.call('HMGET', KJ, unpack(chunk))
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

-- Ready entries (a K, or a staged member). A job without a priority joins P.."r" (RPUSH); one
-- with a priority (PRIORITY 1..9) joins P.."h", scored (10 - level) * 2^40 + a sequence number
-- of the queue (P.."s" hseq), so that ZPOPMIN takes the highest level first and, within a level,
-- the oldest entry. levels[i] is entries[i]'s level (1..9).
local LEVEL_SPAN = 1099511627776  -- 2^40
local function push_high(entries, levels)
  local seq = redis.call('HINCRBY', KS, 'hseq', #entries) - #entries
  local args = {}
  for i, e in ipairs(entries) do
    args[#args + 1] = (10 - levels[i]) * LEVEL_SPAN + seq + i
    args[#args + 1] = e
  end
  batched('ZADD', KH, args)
end

local function push_ready(e, level)
  if level > 0 then return push_high({e}, {level}) end
  redis.call('RPUSH', KR, e)
end

-- Ready entries in order, entries[i] of level levels[i]: to P.."r" or P.."h" (one RPUSH, one
-- ZADD). pump.lua's jobs made ready (plain K).
local function push_levels(entries, levels)
  local plain, high, hl = {}, {}, {}
  for i, e in ipairs(entries) do
    if levels[i] > 0 then
      high[#high + 1], hl[#hl + 1] = e, levels[i]
    else
      plain[#plain + 1] = e
    end
  end
  if #plain > 0 then batched('RPUSH', KR, plain) end
  if #high > 0 then push_high(high, hl) end
end

-- A ready entry back at the head of its level (nack.lua "undo": where it was).
local function push_ready_head(e, level)
  if level > 0 then return redis.call('ZADD', KH, (10 - level) * LEVEL_SPAN, e) end
  redis.call('LPUSH', KR, e)
end

-- Staged members (all of them ready now) to their lists: the level is in each member's mark.
local function push_members(items)
  local levels = {}
  for i, e in ipairs(items) do levels[i] = 255 - string.byte(e, 1) end
  push_levels(items, levels)
end

-- Buckets. A generated K is 16 bytes: big-endian u48 first due ms .. 10 random bytes. While the
-- job waits for exactly that due time its field is OFFSET|bit15 .. the 10 random bytes and it has
-- no index entry; otherwise the field is OFFSET .. K and the index holds K -> due ms.
-- The index is split into INDEX_PARTS hashes P.."i:"..XXX (XXX: the first three hex digits of
-- SHA-1(K)), so up to ~400,000 indexed jobs per queue each part stays a small listpack-encoded
-- hash (hash-max-listpack-entries 128) and an entry costs ~30 bytes instead of ~100 in one big
-- hash table (docs/storage.md, Memory). The due ms is stored as a decimal integer, which a
-- listpack keeps as a 64-bit integer.
local function is_generated(K) return #K == 16 and string.byte(K, 1) ~= 35 end

local INDEX_PARTS = 4096  -- 16^3: index_key takes three hex digits
local function index_key(K) return KI .. string.sub(redis.sha1hex(K), 1, 3) end

local function is_derivable(K, due)
  return is_generated(K) and struct.unpack('>I6', K) == due
end

local function field_of(K, due, derivable)
  if derivable then return struct.pack('>I2', due % 1000 + DERIVABLE_BIT) .. string.sub(K, 7) end
  return struct.pack('>I2', due % 1000) .. K
end

-- From a bucket field and its due ms back to K (and whether the field is the derivable form).
local function key_of_field(f, due)
  if struct.unpack('>I2', f) >= DERIVABLE_BIT then
    return struct.pack('>I6', due) .. string.sub(f, 3), true
  end
  return string.sub(f, 3), false
end

local function offset_of_field(f) return struct.unpack('>I2', f) % DERIVABLE_BIT end

-- The pump stages every bucket up to stage_sec (see pump.lua): it moves the bucket's records into
-- P.."j" (state bits still DELAYED) and indexes them in P.."w" by due ms. A job added to such a
-- second is staged at once.
local function stage_sec()
  if stage_sec_cached == nil then
    stage_sec_cached = tonumber(redis.call('HGET', KS, 'stage_sec') or '-1')
  end
  return stage_sec_cached
end

-- A bucket of at most SPARSE jobs is staged when its first job falls due, by the pump call that
-- moves that job (the due index points at that ms): one pump call per due job, where staging it
-- ahead would cost one more (1,000 queues with a job or two due per second each). A fuller
-- bucket is staged in the pump's look-ahead, before its second begins, so that no job of a busy
-- second waits for the staging of the others.
local SPARSE = 16

-- The due ms of the first job of the (not yet staged) bucket of second `sec`.
-- HLEN of the bucket of second `sec`, read once per call (bucket_add forgets what it changes).
local function bucket_len(sec)
  local n = bucket_lens[sec]
  if n == nil then
    n = redis.call('HLEN', bucket_key(sec))
    bucket_lens[sec] = n
  end
  return n
end

local function bucket_first_due(sec)
  local first
  for _, f in ipairs(redis.call('HKEYS', bucket_key(sec))) do
    local o = offset_of_field(f)
    if not first or o < first then first = o end
  end
  return sec * 1000 + (first or 0)
end

-- When the pump must look at the bucket of second `sec` (not yet staged): its first job's due
-- ms while it is sparse, else its place in the look-ahead (ahead_ms less the queue's spread
-- before its second).
local function bucket_due(sec)
  if bucket_len(sec) <= SPARSE then return bucket_first_due(sec) end
  return sec * 1000 - ahead_ms + stage_spread()
end

-- Stores a delayed record. nx: only if its place is free (a retried publish of a generated K);
-- returns false, writing nothing, when it is not. P.."b" lists the buckets not yet staged, so a
-- job for a second that has one (the usual case) costs one ZSCORE and the write.
local function bucket_add(K, due, raw, derivable, nx)
  local sec = sec_of(due)
  local new_bucket = not (batch_buckets and batch_buckets[sec]) and
                     not redis.call('ZSCORE', KB, fmt(sec))
  if new_bucket and sec <= stage_sec() then
    -- Staged already: the record waits in P.."j" (a non-derivable one with D = its due time),
    -- indexed for the pump at its due ms, which the due index must not miss.
    if not derivable then raw = with_at(raw, due, DELAYED) end
    if nx then
      if redis.call('HSETNX', KJ, K, raw) == 0 then return false end
    else
      redis.call('HSET', KJ, K, raw)
    end
    redis.call('ZADD', KW, due, staged_member(K, due, level_in_place(raw)))
    due_at(due)
    if REGISTRY then redis.call('SADD', REGISTRY, queue_tag()) end
    return true
  end
  local f = field_of(K, due, derivable)
  if nx then
    if redis.call('HSETNX', bucket_key(sec), f, raw) == 0 then return false end
  else
    redis.call('HSET', bucket_key(sec), f, raw)
  end
  bucket_lens[sec] = nil
  if new_bucket then
    -- The pump must stage it when its first job falls due (a sparse bucket: SPARSE), and the
    -- queue holds a job.
    redis.call('ZADD', KB, sec, fmt(sec))
    if not created_bucket or sec < created_bucket then created_bucket = sec end
    due_at(due)
    if REGISTRY then redis.call('SADD', REGISTRY, queue_tag()) end
  else
    -- While the bucket is sparse each job's due ms may be its first; once it is not, the
    -- look-ahead stages it (the due index is a lower bound: lowered once, when it fills up).
    local n = bucket_len(sec)
    if n <= SPARSE then
      due_at(due)
    elseif n == SPARSE + 1 then
      due_at(sec * 1000 - ahead_ms + stage_spread())
    end
  end
  if not derivable then redis.call('HSET', index_key(K), K, fmt(due)) end
  if batch_buckets then batch_buckets[sec] = true end
  return true
end

local function bucket_del(K, sec, f, derivable)
  local bk = bucket_key(sec)
  redis.call('HDEL', bk, f)
  if not derivable then redis.call('HDEL', index_key(K), K) end
  if redis.call('HLEN', bk) == 0 then
    redis.call('ZREM', KB, fmt(sec))
    if batch_buckets then batch_buckets[sec] = nil end
  end
end

-- Where is K? Returns nil or a location {K, r (decoded record), state, and for delayed jobs due
-- and either staged (its P.."w" member; the record is in P.."j") or sec, f (bucket field),
-- derivable}.
-- try_derivable: look in K's own first bucket as a last resort
-- (the caller knows K is a generated id). raw_j: K's value in P.."j" when the caller has read it
-- already (false: none), so it is not read twice.
local function find(K, try_derivable, raw_j)
  local raw = raw_j
  if raw == nil then raw = redis.call('HGET', KJ, K) end
  if raw then
    local r = decode(raw)
    if r.state == DELAYED then  -- staged: delayed while in P.."w", else made ready by the pump
      local due = staged_due(raw, K)
      local member = staged_member(K, due, r.level)
      if redis.call('ZSCORE', KW, member) then
        return {K = K, r = r, state = DELAYED, staged = member, due = due}
      end
      r.state, r.at = READY, r.at or due
      return {K = K, r = r, state = READY, entry = member}  -- its ready entry is the member
    end
    return {K = K, r = r, state = r.state}
  end
  local sec, due, f, derivable
  local pos = redis.call('HGET', index_key(K), K)
  if pos then
    due = tonumber(pos)
    sec = sec_of(due)
    derivable = false
  elseif try_derivable and is_generated(K) then
    due = struct.unpack('>I6', K)
    sec = sec_of(due)
    derivable = true
  else
    return nil
  end
  f = field_of(K, due, derivable)
  raw = redis.call('HGET', bucket_key(sec), f)
  if not raw then return nil end
  local r = decode(raw)
  r.state = DELAYED
  return {K = K, r = r, state = DELAYED, sec = sec, f = f, derivable = derivable, due = due}
end

-- Takes a found job out of its place (record, list/zset membership, gauge). Lists are lazy.
local function remove(loc)
  local s, K = loc.state, loc.K
  drop_error(K, loc.att or (loc.r and loc.r.att) or 0, s)
  if s == DELAYED then
    if loc.staged then
      redis.call('HDEL', KJ, K)
      redis.call('ZREM', KW, loc.staged)
    else
      bucket_del(K, loc.sec, loc.f, loc.derivable)
    end
    count('delayed', -1)
    return
  end
  redis.call('HDEL', KJ, K)
  if s == READY then
    local level = loc.r and loc.r.level or 0
    if level > 0 then redis.call('ZREM', KH, loc.entry or K) end
    local live = count('ready', -1)
    if live > 0 and level == 0 then
      trim_head(KR, READY)
      compact(KR, READY, live)
    end
  elseif s == LEASED then
    redis.call('ZREM', KL, K)
    forget_if_empty()
  else
    local live = count('dead', -1)
    if live > 0 then
      trim_head(KX, DEAD)
      compact(KX, DEAD, live)
    end
  end
end

-- Whether some deferq instance has consumers blocked on this queue (it keeps P.."wt" alive):
-- then the pump moves due staged jobs at their due ms (pump.lua lazy_ms), and reads leave it
-- to the pump, so each such move is timed (its lateness observed) as before lazy moving.
local function waited_on()
  if waited_cached == nil then waited_cached = redis.call('EXISTS', P .. 'wt') == 1 end
  return waited_cached
end

-- Cross-instance wake-ups: while the marker exists, a call that makes jobs ready announces the
-- queue's tag ("ns/queue") once on channel dq:ready. Without it this costs one EXISTS per call.
local function announce_ready()
  if announced then return end
  announced = true
  if waited_on() then
    redis.call('PUBLISH', 'dq:ready', string.sub(P, 5, -3))
  end
end

-- The ready list of a queue consumers wait on went empty: "empty ns/queue" on the same channel
-- tells every instance it has nothing to offer there, until the next ready news (which follows
-- it on the channel: jobs made ready later, in this call too, are announced again).
announce_empty = function()
  announced = false
  if hush_empty then return end
  if waited_on() then
    redis.call('PUBLISH', 'dq:ready', 'empty ' .. string.sub(P, 5, -3))
  end
end

-- The ready list of this queue just went from empty to holding `raw`'s job: the pump must look
-- at its head when that job's ttl passes (pump.lua removes expired jobs from the head; with one
-- TTL per queue the head expires first). Later jobs behind a live head need no entry.
local function ready_expiry_due(raw)
  if not DUE then return end
  local flags, created, ttl = struct.unpack('<BI6I4', raw)
  if ttl == 0 then return end
  local e = created + ttl * 1000
  if bit.band(flags, F_E) ~= 0 then e = expires_at(decode(raw)) end
  due_at(e + 1)
end

-- Due staged jobs become ready: their P.."w" members, earliest due first (at most `limit`), move
-- to the ready list as they are (ZRANGEBYSCORE + ZREMRANGEBYRANK of P.."w", one RPUSH); records
-- untouched (staged_member, entry_live). pump.lua's step (1), and the first step of consume, peek
-- and job, so a staged job is ready at its due ms whether or not the pump has moved it yet
-- (docs/storage.md "Lazy moving"). Returns the moved members.
local function move_due(now, limit, extra, hold)
  local items = {}
  if limit > 0 then items = redis.call('ZRANGEBYSCORE', KW, '-inf', now, 'LIMIT', 0, limit) end
  local n = #items
  if n > 0 then redis.call('ZREMRANGEBYRANK', KW, 0, n - 1) end
  -- `extra`: due members that never were in P.."w" (pump.lua's direct ones), merged in due order.
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
  redis.call('HINCRBY', KS, 'delayed', -n)
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
    if not in_pump then ready_expiry_due(redis.call('HGET', KJ, (entry_key(rest[1])))) end
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
  local raws = redis.call('HMGET', KJ, unpack(ks))
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
       redis.call('EXISTS', P .. 'p', KH) ~= 0 then
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
  local w = redis.call('ZRANGE', KW, 0, 0, 'WITHSCORES')
  if #w > 0 and tonumber(w[2]) <= now and not waited_on() then
    return #move_due(now, 1000) > 0
  end
  return false
end

-- Puts a job that is in no place into one (record r is updated and stored).
local function put_ready(K, r, now)
  r.state, r.at, r.ttr = READY, now, nil
  local raw = encode(r)
  redis.call('HSET', KJ, K, raw)
  push_ready(K, r.level)
  if count('ready', 1) == 1 then ready_expiry_due(raw) end
  announce_ready()
end

local function put_dead(K, r, now)
  r.state, r.at, r.ttr = DEAD, now, nil
  redis.call('HSET', KJ, K, encode(r))
  redis.call('RPUSH', KX, K)
  count('dead', 1)
  count('dead_total', 1)
end

-- A delayed record keeps no at_ms: its due time is its bucket position.
local function put_delayed(K, r, due)
  r.state, r.at, r.ttr = DELAYED, nil, nil
  bucket_add(K, due, encode(r), is_derivable(K, due))
  count('delayed', 1)
end

-- A recurring job (in no place) starts its next occurrence with full tries.
local function reschedule(K, r, now)
  drop_error(K, r.att, r.state)
  r.occ = next_occurrence(r, now)
  r.tl, r.att = r.tt, 0
  put_delayed(K, r, r.occ)
end

-- An expired job (in no place) is met: a one-off job is gone, a recurring one moves on.
local function expire(K, r, now)
  count('expired_total', 1)
  if recurring(r) then
    reschedule(K, r, now)
  else
    drop_error(K, r.att, r.state)
    retire(K, r, now, 'x')
  end
end

-- A leased job whose attempt failed and that has no try left (its lease already gone from P.."l";
-- K's record still in P.."j"). A one-off job goes to the dead letter. An occurrence of a
-- recurring job goes there as a job of its own -- a new K, the occurrence's payload, ttl and
-- tries, no EVERY -- and the schedule goes on at its next occurrence after now with full tries
-- (docs/commands.md EVERY). The new K is a generated id's: its time is now, its shard byte (K[6],
-- queue/model/shards.h) this queue's shard number, so the commands that name it reach this queue, and
-- its other 9 bytes come from SHA-1 of K and the occurrence.
local function fail_for_good(K, r, now, reason)
  if not recurring(r) then
    record_error(K, r.att, now, reason)
    put_dead(K, r, now)
    retire(K, r, now, 'd', reason)
    return
  end
  local shard = tonumber(string.match(queue_tag(), '#(%d+)$') or '0')
  local D
  for salt = 0, 9 do
    local h = redis.sha1hex(K .. struct.pack('<I6I1', r.occ, salt))
    local rest = string.gsub(string.sub(h, 1, 18), '%x%x',
                             function(x) return string.char(tonumber(x, 16)) end)
    D = struct.pack('>I6', now) .. string.char(shard % 256) .. rest
    if redis.call('HEXISTS', KJ, D) == 0 then break end
  end
  local created = r.created
  if r.occ > created then created = r.occ end  -- its ttl counted from the occurrence (expires_at)
  local copy = {state = DEAD, created = created, ttl = r.ttl, tl = 0, att = r.att, tt = r.tt,
                every = 0, backoff = r.backoff, bmax = r.bmax, jitter = r.jitter, level = r.level,
                payload = r.payload}
  record_error(D, r.att, now, reason)
  put_dead(D, copy, now)
  redis.call('HDEL', KJ, K)
  reschedule(K, r, now)
end

-- pump.lua (2): leases whose deadline passed (`expired`, their K, already out of P.."l"), oldest
-- first: a job past its ttl is removed (recurring: next occurrence); one with tries left is ready
-- again (`make_ready`, pump.lua's: its writes are batched there) or delayed by its BACKOFF; one
-- without dies (fail_for_good). The reason recorded is "lease expired".
local function end_leases(expired, now, make_ready)
  local raws = redis.call('HMGET', KJ, unpack(expired))
  for m, K in ipairs(expired) do
    local raw = raws[m]
    if raw and string.byte(raw, 1) % 4 == LEASED then
      local r = decode(raw)
      if is_expired(r, now) then
        redis.call('HDEL', KJ, K)
        expire(K, r, now)
        forget_if_empty()  -- the last job gone: the queue leaves the registry (as nack.lua)
      elseif r.tl > 0 then
        record_error(K, r.att, now, 'lease expired')
        local wait = backoff_ms(r, K, now)
        if wait > 0 then
          redis.call('HDEL', KJ, K)
          put_delayed(K, r, now + wait)
        else
          make_ready(K, r)
        end
      else
        fail_for_good(K, r, now, 'lease expired')
      end
    end
  end
end

-- The per-job reply shape shared by consume, peek and deadletter peek.
local function push_job(out, K, r, now)
  out[#out + 1] = K
  out[#out + 1] = r.payload
  out[#out + 1] = r.tl
  out[#out + 1] = ttl_left(r, now)
  out[#out + 1] = r.att
  out[#out + 1] = r.created
end

-- pump.lua (2b): ready jobs whose ttl has passed, from the head of P.."r", then of P.."h" in a
-- queue that ever had one (has_high), with up to `budget` steps (stale entries met on the way
-- are dropped too). Returns when the first live head expires (nil: none), for next_due, and the
-- budget left.
local function expire_ready_heads(now, budget, has_high)
  local head_expiry
  while budget > 0 do
    local e = redis.call('LINDEX', KR, 0)
    if not e then break end
    local K, due = entry_key(e)
    local raw = redis.call('HGET', KJ, K)
    if raw and entry_live(raw, K, due, READY) then
      local r = decode(raw)
      if not is_expired(r, now) then
        head_expiry = expires_at(r)
        break
      end
      redis.call('LPOP', KR)
      redis.call('HDEL', KJ, K)
      count('ready', -1)
      expire(K, r, now)
    else
      redis.call('LPOP', KR)
    end
    budget = budget - 1
  end
  while has_high and budget > 0 do
    local z = redis.call('ZRANGE', KH, 0, 0)
    if #z == 0 then break end
    local K, due = entry_key(z[1])
    local raw = redis.call('HGET', KJ, K)
    if raw and high_live(raw, K, due) then
      local r = decode(raw)
      if not is_expired(r, now) then
        local x = expires_at(r)
        if x and (not head_expiry or x < head_expiry) then head_expiry = x end
        break
      end
      redis.call('ZREM', KH, z[1])
      redis.call('HDEL', KJ, K)
      count('ready', -1)
      expire(K, r, now)
    else
      redis.call('ZREM', KH, z[1])
    end
    budget = budget - 1
  end
  return head_expiry, budget
end

-- Read-only walk of a lazy list (KR or KX) from its head: up to n live jobs in `state`, in list
-- order, each once (a job that left and came back is met at its first entry), skipping stale
-- entries and, when skip_expired, jobs whose ttl has passed. Looks at most n + the list's stale
-- entries (LLEN - gauge, bounded by compact) + 1000, so it is never short while jobs are live.
-- Returns the per-job reply shape of push_job; with_errors: each job followed by last_error's
-- three values.
local function peek_list(list, state, n, now, skip_expired, with_errors)
  local out, seen = {}, {}
  local got, scanned, start = 0, 0, 0
  -- The ready jobs with a priority come first, in the order CONSUME takes them.
  if list == KR then
    for _, e in ipairs(redis.call('ZRANGE', KH, 0, n - 1)) do
      local K, due = entry_key(e)
      local raw = redis.call('HGET', KJ, K)
      if raw and high_live(raw, K, due) then
        local r = decode(raw)
        if not (skip_expired and is_expired(r, now)) then
          seen[K] = true
          push_job(out, K, r, now)
          got = got + 1
        end
      end
    end
  end
  local live = tonumber(redis.call('HGET', KS, STATE_NAME[state]) or '0')
  local bound = n + 1000 + math.max(0, redis.call('LLEN', list) - live)
  while got < n and scanned < bound do
    -- Chunks of up to 100, no larger than needed when there are few stale entries.
    local chunk = redis.call('LRANGE', list, start, start + math.min(99, n - got + 3))
    if #chunk == 0 then break end
    start = start + #chunk
    for _, e in ipairs(chunk) do
      scanned = scanned + 1
      local K, due = entry_key(e)
      if not seen[K] then
        seen[K] = true
        local raw = redis.call('HGET', KJ, K)
        if raw and entry_live(raw, K, due, state) then
          local r = decode(raw)
          if not (skip_expired and is_expired(r, now)) then
            push_job(out, K, r, now)
            if with_errors then
              local m = #out
              out[m + 1], out[m + 2], out[m + 3] = last_error(K, r.att, r.state)
            end
            got = got + 1
          end
        end
      end
      if got >= n or scanned >= bound then break end
    end
  end
  return out
end

-- The queue's gauges and counters in qstat.lua's reply order (qstat and qstats share them).
-- pd: delayed publishes, which count in both the delayed gauge and published_total.
-- now (ms, optional): the staged jobs due by then count as ready, moved or not, as bring_due
-- would move them (unless consumers wait).
local function queue_figures(now)
  local v = redis.call('HMGET', KS, 'ready', 'delayed', 'dead', 'published_total',
                       'consumed_total', 'acked_total', 'expired_total', 'dead_total',
                       'nacked_total', 'respawned_total', 'cancelled_total', 'pd',
                       'undelivered_total', 'sched')
  local function n(i) return tonumber(v[i] or '0') end
  -- sched counts recurring jobs since they were counted (a build before CRON did not: never
  -- below 0 when those are cancelled).
  local sched = math.max(0, n(14))
  local due = 0
  if now and not waited_on() then due = redis.call('ZCOUNT', KW, '-inf', now) end
  return {n(1) + due, n(2) + n(12) - due, redis.call('ZCARD', KL), n(3), n(4) + n(12), n(5), n(6),
          n(7), n(8), n(9), n(10), n(11), redis.call('EXISTS', P .. 'p'), n(13), sched}
end

-- ACK (ack.lua, acks.lua). Whether derivable_sec `hint` is "" or matches generated K.
local function ack_hint_ok(K, hint)
  return hint == '' or (is_generated(K) and tonumber(hint) == sec_of(struct.unpack('>I6', K)))
end

-- Finishes job K in any state; 1 when found, else 0. try_derivable: look in K's own first bucket
-- too (see find). seen: the Ks this call already finished (ack.lua counts a K given twice once), or
-- nil (acks.lua: each K is an ACK of its own). acked_total is the caller's.
local function ack_key(K, try_derivable, now, seen, result)
  if seen then
    if seen[K] then return 0 end
    seen[K] = true
  end
  local raw = redis.call('HGET', KJ, K)
  local flags = raw and string.byte(raw, 1)
  if flags and flags % 4 == LEASED and bit.band(flags, F_E) == 0 then
    -- The usual ACK, a leased one-off job: removed without decoding its record. A leased record
    -- always has its T block: the attempt is bytes 14-15 (read with one call: the hot path), and
    -- a zero third u16 with a level byte >= L_NOTIFY marks result flags (has_result_flags).
    local a1, a2, z1, z2, _, _, lv = string.byte(raw, 14, 20)
    if z1 ~= 0 or z2 ~= 0 or lv < L_NOTIFY then
      remove({K = K, state = LEASED, att = a1 + 256 * a2})
      return 1
    end
  end
  local loc = find(K, try_derivable, raw)
  if not loc then return 0 end
  local r = loc.r
  if not recurring(r) then
    remove(loc)
    retire(K, r, now, 'f', result)
  elseif not (loc.state == DELAYED and r.occ > now) then
    remove(loc)
    reschedule(K, r, now)
  end
  return 1
end
-- END common.lua
