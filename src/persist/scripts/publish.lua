-- publish.lua -- store a new job: ready at once, or delayed in its due second's bucket.
--
-- KEYS[1]  P        queue prefix "dq:{ns/queue}:" (all keys are P .. suffix: one hash slot)
-- ARGV[1]  now_ms
-- ARGV[2]  K        canonical key: 16-byte generated id, or "#" .. custom id
-- ARGV[3]  record   encoded record (docs/storage.md) with state bits 0. Leave D (at_ms) and R
--                   (ttr) out: the script derives them (stored bytes are then exactly the
--                   caller's, 11 + payload for a default job); if present they are normalised.
-- ARGV[4]  due_ms   first due time; <= now_ms means ready at once
-- ARGV[5]  mode     ""        plain publish (generated K); behaves as "id", so a publish that the
--                             caller retries after a lost reply cannot store the job twice
--                   "id"      idempotent: if a live job K exists, change nothing and return {0}
--                             ("live": any state, except a one-off job whose ttl has passed,
--                             which is dropped and counted in expired_total)
--                   "replace" remove job K wherever it is (a leased one loses its lease), then
--                             store this one
-- ARGV[6]  derivable "1" when K is generated and due_ms equals its timestamp: the bucket field is
--                   then the 12-byte derivable form and no P.."i" entry is written. "0" otherwise.
--
-- State change: (nothing | old job K) -> ready (HSET j, RPUSH r, ready++) or
--               delayed (HSET d:SEC, ZADD b, HSET i unless derivable, delayed++); published_total++.
--               Mode "" or "id" with a live job K: no change at all.
-- Returns: {1} created, {0} a live job K exists (nothing changed), {2} replaced.
-- Errors (nothing written): "ERR deferq publish: ..." on malformed arguments.

-- BEGIN common.lua
-- END common.lua

local now, K, rec, due, mode = arg_int(ARGV[1]), ARGV[2], ARGV[3], arg_int(ARGV[4]), ARGV[5]
local derivable = ARGV[6] == '1'
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

local result = 1
do
  -- A generated K (also an ID given as a generated id's text) may sit in its derivable bucket.
  local old = find(K, true)
  if old then
    local stale = old.state ~= DEAD and old.r.every == 0 and is_expired(old.r, now)
    if mode ~= 'replace' and not stale then return {0} end
    remove(old)
    if mode == 'replace' then result = 2 else count('expired_total', 1) end
  end
end

if bit.band(string.byte(rec, 1), F_E + F_D + F_R + F_O) ~= 0 then
  -- Normalise: a recurring job's first occurrence is due_ms; a delayed record keeps no at_ms
  -- (its bucket position is its due time); a ready one gets at_ms = now; no ttr outside a lease.
  local r = decode(rec)
  if r.every > 0 then r.occ = due end
  r.at, r.ttr = nil, nil
  if delayed then
    r.state = DELAYED
    bucket_add(K, due, encode(r), derivable)
    count('delayed', 1)
  else
    put_ready(K, r, now)
  end
elseif delayed then
  -- The hot path stores the caller's bytes as they are (a default job: 11 + payload bytes).
  bucket_add(K, due, with_state(rec, DELAYED), derivable)
  count('delayed', 1)
else
  redis.call('HSET', KJ, K, with_state(rec, READY))
  redis.call('RPUSH', KR, K)
  count('ready', 1)
  announce_ready()
end
count('published_total', 1)
return {result}
