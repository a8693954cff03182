-- publish.lua -- store a new job: ready at once, or delayed in its due second's bucket.
--
-- KEYS[1]  prefix        queue prefix "dq:{ns/queue}:" (all keys are prefix .. suffix: one hash
-- slot)
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  K        canonical key: 16-byte generated id, or "#" .. custom id
-- ARGV[3]  record   encoded record (docs/storage.md), its state bits delayed (3) when due_ms >
--                   now_ms, else ready (0); other bits are set here, at the cost of a copy.
--                   Leave D (at_ms) and R (ttr) out: the script derives them (stored bytes are
--                   then exactly the caller's, 11 + payload for a default job); if present they
--                   are normalised.
-- ARGV[4]  due_ms   first due time; <= now_ms means ready at once
-- ARGV[5]  mode     ""        plain publish of a generated K: stored without lookups; a publish
--                             that the caller retries after a lost reply finds K's place taken
--                             (HSETNX) and returns {0}, so it cannot store the job twice (as
--                             long as the job is still where it was put: delayed, or ready or
--                             leased when published ready)
--                   "id"      idempotent: if a live job K exists, change nothing and return {0}
--                             ("live": any state, except a one-off job whose ttl has passed,
--                             which is dropped and counted in expired_total)
--                   "replace" remove job K wherever it is (a leased one loses its lease), then
--                             store this one
-- ARGV[6]  derivable "1" when K is generated and due_ms equals its timestamp: the bucket field is
--                   then the 12-byte derivable form and no prefix.."i" entry is written. "0" otherwise.
-- ARGV[7]  ahead_ms optional (default 2000): the pump's look-ahead; a new bucket lowers the
--                   queue's due index entry (dq:due) to its second's start minus this.
-- ARGV[8]  keep_ms  optional, mode "id" or "replace" (ID key KEEP s): the key is held for keep_ms
--                   after the job's due time, whether the job lives or finished: while the
--                   marker prefix.."k:"..K exists (PX, Redis expires it), a publish of K that finds no
--                   live job changes nothing and returns {0}; a publish that stores the job sets
--                   the marker to due_ms - now_ms + keep_ms.
--                   A job's kept outcome (RETAIN: prefix.."f:"..K) holds its key the same way: "id"
--                   changes nothing and returns {0} while it exists; "replace" deletes it, and
--                   the new job inherits the L_NOTIFY mark of the job it replaces.
--
-- State change: (nothing | old job K) -> ready (HSET j, RPUSH r, ready++, published_total++) or
--               delayed: in its second's bucket (HSET d:SEC; a new bucket joins prefix.."b" and
--               lowers the queue's dq:due entry; HSET i unless derivable), or, when the pump has
--               staged that second already, or the second has no bucket and prefix.."w" holds
--               fewer than SPARSE members, in prefix.."j" with K in prefix.."w"
--               (common/staging.lua bucket_add);
--               then pd++ (delayed publishes: counted in both the delayed gauge and
--               published_total). A new bucket, a staged job or a gauge leaving 0 adds the queue
--               to the registry dq:queues.
--               Mode "" or "id" with a live job K: no change at all.
-- Returns: {1} created, {0} a live job K exists, or K was held within keep_ms (nothing changed),
--          {2} replaced.
-- Errors (nothing written): "ERR deferq publish: ..." on malformed arguments.

-- BEGIN common
-- END common

local now, K, rec, due, mode = now_arg(ARGV[1]), ARGV[2], ARGV[3], arg_int(ARGV[4]), ARGV[5]
local derivable = ARGV[6] == '1'
ahead_ms = arg_int(ARGV[7] or '') or ahead_ms
local keep = arg_int(ARGV[8] or '') or 0
if not now or not due or not K or #K == 0 or not rec or #rec < 11 then
  return redis.error_reply('ERR deferq publish: bad arguments')
end
if mode ~= '' and mode ~= 'id' and mode ~= 'replace' then
  return redis.error_reply('ERR deferq publish: bad mode')
end
local delayed = due > now
if delayed and derivable and not is_derivable(K, due) then
  return redis.error_reply('ERR deferq publish: K is not derivable from due_ms')
end

local result, carry_notify = 1, false
-- A generated K stored at its own place cannot belong to another job: no lookups. A retried
-- publish (same K, the reply was lost) is caught by HSETNX on that place instead.
local fresh = mode == '' and is_generated(K) and (not delayed or derivable)
if not fresh then
  -- A generated K (also an ID given as a generated id's text) may sit in its derivable bucket.
  local old = find(K, true)
  local replacing = false
  if old then
    local stale = old.state ~= DEAD and not recurring(old.r) and is_expired(old.r, now)
    if mode ~= 'replace' and not stale then return {0} end
    replacing = mode == 'replace' and not stale
  end
  -- KEEP: a key held within its window is taken even when its job finished (or expired);
  -- REPLACE still replaces a live job.
  local held = prefix .. 'k:' .. K
  if keep > 0 and not replacing and redis.call('EXISTS', held) == 1 then return {0} end
  -- A kept outcome (RETAIN, common/outcomes.lua retire) holds its key as KEEP does: "id" finds it taken,
  -- "replace" drops it.
  if mode == 'id' and not old and redis.call('EXISTS', result_key(K)) == 1 then return {0} end
  if mode == 'replace' then redis.call('DEL', result_key(K)) end
  if old then
    remove(old)
    if recurring(old.r) then count('sched', -1) end
    if mode == 'replace' then result = 2 else count('expired_total', 1) end
    -- Whoever waits for the replaced job (CALL, WAITJOB) waits for its replacement.
    carry_notify = old.r.notify and mode == 'replace'
  end
  if keep > 0 then redis.call('SET', held, '1', 'PX', math.max(due, now) - now + keep) end
end
if carry_notify then
  local r = decode(rec)
  r.notify = true
  rec = encode(r)
end

-- The hot path stores the caller's bytes as they are, apart from the state bits (a default job:
-- 11 + payload bytes).
local raw = rec
if bit.band(string.byte(rec, 1), FLAG_EVERY + FLAG_AT + FLAG_TTR + FLAG_OCCURRENCE) ~= 0 then
  -- Normalise: a recurring job's first occurrence is due_ms; a delayed record keeps no at_ms
  -- (its bucket position is its due time); a ready one gets at_ms = now; no ttr outside a lease.
  local r = decode(rec)
  if recurring(r) then r.occ = due end
  r.at, r.ttr = nil, nil
  if not delayed then r.at = now end
  raw = encode(r)
end
-- The state bits: deferq sends them right (queue::EncodeRecord), so the bytes are stored as they
-- came; a caller that sends other bits gets them set here.
local state = string.byte(raw, 1) % 4
if delayed then
  if state ~= DELAYED then raw = with_state(raw, DELAYED) end
  if not bucket_add(K, due, raw, derivable, fresh) then return {0} end
  if bit.band(string.byte(raw, 1), FLAG_EVERY) ~= 0 then count('sched', 1) end
  -- The delayed gauge and published_total at once (common/counters.lua count).
  count('pd', 1)
  return {result}
else
  if state ~= READY then raw = with_state(raw, READY) end
  if fresh then
    if redis.call('HSETNX', jobs_key, K, raw) == 0 then return {0} end
  else
    redis.call('HSET', jobs_key, K, raw)
  end
  push_ready(K, level_in_place(raw))
  if count('ready', 1) == 1 then ready_expiry_due(raw) end
  announce_ready()
  if bit.band(string.byte(raw, 1), FLAG_EVERY) ~= 0 then count('sched', 1) end
end
count('published_total', 1)
return {result}
