-- common/outcomes.lua: How attempts end: the last failure of a job, lease fencing (ATTEMPT n),
-- results kept after a job finishes.

-- Failures (docs/commands.md NACK REASON). The end of a failed attempt -- a NACK, with its REASON
-- or without, or a lease that expired -- records in prefix.."e" K -> u16 attempt, u48 at_ms,
-- reason. Only a job that failed an attempt has an entry, so only a job past its first attempt, or
-- out of the leased state after it, can have one (may_have_error): the usual ACK of a first attempt
-- looks at nothing. A job leaving the queue takes its entry along (drop_error); respawning or a
-- recurring job's next occurrence starts it afresh. When the queue's retention ends its key goes
-- with the counters (pump.lua (3)), so nothing outlives the queue.
local MAX_REASON = 512

local function record_error(K, attempt, now, reason)
  redis.call('HSET', errors_key, K,
             struct.pack('<I2I6', attempt, now) .. string.sub(reason, 1, MAX_REASON))
end

local function may_have_error(attempt, state)
  return attempt >= 2 or (attempt >= 1 and state ~= LEASED)
end

local function drop_error(K, attempt, state)
  if may_have_error(attempt, state) then redis.call('HDEL', errors_key, K) end
end

-- The attempt of an encoded record, without decoding it.
local function att_in_place(s)
  if bit.band(string.byte(s, 1), FLAG_TRIES) == 0 then return 0 end
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
local function last_error(K, attempt, state)
  if not may_have_error(attempt, state) then return false, 0, 0 end
  local e = redis.call('HGET', errors_key, K)
  if not e then return false, 0, 0 end
  local a, at, pos = struct.unpack('<I2I6', e)
  return string.sub(e, pos), a, at
end

-- Results (docs/commands.md CALL, RESULT, RETAIN). A one-off job published with RETAIN s keeps,
-- once it finishes, its outcome in a key of its own, prefix.."f:"..K, for s seconds (Redis expires
-- it; nothing else tracks it): u8 outcome ("f" finished by ACK, "x" expired, "c" cancelled), u48
-- when, u16 its last attempt, u48 created_ms, then the text (ACK ... RESULT). A job someone waits
-- for (L_NOTIFY: CALL, WAITJOB) is announced when it finishes, on the pool's channel: "done
-- ns/queue " .. u16 #K (big-endian) .. K .. outcome .. u16 attempt .. u48 when .. text; "d" when
-- it died (text: its reason; it keeps no result key, it is in the dead letter).
local function result_key(K) return prefix .. 'f:' .. K end
local OUTCOME_NAME = {f = 'finished', x = 'expired', c = 'cancelled', d = 'dead'}

local function retire(K, r, now, outcome, text)
  text = text or ''
  if (r.retain or 0) > 0 and outcome ~= 'd' then
    redis.call('SET', result_key(K),
               outcome .. struct.pack('<I6I2I6', now, r.attempt, r.created) .. text,
               'PX', r.retain * 1000)
  end
  if r.notify then
    redis.call('PUBLISH', 'dq:ready', 'done ' .. string.sub(prefix, 5, -3) .. ' ' ..
               struct.pack('>I2', #K) .. K .. outcome .. struct.pack('<I2I6', r.attempt, now) ..
               text)
  end
end

-- A one-off job's record `raw` left its place without being decoded (an expired job dropped in
-- place): retired when it carries result flags.
local function retire_raw(K, raw, now, outcome)
  if has_result_flags(raw) then retire(K, decode(raw), now, outcome) end
end

