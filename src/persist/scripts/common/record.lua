-- common/record.lua: The job record: states, flag bits, the codec (decode/encode and in-place
-- edits), expiry and backoff.

local READY, LEASED, DEAD, DELAYED = 0, 1, 2, 3
local STATE_NAME = {[0] = 'ready', 'leased', 'dead', 'delayed'}

-- Record flag bits (bits 0-1 are the state).
local FLAG_TRIES, FLAG_EVERY, FLAG_BACKOFF = 4, 8, 16     -- the T, E and B blocks are present
local FLAG_AT, FLAG_TTR, FLAG_OCCURRENCE = 32, 64, 128   -- the D, R and O blocks are present
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

local function bucket_key(sec) return prefix .. 'd:' .. fmt(sec) end
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
  if bit.band(string.byte(s, 1), FLAG_TRIES) == 0 or struct.unpack('<I2', s, 16) ~= 0 then
    return 0
  end
  return string.byte(s, 20) % 16
end

-- Whether an encoded record keeps its result or has someone waiting for it (retire), without
-- decoding it.
local function has_result_flags(s)
  if bit.band(string.byte(s, 1), FLAG_TRIES) == 0 or struct.unpack('<I2', s, 16) ~= 0 then
    return false
  end
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
  local r = {state = flags % 4, created = created, ttl = ttl, tries_left = 1, attempt = 0, tt = 1,
             every = 0, backoff = 0, level = 0}
  if bit.band(flags, FLAG_TRIES) ~= 0 then
    r.tries_left, r.attempt, r.tt, pos = struct.unpack('<I2I2I2', s, pos)
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
  if bit.band(flags, FLAG_EVERY) ~= 0 then
    r.every, pos = struct.unpack('<I4', s, pos)
    if r.every == 0 then
      local n
      n, pos = struct.unpack('<I2', s, pos)
      r.sched, pos = string.sub(s, pos, pos + n - 1), pos + n
    end
  end
  if bit.band(flags, FLAG_BACKOFF) ~= 0 then
    r.backoff, pos = struct.unpack('<I4', s, pos)
    if r.backoff == 0 then
      local m
      r.backoff, m, pos = struct.unpack('<I4I4', s, pos)
      r.bmax, r.jitter = m % 2147483648, m >= 2147483648
    end
  end
  if bit.band(flags, FLAG_AT) ~= 0 then r.at, pos = struct.unpack('<I6', s, pos) end
  if bit.band(flags, FLAG_TTR) ~= 0 then r.ttr, pos = struct.unpack('<I4', s, pos) end
  if bit.band(flags, FLAG_OCCURRENCE) ~= 0 then r.occ, pos = struct.unpack('<I6', s, pos) end
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
    flags = flags + FLAG_TRIES
    parts[#parts + 1] = struct.pack('<I2I2I2I2B', r.tries_left, r.attempt, 0, r.tt, lv)
    if (r.retain or 0) > 0 then parts[#parts + 1] = struct.pack('<I4', r.retain) end
  elseif r.tries_left ~= 1 or r.attempt ~= 0 or r.tt ~= 1 then
    flags = flags + FLAG_TRIES
    parts[#parts + 1] = struct.pack('<I2I2I2', r.tries_left, r.attempt, r.tt)
  end
  if r.sched then
    flags = flags + FLAG_EVERY
    parts[#parts + 1] = struct.pack('<I4I2', 0, #r.sched) .. r.sched
  elseif r.every > 0 then
    flags = flags + FLAG_EVERY
    parts[#parts + 1] = struct.pack('<I4', r.every)
  end
  if r.backoff > 0 then
    flags = flags + FLAG_BACKOFF
    if (r.bmax or 0) > 0 or r.jitter then
      local m = r.bmax or 0
      if r.jitter then m = m + 2147483648 end
      parts[#parts + 1] = struct.pack('<I4I4I4', 0, r.backoff, m)
    else
      parts[#parts + 1] = struct.pack('<I4', r.backoff)
    end
  end
  if r.at then flags = flags + FLAG_AT; parts[#parts + 1] = struct.pack('<I6', r.at) end
  if r.ttr then flags = flags + FLAG_TTR; parts[#parts + 1] = struct.pack('<I4', r.ttr) end
  if recurring(r) and r.occ ~= r.at then
    flags = flags + FLAG_OCCURRENCE; parts[#parts + 1] = struct.pack('<I6', r.occ)
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
  if bit.band(flags, FLAG_TRIES) ~= 0 then pos = pos + t_len(s, pos) end
  if bit.band(flags, FLAG_EVERY) ~= 0 then pos = pos + e_len(s, pos) end
  if bit.band(flags, FLAG_BACKOFF) ~= 0 then pos = pos + b_len(s, pos) end
  local head = bit.band(flags, 252) + state
  local rest = pos
  if bit.band(flags, FLAG_AT) ~= 0 then rest = pos + 6 else head = head + FLAG_AT end
  return string.char(head) .. string.sub(s, 2, pos - 1) .. struct.pack('<I6', t) ..
         string.sub(s, rest)
end

-- The due ms of a staged record (state bits DELAYED, in prefix.."j"): its D block, or, for a job at
-- its derivable place (no D), the timestamp in its generated K.
local function staged_due(s, K)
  local flags = string.byte(s, 1)
  if bit.band(flags, FLAG_AT) == 0 then return (struct.unpack('>I6', K)) end
  local pos = 12
  if bit.band(flags, FLAG_TRIES) ~= 0 then pos = pos + t_len(s, pos) end
  if bit.band(flags, FLAG_EVERY) ~= 0 then pos = pos + e_len(s, pos) end
  if bit.band(flags, FLAG_BACKOFF) ~= 0 then pos = pos + b_len(s, pos) end
  return (struct.unpack('<I6', s, pos))
end

-- A staged job is K in prefix.."w" under the member MARK .. u48 due ms (big-endian) .. K, and the
-- pump moves exactly that member to the ready list when the job falls due: a ready-list entry is
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
-- raw being K's record in prefix.."j". A staged record keeps its state bits DELAYED when the pump
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
  -- prefix.."r" holds the ready jobs without a priority, prefix.."h" those with one (push_ready):
  -- an entry of prefix.."r" left from a job published again with a priority (REPLACE) is stale.
  if live and want == READY then return level_in_place(raw) == 0 end
  return live
end

-- entry_live for an entry of prefix.."h": a ready job with a priority.
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
  local tries_left, attempt, tt, keep, pos = 1, 0, 1, 12, 12
  if bit.band(flags, FLAG_TRIES) ~= 0 then
    tries_left, attempt, tt = struct.unpack('<I2I2I2', s, 12)
    keep, pos = 18, 12 + t_len(s, 12)  -- a long T block's rest is kept as it is
  end
  if tries_left > 0 then tries_left = tries_left - 1 end
  -- A snoozed job (NACK KEEPTRY) can be leased without end.
  if attempt < 65535 then attempt = attempt + 1 end
  local r_at = pos  -- R follows B and D (E is absent)
  if bit.band(flags, FLAG_BACKOFF) ~= 0 then r_at = r_at + b_len(s, r_at) end
  if bit.band(flags, FLAG_AT) ~= 0 then r_at = r_at + 6 end
  local after = r_at
  if bit.band(flags, FLAG_TTR) ~= 0 then after = r_at + 4 end
  local head = bit.bor(bit.band(flags, 252), FLAG_TRIES, FLAG_TTR) + LEASED
  local payload = string.sub(s, after)
  return string.char(head) .. string.sub(s, 2, 11) ..
         struct.pack('<I2I2I2', tries_left, attempt, tt) .. string.sub(s, keep, r_at - 1) ..
         struct.pack('<I4', ttr_ms) .. payload, tries_left, attempt, payload
end

-- consume's fast path for one live, unexpired one-off record `raw` of K: leased in place until
-- `deadline` (fmt(now + ttr_ms)), and consume.lua's six reply fields appended to `out`. The
-- gauges are the caller's.
local function lease_one_in_place(out, K, raw, ttr_ms, deadline, now)
  local _, created, ttl_s = struct.unpack('<BI6I4', raw)
  local leased, tries_left, attempt, payload = lease_in_place(raw, ttr_ms)
  redis.call('HSET', jobs_key, K, leased)
  lease_add(K, deadline)
  local ttl_left = -1
  if ttl_s ~= 0 then ttl_left = math.ceil((created + ttl_s * 1000 - now) / 1000) end
  out[#out + 1] = K
  out[#out + 1] = payload
  out[#out + 1] = tries_left
  out[#out + 1] = ttl_left
  out[#out + 1] = attempt
  out[#out + 1] = created
end

-- Whether a one-off record's ttl has passed, read from its header alone; nil for a recurring
-- record, whose expiry needs its occurrence (decode it).
local function expired_in_place(s, now)
  local flags, created, ttl = struct.unpack('<BI6I4', s)
  if bit.band(flags, FLAG_EVERY) ~= 0 then return nil end
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
  local n = r.attempt
  if n < 1 then n = 1 end
  local cap = 86400
  if (r.bmax or 0) > 0 then cap = r.bmax end
  local wait = math.min(cap, r.backoff * 2 ^ (n - 1)) * 1000
  if r.jitter then
    local h = tonumber(string.sub(redis.sha1hex(K .. fmt(now) .. fmt(r.attempt)), 1, 8), 16)
    wait = math.floor(wait * h / 4294967296)
  end
  return wait
end

